"""Policy-gradient post-training against the sandboxed executable reward (RLOO by default).

For each task, sample G completions, verify each in the sandbox, reward it, and update with
an advantage estimator and a loss from `policy_gradient` (no critic). The default, RLOO:

    A_i = r_i - (1 / (G - 1)) * sum_{j != i} r_j            (optionally / std(r), GRPO style)
    loss = -(1 / N) * sum_i A_i * sum_t log pi(y_{i,t} | prompt, y_{i,<t})   (+ beta * KL)

The log-probabilities of a completion are summed over its tokens (sequence level, not averaged
per token), so the update is the REINFORCE gradient of each completion's probability and a
long completion is not down-weighted; N is the number of completions in the step. A group
whose rewards are all equal has all A_i = 0: it contributes no gradient and is counted.
`advantage`, `aggregation` and `update_epochs` select GRPO, Dr. GRPO or PPO-style clipped
updates instead (`policy_gradient.ALGORITHMS`). Every step logs the run's health: reward mean
and spread, share of groups without spread, policy entropy, KL to the initial policy (from
`kl_rows` completions while the penalty is off: a full reference pass was a quarter of the
update), clip fraction, completion length and truncation rate, gradient norm.
The KL option penalises drift from the initial policy with the k3 estimator per token,
exp(ref - logp) - (ref - logp) - 1. The ptx option (InstructGPT's PPO-ptx) adds
gamma * (next-token loss on a batch of the pretraining corpus) to every update: the KL term
holds the policy near its start only on the trained prompts, while the pretraining loss holds
it there on everything else, the untrained families included.

Which tasks a step trains on is `sampler`'s: uniform takes the tasks of `rl_tasks` in order,
each once; edge draws them from the same tasks as a pool, favouring those the policy sometimes
solves (weight p(1 - p) or the chance of a group with spread, plus a floor, of each task's
estimated pass rate: `edge_weight`), and replaces groups without reward spread by new draws,
up to `max_redraws` extra groups a step (DAPO's dynamic sampling; `task_sampler`). Its counts
come from the run's own rollouts (discounted by `edge_discount` a step, and an optional probe
of the initial policy, `edge_probe`), so a resumed run draws as the uninterrupted one does.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from glmflash import checkpoint as ckpt
from glmflash import tokenizer as tok
from glmflash.checkpoint import checkpoint_dirs, load_training_state, save_training_state
from glmflash.config import RLConfig, Sampling
from glmflash.data import derive_seed, ladder
from glmflash.data.code_tasks import CodeTask, interleaved_tasks, tasks
from glmflash.device import autocast, resolve_device
from glmflash.evaluate.coding import completion_source, evaluate_tasks
from glmflash.generate import (
    Completion,
    allowed_mask,
    distinct_prompts,
    generate,
    right_padded,
)
from glmflash.machine import bf16_warning, machine_record
from glmflash.model.lm import GLMFlash
from glmflash.plots import pyplot, save
from glmflash.progress import Progress
from glmflash.train.distributed import DistInfo
from glmflash.train.policy_gradient import (
    advantages,
    k3_kl,
    policy_surrogate,
)
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
from glmflash.train.step import update
from glmflash.train.task_sampler import EdgeSampler, Group
from glmflash.train.tensorboard import Scalars

ROLLOUTS = "rollouts.jsonl"
PROBE = "probe.jsonl"  # the edge sampler's samples of the initial policy (edge_probe > 0)
PTX_SEQ_LEN = 128


def set_scope(model: GLMFlash, scope: str) -> int:
    """Freeze all but the scope's parameters; returns the trainable count.
    last-block-head: last block + final norm + tied embedding/head; last-block; all."""
    for p in model.parameters():
        p.requires_grad_(scope == "all")
    if scope != "all":
        for p in model.layers[-1].parameters():
            p.requires_grad_(True)
    if scope == "last-block-head":
        model.final_norm.weight.requires_grad_(True)
        model.embedding.weight.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class Scored(NamedTuple):
    """Completion positions of a right-padded batch [N, L]: log pi of each sampled token,
    the mask of real positions, the token ids, and the policy's entropy there (no gradient;
    None unless asked for)."""

    logp: Tensor
    mask: Tensor
    ids: Tensor
    entropy: Tensor | None = None


SCORING_CHUNKS = 4  # rows without a shared prompt: this many passes, sorted by length


def sequence_logprobs(
    model: GLMFlash,
    prompts: list[list[int]],
    completions: list[list[int]],
    with_entropy: bool = False,
    chunks: int = SCORING_CHUNKS,
    share_prompts: bool = True,
    temperature: float = 1.0,
) -> Scored:
    """Per-token log pi of each completion given its prompt, right-padded to one [N, L] batch;
    with `with_entropy`, also the policy's entropy at each scored position. pi is the policy
    generation samples from: softmax(logits / temperature) over the tokens it may emit
    (`allowed_mask`), so RL's gradient and KL are those of the rollouts' own distribution.

    Where prompts repeat (RL scores G completions of each), each distinct prompt runs through
    the model once and its state continues into all its completions (`_shared_prompt_passes`):
    on the RL stage's batches the prompts are about half the tokens. Otherwise (and with
    share_prompts=False) the rows run whole, in `chunks` forward passes of rows of similar
    length (sorted), each padded only to its own longest: one padded pass spends 37% of its
    tokens on padding there, four sorted ones 11% (results/profile/rl_padding.py); `chunks`
    applies to this path only. A causal model scores a row the same either way, and in any
    batch."""
    seqs = [[tok.BOS, *p, *c] for p, c in zip(prompts, completions, strict=True)]
    device = next(model.parameters()).device
    ids, _ = right_padded(seqs, device)
    T = ids.shape[1]
    mask = torch.zeros(len(seqs), T - 1, dtype=torch.bool, device=device)
    for i, (s, p) in enumerate(zip(seqs, prompts, strict=True)):
        mask[i, len(p) : len(s) - 1] = True  # targets at positions 1 + len(p) .. len(s) - 1
    if share_prompts and len({tuple(p) for p in prompts}) < len(prompts):
        passes = _shared_prompt_passes(model, prompts, completions, device)
    else:
        passes = _sorted_passes(model, seqs, chunks, device)
    rows, logps, entropies = [], [], []
    for part, start, logits in passes:  # logits [n, L, V] predict ids[part, start + 1 ..]
        L = logits.shape[1]
        z = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
        # the lowest finite value rather than -inf: probability 0, and 0 * log 0 = 0 in entropy
        z = z.masked_fill(~allowed_mask(z.shape[-1], device), torch.finfo(z.dtype).min)
        log_probs = torch.log_softmax(z, -1)
        target = ids[part, start + 1 : start + 1 + L, None]
        logps.append(F.pad(log_probs.gather(-1, target).squeeze(-1), (start, T - 1 - start - L)))
        if with_entropy:
            with torch.no_grad():
                entropy = -(log_probs.exp() * log_probs).sum(-1)
                entropies.append(F.pad(entropy, (start, T - 1 - start - L)))
        rows += part.tolist()
    back = torch.tensor(rows, device=device).argsort()  # where each row's scores landed
    logp = torch.cat(logps)[back] * mask
    entropy = torch.cat(entropies)[back] * mask if with_entropy else None
    return Scored(logp, mask, ids[:, 1:], entropy)


Pass = tuple[Tensor, int, Tensor]  # rows, first predicting position, logits [rows, L, V]


def _sorted_passes(
    model: GLMFlash, seqs: list[list[int]], chunks: int, device: torch.device
) -> list[Pass]:
    """Whole rows, sorted by length, in `chunks` passes padded to each pass's longest."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    size = -(-len(order) // max(1, chunks))
    passes = []
    for begin in range(0, len(order), size):
        part = order[begin : begin + size]
        x, _ = right_padded([seqs[i][:-1] for i in part], device)
        passes.append((torch.tensor(part, device=device), 0, model(x).logits))
    return passes


