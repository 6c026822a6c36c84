"""The small composition model that the data-diversity and curriculum experiments train.

A 253,120-parameter GLMFlash (the reference lab's had 248K): the `tiny` preset (d_model 64,
4 heads, 4 layers, 4 routed SwiGLU experts top-2 plus a shared one, 4 residual streams) with
these changes, each measured on this task (200 updates, seed 0):

    layer_pattern "LS", sparse_window 128   two softmax layers whose window spans the whole
        context, so an answer can look up the constants in its prompt (an 8-byte window
        cannot reach them; with one softmax layer, LLLS, byte accuracy was 2-5 points lower)
    init_std 0.1                            at 0.02 (GPT-2's value, for width 768) the loss
        sat on the unigram plateau (3.2 nats) for the first 100 of the 200 updates
    stream_mixer "static", expert_hidden 44 the reference lab's mixer: mHC's Sinkhorn
        iterations doubled the cost of an update at this size; wider experts restore ~250K

It is trained from random weights on the composition corpus (AdamW, warmup + cosine, as in
pretraining: lr_at, adamw and update) and evaluated on the 32 held-out structures:

    byte accuracy  the share of answer bytes (the expression and its newline) that the argmax
                   next-byte prediction gets right, teacher forced after the prompt
    exact match    the share of greedy answers equal in value to the program (check_answer)

A schedule says which training structures update s draws its batch from, of `steps` updates:

    repeated    the first 8 training structures, throughout
    diverse     all 88, interleaved at random
    curriculum  the 8 for the first half of the updates, then the 88
    blocked     the 88, one structure per batch, in order: structure floor(s * 88 / steps)

Pairing: seed k fixes the initial weights (torch.manual_seed(k) right before the model is
built), the evaluation examples and the data stream's row generator, in every schedule and at
every length; only the structures that the documents are drawn from differ. Each run has its
own warmup + cosine schedule over its own `steps`, so a 50-update run is a complete short run,
not the first quarter of a 200-update one.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from glmflash import tokenizer as tok
from glmflash.config import model_config
from glmflash.data import compositions as comp
from glmflash.data.stream import PackedStream
from glmflash.device import autocast, autocast_dtype
from glmflash.flags import from_fields
from glmflash.generate import generate
from glmflash.model.lm import GLMFlash
from glmflash.train.optim import adamw
from glmflash.train.schedule import Schedule, lr_at, set_lr
from glmflash.train.step import update

SCHEDULES = ("repeated", "diverse", "curriculum", "blocked")
SMALL_MODEL: dict[str, Any] = {  # overrides of the tiny preset; see the module docstring
    "layer_pattern": "LS",
    "sparse_window": 128,
    "context": 128,
    "expert_hidden": 44,
    "stream_mixer": "static",
    "init_std": 0.1,
}
MAX_ANSWER_BYTES = 24  # the longest composition answer has 16 bytes and a newline


@dataclass(frozen=True)
class SmallRun:
    """One training run of the small model. `scale` shortens it for quick checks: it runs
    round(steps * scale) updates and evaluates every round(eval_every * scale)."""

    schedule: str = "diverse"
    steps: int = 200
    batch_size: int = 8
    seq_len: int = 128
    lr: float = 1e-2
    warmup_frac: float = 0.1
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    n_repeated: int = 8  # the structures of the repeated phase: TRAIN_STRUCTURES[:n_repeated]
    eval_every: int = 50
    eval_per_structure: int = 4  # teacher-forced examples per structure
    exact_per_structure: int = 1  # greedy examples per structure (decoding costs most)
    scale: float = 1.0
    precision: str = "fp32"
    model: dict[str, Any] = field(default_factory=lambda: dict(SMALL_MODEL))

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not 0 < self.scale <= 1:
            raise ValueError(f"scale must lie in (0, 1], got {self.scale}")
        if not 1 <= self.n_repeated <= len(comp.TRAIN_STRUCTURES):
            raise ValueError(f"n_repeated must be in 1..{len(comp.TRAIN_STRUCTURES)}")
        if self.seq_len > self.model_config().context:
            raise ValueError(f"seq_len {self.seq_len} exceeds the model's context")

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> SmallRun:
        return from_fields(cls, config, "small-model option")

    @property
    def updates(self) -> int:
        return max(1, round(self.steps * self.scale))

    @property
    def eval_interval(self) -> int:
        return max(1, round(self.eval_every * self.scale))

    def model_config(self):
        return model_config("tiny", **{**SMALL_MODEL, **self.model})

    def lr_schedule(self) -> Schedule:
        """Pretraining's cosine schedule with this run's warm-up and floor."""
        warmup = round(self.warmup_frac * self.updates)
        return Schedule(self.lr, self.updates, warmup, "cosine", self.min_lr_ratio)


def build_model(run: SmallRun, seed: int) -> GLMFlash:
    """The initial model of seed `seed`: identical weights for every schedule."""
    torch.manual_seed(seed)
    return GLMFlash(run.model_config())


def structures_at(run: SmallRun, step: int) -> tuple[comp.Structure, ...]:
    """The training structures that update `step` (0-based, of run.updates) draws from."""
    train, n = comp.TRAIN_STRUCTURES, run.updates
    if run.schedule == "repeated" or (run.schedule == "curriculum" and step < n // 2):
        return train[: run.n_repeated]
    if run.schedule == "blocked":
        return (train[step * len(train) // n],)
    return train


@functools.lru_cache(maxsize=256)
def _stream(structures: tuple[comp.Structure, ...], seq_len: int, seed: int) -> PackedStream:
    doc_fn = functools.partial(comp.composition_document, seed=seed, structures=structures)
    return PackedStream(doc_fn, seq_len=seq_len, seed=seed)


def train_batch(run: SmallRun, seed: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of update `step`; row g of the stream is a function of (seed, g)."""
    return _stream(structures_at(run, step), run.seq_len, seed).batch(step, run.batch_size)


