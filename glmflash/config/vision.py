"""One vision run's settings (`glmflash vision`, the pipeline's vision stage)."""

from __future__ import annotations

from dataclasses import dataclass

from glmflash.config.model import PRESETS
from glmflash.config.pretrain import PRECISIONS
from glmflash.flags import check_setting_choices, setting

SCOPES = ("lm", "vision", "vision+last-block", "all")
TOWERS = ("blocks", "direct")  # model.vision.make_tower


class VisionTrainError(RuntimeError):
    """A bad setting or output folder, for the user to fix."""


@dataclass(frozen=True)
class VisionConfig:
    """One vision run: the align stage (the tower alone), then the full stage through the LM.
    Every field is a flag of `glmflash vision`."""

    preset: str = setting(
        "25m", "model preset of a from-scratch LM (a checkpoint has its own)", tuple(PRESETS)
    )
    steps: int = setting(100, "full steps through the LM")
    batch_size: int = setting(16, "images per full step")
    lr: float = setting(1e-3, "peak learning rate of the full stage")
    warmup: int = setting(10, "linear warm-up steps of each stage")
    align_steps: int = setting(
        2000, "tower-only steps first, the answer read through the tied head (0: none)"
    )
    align_batch_size: int = setting(32, "images per align step")
    align_lr: float = setting(2e-3, "peak learning rate of the align stage")
    weight_decay: float = setting(0.01, "decoupled weight decay on matrices")
    train_scope: str = setting(
        "lm", "what learns in the full stage (lm: the LM, the aligned tower frozen)", SCOPES
    )
    tower: str = setting(
        "blocks", "blocks: two-block transformer tower; direct: the direct-patch baseline", TOWERS
    )
    seed: int = setting(0, "initialisation and the training images")
    eval_size: int = setting(1000, "renderings per evaluation split")
    precision: str = setting(
        "fp32", "fp32, bf16 autocast, or auto (bf16 where it is fast here)", PRECISIONS
    )

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "eval_size", "align_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise VisionTrainError(f"{name} must be a positive integer, got {value!r}")
        if self.warmup < 0 or self.align_steps < 0 or not self.lr > 0 or not self.align_lr > 0:
            raise VisionTrainError(
                f"need lr > 0, align_lr > 0, warmup >= 0 and align_steps >= 0, got "
                f"lr={self.lr}, align_lr={self.align_lr}, warmup={self.warmup}, "
                f"align_steps={self.align_steps}"
            )
        check_setting_choices(self, VisionTrainError)  # before any training
        if self.train_scope == "lm" and self.align_steps == 0:
            raise VisionTrainError(
                "train scope lm freezes the tower, so it needs --align-steps > 0 to train it first"
            )


__all__ = ["SCOPES", "TOWERS", "VisionConfig", "VisionTrainError"]