def _shared_prompt_passes(
    model: GLMFlash,
    prompts: list[list[int]],
    completions: list[list[int]],
    device: torch.device,
) -> list[Pass]:
    """Prompts of one length at a time: the distinct ones run once (BOS + prompt), their
    states are repeated for their rows (`DecodeState.select`: its backward sums the rows'
    gradients into the shared prefix) and continue through the rows' completions, right-padded.
    The prompt's last logits predict the first completion token, the continuation the rest."""
    passes = []
    for members, unique, pick in distinct_prompts([[tok.BOS, *p] for p in prompts], device):
        P = len(prompts[members[0]])
        out = model.forward_embeddings(model.embedding(unique))
        C = max(len(completions[i]) for i in members)
        logits = out.logits[pick, -1:][:, :C]  # none when every completion is empty
        if C > 1:
            x, _ = right_padded([completions[i][:-1] for i in members], device)
            more = model.forward_embeddings(model.embedding(x), out.state.select(pick)).logits
            logits = torch.cat((logits, more), 1)
        passes.append((torch.tensor(members, device=device), P, logits))
    return passes


def reward_of(verdict, cfg: RLConfig) -> float:
    from glmflash.verify import reward

    return reward(verdict, cfg.reward, cfg.invalid_penalty)


def rl_tasks(cfg: RLConfig) -> list[CodeTask]:
    """The RL split's tasks in training order: round(groups * ladder_share) tasks of the
    ladder's RL structures spread evenly among the seed-family tasks (families interleaved)."""
    n_ladder = round(cfg.groups * cfg.ladder_share)
    parts = [
        interleaved_tasks("rl", cfg.families, cfg.groups - n_ladder, cfg.seed),
        ladder.rl_ladder_tasks("rl", n_ladder, cfg.seed, cfg.ladder_depths),
    ]
    keyed = [
        ((i + 0.5) / len(part), j, t) for j, part in enumerate(parts) for i, t in enumerate(part)
    ]
    return [t for *_, t in sorted(keyed, key=lambda k: k[:2])]