@torch.no_grad()
def byte_accuracy(
    model: GLMFlash, pairs: Sequence[tuple[list[int], list[int]]], batch_size: int = 64
) -> float:
    """Teacher-forced argmax accuracy over all answer bytes of (prompt_ids, answer_ids) pairs.

    The input is prompt + answer[:-1]; the prediction at position len(prompt) - 1 + j is
    scored against answer[j]. Rows are right-padded: a causal model never sees the padding
    from an earlier position, so batching does not change any prediction.
    """
    was = model.training
    model.eval()
    hits = total = 0
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        rows = [p + a[:-1] for p, a in chunk]
        x = torch.full((len(rows), max(map(len, rows))), tok.PAD, dtype=torch.long)
        for i, r in enumerate(rows):
            x[i, : len(r)] = torch.tensor(r)
        pred = model(x).logits.argmax(-1)
        for i, (p, a) in enumerate(chunk):
            got = pred[i, len(p) - 1 : len(p) - 1 + len(a)]
            hits += int((got == torch.tensor(a)).sum())
            total += len(a)
    model.train(was)
    return hits / total


def exact_match(model: GLMFlash, examples: Sequence[comp.CompositionExample]) -> float:
    """The share of greedy answers (cut at the first newline) that check_answer accepts."""
    completions = generate(
        model, [e.prompt for e in examples], max_new_tokens=MAX_ANSWER_BYTES, temperature=0.0
    )
    return sum(
        comp.check_answer(e.program, c.text.split("\n", 1)[0])
        for e, c in zip(examples, completions, strict=True)
    ) / len(examples)


def train_and_evaluate(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """Train one small model and return its metrics and learning curves.

    metrics: heldout_byte_acc, heldout_exact (the 32 held-out structures), seen_byte_acc (the
    8 structures every schedule trains on), final train loss, timings; curves: train_loss
    (mean over each evaluation interval) and heldout_byte_acc at update 0 and every
    eval_interval updates. One piece on purpose: a run of the experiment reads top to bottom
    (data, model, the training loop with its evaluations, the metrics).
    """
    run = SmallRun.from_dict(config)
    t0 = time.perf_counter()
    heldout = comp.examples(comp.HELDOUT_STRUCTURES, run.exact_per_structure, seed)
    heldout_pairs = comp.teacher_forced_pairs(comp.HELDOUT_STRUCTURES, run.eval_per_structure, seed)
    seen_pairs = comp.teacher_forced_pairs(
        comp.TRAIN_STRUCTURES[: run.n_repeated], run.eval_per_structure, seed
    )
    model = build_model(run, seed)
    schedule = run.lr_schedule()
    optimizer = adamw(model.parameters(), run.lr, run.weight_decay)
    device = torch.device("cpu")
    amp = autocast_dtype(device, run.precision)
    curves: dict[str, list[list[float]]] = {
        "heldout_byte_acc": [[0, byte_accuracy(model, heldout_pairs)]],
        "train_loss": [],
    }
    eval_seconds = time.perf_counter() - t0
    window: list[float] = []
    model.train()
    for step in range(run.updates):
        set_lr(optimizer, lr_at(step, schedule))
        x, y = train_batch(run, seed, step)
        with autocast(device, amp):
            out = model(x, y)
        params = list(model.parameters())
        balance = zip(model.moe_layers(), out.load, strict=True)
        update(optimizer, out.loss + out.aux_loss, params, run.grad_clip, balance)
        window.append(float(out.loss.detach()))
        done = step + 1
        if done % run.eval_interval == 0 or done == run.updates:
            e0 = time.perf_counter()
            curves["train_loss"].append([done, sum(window) / len(window)])
            curves["heldout_byte_acc"].append([done, byte_accuracy(model, heldout_pairs)])
            eval_seconds += time.perf_counter() - e0
            window = []
    e0 = time.perf_counter()
    metrics = {
        "heldout_byte_acc": curves["heldout_byte_acc"][-1][1],
        "heldout_exact": exact_match(model, heldout),
        "seen_byte_acc": byte_accuracy(model, seen_pairs),
        "train_loss": curves["train_loss"][-1][1],
    }
    eval_seconds += time.perf_counter() - e0
    if not math.isfinite(metrics["train_loss"]):
        raise FloatingPointError(f"training diverged: loss {metrics['train_loss']}")
    return {
        **metrics,
        "updates": run.updates,
        "parameters": model.num_parameters(),
        "tokens": run.updates * run.batch_size * run.seq_len,
        "train_seconds": time.perf_counter() - t0 - eval_seconds,
        "eval_seconds": eval_seconds,
        "curves": curves,
    }
