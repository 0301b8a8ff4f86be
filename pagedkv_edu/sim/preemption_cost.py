"""Recompute against swap, by block size: the cost model of the paper's Fig. 19 (chapter 9).

A preempted sequence comes back either by a prefill of its tokens again (recompute) or by
copying its blocks back from host memory (swap, :class:`~pagedkv_edu.core.swap.SwapSpace`).
The model prices both on an assumed machine; the simulator counts what each mode moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..checks import check_whole
from ..core.block_table import blocks_needed


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
