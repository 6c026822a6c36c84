"""Batched sampling with cached decoding: greedy, temperature and top-p, seeded.

Prompts are decoded in batches: one prefill `model.step(prompt)` of each distinct prompt builds
the recurrent states (linear layers) and KV caches (sparse layers), shared by every sample of
that prompt; the states of prompts of different lengths are merged into one batch, each row at
its own position (`merge_states`), and every new token is a `step` of length 1 for all rows. A
sequence stops at EOS or when its function is complete: the body ended because a line returns
to the outer indentation (that line is not part of the completion).
The same loop with `use_cache=False` recomputes the whole prefix for every token: the oracle
the cached path is tested against, and the benchmark's baseline.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from glmflash import tokenizer as tok
from glmflash.model.lm import GLMFlash, merge_states
from glmflash.progress import Progress

NEWLINE = tok.BYTE_OFFSET + ord("\n")
INDENT = (tok.BYTE_OFFSET + ord(" "), tok.BYTE_OFFSET + ord("\t"), NEWLINE)


@dataclass(frozen=True)
class Completion:
    prompt_ids: list[int]
    ids: list[int]  # generated ids, without the stopping EOS or the dedented line
    text: str
    stop: str  # "eos" | "complete" | "length"
    stop_id: int | None = None  # the sampled token that ended it: EOS, or the dedenting byte

    @property
    def sampled(self) -> list[int]:
        """Every token the policy chose, the one that stopped it included: what RL scores, so
        that ending (an empty body, a body of the right length) is rewarded or punished too."""
        return self.ids + ([] if self.stop_id is None else [self.stop_id])


class StopRule:
    """Per-sequence incremental stopping: EOS, or a line that returns to column 0.

    Tracks only whether each row's last token ended a line, so each new token costs O(1): no
    re-parse of the completion. `line_start[i]`: row i's prompt ends a line ("def ...:\n").
    """

    def __init__(self, line_start: list[bool]) -> None:
        self.line_start = list(line_start)

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


def prefill(model: GLMFlash, prompts: list[list[int]]) -> tuple[Tensor, Any]:
    """The last position's logits [B, V] of each prompt and the state to decode all B rows
    from: one prefill per distinct prompt (RL samples a group from each), its state repeated
    for every row of that prompt; prompts of different lengths are prefilled apart and their
    states merged, each row keeping its own position (`merge_states`)."""
    device = next(model.parameters()).device
    rows, logits, states = [], [], []
    for members, unique, inverse in distinct_prompts(prompts, device):
        last, state = model.step(unique)
        last = last[:, -1]
        if not torch.equal(inverse, torch.arange(len(members), device=device)):
            last, state = last[inverse], state.select(inverse)  # back to the rows' order
        rows += members
        logits.append(last)
        states.append(state)
    if len(states) == 1:
        return logits[0], states[0]
    order = torch.tensor(rows, device=device).argsort()  # row i of the prompts at order[i]
    return torch.cat(logits)[order], merge_states(states).select(order)


def distinct_prompts(
    prompts: list[list[int]], device: torch.device
) -> Iterator[tuple[list[int], Tensor, Tensor]]:
    """For each prompt length: the indices of its prompts, the distinct ones as a batch
    [U, length] (sorted), and each prompt's row in that batch [len(indices)]: what runs once
    for all the samples of a prompt, in `prefill` and in RL's scoring."""
    for members in rows_by_length(prompts).values():
        batch = torch.tensor([prompts[i] for i in members], device=device)
        unique, inverse = torch.unique(batch, dim=0, return_inverse=True)
        yield members, unique, inverse


def rows_by_length(seqs: Sequence[Sequence[int]]) -> dict[int, list[int]]:
    """Length -> the indices of the sequences of that length, in their order."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, s in enumerate(seqs):
        groups[len(s)].append(i)
    return groups


def right_padded(prompts: list[list[int]], device: torch.device) -> tuple[Tensor, Tensor]:
    """Prompts as one batch [B, L] padded on the right, and their lengths [B]: a causal model
    reads each row's last real position unaffected by the padding after it."""
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    seqs = torch.full((len(prompts), int(lengths.max())), tok.PAD, device=device)
    for i, p in enumerate(prompts):
        seqs[i, : len(p)] = torch.tensor(p)
    return seqs, lengths


