"""`glmflash bench generate`: cached decoding against full recomputation.

A batch of random prompts is decoded greedily for a fixed number of new tokens (no stopping
rule: with random weights a sequence could stop at any token). The cached path is one prefill
`model.step(prompt)`, then one `model.step` per token with the recurrent states and KV caches;
the baseline recomputes the whole prefix for every token, as the reference lab's RL did. Both
timings include the prompt. Then prompts of many lengths (an evaluation's workload) decoded as
one batch, each row at its own position, against one batch per length. Then the cost of one
cached step at several context lengths, for the whole model and for one linear and one sparse
attention layer alone: a linear layer's state has a fixed size, so its step cost is flat; a
sparse layer's KV cache grows by its anchors only (`GLMFlash.step` evicts the keys no later
token sees).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from glmflash import tokenizer as tok
from glmflash.bench.peak import best_times
from glmflash.config import ModelConfig
from glmflash.generate import generate
from glmflash.model.lm import GLMFlash


def random_prompts(batch_size: int, length: int, device: torch.device, seed: int = 0) -> Tensor:
    """[batch_size, length] ids: BOS, then random bytes."""
    g = torch.Generator().manual_seed(seed)
    body = torch.randint(
        tok.BYTE_OFFSET, tok.BYTE_OFFSET + 256, (batch_size, length - 1), generator=g
    )
    return torch.cat((torch.full((batch_size, 1), tok.BOS), body), 1).to(device)


def check_lengths(
    cfg: ModelConfig, prompt_len: int, new_tokens: int, contexts: Sequence[int]
) -> None:
    """Raise ValueError unless every sequence fits the model's context."""
    if prompt_len < 1 or new_tokens < 1 or prompt_len + new_tokens > cfg.context:
        raise ValueError(f"prompt length + new tokens must be within the context ({cfg.context})")
    if not contexts or min(contexts) < 2 or max(contexts) > cfg.context:
        raise ValueError(f"decode contexts must lie in 2..{cfg.context}")


@torch.no_grad()
def decode_cached(model: GLMFlash, prompt: Tensor, new_tokens: int) -> Tensor:
    """Greedy ids [B, new_tokens]: prefill once, then one cached step per token."""
    logits, state = model.step(prompt)
    out = []
    for i in range(new_tokens):
        out.append(logits[:, -1].argmax(-1, keepdim=True))
        if i + 1 < new_tokens:
            logits, state = model.step(out[-1], state)
    return torch.cat(out, 1)


@torch.no_grad()
def decode_full(model: GLMFlash, prompt: Tensor, new_tokens: int) -> Tensor:
    """Greedy ids [B, new_tokens], running the whole sequence again for every token."""
    seq = prompt
    for _ in range(new_tokens):
        seq = torch.cat((seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)), 1)
    return seq[:, prompt.shape[1] :]


@torch.no_grad()
def step_times(
    model: GLMFlash, batch_size: int, contexts: Sequence[int], repeats: int, device: torch.device
) -> dict[str, dict[str, float]]:
    """Milliseconds of one cached step (one new token per sequence) whose token sees
    `context` tokens including itself: the whole model, and the first linear and first
    sparse attention layer alone."""
    cfg = model.cfg
    layers = {
        name: cfg.layer_kinds.find(kind)
        for name, kind in (("linear_layer", "L"), ("sparse_layer", "S"))
        if kind in cfg.layer_kinds
    }
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch_size, 1, cfg.d_model, generator=g).to(device)
    result = {}
    for context in contexts:
        _, state = model.step(random_prompts(batch_size, context - 1, device, seed=context))
        token = random_prompts(batch_size, 2, device, seed=10_000 + context)[:, 1:]
        fns = {"model": lambda state=state, token=token: model.step(token, state)}
        for name, i in layers.items():
            attn, s = model.layers[i].attn, state.layers[i]
            fns[name] = lambda attn=attn, s=s, p=context - 1: attn(x, s, p)
        result[str(context)] = {k: 1e3 * v for k, v in best_times(fns, repeats, device).items()}
    return result


