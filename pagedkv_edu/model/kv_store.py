"""Where the decoder keeps K and V: in blocks through block tables, or in one contiguous range per sequence.

The decoder (:mod:`pagedkv_edu.model.llama`) asks a KV store two things per layer:
``write`` this step's K/V, and ``attend``: give each query the attention over everything its
sequence has cached. Two stores answer the same questions:

* :class:`PagedKVStore`, the paper's design: K/V go to ``slot = table[pos // B] * B + pos % B``
  of chapter 3's block cache and are read back through the block tables.
* :class:`ContiguousKVStore`, chapter 1's naive cache: a sequence's tokens sit side by side
  in one reserved range, position ``p`` at slot ``start + p``. It knows nothing about blocks,
  so it is the oracle: the same decoder on both stores must produce the same tokens.

A store holds tensors and dispatches attention; it allocates nothing. Which blocks (or which
range) a sequence owns is decided by the scheduler's memory (:mod:`pagedkv_edu.scheduler`),
and the engine's model runner (:mod:`pagedkv_edu.engine.model_runner`) turns those decisions
into the :class:`StepMetadata` every layer reads: which sequences take part, how many new
tokens each brings, each token's position and slot. A step may mix sequences that bring one
token (decodes) with sequences that bring many (prefills, or a chunk of one).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
import torch.nn.functional as F

from ..attention import BACKENDS, AttentionFn, check_backend, kernel_name, paged_attention  # noqa: F401  (BACKENDS re-exported: readers import it from here)
from ..attention.reference import prefix_causal_sdpa
from ..checks import check_whole
from ..kv_cache import PagedKVCache

if TYPE_CHECKING:
    from .llama import LlamaConfig



class HasBlocks(Protocol):
    """A block table as :meth:`StepMetadata.build` reads it (chapter 2's ``BlockTable``)."""

    block_ids: list[int]

    def slot_mapping(self, start: int = 0, end: int | None = None) -> list[int]: ...


@dataclass(frozen=True)
class StepMetadata:
    """One forward step's batch: its sequences, and for each new token a position (and a slot).

    The step's tokens are laid end to end: sequence ``i`` contributes ``query_lens[i]`` tokens,
    the last ``query_lens[i]`` of its ``seq_lens[i]`` (the earlier ones are already cached). A
    decode step has ``query_lens == (1, 1, ...)``; a prefill brings a whole prompt, a chunk of
    one, or the rest of one whose prefix is cached already (chapter 8's prefix cache, a
    preempted recompute); a mixed step has both kinds.
    """

    seq_ids: tuple[Hashable, ...]
    query_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    positions: torch.Tensor                     # [num_tokens] int64
    last_token_index: torch.Tensor              # [num_seqs] int64: where each sequence's logits come from
    slot_mapping: torch.Tensor | None = None    # [num_tokens] int64: each new token's cache slot
    block_tables: torch.Tensor | None = None    # [num_seqs, max_blocks] int32, -1 padded (paged only)
    seq_lens_tensor: torch.Tensor | None = None  # [num_seqs] int32
    query_start_loc: torch.Tensor | None = None  # [num_seqs + 1] int32: cumulative query lengths (cu_seqlens)
    kv_starts: tuple[int, ...] | None = None    # first slot of each sequence's range (contiguous only)

    @classmethod
    def build(cls, seq_ids: Sequence[Hashable], seq_lens: Sequence[int], query_lens: Sequence[int],
              device: torch.device, tables: Sequence[HasBlocks] | None = None) -> "StepMetadata":
        """Positions from the lengths; slots and padded block tables from ``tables`` when paged.

        The plain way to describe a step, from Python lists (chapter 5 builds one by hand); the
        engine's model runner builds the same fields from its persistent tensors instead.
        """
        positions = torch.cat([torch.arange(s - q, s) for s, q in zip(seq_lens, query_lens)])
        starts = torch.tensor([0, *query_lens]).cumsum(0)
        paged: dict[str, torch.Tensor] = {}
        if tables is not None:
            slots = [slot for t, s, q in zip(tables, seq_lens, query_lens) for slot in t.slot_mapping(s - q, s)]
            width = max(len(t.block_ids) for t in tables)
            padded = [list(t.block_ids) + [-1] * (width - len(t.block_ids)) for t in tables]
            paged = {
                "slot_mapping": torch.tensor(slots, dtype=torch.int64, device=device),
                "block_tables": torch.tensor(padded, dtype=torch.int32, device=device),
            }
        return cls(tuple(seq_ids), tuple(query_lens), tuple(seq_lens), positions.to(device), (starts[1:] - 1).to(device),
                   seq_lens_tensor=torch.tensor(list(seq_lens), dtype=torch.int32, device=device),
                   query_start_loc=starts.to(torch.int32).to(device), **paged)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def is_decode(self) -> bool:
        """Every sequence brings exactly one token: the decode kernel's case."""
        return all(q == 1 for q in self.query_lens)


class KVStore(Protocol):
    """What the decoder needs from a KV store."""

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, meta: StepMetadata) -> None:
        """Store the step's K/V (``[num_tokens, num_kv_heads, head_dim]``) of ``layer`` at their slots."""

    def attend(self, layer: int, q: torch.Tensor, meta: StepMetadata) -> torch.Tensor:
        """Each query's attention over its sequence's cached K/V, ``[num_tokens, num_heads, head_dim]``."""

    @property
    def bytes(self) -> int:
        """Memory of the store's K/V tensors."""


