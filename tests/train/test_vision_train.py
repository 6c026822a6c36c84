"""Vision training: scopes freeze exactly what they say, a tiny model overfits, outputs and
checkpoints are complete, and bad input is one clear error."""

import argparse
import json

import pytest
import torch
import torch.nn.functional as F

from glmflash import checkpoint as ckpt
from glmflash.cli import CLIError
from glmflash.commands.vision import add_arguments, run
from glmflash.config import VisionConfig, VisionTrainError, model_config
from glmflash.data.digits import batch
from glmflash.model.lm import GLMFlash
from glmflash.model.vision import VisionLanguageModel, make_tower
from glmflash.train.optim import adamw
from glmflash.train.vision import build_model, confusion_matrix, load_vision, scope_parameters
from glmflash.train.vision import train_vision as train

SMALL = dict(preset="tiny", steps=2, batch_size=4, align_steps=2, align_batch_size=4, eval_size=10)


def train_vision(out, init=None, plots=False, **settings):
    """A small run on the CPU, quietly; `settings` are VisionConfig fields."""
    return train(
        out, VisionConfig(**settings), init=init, device="cpu", progress=False, plots=plots
    )


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one thread avoids waiting on a second, busy core."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def names(model, params):
    ids = {id(p) for p in params}
    return {n for n, p in model.named_parameters() if id(p) in ids}


def test_scope_parameters_select_exactly_the_scope():
    torch.manual_seed(0)
    cfg = model_config("tiny")
    model = VisionLanguageModel(GLMFlash(cfg), make_tower("blocks", cfg))
    every = {n for n, _ in model.named_parameters()}
    tower = {n for n in every if n.startswith("tower.")}
    last = {n for n in every if n.startswith(f"lm.layers.{cfg.n_layers - 1}.")}
    assert tower and last
    assert names(model, scope_parameters(model, "vision")) == tower
    assert names(model, scope_parameters(model, "vision+last-block")) == tower | last
    assert names(model, scope_parameters(model, "all")) == every
    assert names(model, scope_parameters(model, "lm")) == every - tower
    assert names(model, scope_parameters(model, "vision")) == tower  # and back again
    assert {n for n, p in model.named_parameters() if p.requires_grad} == tower


@pytest.mark.parametrize("scope", ["vision", "vision+last-block", "all"])
def test_training_changes_exactly_the_scope(tmp_path, scope):
    initial = build_model(None, "tiny", "blocks", 0, torch.device("cpu"))
    before = {k: v.clone() for k, v in initial.lm.state_dict().items()}
    train_vision(tmp_path / "run", train_scope=scope, lr=1e-2, **SMALL)
    trained = load_vision(tmp_path / "run" / "checkpoint")
    after = trained.lm.state_dict()
    last = f"layers.{initial.lm.cfg.n_layers - 1}."
    for k, v in before.items():
        if "select_bias" in k:
            continue
        changed = not torch.equal(v, after[k])
        if scope == "vision" or (scope == "vision+last-block" and not k.startswith(last)):
            assert not changed, k
    lm_changed = {k for k in before if not torch.equal(before[k], after[k])}
    if scope == "vision+last-block":
        assert lm_changed and all(k.startswith(last) for k in lm_changed)
    if scope == "all":
        assert "embedding.weight" in lm_changed and any("layers.0." in k for k in lm_changed)
    tower_changed = [
        not torch.equal(a, b)
        for a, b in zip(
            initial.tower.state_dict().values(), trained.tower.state_dict().values(), strict=True
        )
    ]
    assert all(tower_changed)


