"""The starting model, the pipeline's confirm tasks, three sampling seeds: how far each family's
passing samples (of 64) move with no training at all. Output: sampling_noise.txt.
Needs runs/pipeline from `glmflash pipeline`.
Run: .venv/bin/python results/rl_seeds/sampling_noise.py > results/rl_seeds/sampling_noise.txt
"""

from dataclasses import replace

from glmflash.checkpoint import load_model
from glmflash.config import PipelinePlan
from glmflash.data.code_tasks import FAMILIES, tasks
from glmflash.evaluate.coding import evaluate_tasks

plan = PipelinePlan.full(0)
model, _ = load_model("runs/pipeline/pretrain/run/checkpoints/step_000160", "cpu")
todo = tasks("confirm", FAMILIES, per_family=plan.evaluation.per_family, seed=plan.pretrain.seed)
for seed in (0, 1, 2):
    r = evaluate_tasks(model, todo, replace(plan.evaluation.sampling, seed=seed))
    print(f"sampling seed {seed}:", {f: v[0] for f, v in r.passing_samples().items()}, flush=True)
