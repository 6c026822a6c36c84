"""Every config field is a flag of its command, with its help, and a value given on the command
line arrives in the config and in the run's record: adding a setting is one field in one
dataclass."""

import argparse
import dataclasses
import json
import typing

import pytest
import torch

from glmflash.checkpoint import save_model
from glmflash.cli import main
from glmflash.commands import eval as eval_command
from glmflash.commands import pretrain, rl, vision
from glmflash.config import PretrainConfig, RLConfig, VisionConfig, model_config
from glmflash.config.evaluation import Sampling
from glmflash.flags import add_config_flags, changed_settings, flag_name, given, setting
from glmflash.model.lm import GLMFlash

COMMANDS = [
    (pretrain, PretrainConfig, lambda args: PretrainConfig(**given(PretrainConfig, args))),
    (rl, RLConfig, rl.config_from_args),
    (vision, VisionConfig, lambda args: VisionConfig(**given(VisionConfig, args))),
    (eval_command, Sampling, lambda args: Sampling(**given(Sampling, args))),
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
        return value, [flag_name(field.name), ",".join(map(str, value))]
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
        "eval": ["--checkpoint", "c"],
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


CHEAP = {  # non-default values that keep each run to seconds
    "pretrain": dict(
        preset="tiny", steps=2, batch_size=2, seq_len=16, warmup=1, eval_every=1,
        eval_batches=1, eval_tasks=1, ckpt_every=1, keep_checkpoints=1,
    ),
    "rl": dict(
        groups=2, group_size=2, tasks_per_step=1, ptx_batch=1, max_new_tokens=4, eval_every=1,
        dev_per_family=1, dev_ladder=1, families=("double",), scope="all",
        objective="rloo",  # the edge sampler (non-default) needs rollouts
    ),
    "vision": dict(
        preset="tiny", steps=2, batch_size=2, warmup=1, align_steps=1, align_batch_size=2,
        eval_size=3,
    ),
}  # fmt: skip


def argv_setting_everything(cls, cheap: dict) -> tuple[list[str], dict]:
    """Flags giving every field of `cls` a non-default value, and those values."""
    hints = typing.get_type_hints(cls)
    argv, values = [], {}
    for f in dataclasses.fields(cls):
        value, flags = other_value(f, hints[f.name])
        if f.name in cheap:
            value = cheap[f.name]
            text = ",".join(value) if isinstance(value, tuple) else str(value)
            flags = [flags[0], text]
        argv += flags
        values[f.name] = value
    return argv, values


@pytest.mark.parametrize(
    "command, cls, record",
    [
        (
            "pretrain",
            PretrainConfig,
            lambda out: json.loads((out / "run.json").read_text())["pretrain"],
        ),
        ("rl", RLConfig, lambda out: json.loads((out / "run.json").read_text())["rl"]),
        ("vision", VisionConfig, lambda out: json.loads((out / "results.json").read_text())),
    ],
)
def test_every_setting_reaches_the_run_record(tmp_path, command, cls, record):
    argv, values = argv_setting_everything(cls, CHEAP[command])
    kept = {"objective"} if command == "rl" else set()  # sampler edge needs objective rloo
    assert all(values[f.name] != f.default for f in dataclasses.fields(cls) if f.name not in kept)
    out = tmp_path / "run"
    extra = {"pretrain": [], "vision": ["--from-scratch"], "rl": ["--init", str(tmp_path / "ck")]}
    if command == "rl":
        torch.manual_seed(0)
        save_model(tmp_path / "ck", GLMFlash(model_config("tiny")))
    assert main([command, "--out", str(out), "--device", "cpu", *extra[command], *argv]) == 0
    saved = record(out)
    for name, value in values.items():
        got = tuple(saved[name]) if isinstance(value, tuple) else saved[name]
        assert got == value, name


def test_changed_settings_against_a_record():
    """Nested settings by dotted name, tuples equal to the lists JSON reads back, and a
    setting that only one side has counts as changed."""
    saved = {"rl": {"lr": 1e-4, "families": ["a", "b"], "old": 1}, "seed": 0}
    now = {"rl": {"lr": 1e-4, "families": ("a", "b"), "new": 2}, "seed": 0}
    assert changed_settings(saved, now) == ["rl.new", "rl.old"]
    assert changed_settings(saved, saved) == []
    assert changed_settings({"a": {"b": 1}}, {"a": {"b": 2}, "c": 3}) == ["a.b", "c"]


def test_experiment_settings_split_like_every_setting_and_read_json():
    from glmflash.commands.experiment import parse_settings

    got = parse_settings(["init=runs/x", "groups = 24", 'families=["double"]', "on=true"])
    assert got == {"init": "runs/x", "groups": 24, "families": ["double"], "on": True}
    for bad in ("groups", "=3"):
        with pytest.raises(ValueError, match="bad --set: expected KEY=VALUE"):
            parse_settings([bad])
