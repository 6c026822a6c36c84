"""Pretraining from random weights on the synthetic corpora.

    loss = cross-entropy(next byte) + sum over layers of the MoE balance loss
           (+ the lightning indexer's KL, + the multi-token prediction loss, when enabled)

AdamW with weight decay on matrices only, linear warmup then cosine decay, gradient clipping,
bf16 autocast where the device supports it, packed sequences (no padding). The data of step s
is a pure function of (seed, s), so a checkpoint holding weights, optimizer, schedule step and
RNG states resumes the run exactly. Under torchrun each rank trains on its slice of the global
batch and gradients are averaged (see distributed.py); rank 0 writes checkpoints and logs.
"""

from __future__ import annotations

import contextlib
import json
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from glmflash import checkpoint as ckpt
from glmflash.checkpoint import (
    checkpoint_dirs,
    load_training_state,
    save_training_state,
)
from glmflash.config import ModelConfig, PretrainConfig, model_config
from glmflash.data.code_tasks import tasks
from glmflash.device import autocast, resolve_device
from glmflash.evaluate.coding import evaluate_tasks
from glmflash.flags import changed_settings, from_fields
from glmflash.machine import bf16_warning, machine_record
from glmflash.model.lm import GLMFlash, ModelOutput
from glmflash.plots import pyplot, save
from glmflash.progress import Progress
from glmflash.train.distributed import (
    DistInfo,
    all_reduce_mean,
    init_distributed,
)
from glmflash.train.optim import make_optimizer
from glmflash.train.runlog import (
    METRICS,
    TrainError,
    append_jsonl,
    check_resume,
    note_machine,
    read_jsonl,
    recorded_dtypes,
    run_autocast,
    trim_metrics,
)
from glmflash.train.schedule import Schedule, lr_at, set_lr
from glmflash.train.step import SINGLE, update
from glmflash.train.tensorboard import Scalars

RUN = "run.json"


# -- data ------------------------------------------------------------------------------------


def training_stream(cfg: PretrainConfig, dist: DistInfo, split: str = "train"):
    """The packed token stream of the chosen corpus for this rank. The dev stream ("eval")
    draws the tasks' own constants whatever `ladder_constants` trains on, and starts its rows
    where training does (a model trained on rows from a document's start has never seen a row
    begin mid-document, and nothing it is asked to complete does)."""
    from glmflash.data.stream import PackedStream, make_corpus

    constants = cfg.ladder_constants if split == "train" else "task"
    return PackedStream(
        make_corpus(cfg.corpus, cfg.seed, split, constants=constants),
        seq_len=cfg.seq_len,
        seed=cfg.seed,
        rank=dist.rank,
        world_size=dist.world_size,
        row_start=cfg.row_start,
    )


@torch.no_grad()
def eval_loss(
    model: GLMFlash, stream, cfg: PretrainConfig, amp: torch.dtype | None, device: torch.device
) -> float:
    """Mean next-token loss on `eval_batches` fixed batches of the dev stream."""
    was = model.training
    model.eval()
    losses = []
    for i in range(cfg.eval_batches):
        x, y = stream.batch(i, cfg.batch_size)
        with autocast(device, amp):
            losses.append(float(model(x.to(device), y.to(device)).loss))
    model.train(was)
    return sum(losses) / len(losses)


# -- the loop --------------------------------------------------------------------------------


def pretrain_step(
    model: GLMFlash,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    cfg: PretrainConfig,
    amp: torch.dtype | None,
    dist: DistInfo = SINGLE,
    indexer_only: bool = False,
) -> tuple[ModelOutput, float, torch.Tensor]:
    """One pretraining update on inputs x and targets y: loss = cross-entropy + balance
    losses + indexer KL (the KL alone during the indexer's dense warm-up), then `update`
    (gradients averaged over ranks, clipped to cfg.grad_clip, MoE bias balancing on the step's
    expert load averaged over ranks). Returns the model output, the gradient norm before
    clipping and the load [layers, experts]."""
    with autocast(x.device, amp):
        o = model(x, y)
    kl = o.indexer_kl
    loss = kl if indexer_only else o.loss + o.aux_loss + (kl if kl is not None else 0.0)
    load = all_reduce_mean(o.load.float(), dist)
    params = list(model.parameters())
    grad_norm = update(
        optimizer, loss, params, cfg.grad_clip, zip(model.moe_layers(), load, strict=True), dist
    )
    return o, grad_norm, load


