"""The screening table: one row per lever of screen.sh, from its run folder: dev loss on rows
that start anywhere and on rows that start at a document (the one a lever trained on is not
the other's), tokens/s, greedy pass@1 per rung (dev, 32 tasks) and the reference bodies' loss
on the held-out rungs (both computed once from the checkpoint and kept beside it). Run from the
repository root after screen.sh:
    python results/competence/screen_table.py runs/screen > results/competence/screen.md
A batch of rows run on another machine (comparable with each other, not with the first batch)
gets its own file: `screen_table.py runs/screen_pipe pipe` writes screen_pipe.json.
"""

import json
import sys
from dataclasses import replace
from pathlib import Path

from glmflash.checkpoint import checkpoint_dirs, load_model
from glmflash.config import PretrainConfig
from glmflash.experiments.competence import RUNGS, body_loss
from glmflash.train.distributed import DistInfo
from glmflash.train.pretrain import eval_loss, training_stream

BODY_RUNGS = ("depth1", "depth1_heldout_phrasings", "unseen_depth2", "unseen_depth3")


def row(folder: Path) -> dict:
    summary = json.loads((folder / "run" / "summary.json").read_text())
    run = json.loads((folder / "run" / "run.json").read_text())
    rungs = json.loads((folder / "eval_summary.json").read_text())["rungs"]
    cache = folder / "body_loss.json"
    if not cache.is_file():
        model, _ = load_model(checkpoint_dirs(folder / "run")[-1])
        cfg = PretrainConfig(**run["pretrain"])
        losses = {r: body_loss(model, r, "dev", 32) for r in BODY_RUNGS}
        for start in ("anywhere", "document"):
            at = replace(cfg, row_start=start)
            losses[f"dev_{start}"] = eval_loss(
                model, training_stream(at, DistInfo(), "eval"), at, None, "cpu"
            )
        cache.write_text(json.dumps(losses))
    return {
        "name": folder.name,
        "tokens": summary["tokens"],
        "dev_loss": {k: v for k, v in json.loads(cache.read_text()).items() if "dev" in k},
        "tokens_per_s": summary["tokens_per_s"],
        "rungs": {r: rungs[r]["greedy"] for r in RUNGS},
        "body_loss": {k: v for k, v in json.loads(cache.read_text()).items() if k in BODY_RUNGS},
        "machine": run["machines"][0],
    }


def main(root: str, batch: str = "") -> None:
    """Rows of the folders under `root`, and the rows already in the batch's json whose
    folders are gone (runs/ does not outlive its machine; the json does)."""
    out = Path("results/competence") / (f"screen_{batch}.json" if batch else "screen.json")
    fresh = [row(f) for f in sorted(Path(root).iterdir()) if (f / "eval.json").is_file()]
    kept = json.loads(out.read_text()) if out.is_file() else []
    names = {r["name"] for r in fresh}
    rows = sorted([*fresh, *(r for r in kept if r["name"] not in names)], key=lambda r: r["name"])
    out.write_text(json.dumps(rows, indent=2))
    head = [
        "lever",
        "dev loss (anywhere / document)",
        "tokens/s",
        *RUNGS,
        *(f"body loss {r}" for r in BODY_RUNGS),
    ]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        dev = r["dev_loss"]
        cells = [r["name"], f"{dev['dev_anywhere']:.3f} / {dev['dev_document']:.3f}"]
        cells += [f"{r['tokens_per_s']:.0f}"]
        cells += [f"{int(r['rungs'][k][0])}" for k in RUNGS]
        cells += [f"{r['body_loss'][k]:.3f}" for k in BODY_RUNGS]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(*(sys.argv[1:] or ["runs/screen"]))
