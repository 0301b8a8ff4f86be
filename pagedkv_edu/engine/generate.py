"""Chapter 5's static batch: every prompt prefilled together, then one decode step at a time.

It is the engine (:class:`~pagedkv_edu.engine.engine.LLMEngine`) over a pool sized exactly for
its prompts plus ``max_new_tokens``, so nobody waits or is preempted; chapter 6 lets requests
join and leave. ``python -m pagedkv_edu generate`` is :mod:`pagedkv_edu.bench.generate_cli`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.block_manager import BlockManager
from ..core.block_table import BlockTable, blocks_needed
from ..checks import check_whole
from .engine import LLMEngine
from .model_runner import ModelRunner
from .sampling import SamplingParams
from ..attention.kv_cache import PagedKVCache
from ..attention import AttentionFn, check_backend
from ..model.llama import Llama
from .config import POLICIES


@dataclass
class GenerationResult:
    """What one :func:`generate` call produced, and how long it took."""

    prompts: list[list[int]]
    tokens: list[list[int]]                      # new tokens of each prompt (a stop token included)
    block_tables: list[BlockTable]               # each sequence's final table (contiguous: one block per prompt)
    kv_bytes: int                                # memory of the KV store's tensors
    prefill_seconds: float
    decode_seconds: float
    decode_steps: int
    step_logits: list[torch.Tensor] | None = field(default=None, repr=False)
    """Per prompt, ``[num_new_tokens, vocab]`` float32 logits (with ``record_logits=True``)."""
    attention: dict[str, str] = field(default_factory=dict)
    """Which attention kernel ran each phase, ``{"prefill": ..., "decode": ...}`` (the cache's ``kernels``)."""
    manager: BlockManager | None = field(default=None, repr=False)
    """The block manager that held the batch's blocks, tables left in place."""

    @property
    def num_new_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def seconds(self) -> float:
        return self.prefill_seconds + self.decode_seconds

    @property
    def tokens_per_second(self) -> float:
        """New tokens per second of prefill + decode (load time excluded)."""
        return self.num_new_tokens / self.seconds if self.seconds > 0 else 0.0


def check_request(model: Llama, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
    """Refuse what cannot be generated, naming the bad value, before anything is allocated."""
    check_whole("max_new_tokens", max_new_tokens)
    if isinstance(prompts, (str, bytes)) or not len(prompts):
        raise ValueError("prompts must be a non-empty list of token-id lists")
    if isinstance(prompts[0], int):
        raise ValueError("prompts must be a list of token-id lists; wrap a single prompt in a list: [prompt]")
    vocab, context = model.config.vocab_size, model.config.max_position_embeddings
    out = []
    for i, prompt in enumerate(prompts):
        ids = [int(t) for t in prompt]
        if not ids:
            raise ValueError(f"prompt {i} is empty: there is no last token to predict from "
                             f"(a tokenizer's BOS token makes a valid one-token prompt)")
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt {i} has token ids outside the vocabulary 0..{vocab - 1}: {bad[:5]}")
        if len(ids) + max_new_tokens > context:
            raise ValueError(f"prompt {i} has {len(ids)} tokens; with max_new_tokens={max_new_tokens} that is "
                             f"{len(ids) + max_new_tokens}, past the model's context of {context} positions")
        out.append(ids)
    return out


def blocks_for(prompts: Sequence[Sequence[int]], max_new_tokens: int, block_size: int) -> list[int]:
    """Blocks each sequence will hold at the end: the last sampled token's K/V is never written."""
    return [blocks_needed(len(p) + max(max_new_tokens - 1, 0), block_size) for p in prompts]


def make_store(model: Llama, prompts: Sequence[Sequence[int]], max_new_tokens: int, *, cache: str = "paged",
               backend: str | AttentionFn = "torch", block_size: int = 16, num_blocks: int | None = None) -> PagedKVCache:
    """A KV store just big enough for this batch (or of exactly ``num_blocks`` blocks; :func:`generate` checks it).

    ``backend`` runs every attention of the paged store, prefill included: ``"torch"`` (the
    gather reference), ``"triton"`` (the book's kernels) or a function with
    :func:`~pagedkv_edu.attention.paged_attention`'s positional signature (a reader's kernel).
    """
    if cache not in POLICIES:
        raise ValueError(f"unknown cache {cache!r}; choose one of {', '.join(POLICIES)}")
    if callable(backend):
        if cache != "paged":
            raise ValueError(f"an attention function reads a paged cache; cache={cache!r} cannot use one")
    else:
        check_backend(backend)
    check_whole("block_size", block_size, 1)
    if cache == "contiguous":
        longest = max(len(p) for p in prompts) + max_new_tokens
        return PagedKVCache.for_model(model.config, len(prompts), longest, dtype=model.dtype, device=model.device,
                                      backend=backend)
    num_blocks = max(sum(blocks_for(prompts, max_new_tokens, block_size)), 1) if num_blocks is None else num_blocks
    return PagedKVCache.for_model(model.config, num_blocks, block_size, dtype=model.dtype, device=model.device,
                                  backend=backend)


def check_fits(prompts: Sequence[Sequence[int]], max_new_tokens: int, num_blocks: int, block_size: int) -> None:
    """Refuse a batch that ``num_blocks`` blocks cannot hold to its end: a static batch cannot wait or preempt."""
    need = blocks_for(prompts, max_new_tokens, block_size)
    for i, n in enumerate(need):
        if n > num_blocks:
            raise ValueError(f"prompt {i} ({len(prompts[i])} tokens + {max_new_tokens} new) needs {n} blocks of "
                             f"{block_size}, but the pool only has {num_blocks}: it can never fit")
    if sum(need) > num_blocks:
        raise ValueError(f"the batch needs {sum(need)} blocks by its end but the pool has {num_blocks}; this "
                         f"static batch cannot wait or preempt (chapter 6's scheduler can): give more blocks "
                         f"or fewer prompts")


def generate(
    model: Llama,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int = 64,
    *,
    cache: str = "paged",
    backend: str | AttentionFn | None = None,
    block_size: int = 16,
    num_blocks: int | None = None,
    store: PagedKVCache | None = None,
    temperature: float = 0.0,
    seed: int = 0,
    stop_token_ids: Iterable[int] = (),
    on_token: Callable[[int, int], None] | None = None,
    on_step: Callable[[int, Any], None] | None = None,
    record_logits: bool = False,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` for every prompt, all of them batched together.

    The loop is the engine's (scheduler, then model runner, then sampling), with every prompt
    admitted at step 0 and prefilled whole. ``cache`` picks the paged store (the default) or
    the contiguous oracle (one block per prompt); ``backend`` runs its attention (default
    ``"torch"``; see :func:`make_store`). Pass ``store`` to run on one you built (its blocks are
    handed out afresh, its backend runs; a different ``backend`` is refused). A sequence stops at a token in ``stop_token_ids`` (kept in its output) or after
    ``max_new_tokens``. With ``temperature > 0`` each prompt samples from its own generator
    seeded ``seed`` (the engine's ``SamplingParams(seed=seed)``), so a prompt's text does not
    depend on which other prompts share its batch, and equals the engine's for that seed.
    ``on_token(i, token)`` streams prompt ``i``'s tokens as they come;
    ``on_step(step, manager)`` runs after every forward step (step 0 is the prefill) with the
    :class:`~pagedkv_edu.core.block_manager.BlockManager` that holds the tables (contiguous: one
    block per prompt). The blocks stay allocated in ``result.manager``.
    """
    prompts = check_request(model, prompts, max_new_tokens)
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if store is None:
        store = make_store(model, prompts, max_new_tokens, cache=cache, backend="torch" if backend is None else backend,
                           block_size=block_size, num_blocks=num_blocks)
    elif backend is not None and backend != store.backend:
        raise ValueError(f"the store you pass runs backend {store.backend!r}; backend={backend!r} would be ignored: "
                         f"build the store with it, or pass no backend")
    context = max(len(p) for p in prompts) + max_new_tokens
    check_fits(prompts, max_new_tokens, store.num_blocks, store.block_size)   # once, for a store made or passed in
    manager = BlockManager(store.num_blocks, store.block_size)   # contiguous: one block of the longest per prompt
    engine = LLMEngine(ModelRunner(model, store, context), memory=manager, max_seq_len=context, policy=cache,
                       seed=seed, free_finished=False, keep_history=False, max_num_batched_tokens=None)
    params = SamplingParams(max_tokens=max_new_tokens, temperature=temperature, seed=seed,
                            stop_token_ids=tuple(int(t) for t in stop_token_ids), ignore_eos=True)
    if max_new_tokens > 0:
        for prompt in prompts:
            engine.add_request(prompt, params)
    logits_log: list[list[torch.Tensor]] = [[] for _ in prompts]
    timings = [0.0, 0.0]
    step = 0
    while engine.has_unfinished:
        start = time.perf_counter()
        engine.step()
        timings[min(step, 1)] += time.perf_counter() - start
        for row, s in enumerate(engine.last_step.scheduled):    # every row samples: prompts are prefilled whole
            i, token = s.seq.request_id, s.seq.output_token_ids[-1]
            if record_logits:
                logits_log[i].append(engine.last_logits[row].float().cpu())
            if on_token is not None:
                on_token(i, token)
        if on_step is not None:
            on_step(step, manager)
        step += 1

    records = [engine.requests.get(i) for i in range(len(prompts))]
    tables = [manager.table(r) if r is not None and r in manager else BlockTable(store.block_size) for r in records]
    return GenerationResult(
        prompts=prompts, tokens=[list(r.output_token_ids) if r is not None else [] for r in records],
        block_tables=tables, kv_bytes=store.bytes,
        prefill_seconds=timings[0], decode_seconds=timings[1], decode_steps=max(step - 1, 0),
        step_logits=[torch.stack(rows) if rows else torch.empty(0) for rows in logits_log] if record_logits else None,
        attention=dict(getattr(store, "kernels", {})),
        manager=manager,
    )
