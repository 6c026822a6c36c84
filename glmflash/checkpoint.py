"""Checkpoints: safetensors weights + a JSON file with the config and metadata, and, for a
training run, the whole training state beside them.

A checkpoint is a folder:
    model.safetensors   weights (the tied head is stored once, as the embedding)
    config.json         {"model": ModelConfig fields, "meta": {...,"sha256": hash of weights}}
    train_state.pt      optimizer, RNG states and step (training checkpoints only: an exact
                        resume)
Folders are written atomically (a temporary folder, then a rename), so a crash never leaves a
half-written checkpoint, and what a killed writer left beside them is put right by the next
write (`recover`). Every failure to load is a `CheckpointError` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from glmflash.config import ConfigError, ModelConfig
from glmflash.model.lm import GLMFlash

WEIGHTS, CONFIG = "model.safetensors", "config.json"
TIED = ("output.weight",)  # aliases of the embedding, not stored


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, truncated, corrupt or of another shape."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# hidden siblings of a folder being written, replaced or deleted by process <pid>
SIBLING = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old|trash)-(?P<pid>\d+)$")


def _sibling(final: Path, kind: str) -> Path:
    return final.with_name(f".{final.name}.{kind}-{os.getpid()}")


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def recover(parent: Path) -> None:
    """Put right what killed writers left in `parent`: a folder caught between commit_dir's
    two renames (the old one moved aside, the new one not yet in place) gets the old one back,
    complete; temporary and half-deleted folders are removed. Only a dead process's siblings
    are touched, so a writer still at work is left alone."""
    if not parent.is_dir():
        return
    for path in sorted(parent.iterdir()):
        m = SIBLING.match(path.name)
        if m is None or _alive(int(m["pid"])):
            continue
        final = parent / m["name"]
        if m["kind"] == "old" and not final.exists():
            os.replace(path, final)
        else:
            shutil.rmtree(path, ignore_errors=True)


def atomic_dir(final: Path) -> Path:
    """A fresh temporary sibling of `final`, to be filled and then `commit_dir`-ed (what a
    killed writer left beside it is recovered first)."""
    recover(final.parent)
    tmp = _sibling(final, "tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def commit_dir(tmp: Path, final: Path) -> None:
    """Replace `final` by `tmp`: after this returns, `final` is complete (old or new)."""
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    if final.exists():
        old = _sibling(final, "old")
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old)
    else:
        os.replace(tmp, final)


def write_model_files(folder: Path, model: GLMFlash, meta: dict[str, Any]) -> None:
    """Write the weights and config.json into an existing folder (not atomic by itself)."""
    state = {
        k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k not in TIED
    }
    save_file(state, str(folder / WEIGHTS))
    meta = {**meta, "sha256": sha256_file(folder / WEIGHTS)}
    config = {"model": model.cfg.to_dict(), "meta": meta}
    (folder / CONFIG).write_text(json.dumps(config, indent=2))


def save_model(folder: str | Path, model: GLMFlash, **meta: Any) -> Path:
    """Atomically write `model` to `folder` with `meta` (step, ...)."""
    final = Path(folder)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = atomic_dir(final)
    write_model_files(tmp, model, meta)
    commit_dir(tmp, final)
    return final


def read_config(folder: str | Path) -> tuple[ModelConfig, dict[str, Any]]:
    """The model config and metadata of a checkpoint folder."""
    path = Path(folder) / CONFIG
    if not Path(folder).is_dir():
        raise CheckpointError(f"checkpoint folder not found: {folder}")
    if not path.is_file():
        raise CheckpointError(f"checkpoint config missing: {path}")
    try:
        data = json.loads(path.read_text())
        return ModelConfig.from_dict(data["model"]), data.get("meta", {})
    except (json.JSONDecodeError, KeyError, TypeError, ConfigError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint config is corrupt: {path} ({e})") from None


def read_weights(path: Path, sha256: str | None) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, after checking that it exists and, when a hash was
    recorded with it, that it matches (every kind of checkpoint loads its weights here)."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint weights missing: {path}")
    if sha256 is not None and sha256_file(path) != sha256:
        raise CheckpointError(f"checkpoint weights do not match their hash: {path}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint weights are unreadable: {path} ({e})") from None


def load_model(
    folder: str | Path, device: str | torch.device = "cpu", verify_hash: bool = True
) -> tuple[GLMFlash, dict[str, Any]]:
    """Load a checkpoint folder into a new model; returns (model, meta)."""
    cfg, meta = read_config(folder)
    path = Path(folder) / WEIGHTS
    state = read_weights(path, meta.get("sha256") if verify_hash else None)
    model = GLMFlash(cfg)
    expected = {k: v for k, v in model.state_dict().items() if k not in TIED}
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint weights do not fit the config: {path} "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    for k, v in state.items():
        if v.shape != expected[k].shape:
            raise CheckpointError(
                f"checkpoint weights do not fit the config: {path} "
                f"({k} has shape {tuple(v.shape)}, "
                f"expected {tuple(expected[k].shape)})"
            )
    model.load_state_dict(state, strict=False)
    return model.to(device), meta


# -- the whole training state: weights, optimizer, RNG and step, for an exact resume -------

STATE = "train_state.pt"


def checkpoint_dirs(out: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first (temporary folders start with '.')."""
    root = out / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith("step_") and p.is_dir())


def rng_state() -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def save_training_state(
    out: Path,
    step: int,
    model: GLMFlash,
    optimizer: torch.optim.Optimizer,
    keep: int,
    metrics: dict[str, Any],
) -> Path:
    """Atomically write checkpoint `step` (weights, optimizer, RNG, data position)."""
    final = out / "checkpoints" / f"step_{step:06d}"
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = atomic_dir(final)
    write_model_files(tmp, model, {"step": step, **metrics})
    torch.save({"step": step, "optimizer": optimizer.state_dict(), "rng": rng_state()}, tmp / STATE)
    commit_dir(tmp, final)
    for old in checkpoint_dirs(out)[:-keep]:  # out of the list first: never half deleted
        trash = _sibling(old, "trash")
        shutil.rmtree(trash, ignore_errors=True)
        os.replace(old, trash)
        shutil.rmtree(trash, ignore_errors=True)
    return final


def load_training_state(folder: Path, model: GLMFlash, optimizer: torch.optim.Optimizer) -> int:
    """Restore weights, optimizer and RNG from a checkpoint folder; returns its step."""
    loaded, _ = load_model(folder)
    model.load_state_dict(loaded.state_dict())
    path = folder / STATE
    try:
        state = torch.load(path, weights_only=False)
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        return int(state["step"])
    except (OSError, RuntimeError, KeyError, ValueError, EOFError) as e:
        raise CheckpointError(f"training state unreadable: {path} ({e})") from None
