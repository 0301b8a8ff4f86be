"""The paged KV cache: per-layer K and V tensors cut into blocks, and the step that reads and writes them (chapters 3, 5).

Every layer holds one K and one V tensor ``[num_blocks, block_size, num_kv_heads, head_dim]``
("NHD", the layout of FlashAttention, vLLM's Triton backends and nano-vllm), sized once up
front. The decoder asks it two things per layer: :meth:`PagedKVCache.write` a step's K/V at
their slots, and :meth:`PagedKVCache.attend` (each query over its sequence's cached K/V).
:class:`StepMetadata` describes a step; :meth:`StepMetadata.build` is its one builder.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .. import runtime
from ..checks import check_whole, is_whole
from ..specs import kv_bytes_per_token, step_kind
from . import AttentionFn, gather_kv, kernel_name, paged_attention, paged_decode_attention, store_kv
from .reference import GatherPlan, gather_plan, paged_attention_torch
from .triton_copy import check_copy_pairs, copy_blocks_torch, copy_blocks_triton, copy_indices
from .validate import SUPPORTED_DTYPES, check_backend


def block_bytes(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """Bytes one block id costs across all layers, K and V together."""
    return block_size * kv_bytes_per_token(num_layers, num_kv_heads, head_dim, dtype.itemsize)


@dataclass(frozen=True)
class StepMetadata:
    """One forward step's batch: sequence ``i`` brings the last ``query_lens[i]`` of its ``seq_lens[i]`` tokens.

    The step's tokens are laid end to end; a decode brings one token, a prefill a prompt, a
    chunk of one, or the rest after a cached prefix; a mixed step has both kinds.
    """

    seq_ids: tuple[Hashable, ...]
    query_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    positions: torch.Tensor                      # [num_tokens] int64
    last_token_index: torch.Tensor               # [num_seqs] int64: where each sequence's logits come from
    slot_mapping: torch.Tensor | None = None     # [num_tokens] int64: each new token's cache slot
    block_tables: torch.Tensor | None = None     # [num_seqs, max_blocks] int32, -1 padded
    seq_lens_tensor: torch.Tensor | None = None  # [num_seqs] int32
    query_start_loc: torch.Tensor | None = None  # [num_seqs + 1] int32: cumulative query lengths (cu_seqlens)
    kind: str = ""                               # specs.step_kind: decides the kernel, once per step
    max_query_len: int = 0

    @classmethod
    def build(cls, seq_ids: Sequence[Hashable], seq_lens: Sequence[int], query_lens: Sequence[int],
              device: torch.device | str, block_tables: torch.Tensor | Sequence[Sequence[int]] | None = None,
              block_size: int = 0) -> "StepMetadata":
        """Positions from the lengths; slots and tables from ``block_tables`` (rows of ids, or a padded tensor).

        Built on the host, copied once per tensor: the engine's runner (from its persistent
        table) and chapter 5's hand-driven steps both call this.
        """
        q = torch.tensor(list(query_lens), dtype=torch.int64)
        starts = torch.zeros(len(q) + 1, dtype=torch.int64)
        torch.cumsum(q, 0, out=starts[1:])
        owner = torch.repeat_interleave(torch.arange(len(q)), q)
        first = torch.tensor([s - n for s, n in zip(seq_lens, query_lens)], dtype=torch.int64)
        positions = torch.arange(int(starts[-1])) - starts[:-1][owner] + first[owner]
        paged: dict[str, torch.Tensor] = {}
        if block_tables is not None:
            if not isinstance(block_tables, torch.Tensor):
                width = max(len(t) for t in block_tables)
                block_tables = torch.tensor([list(t) + [-1] * (width - len(t)) for t in block_tables],
                                            dtype=torch.int32)
            tables = block_tables[:, :-(-max(seq_lens) // block_size)]
            slots = tables[owner, positions // block_size].to(torch.int64) * block_size + positions % block_size
            paged = {"slot_mapping": slots.to(device, non_blocking=True),   # a copy: the caller's rows change later
                     "block_tables": tables.to(device, non_blocking=True, copy=True)}
        return cls(tuple(seq_ids), tuple(query_lens), tuple(seq_lens), positions.to(device, non_blocking=True),
                   (starts[1:] - 1).to(device, non_blocking=True),
                   seq_lens_tensor=torch.tensor(list(seq_lens), dtype=torch.int32).to(device, non_blocking=True),
                   query_start_loc=starts.to(torch.int32).to(device, non_blocking=True), kind=step_kind(query_lens),
                   max_query_len=max(query_lens, default=0), **paged)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def is_decode(self) -> bool:
        """Every sequence brings exactly one token: the decode kernel's case."""
        return self.kind == "decode"


