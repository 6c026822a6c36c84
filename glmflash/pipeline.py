"""`glmflash pipeline`: from random weights to a results report, in one command.

Stages, each in its own folder under --out and skipped once its `stage.json` exists, so a
rerun after an interruption continues where it stopped (pretraining and RL also resume inside
their stage from their last checkpoint):

    pretrain   -> select the checkpoint with the lowest dev loss
    before     -> confirm split: greedy pass@1 per rung of the task ladder; greedy pass@1
                  (the reference lab's RL families), sampled pass@k (those, all; EvalConfig.k)
    rl         -> RLOO on the ladder's depth-2 RL structures, the whole model (PipelinePlan's
                  rl_stage); the checkpoint is selected by dev pass@1 on those structures
    after      -> the same confirm evaluation on the RL checkpoint
    vision     -> the digit-reading path inside the pretrained model, held-out renderings
    report     -> results.json and report.md with tables, example generations and plots

The confirm split is opened only by the `before` and `after` stages.
"""

from __future__ import annotations

import json
import resource
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from glmflash.checkpoint import checkpoint_dirs, load_model, read_config
from glmflash.config import PipelinePlan
from glmflash.data.code_tasks import FAMILIES, tasks
from glmflash.device import resolve_device
from glmflash.evaluate.coding import evaluate_tasks
from glmflash.evaluate.rungs import COMPETENCE_BAR, RUNGS, clears_bar, evaluate_rungs, rung_table
from glmflash.flags import changed_settings
from glmflash.generate import check_against_full_recompute
from glmflash.machine import machine_record
from glmflash.processes import in_fresh_process
from glmflash.stages import (
    BarReading,
    BeforeAfter,
    ConfirmEval,
    Draws,
    PipelineResults,
    PretrainSummary,
    RLSummary,
    Stage,
    TrainStage,
    VisionScores,
    VisionStage,
    load_stage,
    save_stage,
)
from glmflash.train.pretrain import pretrain
from glmflash.train.rl import train_rl
from glmflash.train.vision import train_vision

STAGES = ("pretrain", "before", "rl", "after", "vision")
REACHES = {  # the stages a plan section's settings change (a section not named reaches all)
    "pretrain": STAGES,
    "evaluation": ("before", "after"),
    "rl": ("rl", "after"),
    "vision": ("vision",),
}
TRAINED = ("increment", "double", "even")  # the reference lab's RL families: its figures
STAGE_FILE = "stage.json"
PLAN_FILE = "plan.json"  # the plan a run folder was made with


StageWork = Callable[..., Any]  # Pipeline.<stage>(pipeline, folder, *args) -> a stage record