def dev_tasks(cfg: RLConfig) -> list[CodeTask]:
    """Checkpoint selection's tasks: dev names of the trained families and RL structures."""
    out = tasks("dev", cfg.families, per_family=cfg.dev_per_family, seed=cfg.seed)
    if cfg.ladder_share > 0:
        out += ladder.rl_ladder_tasks("dev", cfg.dev_ladder, cfg.seed, cfg.ladder_depths)
    return out


def train_rl(
    init: str | Path,
    out: str | Path,
    cfg: RLConfig,
    device: str = "auto",
    resume: bool = False,
    log=None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run RL from checkpoint `init` into `out`; returns a summary dict.

    One piece on purpose: set-up, resume, the loop over steps and the dev selection in the
    order they happen; a step is `rl_step` (or `sft_step`)."""
    log = log or (lambda m: print(m, file=sys.stderr))
    out, dev = Path(out), resolve_device(device)
    model, meta = ckpt.load_model(init, dev)
    record = {"rl": asdict(cfg), "init": str(init), "init_sha256": meta.get("sha256")}
    run_file = out / "run.json"
    if resume:
        check_resume(run_file, {"rl": record["rl"]})
    elif run_file.exists():
        raise TrainError(f"{out} already holds a run; use --resume or another --out")
    else:
        out.mkdir(parents=True, exist_ok=True)
        run_file.write_text(json.dumps(record, indent=2))
    amp = run_autocast(dev, cfg.precision, recorded_dtypes(run_file), DistInfo())
    if amp is not None and (warning := bf16_warning(dev)):
        log(warning)
    learner = make_learner(model, cfg, out, amp=amp)
    trainable = sum(p.numel() for p in learner.params)
    dtype = str(amp or torch.float32).removeprefix("torch.")
    log(f"rl: {trainable:,} trainable parameters (scope {cfg.scope}), updates in {dtype}")
    start = 0
    if resume and checkpoint_dirs(out):
        start = load_training_state(checkpoint_dirs(out)[-1], model, learner.optimizer)
        log(f"resuming {out} from group {start}")
    note_machine(run_file, start, machine_record(dev, autocast=amp or "none"))
    trim_metrics(out / METRICS, start)
    trim_metrics(out / ROLLOUTS, start)
    order = rl_tasks(cfg)
    edge = None
    if cfg.sampler == "edge":
        edge = edge_pool(learner, order, start)
    dev = dev_tasks(cfg)
    best = _best_so_far(out)
    evals = [r["dev_pass1"] for r in read_jsonl(out / METRICS) if "dev_pass1" in r]
    if best is not None and evals:  # "last" is the latest evaluation, not the best one's
        best["last"] = evals[-1]
    if start == 0 and best is None:
        best = _evaluate_dev(model, dev, cfg, out, 0, None)
    step = functools.partial(rl_step, edge=edge) if cfg.objective == "rloo" else sft_step
    bar = Progress(cfg.groups, start, enabled=progress, unit="group", desc="rl")
    scalars = Scalars(out, purge_step=start)
    t0, n_rollouts, summary = time.perf_counter(), 0, {"trainable_parameters": trainable}
    g = start
    while g < cfg.groups:
        batch = order[g : min(cfg.groups, g + cfg.tasks_per_step)]
        stats = step(learner, batch, g)
        g += len(batch)
        drawn = stats.get("groups_drawn", len(batch))
        n_rollouts += drawn * (cfg.group_size if cfg.objective == "rloo" else 1)
        stats.update(step=g, rollouts_per_s=n_rollouts / (time.perf_counter() - t0))
        if g % cfg.eval_every < len(batch) or g == cfg.groups:
            best = _evaluate_dev(model, dev, cfg, out, g, best)
            stats["dev_pass1"] = best["last"]
        append_jsonl(out / METRICS, stats)
        scalars.add(stats)
        bar.update(
            g,
            reward=stats["reward_mean"],
            pass_rate=stats["pass_rate"],
            rollouts_s=stats["rollouts_per_s"],
        )
        save_training_state(out, g, model, learner.optimizer, keep=1, metrics={"group": g})
    bar.close()
    scalars.close()
    rows = list(read_jsonl(out / METRICS))
    summary.update(
        groups=cfg.groups,
        wall_seconds=time.perf_counter() - t0,
        no_spread_groups=sum(r["no_spread"] for r in rows),
        best_dev=best,
        rollouts_per_s=n_rollouts / (time.perf_counter() - t0),
    )
    if edge is not None:
        summary.update(
            groups_drawn=sum(r["groups_drawn"] for r in rows),
            groups_kept=sum(r["groups_kept"] for r in rows),
        )
    plot_rl(rows, out / "rl.png")
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def edge_pool(learner: Learner, pool: list[CodeTask], start: int) -> EdgePool:
    """The edge sampler over `pool` (rl_tasks: the ladder's RL structures and the seed
    families), its counts rebuilt from the run's files: the probe (drawn afresh when the run
    starts at group 0) and the rollouts up to `start`, so a resumed run draws as the
    uninterrupted one does. edge_estimate structure keys the counts by `task.family` (the
    ladder structure or seed family), so a structure's instances share one estimate."""
    out, cfg = learner.out, learner.cfg
    if start == 0:
        (out / PROBE).unlink(missing_ok=True)
        if cfg.edge_probe > 0:
            probe(learner, pool, out / PROBE)
    keys = [t.family for t in pool] if cfg.edge_estimate == "structure" else None
    sampler = EdgeSampler(len(pool), weight=cfg.edge_weight, group_size=cfg.group_size, keys=keys)
    index = {(t.family, t.name): i for i, t in enumerate(pool)}
    for r in read_jsonl(out / PROBE):
        sampler.record(index[r["family"], r["task"]], int(r["status"] == "pass"), 1)
    steps: dict[int, dict[int, list[int]]] = {}  # step -> task -> [passes, trials]
    for r in read_jsonl(out / ROLLOUTS):
        counts = steps.setdefault(r["step"], {}).setdefault(index[r["family"], r["task"]], [0, 0])
        counts[0] += r["status"] == "pass"
        counts[1] += 1
    for step in sorted(steps):  # as `edge_draws` counted them: discount, then the step's groups
        sampler.discount(cfg.edge_discount)
        for i, (passes, trials) in steps[step].items():
            sampler.record(i, passes, trials)
    return EdgePool(pool, sampler)


