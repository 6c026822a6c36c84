"""Compiled blocks (PretrainConfig.compile = "blocks") against the eager model: the same
training, to float tolerance, and evaluation that compiles nothing."""

import json

import pytest
import torch
from safetensors.torch import load_file

from glmflash import machine
from glmflash.checkpoint import checkpoint_dirs
from glmflash.config import PretrainConfig
from glmflash.train import pretrain as pretrain_module
from glmflash.train.pretrain import pretrain

RUN = dict(
    preset="tiny",
    steps=3,
    batch_size=4,
    seq_len=32,
    warmup=1,
    eval_every=3,
    eval_batches=1,
    eval_tasks=1,  # greedy generation: a decoding step's shapes
    ckpt_every=3,
    precision="fp32",
)


def run(
    tmp_path, name: str, model: dict | None = None, **overrides
) -> tuple[list[dict], dict[str, torch.Tensor]]:
    pretrain(
        PretrainConfig(**{**RUN, **overrides}), tmp_path / name, device="cpu", model_overrides=model
    )
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").open()]
    return rows, load_file(str(checkpoint_dirs(tmp_path / name)[-1] / "model.safetensors"))


@pytest.mark.parametrize(
    "optimizer, linear_kind", [("adamw", "elu"), ("muon", "elu"), ("adamw", "delta")]
)
def test_compiled_blocks_train_as_the_eager_model(tmp_path, monkeypatch, optimizer, linear_kind):
    from torch._dynamo.utils import counters

    graphs_during_eval = []
    real_eval = pretrain_module.eval_loss

    def counted_eval(*args, **kwargs):  # graphs compiled while the dev loss is computed
        before = counters["stats"]["unique_graphs"]
        out = real_eval(*args, **kwargs)
        graphs_during_eval.append(counters["stats"]["unique_graphs"] - before)
        return out

    monkeypatch.setattr(pretrain_module, "eval_loss", counted_eval)
    # Newton-Schulz in fp32: in bf16 its rounding turns float-level differences of the
    # gradient into different updates, in eager and compiled runs alike
    monkeypatch.setattr(machine, "fast_matmul_dtype", lambda device: torch.float32)
    model = {"linear_kind": linear_kind}
    eager_rows, eager_weights = run(tmp_path, "eager", model, optimizer=optimizer)
    torch._dynamo.reset()
    counters.clear()
    rows, weights = run(tmp_path, "compiled", model, optimizer=optimizer, compile="blocks")
    assert counters["stats"]["unique_graphs"] > 0  # the blocks did compile
    assert graphs_during_eval == [0, 0]  # evaluation ran eagerly
    for a, b in zip(eager_rows, rows, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-3)
    assert rows[-1]["dev_loss"] == pytest.approx(eager_rows[-1]["dev_loss"], rel=1e-4)
    assert rows[-1]["dev_pass1"] == eager_rows[-1]["dev_pass1"]
    assert eager_weights.keys() == weights.keys()
    for name, w in eager_weights.items():
        torch.testing.assert_close(weights[name], w, rtol=1e-3, atol=1e-4, msg=name)
