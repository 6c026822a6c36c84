"""Milliseconds per cached decoding step while the cache grows: the 25m preset (a random
model: a step's cost does not depend on the weights), 64 rows after a 60-token prompt, 100
steps, best of 2, on 2 threads. The label names the code it ran, so two versions can be timed in
turn by putting each on PYTHONPATH:

    PYTHONPATH=OLD_CHECKOUT python results/profile/decode_growing_cache.py before
    PYTHONPATH=. python results/profile/decode_growing_cache.py after
"""

import sys
import time

import torch

from glmflash.config import model_config
from glmflash.model.lm import GLMFlash

torch.set_num_threads(2)
torch.manual_seed(0)
model = GLMFlash(model_config("25m")).eval()
rows, best = 64, float("inf")
for _ in range(2):
    _, state = model.step(torch.randint(10, 200, (rows, 60)))
    token = torch.randint(10, 200, (rows, 1))
    t0 = time.perf_counter()
    for _ in range(100):
        _, state = model.step(token, state)
    best = min(best, (time.perf_counter() - t0) / 100 * 1e3)
print(f"{sys.argv[1] if len(sys.argv) > 1 else 'this code'}: {best:.1f} ms a step")
