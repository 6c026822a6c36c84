"""The edge-of-competence task sampler as bookkeeping, without a model: drop-and-refill and
its counts against a stand-in reward with known pass rates, the weights, the draws' law."""

import random
from fractions import Fraction

import pytest

from glmflash.train.task_sampler import FLOOR, EdgeSampler, Group

RATES = [0.0] * 4 + [1.0] * 4 + [0.5] * 4 + [0.2] * 4 + [0.8] * 4  # known pass rates


def stand_in(rates: list[float], G: int, seed: int):
    """A reward function of known pass rates (binary rewards) and the log of what it rolled:
    (indices, attempt, groups) per call."""
    rng = random.Random(seed)
    log: list[tuple[list[int], int, list[Group]]] = []

    def roll(indices: list[int], attempt: int) -> list[Group]:
        groups = []
        for i in indices:
            passed = [rng.random() < rates[i] for _ in range(G)]
            groups.append(Group(tuple(float(p) for p in passed), sum(passed)))
        log.append((list(indices), attempt, groups))
        return groups

    return roll, log


def test_fill_keeps_groups_with_spread_refills_within_the_limit_and_counts_every_rollout():
    """Each step draws `want` tasks, then exactly the shortfall of kept groups, as long as the
    redraw limit allows; kept groups are exactly those with spread; every rollout of every
    drawn group, kept or dropped, is counted, so the counts equal a direct count."""
    G, want, limit = 4, 3, 5
    sampler = EdgeSampler(len(RATES))
    passes, trials = [0] * len(RATES), [0] * len(RATES)
    draws = [0] * len(RATES)
    refilled = limited = 0
    for step in range(60):
        roll, log = stand_in(RATES, G, step)
        fill = sampler.fill(want, limit, seed=step, roll=roll)
        rolled = [
            (i, g) for indices, _, groups in log for i, g in zip(indices, groups, strict=True)
        ]
        assert fill.drawn == [i for i, _ in rolled]
        assert fill.kept == [max(g.rewards) > min(g.rewards) for _, g in rolled]
        assert [attempt for _, attempt, _ in log] == list(range(fill.rounds))
        assert len(set(fill.drawn)) == len(fill.drawn)  # no task twice in a step
        kept_so_far, extra = 0, limit
        for r, (indices, _, groups) in enumerate(log):
            expected = want if r == 0 else min(want - kept_so_far, extra)
            extra -= 0 if r == 0 else expected
            assert len(indices) == expected
            kept_so_far += sum(max(g.rewards) > min(g.rewards) for g in groups)
        kept = sum(fill.kept)
        assert kept <= want and len(fill.drawn) <= want + limit
        assert kept == want or len(fill.drawn) == want + limit  # stops only when it must
        refilled += fill.rounds > 1
        limited += kept < want
        for i, g in rolled:
            passes[i] += g.passes
            trials[i] += len(g.rewards)
            draws[i] += 1
    assert refilled and limited  # both ends of the refill were exercised
    assert sampler.passes == passes and sampler.trials == trials
    assert sampler.estimates() == [(s + 1) / (n + 2) for s, n in zip(passes, trials, strict=True)]
    observed = [Fraction(s, n) for s, n in zip(passes, trials, strict=True) if n]
    edges = [Fraction(k, 5) for k in range(6)]
    assert sampler.histogram() == [
        sum(lo <= p < hi or p == hi == 1 for p in observed)
        for lo, hi in zip(edges, edges[1:], strict=False)
    ]
    assert sampler.untried() == trials.count(0)
    never, always, mid = (sum(draws[k : k + 4]) for k in (0, 4, 8))
    assert mid > 2 * never and mid > 2 * always  # the edge is drawn most


def test_fill_stops_when_the_pool_is_spent():
    sampler = EdgeSampler(3)
    roll, log = stand_in([0.0, 0.0, 0.0], G=4, seed=0)
    fill = sampler.fill(want=2, max_redraws=5, seed=0, roll=roll)
    assert sorted(fill.drawn) == [0, 1, 2] and fill.kept == [False] * 3
    assert [len(indices) for indices, _, _ in log] == [2, 1] and fill.rounds == 2
    assert sampler.trials == [4, 4, 4] and sampler.passes == [0, 0, 0]


def test_weights_favour_mid_pass_rates_and_draws_follow_them():
    """w = p_hat (1 - p_hat) + FLOOR with p_hat = (passes + 1) / (trials + 2): a task solved
    half the time outweighs one never or always solved, which keep at least the floor; one
    draw picks a task in proportion to its weight, two draw as one at a time without
    replacement does."""
    s = EdgeSampler(4)
    s.record(0, 0, 16)
    s.record(1, 8, 16)
    s.record(2, 16, 16)  # task 3 untried: the prior's 1/2
    w = s.weights()
    assert w == pytest.approx(
        [1 / 18 * 17 / 18 + FLOOR, 0.25 + FLOOR, 17 / 18 / 18 + FLOOR, 0.25 + FLOOR]
    )
    assert w[1] > 3 * w[0] and w[1] > 3 * w[2]
    s.record(0, 0, 10_000)
    assert FLOOR < s.weights()[0] < FLOOR + 1e-3  # never solved: down to the floor, not zero
    rng, n = random.Random(0), 40_000
    w = s.weights()
    singles, pairs = [0] * 4, {}
    for _ in range(n):
        singles[s.draw(1, rng)[0]] += 1
        pair = frozenset(s.draw(2, rng))
        pairs[pair] = pairs.get(pair, 0) + 1
    total = sum(w)
    for i in range(4):
        assert singles[i] / n == pytest.approx(w[i] / total, abs=0.01)
    for a, b in ((1, 3), (0, 1), (2, 3)):
        law = w[a] / total * w[b] / (total - w[a]) + w[b] / total * w[a] / (total - w[b])
        assert pairs.get(frozenset((a, b)), 0) / n == pytest.approx(law, abs=0.01)


