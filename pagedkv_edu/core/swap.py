"""Swapping's bookkeeping: a preempted sequence's blocks go to host memory and come back (the paper's §4.5; chapter 9).

:class:`SwapSpace` keeps the host block ids of every swapped sequence; the sequence's token
count stays on its record (its K/V are kept, only moved). The K/V themselves move in
:class:`~pagedkv_edu.attention.kv_cache.HostKVCache`; the price of recompute against swap is
:mod:`pagedkv_edu.sim.preemption_cost`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .block_pool import BlockPool


class SwapSpace:
    """``num_blocks`` host blocks of ``block_size`` slots, and the host blocks of every swapped sequence."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.pool = BlockPool(num_blocks, block_size)
        self.tables: dict[Any, list[int]] = {}   # a swapped sequence's record -> its host block ids
        self.blocks_out = 0    # blocks copied to the host so far
        self.blocks_in = 0     # blocks copied back

    @property
    def block_size(self) -> int:
        return self.pool.block_size

    def __contains__(self, seq: Any) -> bool:
        return seq in self.tables

    def can_hold(self, num_blocks: int) -> bool:
        return num_blocks <= self.pool.num_free

    def swap_out(self, seq: Any, device_block_ids: Sequence[int]) -> list[tuple[int, int]]:
        """Take host blocks for ``seq``'s device blocks; returns the (device, host) copies to make.

        The caller asks :meth:`can_hold` first; this refuses before changing anything.
        """
        if seq in self.tables:
            raise KeyError(f"sequence {seq.seq_id!r} is already swapped out")
        if not self.can_hold(len(device_block_ids)):
            raise ValueError(f"swapping {seq.seq_id!r} out needs {len(device_block_ids)} host blocks; "
                             f"{self.pool.num_free} are free")
        host = self.pool.allocate(len(device_block_ids))
        self.tables[seq] = host
        self.blocks_out += len(host)
        return list(zip(device_block_ids, host))

    def swap_in(self, seq: Any, device_block_ids: Sequence[int]) -> list[tuple[int, int]]:
        """Give ``seq``'s host blocks back; returns the (host, device) copies into the first ``device_block_ids``."""
        host = self.tables[seq]
        if len(device_block_ids) < len(host):
            raise ValueError(f"sequence {seq.seq_id!r} holds {len(host)} host blocks; {len(device_block_ids)} device "
                             f"blocks cannot take them")
        self.drop(seq)
        self.blocks_in += len(host)
        return list(zip(host, device_block_ids))

    def drop(self, seq: Any) -> None:
        """Forget a swapped sequence (it came back, finished or failed while swapped out)."""
        self.pool.free_all(self.tables.pop(seq))
