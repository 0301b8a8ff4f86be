"""The per-request sampler; the parameters it reads (``SamplingParams``) live on the record, in :mod:`pagedkv_edu.core.request`.

Each request carries its own ``torch.Generator`` seeded from its parameters, so the tokens a
request samples do not depend on which other requests happened to share its batches: the
same request with the same seed gives the same text alone, in a crowd, or after preemption.

Parallel sampling (``n > 1``, chapter 7) gives each of the ``n`` samples its own generator:
sample ``i`` of a request seeded ``s`` draws from seed ``s + i``, so its tokens are exactly
those of a lone request seeded ``s + i``. Forking changes the memory, never the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core.request import SamplingParams


SEED_MODULUS = 2**32
"""torch's CPU generator keeps only a seed's low 32 bits: 5 and 5 + 2**32 give the same stream (checked)."""

GOLDEN = 2_654_435_761
"""An odd constant near 2**32 / golden ratio: ``index * GOLDEN`` spreads a request's samples over the seed space."""


def make_generator(params: SamplingParams, request_id: int, engine_seed: int, index: int = 0) -> torch.Generator:
    """Sample ``index``'s own random stream: the request's seed plus ``index``.

    Without a seed, the request's seed is derived from the engine's seed and the request id, and
    sample ``index`` moves it by ``index * GOLDEN`` (mod 2**32). It must move within the low 32
    bits: moving it by ``index << 32``, as this function once did, changed nothing torch reads,
    and every sample of an unseeded ``n > 1`` request drew the same tokens.
    """
    if params.seed is not None:
        return torch.Generator().manual_seed(params.seed + index)
    return torch.Generator().manual_seed((engine_seed * 1_000_003 + request_id + index * GOLDEN) % SEED_MODULUS)


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> int:
    """One token from a ``[vocab]`` row of logits: greedy, or nucleus (top-p) sampling at a temperature."""
    if params.temperature == 0:
        return int(logits.argmax())
    # Subtract the max before dividing: at a tiny temperature (1e-300) logits / T overflows to inf and
    # softmax gives NaN; (logits - max) / T is at most 0, so the top token keeps weight 1 and the rest fall to 0.
    logits = logits.float().cpu()
    probs = torch.softmax((logits - logits.max()) / params.temperature, dim=-1)
    if params.top_p < 1:
        sorted_probs, order = probs.sort(descending=True)
        # Keep the smallest prefix whose mass reaches top_p (always at least the top token).
        keep = sorted_probs.cumsum(0) - sorted_probs < params.top_p
        probs = torch.zeros_like(probs).scatter_(0, order[keep], sorted_probs[keep])
    return int(torch.multinomial(probs, 1, generator=generator))


def sample_rows(logits: torch.Tensor, rows: Sequence[tuple[int, SamplingParams, torch.Generator]]) -> list[int]:
    """One token per ``(row of logits, params, generator)``: every greedy row in one argmax, one copy to the host.

    Several samples may read the same row (the ``n`` samples of a request right after its prefill).
    """
    tokens: list[int] = [0] * len(rows)
    greedy = [i for i, (_, params, _) in enumerate(rows) if params.temperature == 0]
    if greedy:
        best = logits[[rows[i][0] for i in greedy]].argmax(dim=-1).tolist()
        for i, token in zip(greedy, best):
            tokens[i] = token
    for i, (row, params, generator) in enumerate(rows):
        if params.temperature != 0:
            tokens[i] = sample_token(logits[row], params, generator)
    return tokens


def sample_tokens(out: torch.Tensor | Sequence[int], rows: Sequence[tuple[int, Any]],
                  keep_logprobs: bool = False) -> tuple[list[int], torch.Tensor | None]:
    """A token for each ``(row, request)``: sampled from the row's logits with the request's params and
    generator, or (a stand-in runner's output, a token per row) read off; and the rows' log-probs if kept."""
    if not isinstance(out, torch.Tensor):
        return [out[row] for row, _ in rows], None
    tokens = sample_rows(out, [(row, r.params, r.generator) for row, r in rows])
    return tokens, torch.log_softmax(out.float(), dim=-1).cpu() if keep_logprobs else None


def stop_reason(request: Any, eos_token_ids: Sequence[int], tokenizer: Any = None) -> str | None:
    """Why ``request`` stops after the token it just sampled: "stop" (a stop token, EOS unless ignored, or a
    stop string, the text then cut before it), "length" (``max_tokens`` reached), or None (it goes on)."""
    token, params = request.output_token_ids[-1], request.params
    if token in params.stop_token_ids or (not params.ignore_eos and token in eos_token_ids):
        return "stop"
    if params.stop and tokenizer is not None:
        text = tokenizer.decode(request.output_token_ids, skip_special_tokens=True)
        hits = [text.find(s) for s in params.stop if s in text]
        if hits:
            request.text = text[:min(hits)]
            return "stop"
    return "length" if len(request.output_token_ids) >= params.max_tokens else None