def verify_rows(owners: list[CodeTask], completions: list[Completion]) -> list[Any]:
    """The verdict of each completion as the body of its row's task."""
    from glmflash.verify import verify_many

    sources = [completion_source(t, c.text) for t, c in zip(owners, completions, strict=True)]
    return verify_many(sources, [t.task for t in owners])


def probe(learner: Learner, pool: list[CodeTask], path: Path) -> None:
    """cfg.edge_probe samples of every task of `pool` by the initial policy, verified and
    written to `path`: the edge sampler's first pass counts."""
    cfg = learner.cfg
    owners = [t for t in pool for _ in range(cfg.edge_probe)]
    completions = generate(
        learner.model,
        [t.prompt for t in owners],
        cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        seed=derive_seed("probe", cfg.seed),
    )
    verdicts = verify_rows(owners, completions)
    rows = [
        {"task": t.name, "family": t.family, "completion": c.text, "status": v.status}
        for t, c, v in zip(owners, completions, verdicts, strict=True)
    ]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


def ptx_stream(cfg: RLConfig, context: int):
    """The pretraining corpus ("tasks", train split) as a packed stream for the ptx term."""
    from glmflash.data.stream import PackedStream, make_corpus

    return PackedStream(
        make_corpus("tasks", cfg.seed),
        seq_len=min(PTX_SEQ_LEN, context),
        seed=derive_seed("ptx", cfg.seed),
    )


