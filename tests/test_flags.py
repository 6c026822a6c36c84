"""Every config field is a flag of its command, with its help, and a value given on the command
line arrives in the config: adding a setting is one field in one dataclass."""

import argparse
import dataclasses

import pytest

from glmflash.config import PretrainConfig
from glmflash.evaluate import coding
from glmflash.evaluate.config import Sampling
from glmflash.flags import add_config_flags, flag_name, given, setting
from glmflash.train import pretrain, rl, vision

COMMANDS = [
    (pretrain, PretrainConfig, lambda args: PretrainConfig(**given(PretrainConfig, args))),
    (rl, rl.RLConfig, rl.config_from_args),
    (
        vision,
        vision.VisionConfig,
        lambda args: vision.VisionConfig(**given(vision.VisionConfig, args)),
    ),
    (coding, Sampling, lambda args: Sampling(**given(Sampling, args))),
]
IDS = ["pretrain", "rl", "vision", "eval"]


def parser_of(module) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    module.add_arguments(p)
    return p


def other_value(field: dataclasses.Field, kind):
    """A valid value different from the field's default, and how to write it as a flag."""
    d = field.default
    if kind is bool:
        return (not d), [flag_name(field.name) if not d else "--no-" + flag_name(field.name)[2:]]
    if "choices" in field.metadata:
        value = next(c for c in field.metadata["choices"] if c != d)
    elif isinstance(d, tuple):
        value = d[1:] or ("double",)
        return value, [flag_name(field.name), ",".join(value)]
    elif isinstance(d, int):
        value = d + 1
    elif isinstance(d, float):
        value = d + 0.05 if d < 0.9 else d - 0.05
    else:
        raise AssertionError(f"no test value for {field.name}: give it choices")
    return value, [flag_name(field.name), str(value)]


@pytest.mark.parametrize("module, cls, build", COMMANDS, ids=IDS)
def test_flags_are_the_config_fields(module, cls, build):
    p = parser_of(module)
    dests = {a.dest for a in p._actions}
    fields = {f.name for f in dataclasses.fields(cls)}
    assert fields <= dests
    for f in dataclasses.fields(cls):
        action = next(a for a in p._actions if a.dest == f.name)
        negated = ["--no-" + f.name.replace("_", "-")] if isinstance(f.default, bool) else []
        assert action.option_strings == [flag_name(f.name), *negated]
        assert action.help.startswith(f.metadata["help"])
        assert action.choices == f.metadata.get("choices")


@pytest.mark.parametrize("module, cls, build", COMMANDS, ids=IDS)
def test_every_field_set_on_the_command_line_reaches_the_config(module, cls, build):
    import typing

    hints = typing.get_type_hints(cls)
    required = {
        "pretrain": ["--out", "x"],
        "rl": ["--init", "c", "--out", "x"],
        "vision": ["--from-scratch", "--out", "x"],
        "coding": ["--checkpoint", "c"],
    }[module.__name__.rsplit(".", 1)[-1]]
    for f in dataclasses.fields(cls):
        value, argv = other_value(f, hints[f.name])
        if f.name == "warmup":  # keep the schedule valid
            value, argv = 3, ["--warmup", "3"]
        cfg = build(parser_of(module).parse_args([*required, *argv]))
        assert getattr(cfg, f.name) == value, f.name
        untouched = {g.name for g in dataclasses.fields(cls)} - {f.name}
        assert all(getattr(cfg, g) == getattr(cls(), g) for g in untouched)


def test_a_field_without_help_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Bare:
        documented: int = setting(1, "says what it does")
        bare: int = 2

    with pytest.raises(TypeError, match="Bare.bare has no help"):
        add_config_flags(argparse.ArgumentParser(), Bare)


def test_tuples_and_booleans():
    @dataclasses.dataclass(frozen=True)
    class Conf:
        names: tuple[str, ...] = setting(("a", "b"), "names")
        on: bool = setting(False, "a switch")

    p = argparse.ArgumentParser()
    add_config_flags(p, Conf)
    assert given(Conf, p.parse_args([])) == {}
    assert given(Conf, p.parse_args(["--names", "x, y,", "--on"])) == {
        "names": ("x", "y"),
        "on": True,
    }
    assert given(Conf, p.parse_args(["--no-on"])) == {"on": False}
