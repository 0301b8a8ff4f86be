"""Decoding with and without a KV cache, on a transformers model: the cost chapter 0 measures.

:func:`greedy_decode` counts the positions the model embedded (a hook on its embedding layer), and
:func:`attention_pairs` turns those counts into the attention's work, so the chapter asserts counted
work; step times (:func:`step_seconds`) are wall-clock on whatever machine runs it, and are shown,
never asserted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .decode import cache_keyword, returned_cache


@dataclass(frozen=True)
class DecodeRun:
    """Greedy tokens, and the token positions the model processed at each step (prefill first)."""

    tokens: list[int]
    processed: list[int]


def positions_processed(prompt_len: int, new_tokens: int, use_cache: bool) -> int:
    """Token positions the model runs to generate ``new_tokens`` after a ``prompt_len``-token prompt."""
    if prompt_len < 1 or new_tokens < 1:
        raise ValueError(f"prompt_len={prompt_len} and new_tokens={new_tokens} must both be >= 1")
    if use_cache:
        return prompt_len + new_tokens - 1
    return new_tokens * prompt_len + new_tokens * (new_tokens - 1) // 2


def attention_pairs(processed: Sequence[int], start_len: int) -> list[int]:
    """Query-key pairs each step's attention scores (in every layer and head), from the positions it ran.

    ``processed[i]`` is how many positions step ``i`` ran (:attr:`DecodeRun.processed`); they are the
    last ones of a sequence that holds ``start_len + i`` tokens at that step (``start_len`` is the
    prompt's length for a whole generation). Each position attends causally to itself and to every
    position before it. Without a cache a step at length ``L`` recomputes all ``L (L + 1) / 2`` pairs,
    so a whole generation does cubic work; with one, a decode step's single query scores ``L`` pairs:
    still growing with the context, quadratic in total.
    """
    if start_len < 1:
        raise ValueError(f"start_len={start_len} must be >= 1")
    pairs = []
    for i, ran in enumerate(processed):
        length = start_len + i
        if not 1 <= ran <= length:
            raise ValueError(f"step {i} ran {ran} positions of a {length}-token sequence")
        pairs.append(ran * length - ran * (ran - 1) // 2)   # (length - ran + 1) + ... + length
    return pairs


def _forward(hf_model: Any, ids: torch.Tensor, cache: Any, use_cache: bool) -> Any:
    """One forward pass, through ``cache`` when there is one; only the last position's logits."""
    kwargs: dict[str, Any] = {"use_cache": use_cache, "logits_to_keep": 1}
    if cache is not None:
        kwargs[cache_keyword(hf_model)] = cache
    return hf_model(input_ids=ids, **kwargs)


@torch.inference_mode()
def greedy_decode(hf_model: Any, prompt_ids: Sequence[int], new_tokens: int, *, use_cache: bool) -> DecodeRun:
    """Generate ``new_tokens`` greedily, re-running the whole sequence every step unless ``use_cache``."""
    if not prompt_ids or new_tokens < 1:
        raise ValueError(f"need a prompt and new_tokens >= 1, got {len(prompt_ids)} prompt ids and {new_tokens}")
    processed: list[int] = []
    hook = hf_model.get_input_embeddings().register_forward_hook(
        lambda _module, inputs, _output: processed.append(int(inputs[0].numel())))
    try:
        device = next(hf_model.parameters()).device
        seq = torch.tensor([list(prompt_ids)], device=device)
        tokens: list[int] = []
        cache, feed = None, seq
        for _ in range(new_tokens):
            out = _forward(hf_model, feed, cache, use_cache)
            token = int(out.logits[0, -1].argmax())
            tokens.append(token)
            seq = torch.cat([seq, seq.new_tensor([[token]])], dim=1)
            if use_cache:
                cache, feed = returned_cache(out), seq[:, -1:]
            else:
                feed = seq
    finally:
        hook.remove()
    return DecodeRun(tokens, processed)


@torch.inference_mode()
def step_seconds(hf_model: Any, context_lengths: Sequence[int], *, repeats: int = 3,
                 seed: int = 0) -> dict[str, dict[int, float]]:
    """Seconds of one decode step at each context length, with and without a cache (best of ``repeats``).

    Without a cache the step runs all ``L`` positions; with one it runs the last token against a
    cache of the ``L - 1`` before it (built first, not timed). The token ids are random: the
    cost does not depend on them.
    """
    if not context_lengths or min(context_lengths) < 2 or repeats < 1:
        raise ValueError(f"context lengths must be >= 2 and repeats >= 1, got {list(context_lengths)}, {repeats}")
    device = next(hf_model.parameters()).device
    vocab = hf_model.get_input_embeddings().num_embeddings
    ids = torch.randint(0, vocab, (1, max(context_lengths)), generator=torch.Generator().manual_seed(seed)).to(device)
    times: dict[str, dict[int, float]] = {"without cache": {}, "with cache": {}}
    for length in context_lengths:
        best_full = best_cached = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            _forward(hf_model, ids[:, :length], None, False)
            best_full = min(best_full, time.perf_counter() - start)
            cache = returned_cache(_forward(hf_model, ids[:, :length - 1], None, True))
            start = time.perf_counter()
            _forward(hf_model, ids[:, length - 1:length], cache, True)
            best_cached = min(best_cached, time.perf_counter() - start)
        times["without cache"][length] = best_full
        times["with cache"][length] = best_cached
    return times