def rl_optimizer(params: list[Tensor], cfg: RLConfig) -> torch.optim.Optimizer:
    """AdamW without weight decay, so that lr 0 (rl-ablations' control) changes nothing."""
    return torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0)


@dataclass
class Learner:
    """What a training step works on: the policy and its frozen initial copy (the KL
    reference; None for SFT), the optional pretraining stream of the ptx term, the optimizer
    over the trained parameters, the settings, the run folder and the update's autocast dtype
    (None: fp32)."""

    model: GLMFlash
    reference: GLMFlash | None
    ptx: Any
    optimizer: torch.optim.Optimizer
    params: list[Tensor]
    cfg: RLConfig
    out: Path
    amp: torch.dtype | None = None


def make_learner(model: GLMFlash, cfg: RLConfig, out: Path, *, amp: torch.dtype | None) -> Learner:
    """Set the trained scope of `model` and gather what its steps need: the frozen initial
    policy (the KL penalty's anchor when kl > 0, and always the health metric's; the
    supervised control samples nothing and logs no KL, so it gets none), the ptx stream when
    ptx > 0, the optimizer over the trained parameters, and the update's autocast dtype `amp`
    (None: fp32; a run decides it once from cfg.precision, `runlog.run_autocast`)."""
    set_scope(model, cfg.scope)
    reference = None
    if cfg.objective == "rloo":
        reference = copy.deepcopy(model).eval().requires_grad_(False)
    ptx = ptx_stream(cfg, model.cfg.context) if cfg.ptx > 0 else None
    params = [p for p in model.parameters() if p.requires_grad]
    return Learner(model, reference, ptx, rl_optimizer(params, cfg), params, cfg, out, amp)


def sample_rollouts(
    model: GLMFlash,
    batch: list[CodeTask],
    g0: int,
    cfg: RLConfig,
    use_cache: bool = True,
    attempt: int = 0,
) -> list[Completion]:
    """The step's cfg.group_size samples of each task of `batch`, task by task, in one call:
    all the step's rows decode as one batch (`generate`); the seed is the step's first group index
    g0 (and, after the step's first, its sampling `attempt`: the edge sampler's redraws),
    so resuming at a step boundary reproduces the samples. use_cache=False: the same
    draws with the prefix recomputed for every token (the benchmark's baseline)."""
    return generate(
        model,
        [t.prompt for t in batch for _ in range(cfg.group_size)],
        cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        seed=derive_seed("rl", cfg.seed, g0)
        if attempt == 0
        else derive_seed("rl", cfg.seed, g0, attempt),
        use_cache=use_cache,
    )


class Rollouts(NamedTuple):
    """Groups of verified samples: each row's task (group_size rows per task, task by task),
    completion and verdict, the rewards [tasks, group_size], and the seconds spent sampling
    and verifying."""

    owners: list[CodeTask]
    completions: list[Completion]
    verdicts: list[Any]
    rewards: Tensor
    sample_seconds: float
    verify_seconds: float


