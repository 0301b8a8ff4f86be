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
from ..checks import check_whole


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
