"""Rewards from verdicts: binary and partial modes, and the penalty for unjudgeable programs."""

import pytest

from glmflash.verify import Verdict, reward

VERDICTS = [
    Verdict("pass", 8, 8),
    Verdict("fail", 5, 8, "case 1: wrong value"),
    Verdict("fail", 0, 8, "case 0: wrong value"),
    Verdict("invalid", 0, 8, "x"),
    Verdict("timeout", 0, 8, "x"),
    Verdict("crash", 3, 8, "case 3 raised X"),
]


@pytest.mark.parametrize("penalty", [0.0, -0.1, -1.0])
def test_binary_and_partial_table(penalty):
    binary = [reward(v, "binary", penalty) for v in VERDICTS]
    partial = [reward(v, "partial", penalty) for v in VERDICTS]
    assert binary == [1.0, 0.0, 0.0, penalty, penalty, penalty]
    assert partial == [1.0, 5 / 8, 0.0, penalty, penalty, penalty]


def test_defaults_are_binary_with_minus_a_tenth():
    assert reward(VERDICTS[0]) == 1.0 and reward(VERDICTS[3]) == -0.1
    assert all(isinstance(reward(v), float) for v in VERDICTS)


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match="reward mode"):
        reward(VERDICTS[0], "fractional")