def roll_out(learner: Learner, batch: list[CodeTask], g0: int, attempt: int = 0) -> Rollouts:
    """Sample cfg.group_size completions of each task of `batch`, verify and reward them."""
    cfg = learner.cfg
    owners = [task for task in batch for _ in range(cfg.group_size)]
    t0 = time.perf_counter()
    completions = sample_rollouts(learner.model, batch, g0, cfg, attempt=attempt)
    t1 = time.perf_counter()
    verdicts = verify_rows(owners, completions)
    t2 = time.perf_counter()
    rewards = torch.tensor([reward_of(v, cfg) for v in verdicts], dtype=torch.float64)
    return Rollouts(owners, completions, verdicts, rewards.view(len(batch), -1), t1 - t0, t2 - t1)


class EdgePool(NamedTuple):
    """The edge sampler's pool of tasks and its pass counts, by pool index."""

    tasks: list[CodeTask]
    sampler: EdgeSampler


def edge_draws(learner: Learner, edge: EdgePool, want: int, g0: int) -> tuple[Rollouts, list[bool]]:
    """`want` groups drawn from the pool at the edge of competence with dynamic sampling
    (`EdgeSampler.fill`): every drawn group's rollouts, and whether each is kept (has spread)."""
    cfg, parts = learner.cfg, []

    def roll(indices: list[int], attempt: int) -> list[Group]:
        part = roll_out(learner, [edge.tasks[i] for i in indices], g0, attempt)
        parts.append(part)
        G = cfg.group_size
        passed = [v.status == "pass" for v in part.verdicts]
        return [
            Group(tuple(part.rewards[k].tolist()), sum(passed[k * G : (k + 1) * G]))
            for k in range(len(indices))
        ]

    edge.sampler.discount(cfg.edge_discount)
    fill = edge.sampler.fill(want, cfg.max_redraws, derive_seed("edge", cfg.seed, g0), roll)
    merged = Rollouts(
        [t for p in parts for t in p.owners],
        [c for p in parts for c in p.completions],
        [v for p in parts for v in p.verdicts],
        torch.cat([p.rewards for p in parts]),
        sum(p.sample_seconds for p in parts),
        sum(p.verify_seconds for p in parts),
    )
    return merged, fill.kept


