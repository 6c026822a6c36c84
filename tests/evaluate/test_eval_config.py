import pytest

from glmflash.evaluate.config import EvalConfig
from glmflash.pipeline import PipelinePlan


def test_the_pipeline_evaluates_with_the_defaults_and_the_quick_plan_with_its_own():
    assert PipelinePlan.full(seed=0).evaluation == EvalConfig()
    quick = PipelinePlan.quick(seed=0).evaluation
    assert (quick.per_family, quick.per_rung, quick.k) == (1, 2, 2)


@pytest.mark.parametrize(
    "field, value",
    [("per_family", 0), ("per_rung", 0), ("k", 0), ("max_new_tokens", 0), ("temperature", 0.0)],
)
def test_bad_values_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        EvalConfig(**{field: value})