def bench_generate(
    cfg: ModelConfig,
    batch_size: int = 16,
    prompt_len: int = 60,
    new_tokens: int = 48,
    contexts: Sequence[int] = (64, 192),
    repeats: int = 3,
    full_repeats: int = 1,
    device: torch.device | str = "cpu",
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Every figure of `glmflash bench generate`, as one JSON-ready dict with `ratios`."""
    device = torch.device(device)
    check_lengths(cfg, prompt_len, new_tokens, contexts)
    torch.manual_seed(0)
    model = GLMFlash(cfg).to(device).eval()
    prompt = random_prompts(batch_size, prompt_len, device)

    log("decoding: cached vs full recomputation (slow)")
    decode_cached(model, prompt, 2)  # warm up both paths
    decode_full(model, prompt, 2)
    outputs: dict[str, Tensor] = {}

    def keeping_output(name: str, decode) -> Callable[[], None]:
        def run() -> None:
            outputs[name] = decode(model, prompt, new_tokens)

        return run

    fns = {
        "cached": keeping_output("cached", decode_cached),
        "full_recompute": keeping_output("full_recompute", decode_full),
    }
    seconds = best_times(
        fns, {"cached": repeats, "full_recompute": full_repeats}, device, warmup=False
    )
    n_new = batch_size * new_tokens
    decode = {k: {"seconds": s, "new_tokens_per_s": n_new / s} for k, s in seconds.items()}

    log("prompts of many lengths: one batch against one batch per length")
    mixed = mixed_lengths(model, prompt_len, new_tokens, repeats, device)

    log(f"cached step time at contexts {', '.join(map(str, contexts))}")
    steps = step_times(model, batch_size, contexts, max(5 * repeats, 10), device)
    first, last = steps[str(min(contexts))], steps[str(max(contexts))]
    return {
        "bench": "generate",
        "batch_size": batch_size,
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "repeats": repeats,
        "full_repeats": full_repeats,
        "decode": decode,
        "tokens_agree": float((outputs["cached"] == outputs["full_recompute"]).float().mean()),
        "step_ms_by_context": steps,
        "step_growth": {k: last[k] / first[k] for k in first},  # largest / smallest context
        "mixed_lengths": mixed,
        "ratios": {
            "cached_vs_full_recompute": seconds["full_recompute"] / seconds["cached"],
            "one_batch_vs_per_length": mixed["per_length_seconds"] / mixed["one_batch_seconds"],
        },
    }


def mixed_lengths(
    model: GLMFlash,
    prompt_len: int,
    new_tokens: int,
    repeats: int,
    device: torch.device,
    lengths: int = 16,
    per_length: int = 3,
) -> dict[str, Any]:
    """The evaluation's workload: up to `lengths` distinct prompt lengths around prompt_len,
    `per_length` prompts of each, greedy through `generate` (stopping rule on), decoded as one
    batch with each row at its own position, and as one batch per length (how prompts of
    different lengths had to be decoded before the states could be merged)."""
    sizes = sorted({max(2, prompt_len // 2 + i * prompt_len // lengths) for i in range(lengths)})
    prompts = [
        random_prompts(per_length, n, device, seed=n)[:, 1:].tolist()  # generate adds BOS
        for n in sizes
    ]
    prompts = [p for group in prompts for p in group]
    outputs: dict[str, list] = {}

    def run(name: str, ragged: bool) -> Callable[[], None]:
        def decode() -> None:
            done = generate(model, prompts, max_new_tokens=new_tokens, ragged=ragged)
            outputs[name] = [c.ids for c in done]

        return decode

    fns = {"one_batch": run("one_batch", True), "per_length": run("per_length", False)}
    seconds = best_times(fns, dict.fromkeys(fns, repeats), device)
    return {
        "prompts": len(prompts),
        "distinct_lengths": len(sizes),
        "new_tokens": sum(len(ids) for ids in outputs["one_batch"]),
        "one_batch_seconds": seconds["one_batch"],
        "per_length_seconds": seconds["per_length"],
        "tokens_agree": outputs["one_batch"] == outputs["per_length"],
    }


__all__ = ["bench_generate", "decode_cached", "decode_full", "mixed_lengths", "step_times"]
