"""Where the decoder keeps K and V: in blocks through block tables, or in one row per sequence.

The decoder (:mod:`pagedkv_edu.model.llama`) asks a KV store two things per layer:
``write`` this step's K/V, and ``attend``: give each query the attention over everything its
sequence has cached. Two stores answer the same questions:

* :class:`PagedKVStore`, the paper's design. A :class:`~pagedkv_edu.block_manager.BlockManager`
  hands out blocks as sequences grow; K/V go to ``slot = table[pos // B] * B + pos % B``; a
  decode step reads them back with chapter 4's kernel (or chapter 3's gather reference).
* :class:`ContiguousKVStore`, chapter 1's naive cache: every sequence reserves
  ``max_seq_len`` rows up front and position ``p`` lives at row ``p``. It knows nothing about
  blocks, so it is the oracle: the same decoder on both stores must produce the same tokens.

Both describe a step with the same :class:`StepMetadata`, built by ``plan``: which sequences
take part, how many new tokens each brings, and where those tokens go.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
import torch.nn.functional as F

from ..block_manager import BlockManager
from ..block_pool import OutOfBlocksError
from ..block_table import BlockTable, blocks_needed
from ..attention import AttentionFn, kernel_name, paged_attention
from ..kv_cache import PagedKVCache

if TYPE_CHECKING:
    from .llama import LlamaConfig

BACKENDS = ("torch", "triton")


@dataclass(frozen=True)
class StepMetadata:
    """One forward step's batch: its sequences, and for each new token a position (and a slot).

    The step's tokens are laid end to end: sequence ``i`` contributes ``query_lens[i]`` tokens,
    the last ``query_lens[i]`` of its ``seq_lens[i]`` (the earlier ones are already cached). A
    decode step has ``query_lens == (1, 1, ...)``; a prefill brings a whole prompt, or the rest
    of one whose prefix is cached already (chapter 8's prefix cache, a preempted recompute).
    """

    seq_ids: tuple[Hashable, ...]
    query_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    positions: torch.Tensor                     # [num_tokens] int64
    last_token_index: torch.Tensor              # [num_seqs] int64: where each sequence's logits come from
    slot_mapping: torch.Tensor | None = None    # [num_tokens] int64   (paged only)
    block_tables: torch.Tensor | None = None    # [num_seqs, max_blocks] int32, -1 padded (paged only)
    seq_lens_tensor: torch.Tensor | None = None  # [num_seqs] int32    (paged only)
    query_start_loc: torch.Tensor | None = None  # [num_seqs + 1] int32: where each sequence's tokens start (cu_seqlens)

    @classmethod
    def build(cls, seq_ids: Sequence[Hashable], seq_lens: Sequence[int], query_lens: Sequence[int],
              device: torch.device, tables: Sequence[BlockTable] | None = None) -> "StepMetadata":
        """Positions from the lengths; slots and padded block tables from ``tables`` when paged."""
        positions = torch.cat([torch.arange(s - q, s) for s, q in zip(seq_lens, query_lens)])
        last = torch.tensor(query_lens).cumsum(0) - 1
        query_start_loc = torch.tensor([0, *query_lens], dtype=torch.int32).cumsum(0, dtype=torch.int32)
        paged: dict[str, torch.Tensor] = {}
        if tables is not None:
            slots = [slot for t, s, q in zip(tables, seq_lens, query_lens) for slot in t.slot_mapping(s - q, s)]
            width = max(len(t.block_ids) for t in tables)
            padded = [t.block_ids + [-1] * (width - len(t.block_ids)) for t in tables]
            paged = {
                "slot_mapping": torch.tensor(slots, dtype=torch.int64, device=device),
                "block_tables": torch.tensor(padded, dtype=torch.int32, device=device),
                "seq_lens_tensor": torch.tensor(list(seq_lens), dtype=torch.int32, device=device),
            }
        return cls(tuple(seq_ids), tuple(query_lens), tuple(seq_lens), positions.to(device), last.to(device), **paged,
                   query_start_loc=query_start_loc.to(device))

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def is_decode(self) -> bool:
        """Every sequence brings exactly one token: the decode kernel's case."""
        return all(q == 1 for q in self.query_lens)


class KVStore(Protocol):
    """What the decoder and :func:`~pagedkv_edu.generate.generate` need from a KV store."""

    def plan(self, seq_ids: Sequence[Hashable], query_lens: Sequence[int]) -> StepMetadata:
        """Make room for each sequence's new tokens and describe the step."""

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, meta: StepMetadata) -> None:
        """Store the step's K/V (``[num_tokens, num_kv_heads, head_dim]``) of ``layer``."""

    def attend(self, layer: int, q: torch.Tensor, meta: StepMetadata) -> torch.Tensor:
        """Each query's attention over its sequence's cached K/V, ``[num_tokens, num_heads, head_dim]``."""

    @property
    def bytes(self) -> int:
        """Memory of the store's K/V tensors."""

    @property
    def num_sequences(self) -> int:
        """Sequences that hold cache space now."""


