"""Swapping: a preempted sequence's blocks go to host memory and come back (the paper's §4.5; chapter 9).

:class:`SwapSpace` keeps the host block ids and each swapped sequence's host table;
:class:`HostKVCache` and :func:`copy_blocks_between` hold and move the K/V, one block of one
layer per copy (vLLM's ``swap_blocks``); :func:`preemption_cost` models recompute against swap
by block size, the shape of the paper's Fig. 19.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from .block_pool import BlockPool, OutOfBlocksError
from .block_table import blocks_needed
from .checks import check_whole


class SwapSpace:
    """``num_blocks`` host blocks of ``block_size`` slots, and the host blocks of every swapped sequence."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.pool = BlockPool(num_blocks, block_size)
        self.tables: dict[Hashable, tuple[list[int], int]] = {}   # seq -> (host block ids, tokens they hold)
        self.blocks_out = 0    # blocks copied to the host so far
        self.blocks_in = 0     # blocks copied back

    @property
    def block_size(self) -> int:
        return self.pool.block_size

    def can_swap_out(self, num_tokens: int) -> bool:
        return blocks_needed(num_tokens, self.block_size) <= self.pool.num_free

    def swap_out(self, seq_id: Hashable, device_block_ids: Sequence[int], num_tokens: int) -> list[tuple[int, int]]:
        """Take host blocks for a sequence's ``device_block_ids``; returns the (device, host) copies to make."""
        if seq_id in self.tables:
            raise KeyError(f"sequence {seq_id!r} is already swapped out")
        if len(device_block_ids) != blocks_needed(num_tokens, self.block_size):
            raise ValueError(f"sequence {seq_id!r}: {len(device_block_ids)} blocks for {num_tokens} tokens")
        if len(device_block_ids) > self.pool.num_free:
            raise OutOfBlocksError(f"swapping {seq_id!r} out needs {len(device_block_ids)} host blocks; "
                                   f"{self.pool.num_free} are free")
        host = self.pool.allocate(len(device_block_ids))
        self.tables[seq_id] = (host, num_tokens)
        self.blocks_out += len(host)
        return list(zip(device_block_ids, host))

    def num_tokens(self, seq_id: Hashable) -> int:
        """Tokens whose K/V a swapped sequence holds on the host."""
        return self.tables[seq_id][1]

    def swap_in(self, seq_id: Hashable, device_block_ids: Sequence[int]) -> list[tuple[int, int]]:
        """Give a sequence's host blocks back; returns the (host, device) copies into ``device_block_ids``."""
        host = self.tables[seq_id][0]
        if len(device_block_ids) < len(host):
            raise ValueError(f"sequence {seq_id!r} holds {len(host)} host blocks; {len(device_block_ids)} device "
                             f"blocks cannot take them")
        self.drop(seq_id)
        self.blocks_in += len(host)
        return list(zip(host, device_block_ids))

    def drop(self, seq_id: Hashable) -> None:
        """Forget a swapped sequence (it finished or failed while swapped out)."""
        host, _ = self.tables.pop(seq_id)
        self.pool.free_all(host)


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


# --- the cost model of the paper's Fig. 19 ---------------------------------------------------------
@dataclass(frozen=True)
class Hardware:
    """What the model needs of a machine; the defaults are an A100-40GB on PCIe 4.0 (the paper's GPU).

    ``pcie_bytes_per_s``: achieved host<->device bandwidth of large pinned copies (PCIe 4.0 x16
    peaks at 32 GB/s; 25 GB/s is typical). ``copy_latency_s``: fixed cost of one copy call
    (launch and DMA setup, a few microseconds). ``prefill_flops_per_s``: achieved fp16 throughput of
    a prefill (a fraction of the A100's 312 TFLOP/s peak). All three are assumptions, not measurements.
    """

    pcie_bytes_per_s: float = 25e9
    copy_latency_s: float = 5e-6
    prefill_flops_per_s: float = 150e12


@dataclass(frozen=True)
class PreemptionCost:
    """Seconds to bring back ``num_tokens`` of one preempted sequence, each way."""

    block_size: int
    recompute_s: float      # a prefill of the tokens again
    swap_out_s: float       # its blocks to the host
    swap_in_s: float        # and back

    @property
    def swap_s(self) -> float:
        return self.swap_out_s + self.swap_in_s


def preemption_cost(block_size: int, num_tokens: int, *, num_params: float, num_layers: int,
                    kv_bytes_per_token: int, hw: Hardware = Hardware()) -> PreemptionCost:
    """Recompute against swap for one sequence of ``num_tokens`` at ``block_size``.

    Recompute: one prefill, ``2 * num_params`` FLOPs per token, whatever the block size.
    Swap, each way: one copy per block per layer for K and one for V, each paying
    ``copy_latency_s`` plus its bytes over the PCIe bandwidth. Small blocks mean many small
    copies, and the fixed cost dominates: the shape of the paper's Fig. 19(a).
    """
    check_whole("block_size", block_size, 1)
    check_whole("num_tokens", num_tokens, 1)
    copies = 2 * num_layers * blocks_needed(num_tokens, block_size)
    bytes_moved = blocks_needed(num_tokens, block_size) * block_size * kv_bytes_per_token   # whole blocks move
    one_way = copies * hw.copy_latency_s + bytes_moved / hw.pcie_bytes_per_s
    recompute = 2 * num_params * num_tokens / hw.prefill_flops_per_s
    return PreemptionCost(block_size, recompute, one_way, one_way)


def preemption_costs(block_sizes: Sequence[int], num_tokens: int, **model: object) -> list[PreemptionCost]:
    """:func:`preemption_cost` at every block size (the x axis of Fig. 19)."""
    return [preemption_cost(b, num_tokens, **model) for b in block_sizes]   # type: ignore[arg-type]


OPT_13B = {"num_params": 13e9, "num_layers": 40, "kv_bytes_per_token": 2 * 40 * 5120 * 2}
"""OPT-13B in fp16, the paper's model for Fig. 19: 40 layers, hidden size 5,120 (800 KiB of K/V per token)."""
