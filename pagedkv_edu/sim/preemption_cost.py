"""Recompute against swap, by block size: the cost model of the paper's Fig. 19 (chapter 9).

A preempted sequence comes back either by a prefill of its tokens again (recompute) or by
copying its blocks back from host memory (swap, :class:`~pagedkv_edu.core.swap.SwapSpace`).
The model prices both on a :class:`~pagedkv_edu.sim.decode_cost.Device` (by default the paper's
A100 on PCIe, the one table of assumptions the book's timing chapters share); the simulator counts
what each mode moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..checks import check_whole
from ..core.block_table import blocks_needed
from .decode_cost import A100_PCIE, Device


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
                    kv_bytes_per_token: int, device: Device = A100_PCIE) -> PreemptionCost:
    """Recompute against swap for one sequence of ``num_tokens`` at ``block_size``.

    Recompute: one prefill, ``2 * num_params`` FLOPs per token at the device's achieved FLOP/s,
    whatever the block size. Swap, each way: one copy per block per layer for K and one for V,
    each paying ``copy_latency_s`` plus its bytes over the host link. Small blocks mean many small
    copies, and the fixed cost dominates: the shape of the paper's Fig. 19(a).
    """
    check_whole("block_size", block_size, 1)
    check_whole("num_tokens", num_tokens, 1)
    copies = 2 * num_layers * blocks_needed(num_tokens, block_size)
    bytes_moved = blocks_needed(num_tokens, block_size) * block_size * kv_bytes_per_token   # whole blocks move
    one_way = copies * device.copy_latency_s + bytes_moved / device.host_bandwidth
    recompute = 2 * num_params * num_tokens / device.achieved_flops
    return PreemptionCost(block_size, recompute, one_way, one_way)


def preemption_costs(block_sizes: Sequence[int], num_tokens: int, **model: object) -> list[PreemptionCost]:
    """:func:`preemption_cost` at every block size (the x axis of Fig. 19)."""
    return [preemption_cost(b, num_tokens, **model) for b in block_sizes]   # type: ignore[arg-type]


OPT_13B = {"num_params": 13e9, "num_layers": 40, "kv_bytes_per_token": 2 * 40 * 5120 * 2}
"""OPT-13B in fp16, the paper's model for Fig. 19: 40 layers, hidden size 5,120 (800 KiB of K/V per token)."""
