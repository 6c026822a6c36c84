"""Every setting of the pipeline's plan can be changed with --set STAGE.FIELD=VALUE, reaches
the plan the stages run with, and is recorded in the run folder's plan.json; a rerun under
another plan is refused."""

import argparse
import dataclasses
import json
import typing

import pytest

from glmflash.cli import main
from glmflash.commands import pipeline as pipeline_command
from glmflash.commands.pipeline import plan_from_args
from glmflash.config import PipelinePlan, PretrainConfig, RLConfig, VisionConfig
from glmflash.config.evaluation import EvalConfig, Sampling
from glmflash.flags import changed_settings, flat
from glmflash.pipeline import Pipeline


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    pipeline_command.add_arguments(p)
    return p.parse_args(argv)


def leaves(config, prefix=""):
    """(dotted path, field, type, value) of every setting under a config."""
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            yield from leaves(value, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name, f, hints[f.name], value


SHORT_TUPLES = {"families": ("even",), "ladder_depths": (2, 3)}  # for the RL stage's () and (2,)


def another(f: dataclasses.Field, kind, value):
    """A valid value other than `value`, as --set writes it."""
    if kind is bool:
        return (not value), str(not value).lower()
    if "choices" in f.metadata:
        new = next(c for c in f.metadata["choices"] if c != value)
        return new, new
    if isinstance(value, tuple):
        new = value[1:] if len(value) > 1 else SHORT_TUPLES[f.name]
        return new, ",".join(map(str, new))
    if isinstance(value, int):
        return value + 1, str(value + 1)
    if isinstance(value, float):
        new = value + 0.05 if value < 0.9 else value - 0.05
        return new, repr(new)
    raise AssertionError(f"no test value for {f.name}")


REFUSED = {"evaluation.sampling.mode": "sampling.mode = sample"}  # pass@k needs samples
FULL_REFUSED = {"rl.ladder_share": r"none given"}  # the full RL stage trains no seed family


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_every_setting_of_the_plan_reaches_the_plan_and_its_record(tmp_path, quick):
    base = plan_from_args(parse(["--quick"] if quick else []))
    paths = list(leaves(base))
    configs = (PretrainConfig, RLConfig, VisionConfig, EvalConfig, Sampling)
    assert len(paths) == sum(len(dataclasses.fields(c)) for c in configs) - 1  # less .sampling
    refused = REFUSED if quick else {**REFUSED, **FULL_REFUSED}
    for path, f, kind, value in paths:
        new, text = another(f, kind, value)
        argv = [*(["--quick"] if quick else []), "--set", f"{path}={text}"]
        if path in refused:
            with pytest.raises(ValueError, match=refused[path]):
                plan_from_args(parse(argv))
            continue
        plan = plan_from_args(parse(argv))
        changed = {k for k, v in flat(plan.to_dict()).items() if flat(base.to_dict())[k] != v}
        assert changed == {path}, path
        out = tmp_path / path
        Pipeline(out, plan).record_plan()
        recorded = flat(json.loads((out / "plan.json").read_text()))[path]
        assert (tuple(recorded) if isinstance(new, tuple) else recorded) == new, path


def test_several_sets_apply_in_order_and_the_plan_keeps_its_seed():
    plan = plan_from_args(
        parse(
            [
                "--seed",
                "7",
                "--set",
                "rl.lr=3e-4",
                "--set",
                "rl.lr=5e-4",
                "--set",
                "pretrain.steps=9",
            ]
        )
    )
    assert (plan.rl.lr, plan.pretrain.steps, plan.pretrain.seed, plan.rl.seed) == (5e-4, 9, 7, 7)
    assert plan.preset == "25m"


@pytest.mark.parametrize(
    "item, message",
    [
        ("rl.lrr=1", "unknown setting 'rl.lrr'"),
        ("optim.lr=1", "unknown setting 'optim.lr'"),
        ("rl=1", "rl holds settings"),
        ("rl.lr.x=1", "rl.lr has no fields"),
        ("pretrain.steps=many", "pretrain.steps: expected int, got 'many'"),
        ("pretrain.optimizer=sgd", "pretrain.optimizer must be one of adamw, muon"),
        ("rl.grad_clip", "expected STAGE.FIELD=VALUE"),
        ("pretrain.steps=0", "steps must be a positive integer"),
        ("rl.normalize_std=maybe", "expected true or false"),
    ],
)
def test_bad_settings_are_refused_by_name(item, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("(", r"\(")):
        plan_from_args(parse(["--set", item]))


def test_a_rerun_under_another_plan_is_refused_where_a_started_stage_would_mix_plans(
    tmp_path, capsys
):
    Pipeline(tmp_path, PipelinePlan.quick(0)).record_plan()
    Pipeline(tmp_path, PipelinePlan.quick(0)).record_plan()  # the same plan continues
    (tmp_path / "pretrain").mkdir()  # pretraining started: its settings are fixed
    other = plan_from_args(parse(["--quick", "--set", "rl.lr=0.5", "--set", "pretrain.steps=5"]))
    with pytest.raises(ValueError, match=r"another plan \(pretrain\.steps differ, and reach"):
        Pipeline(tmp_path, other).record_plan()
    new_rl = plan_from_args(parse(["--quick", "--set", "rl.lr=0.5", "--set", "vision.steps=5"]))
    Pipeline(tmp_path, new_rl).record_plan()  # RL and vision have not started: a new RL stage
    assert not changed_settings(json.loads((tmp_path / "plan.json").read_text()), new_rl.to_dict())
    (tmp_path / "after").mkdir()  # the evaluation after RL reads the RL stage's checkpoint
    argv = ["pipeline", "--quick", "--out", str(tmp_path), "--set", "vision.steps=5"]
    assert main(argv) == 2
    assert "rl.lr differ, and reach stages already started: after, pretrain" in (
        capsys.readouterr().err
    )


def test_the_full_rl_stage_meets_every_depth2_rl_structure_equally_on_the_whole_model():
    """The stage rl-meetings chose: each depth-2 RL structure RL_MEETINGS times, a new instance
    each time, no seed family; checkpoints chosen on dev instances of the same structures."""
    from collections import Counter

    from glmflash.config.plan import RL_MEETINGS
    from glmflash.data import ladder
    from glmflash.train.rl import dev_tasks, rl_tasks

    cfg = PipelinePlan.full(seed=3).rl
    assert (cfg.scope, cfg.seed, cfg.families) == ("all", 3, ())
    depth2 = {s.name for s in ladder.structures("rl", 2)}
    order = rl_tasks(cfg)
    assert Counter(t.family for t in order) == dict.fromkeys(depth2, RL_MEETINGS)
    assert len({t.name for t in order}) == len(order)
    assert {t.family for t in dev_tasks(cfg)} <= depth2 and len(dev_tasks(cfg)) == cfg.dev_ladder
