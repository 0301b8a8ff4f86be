"""The seed-000 workload: 50 travel consultants querying hotel availability at peak season.

Each request's prompt is a 200-token system prompt shared by all requests, 400-800 tokens
of retrieved hotel context and a 25-token query (625-1,025 tokens in all). Its output is
100-500 tokens, unknown to the engine until it ends; the model's context is 2,048 tokens.

Every chapter draws the same requests from the same seed, so the numbers of chapter 1
(contiguous), chapter 2 (paged), chapter 6 (real engine) and chapter 8 (block sizes) are
about the same 50 requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SYSTEM_PROMPT_TOKENS = 200
RETRIEVED_TOKENS = (400, 800)
QUERY_TOKENS = 25
OUTPUT_TOKENS = (100, 500)
MAX_SEQ_LEN = 2048
NUM_CONSULTANTS = 50


@dataclass(frozen=True)
class Request:
    """One request as the memory manager sees it: lengths, not text."""

    request_id: int
    prompt_len: int
    output_len: int
    arrival_step: int = 0
    shared_prefix_len: int = SYSTEM_PROMPT_TOKENS

    def __post_init__(self) -> None:
        if self.prompt_len < 0 or self.output_len < 0:
            raise ValueError(
                f"request {self.request_id}: prompt_len={self.prompt_len} and "
                f"output_len={self.output_len} must be >= 0"
            )
        if self.arrival_step < 0:
            raise ValueError(f"request {self.request_id}: arrival_step={self.arrival_step} must be >= 0")

    @property
    def final_len(self) -> int:
        """Tokens in the cache when the request finishes (prompt + output)."""
        return self.prompt_len + self.output_len


def copilot50(
    seed: int = 0,
    num_requests: int = NUM_CONSULTANTS,
    *,
    output_scale: float = 1.0,
    length_scale: float = 1.0,
    arrival_rate: float | None = None,
) -> list[Request]:
    """The seeded seed-000 workload.

    ``output_scale`` shrinks outputs (e.g. 0.2 for "outputs / 5") so a CPU can run a real
    model through it. ``length_scale`` shrinks every length, prompts and shared prefix too
    (a run at 1/16 scale pairs with ``max_seq_len / 16`` and ``block_size / 16``): the same
    draw of requests with the same proportions, cheap enough for a notebook. ``arrival_rate`` spreads arrivals as a Poisson process (requests per
    decode step); ``None`` means everyone asks at once, the article's peak-season picture.
    """
    if num_requests <= 0:
        raise ValueError(f"num_requests must be positive, got {num_requests}")
    if not 0 < output_scale <= 1:
        raise ValueError(f"output_scale must be in (0, 1], got {output_scale}")
    if not 0 < length_scale <= 1:
        raise ValueError(f"length_scale must be in (0, 1], got {length_scale}")
    if arrival_rate is not None and arrival_rate <= 0:
        raise ValueError(f"arrival_rate must be positive or None, got {arrival_rate}")
    rng = np.random.default_rng(seed)
    retrieved = rng.integers(RETRIEVED_TOKENS[0], RETRIEVED_TOKENS[1] + 1, size=num_requests)
    outputs = rng.integers(OUTPUT_TOKENS[0], OUTPUT_TOKENS[1] + 1, size=num_requests)
    if arrival_rate is None:
        arrivals = np.zeros(num_requests, dtype=np.int64)
    else:
        arrivals = np.floor(np.cumsum(rng.exponential(1.0 / arrival_rate, size=num_requests))).astype(np.int64)
    return [
        Request(
            request_id=i,
            prompt_len=max(1, round((SYSTEM_PROMPT_TOKENS + int(retrieved[i]) + QUERY_TOKENS) * length_scale)),
            output_len=max(1, round(int(outputs[i]) * output_scale * length_scale)),
            arrival_step=int(arrivals[i]),
            shared_prefix_len=round(SYSTEM_PROMPT_TOKENS * length_scale),
        )
        for i in range(num_requests)
    ]


def prompt_token_ids(request: Request, vocab_size: int, seed: int = 0, *, low: int = 100) -> list[int]:
    """Deterministic token ids for a request whose first ``shared_prefix_len`` ids are shared.

    Requests in this workload share the system prompt; giving them identical leading ids is
    what lets prefix caching (chapter 7) find the shared blocks. Ids start at ``low`` to stay
    clear of a tokenizer's special tokens.
    """
    if vocab_size <= low:
        raise ValueError(f"vocab_size={vocab_size} must exceed low={low}")
    shared = np.random.default_rng([seed, 0]).integers(low, vocab_size, size=request.shared_prefix_len)
    own = np.random.default_rng([seed, 1, request.request_id]).integers(
        low, vocab_size, size=max(0, request.prompt_len - request.shared_prefix_len)
    )
    return [int(t) for t in np.concatenate([shared, own])[: request.prompt_len]]