@dataclass(frozen=True)
class _GatherPlan:
    """Index tensors one step's attention reuses in every layer (built once, at layer 0)."""

    decode_rows: torch.Tensor | None     # token rows of the one-token sequences
    decode_slots: torch.Tensor | None    # [num_decodes, max_len] context slots (padding repeats slot 0)
    decode_valid: torch.Tensor | None    # [num_decodes, max_len] mask of real positions
    prefills: tuple[tuple[int, int, int, torch.Tensor], ...]   # (first token row, query length, context length, blocks)


class PagedKVStore:
    """K/V in fixed-size blocks of one :class:`~pagedkv_edu.kv_cache.PagedKVCache`, read through block tables."""

    def __init__(self, config: "LlamaConfig", num_blocks: int, block_size: int = 16, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                 backend: str | AttentionFn = "torch", check: bool = True) -> None:
        if not callable(backend):
            check_backend(backend)
        self.cache = PagedKVCache(config.num_layers, num_blocks, block_size, config.num_kv_heads,
                                  config.head_dim, dtype, device)
        self.backend = backend
        # A reader's attention function replaces attention only; K/V stores and block copies use the shipped kernels.
        self.kernel_backend: str = backend if isinstance(backend, str) else "triton"
        # Validate each step's slots and tables (at layer 0). The engine builds them itself and checks its
        # input once, at add_request: it passes check=False, sparing a device-to-host sync per step.
        self.check = check
        self.kernels: dict[str, str] = {}  # phase ("prefill" / "decode") -> the attention kernel that ran
        self.scale = config.head_dim ** -0.5
        self._plan: tuple[StepMetadata, _GatherPlan] | None = None
        self._fresh: tuple[int, StepMetadata, torch.Tensor, torch.Tensor] | None = None   # the layer's K/V just written

    @property
    def block_size(self) -> int:
        return self.cache.block_size

    @property
    def num_blocks(self) -> int:
        return self.cache.num_blocks

    @property
    def bytes(self) -> int:
        """Memory of every K and V block, allocated once up front."""
        return self.cache.bytes

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, meta: StepMetadata) -> None:
        # Every layer of a step uses the same slots: validate them once, at layer 0.
        self.cache.store(layer, k, v, meta.slot_mapping, self.kernel_backend, check=self.check and layer == 0)
        self._fresh = (layer, meta, k, v)

    def attend(self, layer: int, q: torch.Tensor, meta: StepMetadata) -> torch.Tensor:
        """Decode, prefill and mixed steps alike: one attention call over the paged cache.

        ``"triton"`` and a reader's function go through :func:`~pagedkv_edu.attention.paged_attention`
        (the decode kernel when every sequence brings one token, else the unified kernel). The
        ``"torch"`` reference gathers instead, with indices built once per step and reused by
        every layer (the CPU engine's hot path). Records which kernel ran in ``self.kernels``
        under "decode" (every sequence brings one token) or "prefill" (any sequence brings more;
        a mixed step's decode tokens ride along).
        """
        phase = "decode" if meta.is_decode else "prefill"
        self.kernels[phase] = kernel_name(meta.query_lens, self.backend)
        if self.backend != "torch":
            return paged_attention(q, self.cache.k_caches[layer], self.cache.v_caches[layer], meta.block_tables,
                                   meta.seq_lens_tensor, meta.query_start_loc, self.scale, self.backend,
                                   check=self.check and layer == 0, max_query_len=max(meta.query_lens))
        plan = self._gather_plan(meta)
        k_flat = self.cache.k_caches[layer].flatten(0, 1)
        v_flat = self.cache.v_caches[layer].flatten(0, 1)
        out = torch.empty_like(q)
        if plan.decode_rows is not None:   # the one-token rows of the step, batched
            k = k_flat[plan.decode_slots].transpose(1, 2)   # [seqs, kv_heads, max_len, head_dim]
            v = v_flat[plan.decode_slots].transpose(1, 2)
            rows = F.scaled_dot_product_attention(q[plan.decode_rows][:, :, None, :], k, v,
                                                  attn_mask=plan.decode_valid[:, None, None, :], scale=self.scale,
                                                  enable_gqa=True)[:, :, 0, :]
            if not plan.prefills:   # a decode step: the rows are the whole output, in order
                return rows
            out[plan.decode_rows] = rows
        fresh = self._fresh if self._fresh is not None and self._fresh[0] == layer and self._fresh[1] is meta else None
        k_cache, v_cache = self.cache.k_caches[layer], self.cache.v_caches[layer]
        for start, n, length, blocks in plan.prefills:   # prefill rows: each sequence's K/V, then causal SDPA
            if length == n and fresh is not None:        # all of its context is this step's: no gather at all
                k, v = fresh[2][start:start + n], fresh[3][start:start + n]
            else:                                        # a cached prefix (an earlier chunk): whole blocks at once
                k, v = k_cache[blocks].flatten(0, 1)[:length], v_cache[blocks].flatten(0, 1)[:length]
            out[start:start + n] = prefix_causal_sdpa(q[start:start + n], k, v, self.scale)
        return out

    def _gather_plan(self, meta: StepMetadata) -> _GatherPlan:
        """The step's gather indices, computed from its block tables once and reused by every layer."""
        if self._plan is not None and self._plan[0] is meta:
            return self._plan[1]
        device, size = meta.block_tables.device, self.block_size
        starts = [0]
        for n in meta.query_lens:
            starts.append(starts[-1] + n)
        one = [i for i, n in enumerate(meta.query_lens) if n == 1]
        rows = seqs = slots = valid = None
        if one:
            seqs = torch.tensor(one, device=device)
            rows = torch.tensor([starts[i] for i in one], device=device)
            lens = meta.seq_lens_tensor[seqs].to(torch.int64)
            pos = torch.arange(max(meta.seq_lens[i] for i in one), device=device)
            valid = pos[None, :] < lens[:, None]
            slots = meta.block_tables[seqs][:, pos // size].to(torch.int64) * size + pos % size
            slots = torch.where(valid, slots, slots[:, :1])   # padding re-reads a real slot; the mask drops it
        prefills = []
        for i, n in enumerate(meta.query_lens):
            if n > 1:
                length = meta.seq_lens[i]
                prefills.append((starts[i], n, length, meta.block_tables[i, :-(-length // size)].to(torch.int64)))
        plan = _GatherPlan(rows, slots, valid, tuple(prefills))
        self._plan = (meta, plan)
        return plan


class ContiguousKVStore:
    """The naive cache, kept as an oracle: per layer one tensor of ``capacity`` slots, a range per sequence.

    Which range a sequence owns is the scheduler's :class:`~pagedkv_edu.scheduler.ContiguousMemory`
    decision (a first-fit reservation of ``max_seq_len`` slots in chapter 1's arena); the step
    metadata carries its first slot (``kv_starts``), and position ``p`` lives at ``start + p``.
    """

    def __init__(self, config: "LlamaConfig", max_seqs: int, max_seq_len: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        for name, value in (("max_seqs", max_seqs), ("max_seq_len", max_seq_len)):
            check_whole(name, value, 1)
        shape = (max_seqs * max_seq_len, config.num_kv_heads, config.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.max_seq_len = max_seq_len
        self.scale = config.head_dim ** -0.5

    @property
    def capacity(self) -> int:
        """Slots per layer: ``max_seqs`` reservations of ``max_seq_len``."""
        return self.k[0].shape[0]

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, meta: StepMetadata) -> None:
        self.k[layer].index_copy_(0, meta.slot_mapping, k)
        self.v[layer].index_copy_(0, meta.slot_mapping, v)

    def attend(self, layer: int, q: torch.Tensor, meta: StepMetadata) -> torch.Tensor:
        out = torch.empty_like(q)
        start = 0
        for first, n, length in zip(meta.kv_starts, meta.query_lens, meta.seq_lens):
            out[start:start + n] = prefix_causal_sdpa(q[start:start + n], self.k[layer][first:first + length],
                                                           self.v[layer][first:first + length], self.scale)
            start += n
        return out
