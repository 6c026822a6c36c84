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
from glmflash.data.code_tasks import CodeTask
from glmflash.errors import CLIError
from glmflash.evaluate.config import GREEDY, Sampling
from glmflash.evaluate.passk import pass_at_k
from glmflash.flags import add_config_flags, given
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


# -- command line: glmflash eval -------------------------------------------------------------


def add_arguments(p) -> None:
    from glmflash.data.code_tasks import FAMILIES

    p.add_argument("--checkpoint", required=True)
    p.add_argument("--split", choices=("dev", "rl", "confirm"), default="dev")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--per-family", type=int, default=8)
    p.add_argument(
        "--rungs",
        nargs="?",
        const="all",
        default=None,
        help="evaluate the task ladder per rung instead of the families: `all` "
        "(the default when the flag is given alone) or names separated by "
        "commas; greedy pass@1 and, with --mode sample, sampled pass@k",
    )
    p.add_argument("--per-rung", type=int, default=24, help="tasks per rung")
    p.add_argument(
        "--tasks",
        default=None,
        metavar="FILE.jsonl",
        help="evaluate your own tasks: one JSON object a line, {prompt, entry_point, "
        "cases: [{args, expected}] or test: 'def check(candidate): ...', "
        "group}; scores per group and overall (needs --out)",
    )
    p.add_argument(
        "--benchmark",
        choices=("humaneval",),
        default=None,
        help="HumanEval's 164 problems through the sandbox (extra [humaneval]; needs --out)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="with --tasks or --benchmark: skip the tasks whose records --out already holds",
    )
    add_config_flags(p, Sampling)  # --seed also draws the tasks
    p.add_argument("--device", default="auto")
    p.add_argument("--out", default=None, help="JSON file for every prompt, completion, verdict")


def run_user_tasks(model, todo: list[CodeTask], sampling: Sampling, args) -> dict[str, Any]:
    """--tasks FILE or --benchmark humaneval: records beside --out (OUT.records.jsonl), saved as
    they are made, so --resume evaluates nothing twice."""
    from pathlib import Path

    from glmflash.evaluate.user_tasks import evaluate_saved

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    records = out.with_suffix(".records.jsonl")
    summary = evaluate_saved(model, todo, records, args.resume, sampling)
    return {
        "checkpoint": str(args.checkpoint),
        "tasks": args.tasks or args.benchmark,
        **summary,
        "records": str(records),
    }


def run(args) -> int:
    import json
    from pathlib import Path

    from glmflash.data.code_tasks import tasks
    from glmflash.device import resolve_device
    from glmflash.evaluate.rungs import evaluate_rungs, parse_rungs, rung_table
    from glmflash.train.checkpoint import CheckpointError, load_model

    if args.tasks and args.benchmark:
        raise CLIError("give --tasks or --benchmark, not both")
    if args.resume and not (args.tasks or args.benchmark):
        raise CLIError("--resume applies to --tasks and --benchmark")
    try:
        sampling = Sampling(**given(Sampling, args))
        rungs = parse_rungs(args.rungs) if args.rungs is not None else None
        if args.tasks or args.benchmark:
            from glmflash.evaluate.user_tasks import humaneval_tasks, load_tasks

            if not args.out:
                raise ValueError(
                    "--tasks and --benchmark need --out FILE.json (records are "
                    "saved beside it as they are made)"
                )
            todo = load_tasks(args.tasks) if args.tasks else humaneval_tasks()
            model, _ = load_model(args.checkpoint, resolve_device(args.device))
            summary = run_user_tasks(model, todo, sampling, args)
            Path(args.out).write_text(json.dumps(summary, indent=2))
            print(json.dumps(summary))
            return 0
        model, _ = load_model(args.checkpoint, resolve_device(args.device))
        if rungs is not None:
            results = evaluate_rungs(model, rungs, args.split, args.per_rung, sampling)
        else:
            todo = tasks(
                args.split,
                [f for f in args.families.split(",") if f],
                per_family=args.per_family,
                seed=sampling.seed,
            )
            result = evaluate_tasks(model, todo, sampling)
    except (CheckpointError, ValueError, FileNotFoundError) as e:
        raise CLIError(str(e)) from None
    if rungs is not None:
        data = {
            "checkpoint": str(args.checkpoint),
            "split": args.split,
            "rungs": rung_table(results),
            **{mode: r.to_json() for mode, r in results.items()},
        }
        summary = {k: v for k, v in data.items() if k not in ("greedy", "sampled")}
    else:
        data = {"checkpoint": str(args.checkpoint), "split": args.split, **result.to_json()}
        summary = {k: v for k, v in data.items() if k != "records"}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(data, indent=2))
    print(json.dumps(summary))
    return 0
