"""Teaching the language model to read rendered digits: `glmflash vision`.

    loss = cross-entropy(answer logits, byte token of the digit)     (the answer token only)
           (+ the MoE balance loss when LM weights are trained)

Two stages, both on that loss:
  1. align (--align-steps, --align-lr): the tower alone, with the answer read straight off
     its tokens through the LM's final norm and tied head (`VisionLanguageModel.align_logits`).
     No LM block runs, so a step costs a few percent of a full one: the tower learns to see
     while each of its tokens turns towards the digit's embedding.
  2. full (--steps, --lr): the whole sequence through the LM; the train scope says exactly
     what learns: `lm` the LM with the aligned tower frozen (the default: the tower keeps what
     it learned on many cheap steps, the LM learns to read it), `vision` the tower with its
     projector (the LM is frozen but passes gradients through), `vision+last-block` also the
     LM's last block, `all` everything.
AdamW (decay on matrices only), linear warmup then cosine decay per stage, gradient clipping.
The training images are the train split of --seed, consecutive renderings, a fresh batch at
every step. Evaluation: greedy answers (argmax over the whole vocabulary; a non-digit answer is
wrong) on the first N renderings of the heldout and far splits of seed 0 (the same images for
every run) and on N unseen train-split renderings.

The output folder holds metrics.jsonl, results.json, heldout_grid.png, confusion.png and
`checkpoint/` (vision.safetensors + vision.json; the LM's model.safetensors + config.json too
when the LM cannot be recovered from --init: it was trained, or randomly initialised).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import Tensor, nn

from glmflash import checkpoint as ckpt
from glmflash.config import model_config
from glmflash.config.vision import SCOPES, VisionConfig, VisionTrainError
from glmflash.data import digits
from glmflash.device import autocast, autocast_dtype, resolve_device
from glmflash.machine import bf16_warning, machine_record
from glmflash.model.lm import GLMFlash
from glmflash.model.vision import VisionLanguageModel, make_tower
from glmflash.plots import pyplot, save
from glmflash.progress import Progress
from glmflash.train.optim import adamw
from glmflash.train.runlog import append_jsonl
from glmflash.train.schedule import Schedule, lr_at, set_lr
from glmflash.train.step import update
from glmflash.train.tensorboard import Scalars

METRICS, RESULTS, CHECKPOINT = "metrics.jsonl", "results.json", "checkpoint"
VISION_WEIGHTS, VISION_CONFIG = "vision.safetensors", "vision.json"
HELDOUT_SEED = 0  # the held-out and far images are the same for every training seed
TRAIN_EVAL_START = 1 << 40  # train-split evaluation indices, never reached by training


# -- model and scope -------------------------------------------------------------------------


def build_model(
    init: str | Path | None, preset: str, tower: str, seed: int, device: torch.device
) -> VisionLanguageModel:
    """The LM from checkpoint `init` (or random weights of `preset`) with a fresh tower."""
    torch.manual_seed(seed)
    if init is not None:
        lm, _ = ckpt.load_model(init)
    else:
        lm = GLMFlash(model_config(preset))
    return VisionLanguageModel(lm, make_tower(tower, lm.cfg)).to(device)


def check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise VisionTrainError(f"unknown train scope {scope!r}; choose from {', '.join(SCOPES)}")


def scope_parameters(vlm: VisionLanguageModel, scope: str) -> list[nn.Parameter]:
    """Set requires_grad so that exactly the scope trains; return the trainable parameters."""
    check_scope(scope)
    vlm.requires_grad_(scope in ("all", "lm"))
    vlm.tower.requires_grad_(scope != "lm")
    if scope == "vision+last-block":
        vlm.lm.layers[-1].requires_grad_(True)
    return [p for p in vlm.parameters() if p.requires_grad]


def train_steps(
    vlm: VisionLanguageModel,
    stage: str,
    steps: int,
    start: int,
    batch_size: int,
    lr: float,
    warmup: int,
    weight_decay: float,
    scope: str,
    seed: int,
    dev: torch.device,
    amp: torch.dtype | None,
    out: Path,
    progress: bool,
) -> tuple[list[nn.Parameter], float]:
    """One stage: `steps` AdamW updates on fresh renderings from index `start`; returns the
    trained parameters and the last loss. One piece on purpose: a plain training loop."""
    params = scope_parameters(vlm, scope)
    lm_trained = any(p.requires_grad for p in vlm.lm.parameters())
    trained_moe = [
        layer.moe for layer in vlm.lm.layers if any(p.requires_grad for p in layer.moe.parameters())
    ]
    optimizer = adamw(params, lr, weight_decay)
    schedule = Schedule(lr, steps, min(warmup, steps - 1))
    bar = Progress(steps, enabled=progress, desc=f"vision {stage}")
    scalars = Scalars(out)
    vlm.train()
    t0 = time.perf_counter()
    loss_value = float("nan")
    for step in range(steps):
        set_lr(optimizer, lr_at(step, schedule))
        images, labels = digits.batch("train", start + step * batch_size, batch_size, seed)
        images, targets = images.to(dev), vlm.answer_targets(labels.to(dev))
        with autocast(dev, amp):
            if stage == "align":
                logits, o = vlm.align_logits(images).float(), None
            else:
                o = vlm(images)
                logits = o.logits[:, -1].float()
        loss = F.cross_entropy(logits, targets)
        loads = [] if o is None else zip(vlm.lm.layers, o.load, strict=True)
        grad_norm = update(
            optimizer,
            loss + o.aux_loss if o is not None and lm_trained else loss,
            params,
            1.0,
            [(layer.moe, load) for layer, load in loads if layer.moe in trained_moe],
        )
        loss_value = float(loss.detach())
        acc = float((logits.argmax(-1) == targets).float().mean())
        row = {
            "stage": stage,
            "step": step + 1,
            "loss": loss_value,
            "batch_acc": acc,
            "lr": lr_at(step, schedule),
            "grad_norm": grad_norm,
            "seconds": time.perf_counter() - t0,
        }
        append_jsonl(out / METRICS, row)
        scalars.add(row)
        bar.update(step + 1, loss=loss_value, acc=acc)
    bar.close()
    scalars.close()
    return params, loss_value


# -- evaluation --------------------------------------------------------------------------------


@torch.no_grad()
def predict_all(
    vlm: VisionLanguageModel,
    images: Tensor,
    device: torch.device,
    amp: torch.dtype | None,
    batch_size: int = 250,
) -> Tensor:
    """Greedy digit answers [N] (-1: not a digit) for images [N, 3, 32, 32]."""
    was = vlm.training
    vlm.eval()
    preds = []
    for chunk in images.split(batch_size):
        with autocast(device, amp):
            preds.append(vlm.predict(chunk.to(device)).cpu())
    vlm.train(was)
    return torch.cat(preds)


def evaluation_set(split: str, n: int, seed: int) -> tuple[Tensor, Tensor]:
    if split == "train":
        return digits.batch("train", TRAIN_EVAL_START, n, seed)
    return digits.batch(split, 0, n, HELDOUT_SEED)


# -- checkpoints -------------------------------------------------------------------------------


def save_vision(
    folder: str | Path, vlm: VisionLanguageModel, tower: str, with_lm: bool, **meta: Any
) -> Path:
    """Atomically write the tower (and the LM, if `with_lm`) to `folder`."""
    final = Path(folder)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = ckpt.atomic_dir(final)
    state = {k: v.detach().cpu().contiguous() for k, v in vlm.tower.state_dict().items()}
    save_file(state, str(tmp / VISION_WEIGHTS))
    config = {
        "tower": tower,
        "prompt": vlm.prompt,
        "model": vlm.lm.cfg.to_dict(),
        "lm_included": with_lm,
        "meta": meta,
        "sha256": ckpt.sha256_file(tmp / VISION_WEIGHTS),
    }
    (tmp / VISION_CONFIG).write_text(json.dumps(config, indent=2))
    if with_lm:
        ckpt.write_model_files(tmp, vlm.lm, {"vision": True, **meta})
    ckpt.commit_dir(tmp, final)
    return final


def load_vision(folder: str | Path, device: str | torch.device = "cpu") -> VisionLanguageModel:
    """The VisionLanguageModel of a `save_vision` folder; the LM comes from the folder or, when
    it was not included, from the --init checkpoint recorded in its metadata."""
    folder = Path(folder)
    path = folder / VISION_CONFIG
    if not path.is_file():
        raise ckpt.CheckpointError(f"vision checkpoint config missing: {path}")
    try:
        config = json.loads(path.read_text())
        tower_kind, prompt = config["tower"], config["prompt"]
        source = folder if config["lm_included"] else config["meta"]["init"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ckpt.CheckpointError(f"vision checkpoint config is corrupt: {path} ({e})") from None
    weights = folder / VISION_WEIGHTS
    state = ckpt.read_weights(weights, config.get("sha256", ""))  # a hash is always written
    lm, _ = ckpt.load_model(source)
    vlm = VisionLanguageModel(lm, make_tower(tower_kind, lm.cfg), prompt)
    try:
        vlm.tower.load_state_dict(state)
    except RuntimeError as e:
        raise ckpt.CheckpointError(f"vision weights do not fit: {weights} ({e})") from None
    return vlm.to(device)


# -- plots -------------------------------------------------------------------------------------


def plot_grid(images: Tensor, labels: Tensor, preds: Tensor, png: Path, n: int = 64) -> None:
    """Held-out images with 'predicted / true' titles, wrong answers in red."""
    plt = pyplot()

    n = min(n, len(images))
    cols = 8
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 1.2, rows * 1.35), squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i < n:
            ax.imshow(images[i].permute(1, 2, 0).numpy())
            pred, true = int(preds[i]), int(labels[i])
            ax.set_title(
                f"{pred if pred >= 0 else '?'} / {true}",
                fontsize=8,
                color="black" if pred == true else "red",
            )
    fig.suptitle("held-out renderings: predicted / true", fontsize=9)
    save(fig, png, dpi=100)


def confusion_matrix(labels: Tensor, preds: Tensor) -> Tensor:
    """Counts [10, 11]: row = true digit, column = answer (column 10: not a digit)."""
    cols = torch.where(preds < 0, 10, preds)
    return torch.bincount(labels * 11 + cols, minlength=110).view(10, 11)


def plot_confusion(matrix: Tensor, png: Path, title: str) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(5.5, 4.8))
    ax.imshow(matrix.numpy(), cmap="Blues")
    for (i, j), v in zip(
        ((i, j) for i in range(10) for j in range(11)), matrix.flatten(), strict=True
    ):
        if v:
            ax.text(
                j,
                i,
                int(v),
                ha="center",
                va="center",
                fontsize=7,
                color="white" if v > matrix.max() / 2 else "black",
            )
    ax.set_xticks(range(11), [str(d) for d in range(10)] + ["?"])
    ax.set_yticks(range(10))
    ax.set_xlabel("answer")
    ax.set_ylabel("true digit")
    ax.set_title(title, fontsize=9)
    save(fig, png, dpi=110)


# -- the run -----------------------------------------------------------------------------------


def evaluate_vision(
    vlm: VisionLanguageModel,
    cfg: VisionConfig,
    dev: torch.device,
    amp: torch.dtype | None,
    plots: Path | None,
) -> dict[str, Any]:
    """[correct, n] and accuracy on the held-out, far and training renderings (the held-out
    confusion matrix too, and its pictures into `plots`), and on scikit-learn's digits when
    it is installed."""
    results: dict[str, Any] = {}
    for split in ("heldout", "far", "train"):
        images, labels = evaluation_set(split, cfg.eval_size, cfg.seed)
        preds = predict_all(vlm, images, dev, amp)
        k = int((preds == labels).sum())
        results[f"{split}_correct"] = [k, cfg.eval_size]
        results[f"{split}_accuracy"] = k / cfg.eval_size
        if split == "heldout":
            matrix = confusion_matrix(labels, preds)
            results["heldout_confusion"] = matrix.tolist()
            if plots is not None:
                plot_grid(images, labels, preds, plots / "heldout_grid.png")
                plot_confusion(
                    matrix,
                    plots / "confusion.png",
                    f"held-out renderings: {k}/{cfg.eval_size} correct",
                )
    extra = digits.sklearn_digits()
    if extra is None:
        results["sklearn_digits"] = "skipped: scikit-learn is not installed"
    else:
        preds = predict_all(vlm, extra[0], dev, amp)
        results["sklearn_correct"] = [int((preds == extra[1]).sum()), len(extra[1])]
    return results


def train_vision(
    out: str | Path,
    cfg: VisionConfig,
    init: str | Path | None = None,
    device: str = "auto",
    progress: bool = True,
    plots: bool = True,
) -> dict[str, Any]:
    """Train the vision path, evaluate it, write everything to `out`; returns the results.
    One piece on purpose: the stages in order, then the record of the run."""
    out = Path(out)
    if (out / RESULTS).exists():
        raise VisionTrainError(f"{out} already holds a vision run; choose another --out")
    dev = resolve_device(device)
    amp = autocast_dtype(dev, cfg.precision)
    if amp is not None and (warning := bf16_warning(dev)):
        print(warning, file=sys.stderr)
    t_start = time.perf_counter()
    vlm = build_model(init, cfg.preset, cfg.tower, cfg.seed, dev)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / METRICS).write_text("")
        Scalars(out, fresh=True).close()  # this run's events replace a former run's
    except OSError as e:
        raise VisionTrainError(f"cannot write to {out}: {e.strerror}") from None

    common = dict(
        warmup=cfg.warmup, weight_decay=cfg.weight_decay, seed=cfg.seed, dev=dev, amp=amp, out=out
    )
    t0 = time.perf_counter()
    if cfg.align_steps:
        align = (cfg.align_steps, 0, cfg.align_batch_size, cfg.align_lr)
        train_steps(vlm, "align", *align, scope="vision", progress=progress, **common)
    align_seconds = time.perf_counter() - t0
    full = (cfg.steps, cfg.align_steps * cfg.align_batch_size, cfg.batch_size, cfg.lr)
    params, loss_value = train_steps(
        vlm, "full", *full, scope=cfg.train_scope, progress=progress, **common
    )
    lm_trained = any(p.requires_grad for p in vlm.lm.parameters())
    train_seconds = time.perf_counter() - t0

    t1 = time.perf_counter()
    results = evaluate_vision(vlm, cfg, dev, amp, out if plots else None)
    eval_seconds = time.perf_counter() - t1

    meta = {
        "init": str(init) if init is not None else None,
        "preset": cfg.preset if init is None else None,
        "train_scope": cfg.train_scope,
        "steps": cfg.steps,
        "seed": cfg.seed,
    }
    save_vision(out / CHECKPOINT, vlm, cfg.tower, with_lm=lm_trained or init is None, **meta)
    results.update(
        {
            **dataclasses.asdict(cfg),
            "init": meta["init"],
            "preset": meta["preset"],
            "align_seconds": align_seconds,
            "device": str(dev),
            "final_loss": loss_value,
            "trainable_parameters": sum(p.numel() for p in params),
            "tower_parameters": sum(p.numel() for p in vlm.tower.parameters()),
            "train_seconds": train_seconds,
            "eval_seconds": eval_seconds,
            "wall_seconds": time.perf_counter() - t_start,
            "torch_threads": torch.get_num_threads(),
            "machine": machine_record(dev, autocast=amp or "none"),
        }
    )
    (out / RESULTS).write_text(json.dumps(results, indent=2))
    return results
