"""Which tasks an RL step trains on: at the edge of competence, by each task's pass rate.

A group of G completions of one task teaches only if its rewards differ: equal rewards give
every completion advantage 0 (`policy_gradient.advantages`). With a binary reward and pass
rate p, the reward's variance is p (1 - p) and a group has spread with probability
1 - p^G - (1 - p)^G; both vanish at p = 0 and p = 1 and peak at p = 1/2. So the sampler keeps,
for each task of a fixed pool, the count of its rollouts and of those that passed, estimates

    p_hat = (passes + 1) / (trials + 2)      the posterior mean under a uniform Beta(1, 1)
                                             prior: an untried task sits at 1/2

and draws tasks without replacement with weight `w + FLOOR`, where w is one of

    variance   w = p_hat (1 - p_hat)                    the reward variance p_hat predicts
    spread     w = E[1 - p^G - (1 - p)^G]               the chance that a group of G has spread,
                 = 1 - B(a + G, b) / B(a, b)            averaged over the posterior
                     - B(a, b + G) / B(a, b)            Beta(a, b), a = passes + 1,
                                                        b = trials - passes + 1

`variance` peaks sharply at 1/2 (a task at p = 0.05 weighs 0.05, a fifth of one at 1/2);
`spread` is what dynamic sampling needs, and for G = 16 it is flat over most of (0, 1): a task
at p = 0.05 has spread in 56% of its groups. FLOOR keeps a task the policy never or always
solves drawable: the policy moves under training, a task at 0 today may be at the edge
later, and only a draw can tell.

With a discount gamma < 1 (`EdgeSampler.discount`, once per step), old rollouts count less:
after k more steps a rollout weighs gamma^k, so the estimates follow the policy as it moves
(an effective memory of 1 / (1 - gamma) steps).

Tasks may share their counts (`keys`): every instance of one ladder structure, or of one seed
family, counts toward a single estimate, so a task never drawn starts from what its structure
has shown, and a structure always solved sinks to the floor after a few groups instead of each
of its instances starting at 1/2 (online difficulty filtering, Bae et al. 2025, keeps a pass
rate per prompt; here the structure is what a pass rate belongs to: its instances differ only
in constants, names and phrasing).

Dynamic sampling (DAPO, Yu et al. 2025; `EdgeSampler.fill`): the groups of a step without
reward spread are dropped and replaced by new draws, up to a stated number of extra groups per
step, so that the step trains on groups that carry a gradient. The class is bookkeeping only:
the rollouts come from a callback, so it is tested without a model.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import NamedTuple

from glmflash.config.rl import EDGE_WEIGHTS

FLOOR = 0.02  # weight a task keeps at an estimate of 0 or 1: 1/13.5 of the weight at p = 1/2
HIST_BINS = 5  # pass-rate histogram of the pool: [0, .2), [.2, .4), ..., [.8, 1]


class Group(NamedTuple):
    """The outcome of one group: its rewards and how many of its completions passed."""

    rewards: tuple[float, ...]
    passes: int


class Fill(NamedTuple):
    """A step's draws in order (pool indices), whether each group was kept (it has reward
    spread), and the number of sampling rounds."""

    drawn: list[int]
    kept: list[bool]
    rounds: int


def has_spread(rewards: Sequence[float]) -> bool:
    return max(rewards) > min(rewards)


def beta_moment(a: float, b: float, k: int) -> float:
    """E[p^k] for p ~ Beta(a, b): B(a + k, b) / B(a, b) = prod_{i<k} (a + i) / (a + b + i)."""
    return math.prod((a + i) / (a + b + i) for i in range(k))


class EdgeSampler:
    """Pass counts of a pool of `size` tasks (by index) and the draws they weight: `weight`
    variance or spread (for groups of `group_size`), as the module says. `keys` (one per task)
    pools the counts of the tasks that share a key; without it every task counts alone.
    `passes` and `trials` are per key, in order of first appearance (per task without keys)."""

    def __init__(
        self,
        size: int,
        floor: float = FLOOR,
        weight: str = "variance",
        group_size: int = 16,
        keys: Sequence[Hashable] | None = None,
    ) -> None:
        if size < 1 or floor <= 0:
            raise ValueError(f"a pool needs tasks and a positive floor, got {size}, {floor}")
        if weight not in EDGE_WEIGHTS or group_size < 2:
            raise ValueError(
                f"weight must be one of {EDGE_WEIGHTS} and groups of 2 or more, got {weight!r}, "
                f"{group_size}"
            )
        if keys is not None and len(keys) != size:
            raise ValueError(f"one key per task: got {len(keys)} keys for {size} tasks")
        ids: dict[Hashable, int] = {}  # key -> its counts' index, in order of first appearance
        self.key = [ids.setdefault(k, len(ids)) for k in (range(size) if keys is None else keys)]
        self.passes: list[float] = [0] * len(ids)
        self.trials: list[float] = [0] * len(ids)
        self.floor = floor
        self.weight = weight
        self.group_size = group_size

    def __len__(self) -> int:
        return len(self.key)

    def record(self, index: int, passes: int, trials: int) -> None:
        """Count `trials` more rollouts of task `index` (toward its key), `passes` of which
        passed."""
        if not 0 <= passes <= trials:
            raise ValueError(f"passes must be in [0, trials], got {passes} of {trials}")
        self.passes[self.key[index]] += passes
        self.trials[self.key[index]] += trials

    def discount(self, gamma: float) -> None:
        """Weigh every rollout counted so far by gamma (in (0, 1]; 1 changes nothing)."""
        if not 0 < gamma <= 1:
            raise ValueError(f"a discount must be in (0, 1], got {gamma}")
        if gamma < 1:
            self.passes = [s * gamma for s in self.passes]
            self.trials = [n * gamma for n in self.trials]

    def estimates(self) -> list[float]:
        """p_hat = (passes + 1) / (trials + 2) of every task (its key's counts)."""
        return [(self.passes[k] + 1) / (self.trials[k] + 2) for k in self.key]

    def weights(self) -> list[float]:
        """w + floor of every task, w by `weight` (the module's table) of its key's counts."""
        if self.weight == "variance":
            return [p * (1 - p) + self.floor for p in self.estimates()]
        G = self.group_size
        by_key = [
            1 - beta_moment(s + 1, n - s + 1, G) - beta_moment(n - s + 1, s + 1, G) + self.floor
            for s, n in zip(self.passes, self.trials, strict=True)
        ]
        return [by_key[k] for k in self.key]

    def draw(self, n: int, rng: random.Random, exclude: Collection[int] = ()) -> list[int]:
        """Up to `n` distinct tasks not in `exclude`, drawn without replacement in proportion
        to their weights: the n largest keys u^(1 / w), u ~ U(0, 1] (Efraimidis and Spirakis
        2006; compared as log(u) / w, which does not underflow), the same law as drawing by
        weight one at a time among the tasks not yet drawn."""
        keys = [(math.log(1 - rng.random()) / w, i) for i, w in enumerate(self.weights())]
        return [i for _, i in sorted(keys, reverse=True) if i not in exclude][:n]

    def fill(
        self,
        want: int,
        max_redraws: int,
        seed: int,
        roll: Callable[[list[int], int], list[Group]],
    ) -> Fill:
        """Draw `want` tasks, roll them out (`roll(indices, attempt)` gives each one's Group;
        attempt counts the step's sampling rounds from 0), count every rollout, and replace
        the groups without spread by new draws (tasks not yet drawn this step) until `want`
        are kept, the step has drawn `max_redraws` groups beyond `want`, or the pool is
        spent."""
        rng = random.Random(seed)
        drawn: list[int] = []
        kept: list[bool] = []
        need, extra, rounds = want, max_redraws, 0
        while need > 0:
            batch = self.draw(need, rng, exclude=set(drawn))
            if not batch:
                break
            groups = roll(batch, rounds)
            rounds += 1
            for i, group in zip(batch, groups, strict=True):
                self.record(i, group.passes, len(group.rewards))
                drawn.append(i)
                kept.append(has_spread(group.rewards))
            need = min(want - sum(kept), extra)
            extra -= need
        return Fill(drawn, kept, rounds)

    def untried(self) -> int:
        """Keys (tasks, without keys) with no rollout counted yet."""
        return self.trials.count(0)

    def histogram(self, bins: int = HIST_BINS) -> list[int]:
        """How many tried keys (tasks, without keys) have an observed pass rate passes / trials
        in each of `bins` equal bins of [0, 1] (the last one closed)."""
        counts = [0] * bins
        for s, n in zip(self.passes, self.trials, strict=True):
            if n:
                counts[min(int(s * bins // n), bins - 1)] += 1  # integer counts: exact at edges
        return counts


__all__ = [
    "FLOOR",
    "HIST_BINS",
    "EdgeSampler",
    "Fill",
    "Group",
    "beta_moment",
    "has_spread",
]