class Pipeline:
    """Runs the plan's stages into `out`. With `fresh_processes` (the default) each stage runs
    in a new Python process: a process that has trained in bf16 runs fp32 work afterwards
    more slowly (results/profile/after_bf16.py measures it on a vision run; the cause, below
    PyTorch, is not pinned down; results/pipeline_one_process holds the whole pipeline in one
    process), and a stage's memory goes back to the system when it ends. Off, every stage runs
    in this process (for a debugger or a profiler, and for tests that patch the stages)."""

    def __init__(
        self,
        out: str | Path,
        plan: PipelinePlan,
        device: str = "auto",
        log: Callable[[str], None] | None = None,
        fresh_processes: bool = True,
    ) -> None:
        self.out, self.plan, self.device = Path(out), plan, device
        self.log = log or (lambda m: print(m, file=sys.stderr, flush=True))
        self.fresh_processes = fresh_processes

    # -- stage bookkeeping ---------------------------------------------------------------------
    def stage(self, name: str, cls: type[Stage], work: StageWork, *args: str) -> Stage:
        """Run stage `name` unless it already finished: work(self, folder, *args), a method of
        Pipeline (so that a fresh process can find it by name); its typed result is kept in
        stage.json."""
        folder = self.out / name
        done = folder / STAGE_FILE
        if done.is_file():
            self.log(f"pipeline: {name} already done, skipping")
            return load_stage(done, cls)
        self.log(f"pipeline: {name} ...")
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        if self.fresh_processes:
            job = (self.out, self.plan, self.device, work, folder, args)
            result = in_fresh_process(_stage_work, *job)
        else:
            result = work(self, folder, *args)
        result.wall_seconds = time.perf_counter() - t0
        save_stage(done, result)
        return result

    def record_plan(self) -> None:
        """Write the plan to plan.json, or check it against the one a rerun finds there: a
        setting may change only while no stage it reaches has started (a new RL stage on a
        finished pretraining, say), so no stage mixes two plans."""
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / PLAN_FILE
        plan = self.plan.to_dict()
        if path.is_file():
            differ = changed_settings(json.loads(path.read_text()), plan)
            started = {s for s in STAGES if (self.out / s).exists()}
            mixed = [k for k in differ if started & set(REACHES.get(k.split(".")[0], STAGES))]
            if mixed:
                raise ValueError(
                    f"{self.out} holds a run with another plan ({', '.join(mixed)} differ, and "
                    f"reach stages already started: {', '.join(sorted(started))}): give a new "
                    "--out, or the same settings to continue it"
                )
            if not differ:
                return
            self.log(f"pipeline: the plan changes {', '.join(differ)} for stages not yet run")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(plan, indent=2))
        tmp.replace(path)

    # -- the stages ------------------------------------------------------------------------------
    def run(self) -> PipelineResults:
        self.record_plan()
        pre = self.stage("pretrain", TrainStage, Pipeline.pretrain_stage)
        base = pre.selected
        before = self.stage("before", ConfirmEval, Pipeline.confirm_eval, base)
        rl = self.stage("rl", TrainStage, Pipeline.rl_stage, base)
        after = self.stage("after", ConfirmEval, Pipeline.confirm_eval, rl.selected)
        vision = self.stage("vision", VisionStage, Pipeline.vision, base)
        results = self.results(pre, before, rl, after, vision)
        (self.out / "results.json").write_text(json.dumps(results.to_json(), indent=2))
        from glmflash.report import write_pipeline_report  # scipy: only when the report is due

        write_pipeline_report(self.out, results, before, after)
        return results

    def pretrain_stage(self, folder: Path) -> TrainStage:
        """Pretraining from random weights; the kept checkpoint with the lowest dev loss."""
        run_dir = folder / "run"
        summary = pretrain(self.plan.pretrain, run_dir, self.device, resume=resumable(run_dir))
        return TrainStage(summary, str(select_by_dev_loss(run_dir)))

    def rl_stage(self, folder: Path, base: str) -> TrainStage:
        """RL from the pretrained checkpoint `base`; the checkpoint best on dev."""
        run_dir = folder / "run"
        summary = train_rl(base, run_dir, self.plan.rl, self.device, resume=resumable(run_dir))
        return TrainStage(summary, str(run_dir / "best"))

    def confirm_eval(self, folder: Path, checkpoint: str) -> ConfirmEval:
        """Greedy pass@1 per ladder rung and on the reference lab's RL families, sampled pass@k
        on all families."""
        p, e = self.plan, self.plan.evaluation
        model, _ = load_model(checkpoint, resolve_device(self.device))
        seed = p.pretrain.seed
        greedy_draw = replace(e.greedy(), seed=seed)
        ladder = evaluate_rungs(model, RUNGS, "confirm", e.per_rung, greedy_draw)
        (folder / "ladder.json").write_text(json.dumps(ladder["greedy"].to_json(), indent=2))
        todo = tasks("confirm", FAMILIES, per_family=e.per_family, seed=seed)
        trained = [t for t in todo if t.family in TRAINED]
        greedy = evaluate_tasks(model, trained, greedy_draw)
        decoding = None
        if e.decoding_check:
            prompts = [t.prompt for t in trained[: e.decoding_check]]
            decoding = check_against_full_recompute(model, prompts, e.sampling.max_new_tokens)
        sampled = evaluate_tasks(model, todo, replace(e.sampling, seed=seed))
        for name, res in (("greedy", greedy), ("sampled", sampled)):
            (folder / f"{name}.json").write_text(json.dumps(res.to_json(), indent=2))
        return ConfirmEval(
            checkpoint=checkpoint,
            ladder={r: v["greedy"] for r, v in rung_table(ladder).items()},
            greedy_pass1_trained=greedy.counts(),
            passk_trained=sampled.counts(TRAINED),
            passk_all=sampled.counts(),
            per_family_passk=dict(sampled.per_family),
            per_family_samples=sampled.passing_samples(),
            sampling=Draws(sampled.k, sampled.temperature, sampled.n_samples),
            examples=greedy.records[:: max(1, e.per_family)],
            decoding=decoding,
        )

    def vision(self, folder: Path, base: str) -> VisionStage:
        run_dir = folder / "run"
        if run_dir.exists():  # an interrupted vision run restarts (it takes minutes)
            shutil.rmtree(run_dir)
        res = train_vision(run_dir, self.plan.vision, init=base, device=self.device)
        return VisionStage(res["heldout_correct"], res["train_correct"])

    def machine(self) -> dict[str, Any]:
        """The machine the timings were taken on, with the dtypes pretraining chose, as its run
        recorded them (`auto` is decided once per run, not again here)."""
        run = json.loads((self.out / "pretrain" / "run" / "run.json").read_text())
        return machine_record(resolve_device(self.device), **run["machines"][-1]["dtypes"])

    def results(
        self,
        pre: TrainStage,
        before: ConfirmEval,
        rl: TrainStage,
        after: ConfirmEval,
        vision: VisionStage,
    ) -> PipelineResults:
        """Every stage's figures, before and after RL side by side."""
        stages = {"pretrain": pre, "before": before, "rl": rl, "after": after, "vision": vision}
        tokens_per_step = self.plan.pretrain.batch_size * self.plan.pretrain.seq_len
        wall = {k: round(v.wall_seconds, 1) for k, v in stages.items()}
        wall["total"] = round(sum(wall.values()), 1)
        if before.sampling != after.sampling:
            raise ValueError(f"pass@k drawn differently before ({before.sampling}) and after RL")

        def side_by_side(scores: Callable[[ConfirmEval], Any]) -> BeforeAfter:
            return BeforeAfter(scores(before), scores(after))

        usage = max(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
        )
        return PipelineResults(
            preset=self.plan.preset,
            seed=self.plan.pretrain.seed,
            plan=self.plan.to_dict(),
            machine=self.machine(),
            wall_seconds=wall,
            ladder={r: side_by_side(lambda s, r=r: s.ladder.get(r)) for r in before.ladder},
            peak_memory_bytes=usage * 1024,
            pretrain=PretrainSummary(
                **{k: pre.summary.get(k) for k in ("steps", "dev_loss", "loss", "tokens_per_s")},
                tokens=read_config(pre.selected)[1]["step"] * tokens_per_step,  # selected
                schedule=self.plan.pretrain.schedule,
                selected=pre.selected,
            ),
            competence_bar=BarReading(
                {r: f"{op} {share:.0%}" for r, (op, share) in COMPETENCE_BAR.items()},
                clears_bar(before.ladder),
            ),
            rl=RLSummary(
                greedy_pass1_trained=side_by_side(lambda s: s.greedy_pass1_trained),
                sampling={"k": before.sampling.k, "temperature": before.sampling.temperature},
                passk_trained=side_by_side(lambda s: s.passk_trained),
                passk_all=side_by_side(lambda s: s.passk_all),
                per_family={
                    f: side_by_side(lambda s, f=f: s.per_family_passk.get(f)) for f in FAMILIES
                },
                per_family_samples={
                    f: side_by_side(lambda s, f=f: s.per_family_samples.get(f)) for f in FAMILIES
                },
                **{
                    k: rl.summary.get(k)
                    for k in ("trainable_parameters", "rollouts_per_s", "best_dev")
                },
            ),
            decoding=side_by_side(lambda s: s.decoding),
            vision=VisionScores(vision.heldout_correct, vision.train_correct),
        )


def _stage_work(
    out: Path,
    plan: PipelinePlan,
    device: str,
    work: StageWork,
    folder: Path,
    args: tuple[str, ...],
) -> Stage:
    """A stage's work in a fresh process (`Pipeline.stage`)."""
    return work(Pipeline(out, plan, device, fresh_processes=False), folder, *args)


def resumable(run_dir: Path) -> bool:
    """Whether a stage's training run resumes: only from a checkpoint. A run killed before its
    first one is removed and starts afresh (pretraining refuses to resume without a checkpoint,
    and its run.json may be half written)."""
    if checkpoint_dirs(run_dir):
        return True
    shutil.rmtree(run_dir, ignore_errors=True)
    return False


def select_by_dev_loss(run_dir: Path) -> Path:
    """The kept checkpoint with the lowest dev loss, the later one on a tie (it has trained
    longer for the same loss); the latest when none has a dev loss."""
    best, best_loss = None, float("inf")
    for folder in checkpoint_dirs(run_dir):
        meta = json.loads((folder / "config.json").read_text())["meta"]
        loss = meta.get("dev_loss")
        if loss is not None and loss <= best_loss:
            best, best_loss = folder, loss
    return best or checkpoint_dirs(run_dir)[-1]