def rl_step(
    learner: Learner, batch: list[CodeTask], g0: int, edge: EdgePool | None = None
) -> dict[str, Any]:
    """Sample, verify and reward G completions for each task of `batch`; update; the step's
    health figures. With `edge` (sampler edge), the step draws len(batch) tasks from the
    edge pool instead (`edge_draws`): every drawn rollout is written (with `kept`) and counted
    in the figures, and the update sees the kept groups only, so its mean runs over their
    completions. One piece on purpose: the rollouts file, the rewards and the figures are
    written from the same records as they are made."""
    model, cfg, out = learner.model, learner.cfg, learner.out
    if edge is None:
        rolled, kept = roll_out(learner, batch, g0), [True] * len(batch)
    else:
        rolled, kept = edge_draws(learner, edge, len(batch), g0)
    owners, completions, verdicts, rewards = rolled[:4]
    G = cfg.group_size
    adv = advantages(rewards, cfg.advantage, cfg.normalize_std).flatten()
    no_spread = int((rewards.max(-1).values == rewards.min(-1).values).sum())
    for i, (t, c, v) in enumerate(zip(owners, completions, verdicts, strict=True)):
        row = {
            "step": g0 + i // G + 1 if edge is None else g0 + len(batch),
            "task": t.name,
            "family": t.family,
            "prompt": t.prompt,
            "completion": c.text,
            "status": v.status,
            "passed": v.passed,
            "total": v.total,
            "reward": float(rewards.flatten()[i]),
            "advantage": float(adv[i]),
        }
        append_jsonl(out / ROLLOUTS, row if edge is None else {**row, "kept": kept[i // G]})
    rows = [i for i in range(len(completions)) if kept[i // G]]
    ptx = learner.ptx
    lm_batch = ptx.batch(g0 // cfg.tasks_per_step, cfg.ptx_batch) if ptx is not None else None
    t3 = time.perf_counter()
    update = policy_update(
        model,
        learner.reference,
        learner.optimizer,
        learner.params,
        [completions[i].prompt_ids for i in rows],
        [completions[i] for i in rows],
        adv[rows],
        cfg,
        lm_batch,
        amp=learner.amp,
    )
    t4 = time.perf_counter()
    statuses = [v.status for v in verdicts]
    stats = {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "pass_rate": statuses.count("pass") / len(statuses),
        "invalid_rate": sum(s in ("invalid", "timeout", "crash") for s in statuses) / len(statuses),
        "no_spread": no_spread,
        "no_spread_share": no_spread / len(kept),
        **update,
        "mean_len": sum(len(c.ids) for c in completions) / len(completions),
        "truncation_rate": sum(c.stop == "length" for c in completions) / len(completions),
        # where the step's time went (the rest: rewards and the rollouts file)
        "sample_seconds": rolled.sample_seconds,
        "verify_seconds": rolled.verify_seconds,
        "update_seconds": t4 - t3,
    }
    if edge is not None:
        stats.update(
            groups_drawn=len(kept),
            groups_kept=sum(kept),
            pool_pass_hist=edge.sampler.histogram(),
            pool_untried=edge.sampler.untried(),
        )
    return stats


def sft_step(learner: Learner, batch: list[CodeTask], g0: int) -> dict[str, Any]:
    """The supervised counterpart of `rl_step` on the same tasks: one update on each task's
    reference body (+ EOS), mean token log-likelihood; no sampling, no verifier, no reward
    (the learner's reference policy and ptx stream are not used)."""
    model = learner.model
    model.train()
    prompts = [tok.encode(t.prompt) for t in batch]
    bodies = [tok.encode(t.reference) + [tok.EOS] for t in batch]
    with autocast(next(model.parameters()).device, learner.amp):
        scored = sequence_logprobs(model, prompts, bodies)
        loss = -scored.logp.sum() / scored.mask.sum()
    update(learner.optimizer, loss, learner.params, learner.cfg.grad_clip)
    return {
        "reward_mean": None,
        "pass_rate": None,
        "invalid_rate": None,
        "no_spread": 0,
        "loss": float(loss.detach()),
        "mean_len": sum(len(b) for b in bodies) / len(bodies),
    }


def policy_update(
    model: GLMFlash,
    reference: GLMFlash | None,
    optimizer,
    params,
    prompts: list[list[int]],
    completions,
    adv: Tensor,
    cfg: RLConfig,
    lm_batch: tuple[Tensor, Tensor] | None = None,
    amp: torch.dtype | None = None,
) -> dict[str, float | None]:
    """cfg.update_epochs policy-gradient steps on the completions with nonzero advantage.
    The scored tokens are exactly the sampled ones: the body and the token that ended it (EOS,
    or the first byte of the line back at column 0).
    `lm_batch` (x, y) adds cfg.ptx times its next-token loss. The forward passes (the
    reference's too) run under autocast to `amp` (None: fp32), the log-softmax in fp32. A batch
    with no advantage is skipped whole (a group without reward spread still moves nothing).
    Returns the loss and gradient norm of the first update, the entropy and KL to `reference`
    (None without one) on the scored tokens before it (the KL over cfg.kl_rows of the
    completions when kl = 0), and the mean clip fraction over the updates. One piece on
    purpose: each epoch reads as PPO's update does (score, surrogate, KL penalty, ptx, step).
    """
    sel = (adv != 0).nonzero().flatten().tolist()
    if not sel:
        return {"loss": 0.0, "grad_norm": 0.0, "entropy": None, "kl": None, "clip_fraction": 0.0}
    model.train()
    ids = [completions[i].sampled for i in sel]
    chosen = [prompts[i] for i in sel]
    ref, kl_at = None, kl_rows(len(sel), len(sel) if cfg.kl > 0 else cfg.kl_rows)
    device = next(model.parameters()).device
    if reference is not None:
        with torch.no_grad(), autocast(device, amp):
            ref = sequence_logprobs(
                reference,
                [chosen[i] for i in kl_at],
                [ids[i] for i in kl_at],
                temperature=cfg.temperature,
            ).logp
    a = adv[sel]
    budget = cfg.max_new_tokens + 1  # Dr. GRPO's constant: the longest a completion can be
    stats: dict[str, Any] = {}
    old, clip_fractions = None, []
    for epoch in range(cfg.update_epochs):
        with autocast(device, amp):
            scored = sequence_logprobs(
                model, chosen, ids, with_entropy=epoch == 0, temperature=cfg.temperature
            )
        logp, mask = scored.logp, scored.mask
        if epoch == 0:
            stats["entropy"] = float(scored.entropy.sum() / mask.sum().clamp_min(1))
            if ref is not None:
                at = (kl_at, slice(0, ref.shape[1]))  # ref is padded to its own rows' longest
                stats["kl"] = float(k3_kl(logp.detach()[at], ref, mask[at]))
            else:
                stats["kl"] = None
            if cfg.update_epochs > 1:
                old = logp.detach()
        surrogate = policy_surrogate(
            logp,
            mask,
            a.to(device=logp.device, dtype=logp.dtype),
            cfg.aggregation,
            budget,
            old,
            cfg.clip_low,
            cfg.clip_high,
        )
        clip_fractions.append(surrogate.clip_fraction)
        loss = surrogate.loss
        if ref is not None and cfg.kl > 0:
            loss = loss + cfg.kl * k3_kl(logp, ref, mask)
        # the mean runs over all N completions: zero-advantage ones add nothing but count
        loss = loss * len(sel) / len(adv)
        if lm_batch is not None:
            x, y = (t.to(device) for t in lm_batch)
            with autocast(device, amp):
                loss = loss + cfg.ptx * model(x, y).loss
        grad_norm = update(optimizer, loss, params, cfg.grad_clip)
        if epoch == 0:
            stats.update(loss=float(loss.detach()), grad_norm=grad_norm)
    stats["clip_fraction"] = sum(clip_fractions) / len(clip_fractions)
    return stats


def kl_rows(n: int, k: int) -> list[int]:
    """k of n rows evenly spaced (all n when k >= n): the RL batch holds each group's
    completions together, so the rows spread over the groups."""
    return list(range(n)) if k >= n else [i * n // k for i in range(k)]


def _best_so_far(out: Path) -> dict[str, Any] | None:
    ckpt.recover(out)  # a kill while `best` was replaced leaves the old one aside
    path = out / "best" / "config.json"
    if path.is_file():
        return json.loads(path.read_text())["meta"]["best"]
    return None


def _evaluate_dev(
    model, todo, cfg: RLConfig, out: Path, g: int, best: dict[str, Any] | None
) -> dict[str, Any]:
    """Greedy dev pass@1; keep the best checkpoint by dev only (ties go to the later one)."""
    result = evaluate_tasks(model, todo, Sampling(max_new_tokens=cfg.max_new_tokens))
    score = result.pass_rate
    if best is None or score >= best["dev_pass1"]:
        best = {"group": g, "dev_pass1": score}
        ckpt.save_model(out / "best", model, best={**best, "last": score}, group=g)
    return {**best, "last": score}


HEALTH_PANELS = (  # (title, ((metrics key, label), ...)) of the RL plot, reward first
    (
        "reward",
        (
            ("reward_mean", "reward (mean)"),
            ("reward_std", "reward (std)"),
            ("pass_rate", "sample pass rate"),
        ),
    ),
    (
        "signal",
        (
            ("no_spread_share", "groups without spread"),
            ("truncation_rate", "truncated completions"),
            ("clip_fraction", "clipped tokens"),
        ),
    ),
    ("policy", (("entropy", "entropy (nats/token)"), ("kl", "KL to the initial policy"))),
    ("update", (("grad_norm", "gradient norm"), ("mean_len", "completion length / 100"))),
)


def plot_rl(rows: list[dict[str, Any]], png: Path) -> None:
    """The reward, the dev evaluations and the health metrics against groups, four panels."""
    if not rows:
        return
    plt = pyplot()

    fig, axes = plt.subplots(2, 2, figsize=(10, 6.5), sharex=True)
    steps = [r["step"] for r in rows]
    for ax, (title, series) in zip(axes.flat, HEALTH_PANELS, strict=True):
        for key, label in series:
            scale = 0.01 if key == "mean_len" else 1.0
            values = [math.nan if r.get(key) is None else scale * r[key] for r in rows]
            if not all(math.isnan(v) for v in values):
                ax.plot(steps, values, label=label)
        if title == "reward":
            dev = [r for r in rows if "dev_pass1" in r]
            ax.plot(
                [r["step"] for r in dev],
                [r["dev_pass1"] for r in dev],
                "o-",
                label="dev greedy pass@1",
            )
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("groups")
    save(fig, png, dpi=120)
