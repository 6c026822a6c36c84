"""Precision follows what the machine can do: the rule, the calibration under an emulated
AVX2-only CPU, and the records that carry the machine beside a timing. No timing assertions:
the emulated bf16 matmul is tens of times slower, far outside any margin the rule uses."""

import json
import os
import platform
import subprocess
import sys

import pytest
import torch
from torch import nn

from glmflash import machine
from glmflash.config import PretrainConfig
from glmflash.device import autocast_dtype
from glmflash.train.muon import MuonWithAdamW


def test_bf16_only_where_clearly_faster():
    assert machine.faster_dtype(0.02) == torch.float32  # AVX2: bf16 emulated, ~50x slower
    assert machine.faster_dtype(1.0) == torch.float32
    assert machine.faster_dtype(machine.BF16_MARGIN - 1e-6) == torch.float32
    assert machine.faster_dtype(machine.BF16_MARGIN) == torch.bfloat16
    assert machine.faster_dtype(3.0) == torch.bfloat16  # AVX-512 bf16 / AMX


@pytest.mark.parametrize("speedup, expected", [(0.02, torch.float32), (3.0, torch.bfloat16)])
def test_muon_and_warning_follow_the_measured_speed(monkeypatch, speedup, expected):
    monkeypatch.setattr(machine, "bf16_speedup", lambda device="cpu": speedup)
    opt = MuonWithAdamW(nn.Linear(8, 8), PretrainConfig(preset="tiny"))
    assert opt.ns_dtype == expected and opt.muon.ns_dtype == expected
    amp = autocast_dtype(torch.device("cpu"), "auto")  # precision auto: bf16 autocast or none
    assert amp == (None if expected == torch.float32 else torch.bfloat16)
    warning = machine.bf16_warning("cpu")
    if expected == torch.float32:
        assert "50.0x" in warning and "bf16" in warning and "\n" not in warning
    else:
        assert warning is None
    assert machine.machine_record("cpu", newton_schulz=opt.ns_dtype)["dtypes"] == {
        "newton_schulz": str(expected).removeprefix("torch.")
    }


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 ISA limits")
def test_emulated_avx2_cpu_chooses_fp32():
    """Under the environment of an AVX2-only CPU, torch reports AVX2 and the calibration
    keeps Newton-Schulz and precision auto in fp32 (on an AVX2 machine this is simply the
    machine itself)."""
    code = (
        "import json, torch; from glmflash import machine; "
        "from glmflash.device import autocast_dtype; "
        "print(json.dumps([torch.backends.cpu.get_cpu_capability(), "
        "str(machine.fast_matmul_dtype('cpu')), machine.machine_record('cpu'), "
        "str(autocast_dtype(torch.device('cpu'), 'auto'))]))"
    )
    env = {**os.environ, **machine.EMULATE_AVX2}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    capability, dtype, record, amp = json.loads(out)
    assert capability == "AVX2" and dtype == "torch.float32" and amp == "None"
    assert record["cpu_capability"] == "AVX2" and record["bf16_matmul_speedup"] < 1
    assert record["isa_limits"] == machine.EMULATE_AVX2


def test_machine_record_names_the_machine():
    r = machine.machine_record("cpu", autocast="none")
    assert r["cpu"] and r["cores"] == os.cpu_count() and r["threads"] >= 1
    assert r["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert r["torch"] == torch.__version__ and r["bf16_matmul_speedup"] > 0
    assert r["dtypes"] == {"autocast": "none"}
    json.dumps(r)  # JSON-ready