def test_draw_skips_excluded_tasks_and_refuses_bad_counts():
    s = EdgeSampler(5)
    rng = random.Random(1)
    for _ in range(50):
        got = s.draw(3, rng, exclude={0, 2})
        assert len(got) == 3 and not {0, 2} & set(got)
    assert sorted(s.draw(9, rng, exclude={4})) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="passes"):
        s.record(0, 3, 2)


@pytest.mark.parametrize("G", [2, 4, 16])
def test_spread_weight_is_the_posterior_chance_of_a_group_with_spread(G):
    """weight spread: E[1 - p^G - (1 - p)^G] under Beta(passes + 1, trials - passes + 1),
    against numerical integration of the Beta density (scipy), for whole and discounted
    counts; at G = 16 it keeps a task solved 1 time in 20 far more in play than variance."""
    from scipy import integrate, stats

    counts = [(0, 0), (0, 16), (1, 20), (8, 16), (30, 32), (2.7, 5.3), (0.4, 0.9)]
    s = EdgeSampler(len(counts), weight="spread", group_size=G)
    for i, (passes, trials) in enumerate(counts):
        s.passes[i], s.trials[i] = passes, trials  # discounted counts are not whole
    for w, (passes, trials) in zip(s.weights(), counts, strict=True):
        law, _ = integrate.quad(
            lambda p, a=passes + 1, b=trials - passes + 1: (
                (1 - p**G - (1 - p) ** G) * stats.beta.pdf(p, a, b)
            ),
            0,
            1,
        )
        assert w == pytest.approx(law + FLOOR, rel=1e-9, abs=1e-12)
    if G == 16:
        pair = [(1, 20), (10, 20)]  # p_hat 1/11 and 1/2
        by = {}
        for weight in ("variance", "spread"):
            t = EdgeSampler(2, weight=weight, group_size=G)
            for i, (passes, trials) in enumerate(pair):
                t.record(i, passes, trials)
            by[weight] = t.weights()
        assert by["spread"][0] / by["spread"][1] > 1.5 * by["variance"][0] / by["variance"][1]


def test_discount_weighs_each_rollout_by_gamma_per_later_step():
    """After discount(gamma) the counts are gamma times the old ones, and a fill then adds
    whole counts: a rollout k discounts old weighs gamma^k; gamma = 1 changes nothing, and a
    discount outside (0, 1] is refused, as are unknown weights."""
    gamma, G = 0.5, 4
    s = EdgeSampler(len(RATES))
    history = []  # (step, passes, trials) per task
    for step in range(5):
        s.discount(gamma)
        roll, log = stand_in(RATES, G, step)
        s.fill(3, 2, seed=step, roll=roll)
        history += [
            (step, i, g.passes, len(g.rewards))
            for indices, _, groups in log
            for i, g in zip(indices, groups, strict=True)
        ]
    for i in range(len(RATES)):
        mine = [(4 - step, p, n) for step, j, p, n in history if j == i]
        assert s.passes[i] == pytest.approx(sum(gamma**k * p for k, p, _ in mine))
        assert s.trials[i] == pytest.approx(sum(gamma**k * n for k, _, n in mine))
    before = list(s.trials)
    s.discount(1.0)
    assert s.trials == before
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="discount"):
            s.discount(bad)
    with pytest.raises(ValueError, match="weight"):
        EdgeSampler(3, weight="median")


def test_keys_pool_the_counts_of_tasks_that_share_them():
    """With keys (five structures of four instances each, instances drawn in a step at most
    once), every rollout counts toward its key: the counts equal a direct count per key, every
    task reads its key's estimate and weight (an instance never drawn included), the histogram
    and `untried` are per key; without keys the same draws count per task."""
    G, keys = 4, [k // 4 for k in range(len(RATES))]  # RATES holds 5 runs of 4 equal rates
    pooled, alone = EdgeSampler(len(RATES), keys=keys), EdgeSampler(len(RATES))
    passes, trials, tasks_drawn = [0] * 5, [0] * 5, set()
    for step in range(30):
        roll, log = stand_in(RATES, G, step)
        pooled.fill(2, 2, seed=step, roll=roll)
        for indices, _, groups in log:
            for i, g in zip(indices, groups, strict=True):
                alone.record(i, g.passes, len(g.rewards))
                passes[keys[i]] += g.passes
                trials[keys[i]] += len(g.rewards)
                tasks_drawn.add(i)
    assert pooled.passes == passes and pooled.trials == trials
    assert sum(alone.trials) == sum(trials) and len(alone.trials) == len(RATES)
    by_key = [(s + 1) / (n + 2) for s, n in zip(passes, trials, strict=True)]
    assert pooled.estimates() == [by_key[k] for k in keys]
    w = pooled.weights()
    assert all(w[i] == w[4 * keys[i]] for i in range(len(RATES)))
    assert len(tasks_drawn) < len(RATES)  # some instance never drawn, yet it has its estimate
    assert sum(pooled.histogram()) == 5 - pooled.untried() and pooled.untried() == trials.count(0)
    # the structure always solved sinks: its instances weigh less than the mid ones
    assert w[4] < w[8] / 2
    with pytest.raises(ValueError, match="one key per task"):
        EdgeSampler(3, keys=["a", "b"])
