"""Sampling parameters and the per-request sampler.

Each request carries its own ``torch.Generator`` seeded from its parameters, so the tokens a
request samples do not depend on which other requests happened to share its batches: the
same request with the same seed gives the same text alone, in a crowd, or after preemption.

Parallel sampling (``n > 1``, chapter 7) gives each of the ``n`` samples its own generator:
sample ``i`` of a request seeded ``s`` draws from seed ``s + i``, so its tokens are exactly
those of a lone request seeded ``s + i``. Forking changes the memory, never the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..checks import check_whole


@dataclass(frozen=True)
class SamplingParams:
    """What a request asks for. ``temperature == 0`` is greedy decoding."""

    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    n: int = 1                 # completions of the same prompt (parallel sampling, chapter 7)

    def __post_init__(self) -> None:
        check_whole("n (the number of completions)", self.n, 1)
        check_whole("max_tokens", self.max_tokens)
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        if any(not s for s in self.stop):
            raise ValueError(f"stop strings must be non-empty, got {self.stop!r}")


def make_generator(params: SamplingParams, request_id: int, engine_seed: int, index: int = 0) -> torch.Generator:
    """Sample ``index``'s own random stream: the request's seed plus ``index``.

    Without a seed, the request's seed is derived from the engine's seed and the request id
    (and samples after the first are moved 2**32 away, clear of other requests' streams).
    """
    if params.seed is not None:
        return torch.Generator().manual_seed(params.seed + index)
    return torch.Generator().manual_seed(engine_seed * 1_000_003 + request_id + (index << 32))


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> int:
    """One token from a ``[vocab]`` row of logits: greedy, or nucleus (top-p) sampling at a temperature."""
    if params.temperature == 0:
        return int(logits.argmax())
    probs = torch.softmax(logits.float().cpu() / params.temperature, dim=-1)
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