def pretrain(
    cfg: PretrainConfig,
    out: str | Path,
    device: str = "auto",
    resume: bool = False,
    model_overrides: dict[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
    branch_from: str | Path | None = None,
) -> dict[str, Any]:
    """Train (or resume) the run in `out`; returns a summary dict. `branch_from`, a training
    checkpoint of another run whose settings and schedule agree with cfg up to its step,
    starts this run from that state (a wsd decay branch, see schedule.py).

    One piece on purpose: the loop reads top to bottom as one step happens (schedule, batch,
    update, metrics, evaluation, checkpoint); the update itself is `pretrain_step`."""
    out = Path(out)
    dev = resolve_device(device)
    dist = init_distributed(dev)
    log = log or (lambda msg: print(msg, file=sys.stderr))
    mcfg = prepare_run(cfg, out, resume, model_overrides or {}, dist, branch_from)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    model = GLMFlash(mcfg).to(dev)
    resuming = resume and bool(checkpoint_dirs(out))
    source = out if resuming else Path(branch_from).parent.parent if branch_from else None
    chosen = recorded_dtypes(source / RUN) if source else {}
    optimizer = make_optimizer(model, cfg, ns_dtype=chosen.get("newton_schulz"))
    start = 0
    if resuming:
        latest = checkpoint_dirs(out)[-1]
        start = load_training_state(latest, model, optimizer)
        if dist.is_main:
            log(f"resuming {out} from step {start}")
    elif branch_from is not None:
        start = load_training_state(Path(branch_from), model, optimizer)
        if dist.is_main:
            log(f"branching {out} from {branch_from} at step {start}")
    amp = run_autocast(dev, cfg.precision, chosen, dist)
    if cfg.compile == "blocks":
        model.compile_blocks()
    if dist.is_main:
        trim_metrics(out / METRICS, start)
        if amp is not None and (warning := bf16_warning(dev)):
            log(warning)
        note_machine(out / RUN, start, machine_record(dev, **precision_choices(optimizer, amp)))
    train, dev_stream = training_stream(cfg, dist), training_stream(cfg, DistInfo(), "eval")
    has_indexer = mcfg.sparse_kind == "indexer"
    tokens_per_step = cfg.batch_size * cfg.seq_len
    schedule = Schedule.of(cfg)
    progress = Progress(cfg.steps, start, enabled=dist.is_main, unit="step")
    scalars = Scalars(out, purge_step=start) if dist.is_main else None
    summary: dict[str, Any] = {"steps": cfg.steps, "start_step": start}
    t0, last = time.perf_counter(), {}
    recent = deque(maxlen=20)  # the last steps' seconds: the bar's speed, compiling excluded
    model.train()
    for step in range(start, cfg.steps):
        t_step = time.perf_counter()
        warm = has_indexer and step < cfg.indexer_warmup
        model.set_indexer_warmup(warm)
        set_lr(optimizer, lr_at(step, schedule))
        x, y = train.batch(step, cfg.batch_size)
        o, grad_norm, load = pretrain_step(
            model, optimizer, x.to(dev), y.to(dev), cfg, amp, dist, warm
        )
        kl = o.indexer_kl
        done = step + 1
        metrics = {
            "step": done,
            "loss": float(all_reduce_mean(o.loss.detach(), dist)),
            "aux": float(o.aux_loss.detach()),
            "lr": lr_at(step, schedule),
            "grad_norm": grad_norm,
            "tokens": done * tokens_per_step,
            "max_load": float(load.max()),
            "min_load": float(load.min()),
        }
        if kl is not None:
            metrics["indexer_kl"] = float(kl.detach())
        metrics["step_seconds"] = time.perf_counter() - t_step  # the update, data included
        recent.append(metrics["step_seconds"])
        if done % cfg.eval_every == 0 or done == cfg.steps:
            with eager(cfg):
                metrics["dev_loss"] = eval_loss(model, dev_stream, cfg, amp, dev)
                metrics.update(dev_pass_at_1(model, cfg))
        elapsed = time.perf_counter() - t0
        metrics["tokens_per_s"] = (done - start) * tokens_per_step / max(elapsed, 1e-9)
        if dist.is_main:
            append_jsonl(out / METRICS, metrics)
            scalars.add(metrics)
            progress.update(
                done,
                loss=metrics["loss"],
                tok_s=tokens_per_step / statistics.median(recent),
                **({"dev": metrics["dev_loss"]} if "dev_loss" in metrics else {}),
            )
            if done % cfg.ckpt_every == 0 or done == cfg.steps:
                save_training_state(
                    out,
                    done,
                    model,
                    optimizer,
                    cfg.keep_checkpoints,
                    {"loss": metrics["loss"], "dev_loss": metrics.get("dev_loss")},
                )
        last = metrics
    progress.close()
    if scalars is not None:
        scalars.close()
    if start == cfg.steps and dist.is_main:  # resumed at the end: the last step's figures
        last = next(reversed(list(read_jsonl(out / METRICS))), {})
    summary.update(last)
    summary["wall_seconds"] = time.perf_counter() - t0
    if dist.is_main:
        plot_losses(out / METRICS, out / "loss.png")
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def eager(cfg: PretrainConfig) -> contextlib.AbstractContextManager:
    """Evaluation runs eagerly: compiled blocks (cfg.compile) serve the training step's one
    shape, and every other shape (a decoding step's, a no-grad forward) would compile anew."""
    if cfg.compile == "off":
        return contextlib.nullcontext()
    return torch.compiler.set_stance("force_eager")


def dev_pass_at_1(model: GLMFlash, cfg: PretrainConfig) -> dict[str, float]:
    """Greedy pass@1 on a few dev tasks per family, through the sandboxed verifier."""
    if cfg.eval_tasks == 0:
        return {}
    result = evaluate_tasks(model, tasks("dev", per_family=cfg.eval_tasks, seed=cfg.seed))
    return {"dev_pass1": result.pass_rate}


def prepare_run(
    cfg: PretrainConfig,
    out: Path,
    resume: bool,
    overrides: dict[str, Any],
    dist: DistInfo,
    branch_from: str | Path | None = None,
) -> ModelConfig:
    """Check the output folder and record the run's settings; refuse to clobber a run."""
    overrides = dict(overrides)
    context = overrides.pop("context", model_config(cfg.preset).context)
    mcfg = model_config(cfg.preset, context=max(context, cfg.seq_len), **overrides)
    record: dict[str, Any] = {"pretrain": cfg.to_dict(), "model": mcfg.to_dict()}
    if branch_from is not None:
        record["branch_from"] = str(branch_from)
        if not resume:
            check_branch(Path(branch_from), cfg, mcfg)
    run_file = out / RUN
    if resume:
        check_resume(run_file, record)
        if not checkpoint_dirs(out):
            raise TrainError(
                f"nothing to resume in {out}: no checkpoint under {out / 'checkpoints'}"
            )
        return mcfg
    if run_file.exists() or checkpoint_dirs(out):
        raise TrainError(
            f"{out} already holds a run; use --resume to continue it or choose another --out"
        )
    if dist.world_size > 1:  # every rank has checked before rank 0 writes
        import torch.distributed

        torch.distributed.barrier()
    if dist.is_main:
        try:
            out.mkdir(parents=True, exist_ok=True)
            run_file.write_text(json.dumps(record, indent=2))
        except OSError as e:
            raise TrainError(f"cannot write to {out}: {e.strerror}") from None
    return mcfg


BRANCH_FREE = ("steps", "decay_fraction", "eval_every", "ckpt_every", "keep_checkpoints")


def check_branch(checkpoint: Path, cfg: PretrainConfig, mcfg: ModelConfig) -> None:
    """Refuse a branch that would not equal training cfg from scratch: the source run must
    have the same model and settings (but for its length and how often it evaluates and
    saves), and the same learning rate at every step before the checkpoint."""
    source_file = checkpoint.parent.parent / RUN
    if not (checkpoint / ckpt.STATE).is_file() or not source_file.is_file():
        raise TrainError(f"{checkpoint} is not a training checkpoint of a pretraining run")
    source = json.loads(source_file.read_text())
    pick = lambda d: {k: v for k, v in d.items() if k not in BRANCH_FREE}  # noqa: E731
    differ = changed_settings(
        {"pretrain": pick(source["pretrain"]), "model": source["model"]},
        {"pretrain": pick(cfg.to_dict()), "model": mcfg.to_dict()},
    )
    if differ:
        raise TrainError(f"cannot branch from {checkpoint}: {', '.join(differ)} differ")
    scfg = from_fields(PretrainConfig, source["pretrain"], "pretraining setting", TrainError)
    step = int(torch.load(checkpoint / ckpt.STATE, weights_only=False)["step"])
    ours, theirs = Schedule.of(cfg), Schedule.of(scfg)
    if step > cfg.steps or any(lr_at(s, ours) != lr_at(s, theirs) for s in range(step)):
        raise TrainError(
            f"cannot branch from {checkpoint}: the schedules differ before its step {step}"
        )


def precision_choices(optimizer: Any, amp: torch.dtype | None) -> dict[str, Any]:
    """The dtypes a training run chose: autocast (or none) and Muon's Newton-Schulz."""
    choices: dict[str, Any] = {"autocast": amp or "none"}
    if hasattr(optimizer, "ns_dtype"):
        choices["newton_schulz"] = optimizer.ns_dtype
    return choices


# -- logs and plots --------------------------------------------------------------------------


def plot_losses(metrics: Path, png: Path) -> None:
    rows = list(read_jsonl(metrics))
    if not rows:
        return
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], label="train", lw=1)
    dev = [r for r in rows if "dev_loss" in r]
    if dev:
        ax.plot([r["step"] for r in dev], [r["dev_loss"] for r in dev], "o-", label="dev")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats / byte)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    save(fig, png, dpi=120)