class PagedKVCache:
    """``num_layers`` pairs of K/V tensors, each ``[num_blocks, block_size, num_kv_heads, head_dim]``.

    ``backend`` runs :meth:`attend`: ``"torch"`` (gathers, the CPU engine's path), ``"triton"``
    or a reader's attention function; K/V writes and block copies always use the shipped
    kernels. ``check=False`` skips validating each step's slots and tables (the engine
    checks its input once, at ``add_request``).
    """

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None, *,
                 backend: str | AttentionFn = "torch", check: bool = True) -> None:
        for name, value in (("num_layers", num_layers), ("num_blocks", num_blocks), ("block_size", block_size),
                            ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
            check_whole(name, value, 1)
        if dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"dtype {dtype} is not supported; choose one of {', '.join(map(str, SUPPORTED_DTYPES))}")
        if not callable(backend):
            check_backend(backend)
        self.device = torch.device(device) if device is not None else runtime.device()
        self.dtype = dtype
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        # Zeros, not empty: a bug that reads an unwritten slot then gives a stable wrong answer.
        self.k_caches: list[torch.Tensor] = [torch.zeros(shape, dtype=dtype, device=self.device)
                                             for _ in range(num_layers)]
        self.v_caches: list[torch.Tensor] = [torch.zeros(shape, dtype=dtype, device=self.device)
                                             for _ in range(num_layers)]
        self.backend = backend
        self.kernel_backend: str = backend if isinstance(backend, str) else "triton"
        self.check = check
        self.kernels: dict[str, str] = {}   # phase ("prefill" / "decode") -> the attention kernel that ran
        self.scale = head_dim ** -0.5
        self._plan: tuple[StepMetadata, GatherPlan] | None = None   # the step's gather indices, for every layer
        self._fresh: tuple[int, StepMetadata, torch.Tensor, torch.Tensor] | None = None   # the layer's K/V just written

    @classmethod
    def for_model(cls, config: Any, num_blocks: int, block_size: int = 16, **kwargs: Any) -> "PagedKVCache":
        """A cache shaped for a model's ``config`` (its ``num_layers``, ``num_kv_heads``, ``head_dim``)."""
        return cls(config.num_layers, num_blocks, block_size, config.num_kv_heads, config.head_dim, **kwargs)

    @classmethod
    def from_budget(cls, budget_bytes: int, num_layers: int, block_size: int, num_kv_heads: int, head_dim: int,
                    dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> "PagedKVCache":
        """As many whole blocks as ``budget_bytes`` holds (K and V of every layer counted)."""
        check_whole("budget_bytes", budget_bytes, 1)
        if dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"dtype {dtype} is not supported; choose one of {', '.join(map(str, SUPPORTED_DTYPES))}")
        per_block = block_bytes(num_layers, block_size, num_kv_heads, head_dim, dtype)
        if budget_bytes < per_block:
            raise ValueError(f"a budget of {budget_bytes} bytes is smaller than one block ({per_block} bytes "
                             f"for {num_layers} layers x K and V x {block_size} tokens)")
        return cls(num_layers, budget_bytes // per_block, block_size, num_kv_heads, head_dim, dtype, device)

    # --- shape and size ---------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.k_caches)

    @property
    def num_blocks(self) -> int:
        return self.k_caches[0].shape[0]

    @property
    def block_size(self) -> int:
        return self.k_caches[0].shape[1]

    @property
    def num_kv_heads(self) -> int:
        return self.k_caches[0].shape[2]

    @property
    def head_dim(self) -> int:
        return self.k_caches[0].shape[3]

    @property
    def bytes_per_block(self) -> int:
        return block_bytes(self.num_layers, self.block_size, self.num_kv_heads, self.head_dim, self.dtype)

    @property
    def bytes(self) -> int:
        """Total memory of every K and V tensor."""
        return self.num_blocks * self.bytes_per_block

    # --- chapter 3: writes and reads by slot and table ---------------------------------
    def _layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not is_whole(layer) or not 0 <= layer < self.num_layers:
            raise IndexError(f"layer {layer!r} is out of range for a cache of {self.num_layers} layers")
        return self.k_caches[layer], self.v_caches[layer]

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor,
              backend: str = "torch", *, check: bool = True) -> None:
        """Write ``k``, ``v`` (``[N, num_kv_heads, head_dim]``) of ``layer`` at ``slot_mapping`` (-1 skips)."""
        k_cache, v_cache = self._layer(layer)
        store_kv(k, v, k_cache, v_cache, slot_mapping, backend, check=check)

    def gather(self, layer: int, block_table: Sequence[int] | torch.Tensor,
               seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One sequence's contiguous K and V, ``[seq_len, num_kv_heads, head_dim]`` each."""
        k_cache, v_cache = self._layer(layer)
        return gather_kv(k_cache, block_table, seq_len), gather_kv(v_cache, block_table, seq_len)

    def decode_attention(self, layer: int, q: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor,
                         **kwargs: Any) -> torch.Tensor:
        """:func:`pagedkv_edu.attention.paged_decode_attention` over ``layer``'s K and V."""
        k_cache, v_cache = self._layer(layer)
        return paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, **kwargs)

    def copy_blocks(self, pairs: Sequence[tuple[int, int]], backend: str | None = None) -> None:
        """Copy-on-write's data move: for every layer, K and V of block ``src`` into block ``dst``.

        ``pairs`` come from :meth:`BlockManager.take_copies`; all sources are read before any
        destination is written. The pairs are checked and turned into index tensors once, for every layer.
        """
        backend = self.kernel_backend if backend is None else backend   # never a reader's attention function
        check_backend(backend)
        check_copy_pairs(pairs, self.num_blocks)
        if not pairs:
            return
        src, dst, overlapping = copy_indices(pairs, self.device)
        copy = copy_blocks_torch if backend == "torch" or overlapping else copy_blocks_triton
        for k_cache, v_cache in zip(self.k_caches, self.v_caches):
            copy(k_cache, v_cache, src, dst)

    # --- chapter 5: what the decoder asks, per layer -----------------------------------
    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, meta: StepMetadata) -> None:
        """Store the step's K/V (``[num_tokens, num_kv_heads, head_dim]``) of ``layer`` at their slots."""
        self.store(layer, k, v, meta.slot_mapping, self.kernel_backend, check=self.check and layer == 0)
        self._fresh = (layer, meta, k, v)

    def attend(self, layer: int, q: torch.Tensor, meta: StepMetadata) -> torch.Tensor:
        """Each query's attention over its sequence's cached K/V, ``[num_tokens, num_heads, head_dim]``.

        ``"triton"`` and a reader's function go through :func:`~pagedkv_edu.attention.paged_attention`;
        ``"torch"`` is :func:`~pagedkv_edu.attention.reference.paged_attention_torch` with the step's
        gather plan, built at its first layer. Records the kernel that ran in ``self.kernels``
        under "decode" (every sequence brings one token) or "prefill", once per step.
        """
        k_cache, v_cache = self.k_caches[layer], self.v_caches[layer]
        if self.backend != "torch":
            if layer == 0:
                self.kernels["decode" if meta.is_decode else "prefill"] = kernel_name(meta.query_lens, self.backend)
            return paged_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens_tensor, meta.query_start_loc,
                                   self.scale, self.backend, check=self.check and layer == 0,
                                   max_query_len=meta.max_query_len)
        if self._plan is None or self._plan[0] is not meta:
            self.kernels["decode" if meta.is_decode else "prefill"] = "torch-gather"
            self._plan = (meta, gather_plan(meta.block_tables, meta.seq_lens, meta.query_lens, self.block_size,
                                            self.dtype))
        fresh = self._fresh if self._fresh is not None and self._fresh[0] == layer and self._fresh[1] is meta else None
        return paged_attention_torch(q, k_cache, v_cache, meta.block_tables, meta.seq_lens_tensor,
                                     meta.query_start_loc, self.scale, check=False, plan=self._plan[1],
                                     fresh=None if fresh is None else (fresh[2], fresh[3]), scrub=False)

    def __repr__(self) -> str:
        return (f"PagedKVCache(num_layers={self.num_layers}, num_blocks={self.num_blocks}, "
                f"block_size={self.block_size}, num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
                f"dtype={self.dtype}, device={self.device}, bytes={self.bytes})")


