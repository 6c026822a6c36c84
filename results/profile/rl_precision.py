"""Which parts of an RL step bf16 speeds up: a cached decoding step (sampling) and the
whole-model update (score + backward + AdamW) of the 25m preset, each in fp32 and under bf16
autocast (and decoding also with the weights cast to bf16), best of `--rounds` interleaved
rounds, one process. A random model: the cost of a step does not depend on the weights.

The shapes are the pipeline RL stage's: decoding 64 rows (4 prompts x 16 samples) after a
100-token prompt; the update scores 4 prompts of 60 tokens shared by 16 completions each of
30-90 tokens (`sequence_logprobs`, prompts run once), with the entropy, then one AdamW step.

    python results/profile/rl_precision.py > results/profile/rl_precision_<machine>.json
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import time

import torch

from glmflash.config import model_config
from glmflash.device import autocast
from glmflash.machine import machine_record
from glmflash.model.lm import GLMFlash
from glmflash.train.rl import sequence_logprobs

ROWS, PROMPT = 64, 100


def decode_ms(model: GLMFlash, amp: torch.dtype | None, steps: int = 20) -> float:
    """Milliseconds per decoding step of ROWS rows after a PROMPT-token prefill."""
    with autocast(torch.device("cpu"), amp):
        _, state = model.step(torch.randint(10, 200, (ROWS, PROMPT)))
        token = torch.randint(10, 200, (ROWS, 1))
        for _ in range(3):
            model.step(token, state)
        t0 = time.perf_counter()
        for _ in range(steps):
            model.step(token, state)
    return (time.perf_counter() - t0) / steps * 1e3


def update_seconds(model: GLMFlash, opt: torch.optim.Optimizer, amp: torch.dtype | None) -> float:
    """Seconds of one RL update of the whole model on the stage's batch shape."""
    rng = random.Random(0)
    prompts = [[rng.randint(10, 200) for _ in range(60)] for _ in range(4)]
    rows = [p for p in prompts for _ in range(16)]
    completions = [[rng.randint(10, 200) for _ in range(rng.randint(30, 90))] for _ in rows]
    t0 = time.perf_counter()
    with autocast(torch.device("cpu"), amp):
        scored = sequence_logprobs(model, rows, completions, with_entropy=True)
        loss = -scored.logp.sum() / len(rows)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = GLMFlash(model_config("25m"))
    bf16_weights = copy.deepcopy(model).to(torch.bfloat16).eval()
    opt = torch.optim.AdamW(model.parameters(), lr=0.0)  # lr 0: every round the same weights
    update_seconds(model, opt, None)  # warm-up: the optimizer's state, the allocator
    update_seconds(model, opt, torch.bfloat16)
    decode = {"fp32": [], "bf16_autocast": [], "bf16_weights": []}
    update = {"fp32": [], "bf16_autocast": []}
    for _ in range(args.rounds):
        model.eval()
        decode["fp32"].append(decode_ms(model, None))
        decode["bf16_autocast"].append(decode_ms(model, torch.bfloat16))
        decode["bf16_weights"].append(decode_ms(bf16_weights, None))
        model.train()
        update["fp32"].append(update_seconds(model, opt, None))
        update["bf16_autocast"].append(update_seconds(model, opt, torch.bfloat16))
    best_decode = {k: min(v) for k, v in decode.items()}
    best_update = {k: min(v) for k, v in update.items()}
    print(
        json.dumps(
            {
                "what": "25m preset, RL stage shapes, best of rounds",
                "decode_step_ms": best_decode,
                "update_seconds": best_update,
                "ratios": {
                    "decode_fp32_vs_bf16_autocast": best_decode["fp32"]
                    / best_decode["bf16_autocast"],
                    "decode_fp32_vs_bf16_weights": best_decode["fp32"]
                    / best_decode["bf16_weights"],
                    "update_fp32_vs_bf16_autocast": best_update["fp32"]
                    / best_update["bf16_autocast"],
                },
                "rounds": {"decode_step_ms": decode, "update_seconds": update},
                "environment": machine_record(torch.device("cpu")),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
