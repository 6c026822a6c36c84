"""The verifier: validate candidate code (stage 1), run it sandboxed (stage 2), reward it."""

from glmflash.verify.rewards import REWARD_MODES, reward
from glmflash.verify.sandbox import STATUSES, Verdict, VerifierPool, verify, verify_many
from glmflash.verify.task import Case, Task
from glmflash.verify.validate import validate

__all__ = [
    "Case",
    "REWARD_MODES",
    "STATUSES",
    "Task",
    "Verdict",
    "VerifierPool",
    "reward",
    "validate",
    "verify",
    "verify_many",
]
