"""`glmflash info`: counts from the config alone equal the model's own, and no torch."""

import itertools
import subprocess
import sys
from collections import Counter

import pytest
import torch

from glmflash.config import model_config
from glmflash.info import component_of, parameter_counts, tables
from glmflash.model.lm import GLMFlash

OPTIONS = list(
    itertools.product(
        ("elu", "delta"), ("fixed", "indexer"), ("mhc", "static"), (False, True), (0, 2)
    )
)


def counted_from_the_model(cfg) -> dict:
    with torch.device("meta"):
        model = GLMFlash(cfg)
    total: Counter[str] = Counter()
    for name, p in model.named_parameters():  # tied parameters are yielded once
        total[component_of(name)] += p.numel()
    return tables(total, cfg)


@pytest.mark.parametrize("preset", ["tiny", "25m"])
@pytest.mark.parametrize("linear, sparse, mixer, mtp, shared", OPTIONS)
def test_counts_equal_the_models_parameters(preset, linear, sparse, mixer, mtp, shared):
    cfg = model_config(
        preset,
        linear_kind=linear,
        sparse_kind=sparse,
        stream_mixer=mixer,
        mtp=mtp,
        n_shared=shared,
        layer_pattern="LLS",
    )
    assert parameter_counts(cfg) == counted_from_the_model(cfg)


@pytest.mark.parametrize("preset", ["tiny", "25m"])
def test_counts_include_the_elu_layers_convolution(preset):
    cfg = model_config(preset, elu_conv=True)
    assert parameter_counts(cfg) == counted_from_the_model(cfg)


def test_info_starts_without_torch():
    code = (
        "import sys; from glmflash.cli import main; main(['info', '--preset', '25m']); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    assert out[0].startswith("glmflash preset 25m: 26.17M parameters") and out[-1] == "False"
