"""The engine's settings, checked once (nano-vllm's ``Config.__post_init__``), and the KV memory they describe.

``policy="contiguous"`` is the system before PagedAttention: the same block manager with one
block of ``max_seq_len`` slots per request (one reservation), so the two policies differ by the
memory policy alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..checks import check_whole
from ..core.block_manager import BlockManager
from ..core.scheduler import PREEMPTION_MODES
from ..core.swap import SwapSpace

POLICIES: tuple[str, ...] = ("paged", "contiguous")
"""The two ways an engine holds KV memory: blocks from a pool, or one reserved range per request."""

DEFAULT_MAX_SEQ_LEN = 2048
"""The contiguous engine's default ``max_seq_len`` (capped by the model's context).

A contiguous cache must reserve ``max_seq_len`` slots per sequence up front. Llama-3.2-1B's
context is 131,072 tokens: reserving that per sequence would need 4 GiB of K/V for each
request in bf16, and no reservation would fit the default budget. 2,048 is the context of
the book's workload (the paged-KV-cache article's: prompts of 625-1,025 tokens, outputs up to 500); pass
``max_seq_len`` for longer requests. The paged engine reserves nothing, so it defaults to the
model's whole context.
"""

DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
"""Tokens computed per step at most (vLLM's ``max_num_batched_tokens``): longer prompts are chunked."""


@dataclass(frozen=True)
class EngineConfig:
    """Every setting of an :class:`~pagedkv_edu.engine.engine.LLMEngine`, validated when built.

    ``kv_budget_tokens`` is the KV memory in token slots: ``// block_size`` blocks (paged), or
    ``// max_seq_len`` reservations (contiguous). ``max_seq_len`` None means the model's context
    (paged) or :data:`DEFAULT_MAX_SEQ_LEN` capped by it (contiguous): :meth:`for_context` fills it
    in. ``watermark`` is the share of blocks kept free at admission. ``max_num_seqs`` caps the
    running sequences; ``max_num_batched_tokens`` the tokens one step computes (None: no cap).
    ``preemption_mode`` is ``"recompute"`` or ``"swap"`` (into ``swap_space_tokens`` host slots, by
    default as many as the budget). ``backend`` runs attention: ``"torch"``, ``"triton"`` or a
    reader's attention function. ``keep_logprobs`` keeps each sample's last log-probabilities;
    ``free_finished=False`` keeps a finished sequence's blocks (chapter 5 reads its table);
    ``keep_history=False`` skips the per-step :class:`~pagedkv_edu.engine.outputs.EngineStats`.
    """

    policy: str = "paged"
    kv_budget_tokens: int = 20480
    block_size: int = 16
    max_seq_len: int | None = None
    watermark: float = 0.01
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = DEFAULT_MAX_NUM_BATCHED_TOKENS
    preemption_mode: str = "recompute"
    swap_space_tokens: int | None = None
    enable_prefix_caching: bool = False
    backend: str | Callable[..., Any] = "torch"
    stop_token_ids: tuple[int, ...] = ()
    seed: int = 0
    keep_logprobs: bool = False
    free_finished: bool = True
    keep_history: bool = True

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; choose one of {POLICIES}")
        if self.preemption_mode not in PREEMPTION_MODES:
            raise ValueError(f"unknown preemption_mode {self.preemption_mode!r}; choose one of {PREEMPTION_MODES}")
        if self.preemption_mode == "swap" and self.policy != "paged":
            raise ValueError(f"swapping moves blocks through block tables: preemption_mode='swap' needs "
                             f"policy='paged', not {self.policy!r}")
        if self.enable_prefix_caching and self.policy != "paged":
            raise ValueError(f"prefix caching shares blocks, so it needs policy='paged', not {self.policy!r}")
        for name in ("kv_budget_tokens", "block_size", "max_seq_len", "max_num_seqs", "max_num_batched_tokens",
                     "swap_space_tokens"):
            value = getattr(self, name)
            if value is not None:
                check_whole(name, value, 1)
        w = self.watermark
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < 1:
            raise ValueError(f"watermark must be a fraction in [0, 1), got {w!r}")
        if not (callable(self.backend) or isinstance(self.backend, str)):
            raise ValueError(f"backend must be 'torch', 'triton' or an attention function, got {self.backend!r}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    def check_request(self, prompt_token_ids: list[int], params: Any, vocab_size: int | None) -> None:
        """Refuse a request these settings can never serve, naming the bad value (before the engine changes)."""
        bad = [] if vocab_size is None else [t for t in prompt_token_ids if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"prompt has token ids outside the vocabulary 0..{vocab_size - 1}: {bad[:5]}")
        if len(prompt_token_ids) + params.max_tokens > self.max_seq_len:
            raise ValueError(f"prompt of {len(prompt_token_ids)} tokens + max_tokens={params.max_tokens} exceeds "
                             f"max_seq_len={self.max_seq_len}")
        if params.n > 1 and self.policy != "paged":
            raise ValueError(f"n={params.n} samples share the prompt's blocks: parallel sampling needs policy='paged'")
        if self.max_num_seqs is not None and params.n > self.max_num_seqs:
            raise ValueError(f"n={params.n} samples can never run under max_num_seqs={self.max_num_seqs}")

    def for_context(self, context: int) -> "EngineConfig":
        """This config with ``max_seq_len`` filled in for a model of ``context`` positions."""
        if self.max_seq_len is not None:
            return self
        return dataclasses.replace(self, max_seq_len=context if self.policy == "paged"
                                   else min(context, DEFAULT_MAX_SEQ_LEN))

    @property
    def slot_block_size(self) -> int:
        """Slots per block: ``block_size`` (paged), or one ``max_seq_len`` reservation (contiguous)."""
        assert self.max_seq_len is not None, "call for_context first"
        return self.block_size if self.policy == "paged" else self.max_seq_len

    @property
    def num_blocks(self) -> int:
        return self.kv_budget_tokens // self.slot_block_size

    def make_memory(self, block_manager: Callable[..., Any] = BlockManager) -> Any:
        """The block manager these settings describe (contiguous: one block per reservation, no watermark), built
        by ``block_manager``, called as :class:`BlockManager` is (a reader's: ``Parts.memory``)."""
        size = self.slot_block_size
        if self.num_blocks < 1:
            raise ValueError(f"a budget of {self.kv_budget_tokens} tokens holds no {self.policy} block of {size} "
                             f"slots; raise kv_budget_tokens" + ("" if self.policy == "paged" else " or lower max_seq_len"))
        swap = None
        if self.preemption_mode == "swap":
            swap = SwapSpace(max(1, (self.swap_space_tokens or self.kv_budget_tokens) // size), size)
        watermark = math.ceil(self.watermark * self.num_blocks) if self.policy == "paged" else 0
        return block_manager(self.num_blocks, size, self.max_seq_len, enable_prefix_caching=self.enable_prefix_caching,
                             watermark_blocks=watermark, swap=swap)


__all__ = ["DEFAULT_MAX_NUM_BATCHED_TOKENS", "DEFAULT_MAX_SEQ_LEN", "EngineConfig", "POLICIES"]
