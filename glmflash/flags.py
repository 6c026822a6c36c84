"""Command-line flags derived from a config dataclass, so that a setting is written once.

A config field is declared with `setting`, which keeps its help text (and its choices, where
the value is one of a few names) beside its default:

    lr: float = setting(1e-4, "AdamW learning rate; 0 updates nothing")
    advantage: str = setting("rloo", "the advantage estimator", choices=ADVANTAGES)

`add_config_flags(parser, Config)` then adds `--lr`, `--advantage`, ... for every field, with
the type, choices and help of the field and its default in the help; every flag defaults to
None, so `given(Config, args)` returns only what the user set (a resumed run fills the rest
from its record). Tuples of names are written comma-separated, booleans as --x / --no-x.

A config made of configs (the pipeline's plan) is set by dotted paths instead:
`with_setting(plan, "rl.lr", "3e-4")` (the pipeline's --set rl.lr=3e-4).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from collections.abc import Callable, Sequence
from typing import Any


def setting(default: Any, help: str, choices: Sequence[str] | None = None) -> Any:
    """A dataclass field with its documentation (and allowed values) attached."""
    metadata = {"help": help, **({"choices": tuple(choices)} if choices else {})}
    return dataclasses.field(default=default, metadata=metadata)


def check_setting_choices(config: Any, error: type[Exception] = ValueError) -> None:
    """Raise `error` naming the first field of dataclass `config` whose value is not among
    the choices its `setting` declared: the one check of every config's named values."""
    for f in dataclasses.fields(config):
        choices = f.metadata.get("choices")
        value = getattr(config, f.name)
        if choices and value not in choices:
            raise error(f"{f.name} must be one of {', '.join(choices)}, got {value!r}")


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _tuple_parser(kind: Any) -> Callable[[str], tuple]:
    """The parser of "a,b,..." for a field of type tuple[X, ...]: each part converted to X."""
    item = typing.get_args(kind)[0]

    def parse(text: str) -> tuple:
        return tuple(item(part) for part in _names(text))

    parse.__name__ = f"list of {item.__name__}"  # argparse names it in its error
    return parse


def add_config_flags(
    parser: argparse.ArgumentParser | Any, cls: type, skip: Sequence[str] = ()
) -> None:
    """One flag per field of dataclass `cls` (except `skip`), all defaulting to None."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        kind, doc = hints[f.name], f.metadata.get("help")
        if doc is None:
            raise TypeError(f"{cls.__name__}.{f.name} has no help: declare it with setting()")
        help_text = f"{doc} (default: {_shown(f.default)})"
        kwargs: dict[str, Any] = {"default": None, "help": help_text}
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(kind) is tuple:
            kwargs.update(type=_tuple_parser(kind), metavar="A,B,...")
        else:
            kwargs.update(type=kind, choices=f.metadata.get("choices"))
        parser.add_argument(flag_name(f.name), dest=f.name, **kwargs)


def given(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields of `cls` the user set on the command line."""
    return {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(cls)
        if getattr(args, f.name, None) is not None
    }


def parse_setting(kind: Any, text: str) -> Any:
    """The value of type `kind` that `text` writes: a number, a name, true/false, or names
    separated by commas for a tuple."""
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"expected true or false, got {text!r}")
        return text.lower() == "true"
    parse = _tuple_parser(kind) if typing.get_origin(kind) is tuple else kind
    try:
        return parse(text)
    except ValueError:
        raise ValueError(f"expected {parse.__name__}, got {text!r}") from None


def split_setting(item: str) -> tuple[str, str]:
    """ "KEY=VALUE" -> (KEY, VALUE), both stripped; anything else is a ValueError."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"expected KEY=VALUE, got {item!r}")
    return key.strip(), value.strip()


def field_value(cls: type, name: str, text: str) -> Any:
    """The value of field `name` of dataclass `cls` that `text` writes, in the field's type and
    among its declared choices."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if name not in fields:
        raise ValueError(f"unknown setting {name!r}: choose from {', '.join(fields)}")
    try:
        value = parse_setting(typing.get_type_hints(cls)[name], text)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    choices = fields[name].metadata.get("choices")
    if choices and value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def with_setting(config: Any, path: str, text: str, _above: str = "") -> Any:
    """A copy of dataclass `config` with the field at dotted `path` (`rl.lr`,
    `evaluation.sampling.k`) set to the value `text` writes; the copy validates itself."""
    head, _, rest = path.partition(".")
    full = _above + path
    fields = {f.name: f for f in dataclasses.fields(config)}
    if head not in fields:
        raise ValueError(f"unknown setting {full!r}: {head} is not one of {', '.join(fields)}")
    current = getattr(config, head)
    if rest:
        if not dataclasses.is_dataclass(current):
            raise ValueError(f"unknown setting {full!r}: {_above + head} has no fields")
        value = with_setting(current, rest, text, f"{_above}{head}.")
    elif dataclasses.is_dataclass(current):
        raise ValueError(f"{full} holds settings: set one of {', '.join(_field_names(current))}")
    else:
        try:
            value = field_value(type(config), head, text)
        except ValueError as e:
            raise ValueError(f"{_above}{e}") from None
    return dataclasses.replace(config, **{head: value})


def flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"rl": {"lr": 1e-4}} -> {"rl.lr": 1e-4}."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def changed_settings(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The dotted names of the settings in which a recorded run (`saved`, as read back from
    JSON) and the one asked for now differ, sorted; a setting only one of them has counts as
    changed (a run recorded before it existed behaved as it did then, not as its default does
    now). The one check behind every refused resume or rerun."""
    old, new = flat(saved), flat(json.loads(json.dumps(now)))  # tuples as lists, as read back
    missing = object()
    return sorted(k for k in old.keys() | new.keys() if old.get(k, missing) != new.get(k, missing))


def from_fields(cls: type, data: dict[str, Any], what: str, error: type = ValueError) -> Any:
    """`cls(**data)`, refusing keys that are not fields of `cls` by name (as `error`)."""
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise error(f"unknown {what}(s): {', '.join(unknown)}")
    return cls(**data)


def _field_names(config: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(config)]


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


__all__ = [
    "add_config_flags",
    "check_setting_choices",
    "field_value",
    "flag_name",
    "from_fields",
    "given",
    "parse_setting",
    "setting",
    "split_setting",
    "with_setting",
]
