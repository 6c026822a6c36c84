"""Batched sampling with cached decoding: greedy, temperature and top-p, seeded.

Prompts of equal length are decoded together: one prefill `model.step(prompt)` of each
distinct prompt builds the recurrent states (linear layers) and KV caches (sparse layers),
shared by every sample of that prompt, then every new token is a `step` of length 1. A
sequence stops at EOS or when its function is complete: the body ended because a line returns
to the outer indentation (that line is not part of the completion).
The same loop with `use_cache=False` recomputes the whole prefix for every token: the oracle
the cached path is tested against, and the benchmark's baseline.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from glmflash import tokenizer as tok
from glmflash.errors import CLIError
from glmflash.model.lm import GLMFlash

NEWLINE = tok.BYTE_OFFSET + ord("\n")
INDENT = (tok.BYTE_OFFSET + ord(" "), tok.BYTE_OFFSET + ord("\t"), NEWLINE)


@dataclass(frozen=True)
class Completion:
    prompt_ids: list[int]
    ids: list[int]  # generated ids, without the stopping EOS or the dedented line
    text: str
    stop: str  # "eos" | "complete" | "length"


class StopRule:
    """Per-sequence incremental stopping: EOS, or a line that returns to column 0.

    Tracks only whether the last token ended a line, so each new token costs O(1): no
    re-parse of the completion.
    """

    def __init__(self, n: int, line_start: bool = True) -> None:
        self.line_start = [line_start] * n  # prompts end with "def ...:\n"

    def __call__(self, i: int, token: int) -> str | None:
        if token == tok.EOS:
            return "eos"
        if self.line_start[i] and token not in INDENT:
            return "complete"
        self.line_start[i] = token == NEWLINE
        return None


def allowed_mask(vocab_size: int, device: torch.device) -> Tensor:
    """Generation emits byte tokens and EOS only (never pad, bos, sep or vision tokens)."""
    mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
    mask[tok.BYTE_OFFSET : tok.TEXT_VOCAB_SIZE] = True
    mask[tok.EOS] = True
    return mask


def sample_next(
    logits: Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> Tensor:
    """Next tokens [B] from logits [B, V]: argmax when temperature == 0, else a draw from
    softmax(logits / temperature) restricted to the smallest set of mass >= top_p."""
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, -1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        outside = sorted_p.cumsum(-1) - sorted_p >= top_p  # keeps at least the top token
        sorted_p = sorted_p.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def _generate_group(
    model: GLMFlash,
    prompt: Tensor,
    max_new: int,
    temperature: float,
    top_p: float,
    generator: torch.Generator | None,
    use_cache: bool,
) -> list[tuple[list[int], str]]:
    """Decode a batch of equal-length prompts [B, L]; returns (ids, stop) per row."""
    B = prompt.shape[0]
    mask = allowed_mask(model.cfg.vocab_size, prompt.device)
    stop_rule = StopRule(B, line_start=int(prompt[0, -1]) == NEWLINE)
    out: list[list[int]] = [[] for _ in range(B)]
    stops = ["length"] * B
    alive = torch.arange(B, device=prompt.device)  # original row of each active sequence
    seqs = prompt
    if use_cache:  # one prefill per distinct prompt (RL samples a group from each)
        unique, inverse = torch.unique(prompt, dim=0, return_inverse=True)  # rows sorted
        logits, state = model.step(unique)
        if not torch.equal(inverse, torch.arange(B, device=inverse.device)):
            logits, state = logits[inverse], state.select(inverse)  # back to the rows' order
    else:
        logits = model(prompt).logits
    for _ in range(max_new):
        nxt = sample_next(
            logits[:, -1].masked_fill(~mask, float("-inf")), temperature, top_p, generator
        )
        keep = []
        for j, (row, t) in enumerate(zip(alive.tolist(), nxt.tolist(), strict=True)):
            reason = stop_rule(row, t)
            if reason is None:
                out[row].append(t)
                keep.append(j)
            else:
                stops[row] = reason
        if not keep:
            break
        if len(keep) < len(alive):
            index = torch.tensor(keep, device=prompt.device)
            alive, nxt, seqs = alive[index], nxt[index], seqs[index]
            if use_cache:
                state = state.select(index)
        if use_cache:
            logits, state = model.step(nxt[:, None], state)
        else:
            seqs = torch.cat((seqs, nxt[:, None]), 1)
            logits = model(seqs).logits
    return [(ids, stop) for ids, stop in zip(out, stops, strict=True)]


def generate(
    model: GLMFlash,
    prompts: Sequence[str | list[int]],
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = 0,
    use_cache: bool = True,
    batch_size: int = 64,
) -> list[Completion]:
    """Complete each prompt (text, or ids without BOS: BOS is prepended). Prompts are grouped
    by length and decoded in batches; the result is in the order of `prompts`.
    Sampling is reproducible from `seed` for the same prompts and batch size."""
    device = next(model.parameters()).device
    ids = [tok.encode(p) if isinstance(p, str) else list(p) for p in prompts]
    ids = [[tok.BOS, *p] for p in ids]
    groups: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(ids):
        groups[len(p)].append(i)
    generator = None
    if temperature > 0 and seed is not None:
        generator = torch.Generator(device=device).manual_seed(seed)
    was_training = model.training
    model.eval()
    results: list[Completion | None] = [None] * len(ids)
    from glmflash.train.progress import Progress

    progress = Progress(len(ids), enabled=len(ids) >= 256, unit="seq", desc="generate")
    done = 0
    try:
        for length in sorted(groups):
            budget = min(max_new_tokens, model.cfg.context - length)
            members = groups[length]
            for start in range(0, len(members), batch_size):
                rows = members[start : start + batch_size]
                batch = torch.tensor([ids[i] for i in rows], device=device)
                decoded = _generate_group(
                    model, batch, max(budget, 0), temperature, top_p, generator, use_cache
                )
                for i, (new, stop) in zip(rows, decoded, strict=True):
                    results[i] = Completion(ids[i][1:], new, tok.decode(new), stop)
                done += len(rows)
                progress.update(done)
    finally:
        model.train(was_training)
        progress.close()
    return results  # type: ignore[return-value]


# -- command line: glmflash generate ---------------------------------------------------------


def add_arguments(p) -> None:
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--prompt", required=True, action="append", help="may be given several times")
    p.add_argument("--samples", type=int, default=1, help="completions per prompt")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")


def run(args) -> int:
    from glmflash.device import resolve_device
    from glmflash.train.checkpoint import CheckpointError, load_model

    try:
        model, _ = load_model(args.checkpoint, resolve_device(args.device))
    except (CheckpointError, ValueError) as e:
        raise CLIError(str(e)) from None
    prompts = [p.encode().decode("unicode_escape") for p in args.prompt]  # allow "\n" escapes
    outs = generate(
        model,
        [p for p in prompts for _ in range(args.samples)],
        args.max_new_tokens,
        args.temperature,
        args.top_p,
        args.seed,
    )
    for i, c in enumerate(outs):
        print(f"--- prompt {i // args.samples} sample {i % args.samples} (stop: {c.stop})")
        print(prompts[i // args.samples] + c.text)
    return 0
