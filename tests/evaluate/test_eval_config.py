import pytest

from glmflash.config import PipelinePlan
from glmflash.config.evaluation import EvalConfig, Sampling


def test_the_pipeline_evaluates_with_the_defaults_and_the_quick_plan_with_its_own():
    assert PipelinePlan.full(seed=0).evaluation == EvalConfig()
    quick = PipelinePlan.quick(seed=0).evaluation
    assert (quick.per_family, quick.per_rung, quick.sampling.pass_k) == (1, 2, 2)
    assert quick.greedy() == Sampling(max_new_tokens=quick.sampling.max_new_tokens)


@pytest.mark.parametrize("field, value", [("per_family", 0), ("per_rung", 0)])
def test_bad_values_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        EvalConfig(**{field: value})


def test_the_pipelines_pass_at_k_must_sample():
    with pytest.raises(ValueError, match="sampling.mode = sample"):
        EvalConfig(sampling=Sampling())


@pytest.mark.parametrize(
    "field, value",
    [
        ("mode", "beam"),
        ("samples", 0),
        ("k", 9),
        ("k", -1),
        ("max_new_tokens", 0),
        ("temperature", 0.0),
        ("top_p", 0.0),
        ("top_p", 1.5),
    ],
)
def test_bad_sampling_is_refused(field, value):
    with pytest.raises(ValueError, match=field):
        Sampling(**{field: value})


@pytest.mark.parametrize(
    "sampling, n, k, temperature",
    [
        (Sampling(), 1, 1, 0.0),
        (Sampling(samples=5, k=2, temperature=0.5), 1, 1, 0.0),  # greedy ignores them
        (Sampling("sample", 5), 5, 5, 0.8),
        (Sampling("sample", 5, 2, 0.5), 5, 2, 0.5),
    ],
)
def test_draws_per_task_and_the_k_scored(sampling, n, k, temperature):
    assert (sampling.n, sampling.pass_k, sampling.draw_temperature) == (n, k, temperature)
