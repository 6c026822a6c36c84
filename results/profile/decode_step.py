"""One cached decoding step of the 25m preset (a random model: a step's cost does not depend
on the weights) at 1, 16 and 64 rows after a 60-token prompt, three ways in turn, best of 5
rounds of 30 steps, one process:

    eager     the step under torch.no_grad, the streams' autograd Functions called anyway
    no_graph  the same, the streams' forward math without the Functions (`mix_write`,
              `normed_projection` skip them where no gradient is recorded)
    inference `GLMFlash.step` as it is: inference mode, which also skips autograd's per-op
              bookkeeping

    python results/profile/decode_step.py > results/profile/decode_step.json"""

import json
import time

import torch

from glmflash.config import model_config
from glmflash.machine import machine_record
from glmflash.model import streams
from glmflash.model.lm import GLMFlash

torch.manual_seed(0)
model = GLMFlash(model_config("25m")).eval()
step = GLMFlash.step.__wrapped__  # the undecorated method
no_graph_write, no_graph_projection = streams.mix_write, streams.normed_projection


def eager_write(h, y, mix, post):
    with torch.enable_grad():  # makes mix_write take MixWrite.apply; inputs need no grad
        return no_graph_write(h, y, mix, post)


def eager_projection(v, weight, eps):
    return streams.NormedProjection.apply(v, weight, eps)


WAYS = {
    "eager": (torch.no_grad, eager_write, eager_projection),
    "no_graph": (torch.no_grad, no_graph_write, no_graph_projection),
    "inference": (torch.inference_mode, no_graph_write, no_graph_projection),
}


def ms_per_step(way: str, rows: int) -> float:
    mode, streams.mix_write, streams.normed_projection = WAYS[way]
    with mode():
        _, state = step(model, torch.randint(10, 200, (rows, 60)))
        token = torch.randint(10, 200, (rows, 1))
        for _ in range(3):
            step(model, token, state)
        t0 = time.perf_counter()
        for _ in range(30):
            step(model, token, state)
    return (time.perf_counter() - t0) / 30 * 1e3


best: dict[str, dict[int, float]] = {way: {} for way in WAYS}
for _ in range(5):
    for way in WAYS:
        for rows in (1, 16, 64):
            ms = ms_per_step(way, rows)
            best[way][rows] = min(best[way].get(rows, float("inf")), ms)
streams.mix_write, streams.normed_projection = no_graph_write, no_graph_projection
print(
    json.dumps(
        {
            "what": "ms per cached decoding step, 25m preset, best of 5 rounds of 30 steps",
            "ms": best,
            "speedup_no_graph": {r: best["eager"][r] / best["no_graph"][r] for r in best["eager"]},
            "speedup_inference": {
                r: best["no_graph"][r] / best["inference"][r] for r in best["eager"]
            },
            "environment": machine_record(torch.device("cpu")),
        },
        indent=2,
    )
)
