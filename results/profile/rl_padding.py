"""Padding in RL's scoring batches: for each step of a run's rollouts.jsonl, the rows that are
scored (nonzero advantage) as BOS + prompt + completion bytes, padded to the longest in one
batch, or in k batches of rows sorted by length (`rl.SCORING_CHUNKS`).

    python results/profile/rl_padding.py runs/pipeline/rl/run/rollouts.jsonl [group_size 16]
    [tasks_per_step 4]"""

import json
import sys
from collections import defaultdict

path = sys.argv[1]
per_step = (int(sys.argv[2]) if len(sys.argv) > 2 else 16) * (
    int(sys.argv[3]) if len(sys.argv) > 3 else 4
)
steps = defaultdict(list)
with open(path) as f:
    for i, line in enumerate(f):
        r = json.loads(line)
        if r["advantage"] != 0:
            steps[i // per_step].append(
                len(r["prompt"].encode()) + len(r["completion"].encode()) + 2
            )
real = sum(sum(v) for v in steps.values())
result = {"steps": len(steps), "real_tokens": real}
for k in (1, 2, 4):
    padded = 0
    for lengths in steps.values():
        lengths, size = sorted(lengths), -(-len(lengths) // k)
        padded += sum(
            len(c) * max(c) for c in (lengths[i : i + size] for i in range(0, len(lengths), size))
        )
    result[f"padding_share_{k}_batches"] = round(1 - real / padded, 3)
print(json.dumps(result, indent=1))