class HostKVCache:
    """Host copies of a paged cache's K/V: per layer ``[num_blocks, block_size, num_kv_heads, head_dim]`` on the CPU."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32) -> None:
        for name, value in (("num_layers", num_layers), ("num_blocks", num_blocks)):
            check_whole(name, value, 1)
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        pin = torch.cuda.is_available()   # page-locked host memory: the copies can run at full PCIe speed
        self.k_caches = [torch.zeros(shape, dtype=dtype, pin_memory=pin) for _ in range(num_layers)]
        self.v_caches = [torch.zeros(shape, dtype=dtype, pin_memory=pin) for _ in range(num_layers)]


def copy_blocks_between(src_caches: Sequence[torch.Tensor], dst_caches: Sequence[torch.Tensor],
                        pairs: Sequence[tuple[int, int]]) -> int:
    """Copy block ``s`` of every ``src_caches[l]`` into block ``d`` of ``dst_caches[l]``; returns the copies made.

    One copy per block per tensor, as a swap does over PCIe: ``len(pairs) * len(src_caches)``
    copies, each ``block_size * num_kv_heads * head_dim`` elements. Pass the K and the V lists
    one after the other (or concatenated).
    """
    if len(src_caches) != len(dst_caches):
        raise ValueError(f"{len(src_caches)} source tensors but {len(dst_caches)} destinations")
    for src, dst in zip(src_caches, dst_caches):
        for s, d in pairs:
            dst[d].copy_(src[s], non_blocking=True)
    return len(pairs) * len(src_caches)