@torch.no_grad()
def _generate_batch(
    model: GLMFlash,
    prompts: list[list[int]],
    max_new: int,
    temperature: float,
    top_p: float,
    generator: torch.Generator | None,
    use_cache: bool,
) -> list[tuple[list[int], str, int | None]]:
    """Decode a batch of prompts (of one length, unless the model decodes rows of different
    lengths together); returns (ids, stop) per row. Row i may add at most
    min(max_new, context - len(prompt i)) tokens. Returns (ids, stop, stop_id) per row."""
    B, device = len(prompts), next(model.parameters()).device
    mask = allowed_mask(model.cfg.vocab_size, device)
    stop_rule = StopRule([p[-1] == NEWLINE for p in prompts])
    budget = [max(0, min(max_new, model.cfg.context - len(p))) for p in prompts]
    out: list[list[int]] = [[] for _ in range(B)]
    stops = ["length"] * B
    stop_ids: list[int | None] = [None] * B
    rows = [i for i in range(B) if budget[i] > 0]  # a prompt that fills the context adds nothing
    if not rows:
        return list(zip(out, stops, stop_ids, strict=True))
    alive = torch.tensor(rows, dtype=torch.long, device=device)  # original row of each active one
    if use_cache:
        logits, state = prefill(model, [prompts[i] for i in rows])
    else:  # the oracle: the whole sequence again for every token
        seqs, lengths = right_padded([prompts[i] for i in rows], device)
        logits = model(seqs).logits[torch.arange(len(rows), device=device), lengths - 1]
    while True:
        nxt = sample_next(logits.masked_fill(~mask, float("-inf")), temperature, top_p, generator)
        keep = []
        for j, (row, t) in enumerate(zip(alive.tolist(), nxt.tolist(), strict=True)):
            reason = stop_rule(row, t)
            if reason is not None:
                stops[row], stop_ids[row] = reason, t
                continue
            out[row].append(t)
            if len(out[row]) < budget[row]:
                keep.append(j)
        if not keep:
            break
        if len(keep) < len(alive):
            index = torch.tensor(keep, device=device)
            alive, nxt = alive[index], nxt[index]
            if use_cache:
                state = state.select(index)
            else:
                seqs, lengths = seqs[index], lengths[index]
        if use_cache:
            logits, state = model.step(nxt[:, None], state)
            logits = logits[:, -1]
        else:
            n = torch.arange(len(alive), device=device)
            seqs = torch.cat((seqs, seqs.new_full((len(alive), 1), tok.PAD)), 1)
            seqs[n, lengths] = nxt
            lengths = lengths + 1
            seqs = seqs[:, : int(lengths.max())]
            logits = model(seqs).logits[n, lengths - 1]
    return list(zip(out, stops, stop_ids, strict=True))


def generate(
    model: GLMFlash,
    prompts: Sequence[str | list[int]],
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = 0,
    use_cache: bool = True,
    batch_size: int = 64,
    ragged: bool | None = None,
) -> list[Completion]:
    """Complete each prompt (text, or ids without BOS: BOS is prepended), in batches of
    prompts sorted by length: of any lengths where the model decodes rows of different lengths
    together (`GLMFlash.ragged_decoding`; `ragged=False` asks for one length per batch even
    there), else of one length. The result is in the order of `prompts`. Sampling is
    reproducible from `seed` for the same prompts and batch size, and the same with or without
    the cache."""
    device = next(model.parameters()).device
    ids = [tok.encode(p) if isinstance(p, str) else list(p) for p in prompts]
    ids = [[tok.BOS, *p] for p in ids]
    runs = [rows for _, rows in sorted(rows_by_length(ids).items())]  # one run per length
    if getattr(model, "ragged_decoding", False) and ragged is not False:
        runs = [[i for run in runs for i in run]]  # all lengths together
    batches = [run[i : i + batch_size] for run in runs for i in range(0, len(run), batch_size)]
    generator = None
    if temperature > 0 and seed is not None:
        generator = torch.Generator(device=device).manual_seed(seed)
    was_training = model.training
    model.eval()
    results: list[Completion | None] = [None] * len(ids)
    progress = Progress(len(ids), enabled=len(ids) >= 256, unit="seq", desc="generate")
    done = 0
    try:
        for rows in batches:
            decoded = _generate_batch(
                model,
                [ids[i] for i in rows],
                max_new_tokens,
                temperature,
                top_p,
                generator,
                use_cache,
            )
            for i, (new, stop, stop_id) in zip(rows, decoded, strict=True):
                results[i] = Completion(ids[i][1:], new, tok.decode(new), stop, stop_id)
            done += len(rows)
            progress.update(done)
    finally:
        model.train(was_training)
        progress.close()
    return results  # type: ignore[return-value]


def check_against_full_recompute(
    model: GLMFlash, prompts: Sequence[str], max_new_tokens: int
) -> dict[str, Any]:
    """Greedy completions of `prompts` decoded twice, with the recurrent states and KV caches
    and by recomputing the whole sequence for every token: how many are identical, and the
    time of each (the pipeline runs this on its trained model, where the tests use small
    random ones)."""
    seconds, outputs = {}, {}
    for name, use_cache in (("cached", True), ("full_recompute", False)):
        t0 = time.perf_counter()
        outputs[name] = generate(model, prompts, max_new_tokens, use_cache=use_cache)
        seconds[name] = time.perf_counter() - t0
    cached, full = outputs["cached"], outputs["full_recompute"]
    same = [a.ids == b.ids and a.stop == b.stop for a, b in zip(cached, full, strict=True)]
    return {
        "prompts": len(prompts),
        "new_tokens": sum(len(c.ids) for c in cached),
        "identical": sum(same),  # completions equal token for token (a near tie may flip one)
        "seconds": seconds,
        "speedup": seconds["full_recompute"] / max(seconds["cached"], 1e-9),
    }