def test_scope_lm_trains_the_lm_and_leaves_the_aligned_tower_alone(tmp_path):
    """Runs differing only in their number of full steps end with the same tower (the align
    stage set it) and different LMs."""
    initial = build_model(None, "tiny", "blocks", 0, torch.device("cpu"))
    runs = []
    for steps in (1, 3):
        train_vision(
            tmp_path / f"run{steps}", train_scope="lm", lr=1e-2, **{**SMALL, "steps": steps}
        )
        runs.append(load_vision(tmp_path / f"run{steps}" / "checkpoint"))
    for a, b in zip(
        runs[0].tower.state_dict().values(), runs[1].tower.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(runs[0].tower.merge.weight, initial.tower.merge.weight)
    assert not torch.equal(runs[0].lm.embedding.weight, runs[1].lm.embedding.weight)
    with pytest.raises(VisionTrainError, match="align-steps"):
        train_vision(tmp_path / "none", train_scope="lm", **{**SMALL, "align_steps": 0})


def test_a_tiny_model_overfits_a_handful_of_images():
    torch.manual_seed(0)
    cfg = model_config("tiny", n_layers=2)
    model = VisionLanguageModel(GLMFlash(cfg), make_tower("blocks", cfg))
    images, labels = batch("train", 0, 10, seed=5)
    params = scope_parameters(model, "all")
    optimizer = adamw(params, 3e-3, 0.0)
    before = (model.predict(images) == labels).float().mean()
    for _ in range(40):
        loss = F.cross_entropy(model.answer_logits(images), model.answer_targets(labels))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert before < 0.5
    assert model.predict(images).tolist() == labels.tolist()


def test_outputs_and_reload(tmp_path):
    """An --init run writes every artefact; its checkpoint holds the tower only and reloads
    the LM from the init checkpoint, giving the same answers."""
    torch.manual_seed(1)
    lm_dir = ckpt.save_model(tmp_path / "lm", GLMFlash(model_config("tiny")), step=0)
    out = tmp_path / "run"
    results = train_vision(
        out, init=lm_dir, plots=True, **{**SMALL, "steps": 3, "train_scope": "vision"}
    )
    assert results["heldout_correct"][1] == 10 and 0 <= results["heldout_correct"][0] <= 10
    assert results["train_correct"][1] == 10
    assert results["trainable_parameters"] == results["tower_parameters"]
    assert (
        json.loads((out / "results.json").read_text())["heldout_correct"]
        == results["heldout_correct"]
    )
    assert results["far_correct"][1] == 10
    assert results["machine"]["dtypes"] == {"autocast": "none"}
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["stage"], r["step"]) for r in rows] == [
        ("align", 1),
        ("align", 2),
        ("full", 1),
        ("full", 2),
        ("full", 3),
    ]
    for name in (
        "heldout_grid.png",
        "confusion.png",
        "checkpoint/vision.safetensors",
        "checkpoint/vision.json",
    ):
        assert (out / name).is_file(), name
    assert not (out / "checkpoint" / "model.safetensors").exists()
    assert sum(map(sum, results["heldout_confusion"])) == 10
    reloaded = load_vision(out / "checkpoint")
    images, _ = batch("heldout", 0, 6)
    fresh = build_model(lm_dir, "tiny", "blocks", 0, torch.device("cpu"))
    fresh.tower.load_state_dict(reloaded.tower.state_dict())
    assert torch.equal(reloaded.predict(images), fresh.predict(images))
    tower = out / "checkpoint" / "vision.safetensors"
    tower.write_bytes(tower.read_bytes()[:-8] + bytes(8))  # same size, other bytes
    with pytest.raises(ckpt.CheckpointError, match="do not match their hash"):
        load_vision(out / "checkpoint")
    with pytest.raises(Exception, match="already holds"):
        train_vision(out, init=lm_dir, **SMALL)


def test_confusion_matrix_against_loop():
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 10, (200,), generator=g)
    preds = torch.randint(-1, 10, (200,), generator=g)
    ref = torch.zeros(10, 11, dtype=torch.int64)
    for t, p in zip(labels.tolist(), preds.tolist(), strict=True):
        ref[t, 10 if p < 0 else p] += 1
    assert torch.equal(confusion_matrix(labels, preds), ref)


def parse(argv):
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(argv)


def cli_error(argv) -> str:
    with pytest.raises(CLIError) as info:
        run(parse(argv))
    message = str(info.value)
    assert "\n" not in message and message
    return message


def test_command_bad_input(tmp_path):
    out = str(tmp_path / "out")
    assert "checkpoint folder not found" in cli_error(
        ["--init", str(tmp_path / "nothing"), "--out", out]
    )
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert "corrupt" in cli_error(["--init", str(broken), "--out", out])
    torch.manual_seed(0)
    good = ckpt.save_model(tmp_path / "good", GLMFlash(model_config("tiny")))
    weights = good / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    assert "hash" in cli_error(["--init", str(good), "--out", out])
    for flag in ("--steps", "--batch-size", "--eval-size"):
        msg = cli_error(["--from-scratch", "--preset", "tiny", "--out", out, flag, "0"])
        assert flag[2:].replace("-", "_") in msg and "positive" in msg
    assert "lr" in cli_error(["--from-scratch", "--preset", "tiny", "--out", out, "--lr", "0"])
    assert "align_steps" in cli_error(
        ["--from-scratch", "--preset", "tiny", "--out", out, "--align-steps", "-1"]
    )
    with pytest.raises(SystemExit):  # argparse: not one of the presets
        parse(["--from-scratch", "--preset", "huge", "--out", out])
    assert "--from-scratch" in cli_error(["--init", str(good), "--preset", "tiny", "--out", out])
    with pytest.raises(SystemExit):  # argparse: --init and --from-scratch exclude each other
        parse(["--init", "x", "--from-scratch", "--out", out])
    assert not (tmp_path / "out").exists()
