"""Coding evaluation: generate completions for tasks, verify them in the sandbox, score them.

Greedy pass@1 counts tasks whose greedy completion passes every hidden case. Sampled pass@k
draws n >= k completions per task and reports the unbiased estimator (with n == k it is the
fraction of tasks where at least one of the k samples passes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from glmflash import tokenizer as tok
from glmflash.config.evaluation import GREEDY, Sampling
from glmflash.data.code_tasks import CodeTask
from glmflash.evaluate.passk import pass_at_k
from glmflash.generate import generate
from glmflash.model.lm import GLMFlash


@dataclass
class EvalResult:
    """Scores of one evaluation with the sampling that produced them."""

    mode: str  # greedy | sample
    k: int
    n_samples: int  # completions drawn per task
    temperature: float = 0.0  # of the draws: 0 for greedy
    per_family: dict[str, list[float]] = field(default_factory=dict)  # group -> [score, n]
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def solved(self) -> float:
        return sum(v[0] for v in self.per_family.values())

    @property
    def total(self) -> int:
        return int(sum(v[1] for v in self.per_family.values()))

    @property
    def pass_rate(self) -> float:
        return self.solved / max(1, self.total)

    def counts(self, families: Sequence[str] | None = None) -> list[float]:
        """[solved, n] over `families` (all by default): the 'k of n' of a results table."""
        fams = families or list(self.per_family)
        return [
            round(sum(self.per_family[f][0] for f in fams), 4),
            int(sum(self.per_family[f][1] for f in fams)),
        ]

    def passing_samples(self) -> dict[str, list[int]]:
        """group -> [passing samples, samples]: the per-sample pass rate behind pass@k."""
        out: dict[str, list[int]] = {}
        for r in self.records:
            entry = out.setdefault(r["group"], [0, 0])
            entry[0] += r["status"] == "pass"
            entry[1] += 1
        return out

    def to_json(self, with_records: bool = True) -> dict[str, Any]:
        data = {
            "mode": self.mode,
            "k": self.k,
            "n_samples": self.n_samples,
            "temperature": self.temperature,
            "pass_rate": self.pass_rate,
            "solved": self.counts(),
            "per_family": self.per_family,
            "passing_samples": self.passing_samples(),
        }
        if with_records:
            data["records"] = self.records
        return data


def completion_source(task: CodeTask, completion: str) -> str:
    """The program the verifier sees: the prompt's comment and def line, then the body."""
    return task.prompt + completion


def shown_prompts(
    tasks: Sequence[CodeTask], context: int, min_room: int
) -> tuple[list[str | list[int]], list[bool]]:
    """Each task's prompt as the model sees it, and whether it was cut: a prompt that would
    leave fewer than min_room tokens of the context to answer in loses its first bytes."""
    keep = context - 1 - min_room  # 1: BOS
    if keep < 1:
        raise ValueError(
            f"min_room {min_room} leaves no room for a prompt in a context of {context}"
        )
    encoded = [tok.encode(t.prompt) for t in tasks]
    cut = [len(ids) > keep for ids in encoded]
    shown = [ids[-keep:] if c else t.prompt for t, ids, c in zip(tasks, encoded, cut, strict=True)]
    return shown, cut


def evaluate_tasks(
    model: GLMFlash,
    tasks: Sequence[CodeTask],
    sampling: Sampling = GREEDY,
    groups: Sequence[str] | None = None,
    min_room: int = 0,
) -> EvalResult:
    """Greedy pass@1 or sampled pass@k (`sampling`), scored per group: `groups[i]` labels
    task i (default: its family; a ladder rung, say).

    With `min_room` > 0, a prompt that would leave fewer than `min_room` tokens of the model's
    context to answer in is shown without its first bytes (its records say `prompt_cut`);
    the program judged is always the whole prompt followed by the completion."""
    from glmflash.verify import verify_many

    n, k = sampling.n, sampling.pass_k
    labels = [t.family for t in tasks] if groups is None else list(groups)
    if len(labels) != len(tasks):
        raise ValueError(f"{len(labels)} group labels for {len(tasks)} tasks")
    shown, cut = [t.prompt for t in tasks], [False] * len(tasks)
    if min_room > 0:
        shown, cut = shown_prompts(tasks, model.cfg.context, min_room)
    prompts = [p for p in shown for _ in range(n)]
    completions = generate(
        model,
        prompts,
        max_new_tokens=sampling.max_new_tokens,
        temperature=sampling.draw_temperature,
        top_p=sampling.top_p,
        seed=sampling.seed,
    )
    owners = [(t, g) for t, g in zip(tasks, labels, strict=True) for _ in range(n)]
    sources = [completion_source(t, c.text) for (t, _), c in zip(owners, completions, strict=True)]
    verdicts = verify_many(sources, [t.task for t, _ in owners])
    result = EvalResult(sampling.mode, k, n, sampling.draw_temperature)
    passed: dict[int, int] = defaultdict(int)
    for i, ((t, g), c, v) in enumerate(zip(owners, completions, verdicts, strict=True)):
        passed[i // n] += v.status == "pass"
        result.records.append(
            {
                "group": g,
                "family": t.family,
                "name": t.name,
                "prompt": t.prompt,
                "completion": c.text,
                "stop": c.stop,
                "status": v.status,
                "passed": v.passed,
                "total": v.total,
                "reason": v.reason,
                "prompt_cut": cut[i // n],
            }
        )
    for j, g in enumerate(labels):
        score = pass_at_k(n, passed[j], k)
        entry = result.per_family.setdefault(g, [0.0, 0])
        entry[0] += score
        entry[1] += 1
    return result
