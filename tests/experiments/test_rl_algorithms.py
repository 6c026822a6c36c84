from glmflash.config import RLConfig
from glmflash.experiments import registry
from glmflash.train.policy_gradient import ALGORITHMS


def test_arms_differ_in_the_algorithm_only():
    exp = registry.get("rl-algorithms")
    assert set(exp.conditions) == set(ALGORITHMS) == {"rloo", "grpo", "dr_grpo", "ppo"}
    keys = set(ALGORITHMS["rloo"])
    base = {k: v for k, v in exp.conditions["rloo"].items() if k not in keys}
    for name, condition in exp.conditions.items():
        assert {k: v for k, v in condition.items() if k not in keys} == base
        assert {k: condition[k] for k in keys} == ALGORITHMS[name]
        # the same rollouts: tasks, group size and sampling are shared
        cfg = RLConfig(
            **{
                **{k: v for k, v in condition.items() if k not in ("init", "per_rung")},
                "families": tuple(condition["families"]),
            }
        )
        assert (cfg.groups, cfg.group_size, cfg.temperature) == (48, 8, 0.8)
    assert len(exp.seeds) >= 5 and exp.metric == "unseen"
    assert sorted(exp.comparisons) == [("rloo", "dr_grpo"), ("rloo", "grpo"), ("rloo", "ppo")]