def prefix_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Attention of one sequence's ``n`` new queries over its ``L`` keys, the last ``n`` being theirs.

    ``q`` is ``[n, num_heads, head_dim]``, ``k`` and ``v`` ``[L, num_kv_heads, head_dim]``. Query
    ``i`` sits at position ``L - n + i`` and may see keys ``0 .. L - n + i``: the whole cached
    prefix plus the new tokens up to itself. With nothing cached that is the usual causal mask.
    """
    n, length = q.shape[0], k.shape[0]
    qh, kh, vh = q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None]
    if n == length:
        out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=n > 1, scale=scale, enable_gqa=True)
    elif n == 1:
        out = F.scaled_dot_product_attention(qh, kh, vh, scale=scale, enable_gqa=True)
    else:
        visible = torch.arange(length, device=q.device)[None, :] <= torch.arange(length - n, length,
                                                                                  device=q.device)[:, None]
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=visible, scale=scale, enable_gqa=True)
    return out[0].transpose(0, 1)


def _check_plan(seq_ids: Sequence[Hashable], query_lens: Sequence[int]) -> None:
    if len(seq_ids) != len(query_lens) or not seq_ids:
        raise ValueError(f"need one query length per sequence and at least one sequence; got {len(seq_ids)} "
                         f"sequences and {len(query_lens)} lengths")
    if len(set(seq_ids)) != len(seq_ids):
        raise ValueError(f"a sequence appears twice in one step: {list(seq_ids)}")
    for sid, n in zip(seq_ids, query_lens):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"sequence {sid!r}: a step must bring at least one token, got {n!r}")


class PagedKVStore:
    """K/V in fixed-size blocks from one pool, addressed through per-sequence block tables."""

    def __init__(self, config: "LlamaConfig", num_blocks: int, block_size: int = 16, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                 backend: str | AttentionFn = "torch", max_seq_len: int | None = None) -> None:
        if not callable(backend) and backend not in BACKENDS:
            raise ValueError(f"unknown attention backend {backend!r}; choose one of {', '.join(BACKENDS)} "
                             f"or pass an attention function")
        self.manager = BlockManager(num_blocks, block_size, max_seq_len)
        self.cache = PagedKVCache(config.num_layers, num_blocks, block_size, config.num_kv_heads,
                                  config.head_dim, dtype, device)
        self.backend = backend
        # A reader's attention function replaces attention only; K/V stores still use the shipped kernel.
        self._store_backend = backend if isinstance(backend, str) else "triton"
        self.kernels: dict[str, str] = {}  # phase ("prefill" / "decode") -> the attention kernel that ran
        self.scale = config.head_dim ** -0.5

    @property
    def block_size(self) -> int:
        return self.manager.block_size

    @property
    def bytes(self) -> int:
        """Memory of every K and V block, allocated once up front."""
        return self.cache.bytes

    @property
    def num_sequences(self) -> int:
        return len(self.manager.tables)

    def plan(self, seq_ids: Sequence[Hashable], query_lens: Sequence[int]) -> StepMetadata:
        """Make room for each sequence's new tokens (new ids are admitted) and describe the step.

        Checks that every sequence fits before allocating anything, so a refused step leaves
        the pool and the tables as they were.
        """
        _check_plan(seq_ids, query_lens)
        need = 0
        for sid, n in zip(seq_ids, query_lens):
            table = self.manager.tables.get(sid)
            total = n + (table.num_tokens if table else 0)
            if self.manager.max_seq_len is not None and total > self.manager.max_seq_len:
                raise ValueError(f"sequence {sid!r}: {total} tokens exceed max_seq_len={self.manager.max_seq_len}")
            need += table.blocks_to_append(n) if table else blocks_needed(n, self.block_size)
        if need > self.manager.pool.num_free:
            raise OutOfBlocksError(f"this step needs {need} new blocks but the pool has "
                                   f"{self.manager.pool.num_free} of {self.manager.pool.num_blocks} free")
        for sid, n in zip(seq_ids, query_lens):
            if sid in self.manager.tables:
                self.manager.append_tokens(sid, n)
            else:
                self.manager.add_sequence(sid, n)
        tables = [self.manager.table(sid) for sid in seq_ids]
        return StepMetadata.build(seq_ids, [t.num_tokens for t in tables], query_lens, self.cache.device, tables)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, meta: StepMetadata) -> None:
        # Every layer of a step uses the same slots: validate them once, at layer 0.
        self.cache.store(layer, k, v, meta.slot_mapping, self._store_backend, check=layer == 0)

    def attend(self, layer: int, q: torch.Tensor, meta: StepMetadata) -> torch.Tensor:
        """Decode, prefill and mixed steps alike: one :func:`~pagedkv_edu.attention.paged_attention` call.

        Records which kernel ran in ``self.kernels`` under "decode" (every sequence brings one
        token) or "prefill" (any sequence brings more; a mixed step's decode tokens ride along).
        """
        phase = "decode" if meta.is_decode else "prefill"
        self.kernels[phase] = kernel_name(meta.query_lens, self.backend)
        return paged_attention(q, self.cache.k_caches[layer], self.cache.v_caches[layer], meta.block_tables,
                               meta.seq_lens_tensor, meta.query_start_loc, self.scale, self.backend,
                               check=layer == 0, max_query_len=max(meta.query_lens))

    def table(self, seq_id: Hashable) -> BlockTable:
        return self.manager.table(seq_id)

    def finish(self, seq_id: Hashable) -> list[int]:
        """Return the sequence's blocks to the pool."""
        return self.manager.finish(seq_id)


class ContiguousKVStore:
    """One ``max_seq_len`` row per sequence, reserved up front: the naive cache, kept as an oracle."""

    def __init__(self, config: "LlamaConfig", max_seqs: int, max_seq_len: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        if max_seqs < 1 or max_seq_len < 1:
            raise ValueError(f"max_seqs and max_seq_len must be positive, got {max_seqs} and {max_seq_len}")
        shape = (max_seqs, max_seq_len, config.num_kv_heads, config.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.max_seq_len = max_seq_len
        self.scale = config.head_dim ** -0.5
        self.rows: dict[Hashable, int] = {}
        self.lengths: dict[Hashable, int] = {}
        self._free_rows = list(range(max_seqs))

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    @property
    def num_sequences(self) -> int:
        return len(self.rows)

    def plan(self, seq_ids: Sequence[Hashable], query_lens: Sequence[int]) -> StepMetadata:
        """Give new sequences a row and check every sequence still fits in its row."""
        _check_plan(seq_ids, query_lens)
        new = [sid for sid in seq_ids if sid not in self.rows]
        if len(new) > len(self._free_rows):
            raise ValueError(f"{len(new)} new sequences but only {len(self._free_rows)} free rows")
        for sid, n in zip(seq_ids, query_lens):
            if self.lengths.get(sid, 0) + n > self.max_seq_len:
                raise ValueError(f"sequence {sid!r}: {self.lengths.get(sid, 0) + n} tokens exceed the row's "
                                 f"max_seq_len={self.max_seq_len}")
        for sid, n in zip(seq_ids, query_lens):
            if sid not in self.rows:
                self.rows[sid] = self._free_rows.pop(0)
            self.lengths[sid] = self.lengths.get(sid, 0) + n
        return StepMetadata.build(seq_ids, [self.lengths[s] for s in seq_ids], query_lens, self.k[0].device)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, meta: StepMetadata) -> None:
        rows = torch.tensor([self.rows[s] for s in meta.seq_ids], device=k.device)
        rows = rows.repeat_interleave(torch.tensor(meta.query_lens, device=k.device))
        self.k[layer][rows, meta.positions] = k
        self.v[layer][rows, meta.positions] = v

    def attend(self, layer: int, q: torch.Tensor, meta: StepMetadata) -> torch.Tensor:
        out = torch.empty_like(q)
        start = 0
        for sid, n, length in zip(meta.seq_ids, meta.query_lens, meta.seq_lens):
            row = self.rows[sid]
            out[start:start + n] = prefix_causal_attention(q[start:start + n], self.k[layer][row, :length],
                                                           self.v[layer][row, :length], self.scale)
            start += n
        return out

    def finish(self, seq_id: Hashable) -> None:
        self._free_rows.append(self.rows.pop(seq_id))
        del self.lengths[seq_id]
