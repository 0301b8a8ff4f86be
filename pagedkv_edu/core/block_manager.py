"""The block manager: a pool, and the block table of every sequence that holds memory (chapters 2, 6-9).

Each decision the scheduler makes is one call that either does it and returns the new block ids,
or returns None and changes nothing (vLLM's ``allocate_slots``): :meth:`~BlockManager.admit` a
sequence's first tokens (after one :meth:`~BlockManager.lookup` of the prefix cache),
:meth:`~BlockManager.grow` it, :meth:`~BlockManager.release` it. Chapter 7 adds
:meth:`~BlockManager.fork` and copy-on-write, chapter 8 the prefix cache, chapter 9 swapping.

A table holds block ids only. The token count is the sequence's record's
``num_computed_tokens``, read here and never written: ``admit(seq, n)`` and ``grow(seq, n)``
make room for tokens ``num_computed_tokens .. + n`` (from the hit's end, for a new sequence),
and the scheduler advances the count. Tables are keyed by the record itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..checks import check_token_ids, check_whole, is_whole
from ..specs import utilisation
from .block_pool import BlockPool
from .block_table import BlockTable, blocks_needed
from .prefix_cache import NO_HIT, ROOT_HASH, HashFn, PrefixCache, PrefixHit, hash_block
from .swap import SwapSpace


@dataclass(frozen=True)
class MemoryUsage:
    """What the KV memory holds now, in token slots; a shared block counts once."""

    stored_tokens: int   # slots holding a token's K/V
    held_slots: int      # slots of the blocks (or reservations) the sequences hold
    capacity: int        # every slot of the memory

    @property
    def utilisation(self) -> float:
        """Of the held slots, the share holding tokens (1.0 when nothing is held)."""
        return utilisation(self.stored_tokens, self.held_slots)

    @property
    def usage(self) -> float:
        """Share of the memory the sequences hold (vLLM's ``1 - free/total`` when nobody else holds blocks)."""
        return self.held_slots / self.capacity

    @property
    def waste_slots(self) -> int:
        """Held but empty slots: the unfilled tails of last blocks (a reservation's whole tail)."""
        return self.held_slots - self.stored_tokens


def memory_usage(block_size: int, capacity: int, tables: Iterable[tuple[Iterable[int], int]]) -> MemoryUsage:
    """The one definition of what tables hold: ``(block ids, tokens)`` per sequence, a shared block once.

    Every block is full but a last one, and the sharers of a partly filled last block hold the
    same tokens in it (the first to write copies it), so the stored tokens are the distinct
    blocks' slots less the empty tail of each distinct last block.
    """
    blocks: set[int] = set()
    tails: dict[int, int] = {}
    for ids, num_tokens in tables:
        ids = list(ids)
        blocks.update(ids)
        if ids and num_tokens % block_size:
            tails[ids[-1]] = block_size - num_tokens % block_size
    held = len(blocks) * block_size
    return MemoryUsage(held - sum(tails.values()), held, capacity)


@dataclass
class BlockCopies:
    """A step's block moves, in the order the runner makes them: each reads before the next writes."""

    swap_out: list[tuple[int, int]] = field(default_factory=list)   # (device, host): a victim's K/V to host memory
    copy: list[tuple[int, int]] = field(default_factory=list)       # (source, destination): copy-on-write
    swap_in: list[tuple[int, int]] = field(default_factory=list)    # (host, device): a swapped sequence back


class ManagerBase:
    """What every block manager shares, so that one written by a reader holds only its decisions.

    The state is ``held``, each holding sequence's record -> its block ids, over ``pool``. The
    base answers every question (tables, usage, fits, a prefix lookup) and offers the prefix
    cache the blocks a grant fills (:meth:`register`); a subclass makes the decisions:
    ``admit``, ``grow``, ``release`` (chapter 2) and ``fork`` (chapter 7). :class:`BlockManager`
    is the package's subclass; a reader's is graded against it and can take its place.
    """

    swap: SwapSpace | None = None

    def __init__(self, pool: BlockPool, max_seq_len: int | None = None, *, watermark_blocks: int = 0,
                 prefix_cache: Callable[[BlockPool], Any] | None = None) -> None:
        if not isinstance(pool, BlockPool):
            raise ValueError(f"a block manager needs a BlockPool, got {pool!r}")
        if max_seq_len is not None:
            check_whole("max_seq_len", max_seq_len, 1)
        check_whole("watermark_blocks", watermark_blocks)
        self.pool = pool
        self.max_seq_len = max_seq_len
        self.watermark_blocks = watermark_blocks
        self.prefix_cache = None if prefix_cache is None else prefix_cache(pool)
        self.held: dict[Any, list[int]] = {}      # a sequence's record -> its block ids
        self.copies = BlockCopies()                # the moves queued for the next forward pass

    @property
    def block_size(self) -> int:
        return self.pool.block_size

    # --- questions -----------------------------------------------------------------------
    def fits(self, num_tokens: int) -> bool:
        """Could a sequence of ``num_tokens`` ever be held (under ``max_seq_len``, with the pool to itself)?"""
        check_whole("num_tokens", num_tokens)
        return ((self.max_seq_len is None or num_tokens <= self.max_seq_len)
                and blocks_needed(num_tokens, self.block_size) <= self.pool.num_blocks)

    def lookup(self, seq: Any) -> PrefixHit:
        """The cached prefix a new sequence would start from. Takes no reference; changes nothing.

        Nothing without a prefix cache, without token ids, or for a sequence swapped out (its
        K/V come back from host memory instead).
        """
        cache = self.prefix_cache
        if cache is None or seq.prompt_token_ids is None or (self.swap is not None and seq in self.swap):
            return NO_HIT
        hashes = seq.block_hashes(cache.hasher, (seq.num_tokens - 1) // self.block_size)
        return cache.lookup(seq.token_ids, hashes)

    def fork(self, parent: Any, child: Any) -> None:
        raise ValueError(f"{type(self).__name__} does not share blocks: forking {parent.seq_id!r} needs fork "
                         f"(chapter 7)")

    def swap_out(self, seq: Any) -> bool:
        """No swap space here: preemption frees the victim's blocks instead (chapter 9 swaps)."""
        return False

    def take_copies(self) -> BlockCopies:
        """The block moves queued since the last call, to make before the next forward pass."""
        copies, self.copies = self.copies, BlockCopies()
        return copies

    # --- reading -------------------------------------------------------------------------
    def __contains__(self, seq: Any) -> bool:
        """Does ``seq`` hold device blocks?"""
        return seq in self.held

    def block_ids(self, seq: Any) -> list[int]:
        """A copy of ``seq``'s block table."""
        return list(self._table(seq))

    def table(self, seq: Any) -> BlockTable:
        """``seq``'s table with its token count, a copy (the picture chapter 2 prints)."""
        return BlockTable(self.block_size, list(self._table(seq)), seq.num_computed_tokens)

    @property
    def tables(self) -> dict[Any, BlockTable]:
        """Every held sequence's table by its id, in admission order (copies)."""
        return {seq.seq_id: self.table(seq) for seq in self.held}

    @property
    def sequences(self) -> list[Any]:
        """The records that hold device blocks, in admission order."""
        return list(self.held)

    def ref_count_of(self, seq: Any) -> list[int]:
        """Reference count of each block in ``seq``'s table (above 1: shared)."""
        return [self.pool.ref_counts[b] for b in self._table(seq)]

    def usage(self) -> MemoryUsage:
        return memory_usage(self.block_size, self.pool.capacity_tokens,
                            ((ids, seq.num_computed_tokens) for seq, ids in self.held.items()))

    # --- for the decisions ----------------------------------------------------------------
    def register(self, seq: Any, ids: list[int], start: int, end: int) -> None:
        """Offer the prefix cache the full blocks tokens ``start .. end`` fill, each block once, front to back.

        A block is offered only after its own parent block is the cached one (an equal block
        registered first keeps the hash), so no lookup reaches a block after another prefix.
        """
        cache, size = self.prefix_cache, self.block_size
        if cache is None or end // size <= start // size or seq.prompt_token_ids is None:
            return      # most decode steps fill no block
        hashes = seq.block_hashes(cache.hasher, end // size)
        for i in range(start // size, end // size):
            if i and ids[i - 1] not in cache:
                return
            cache.insert(ids[i], hashes[i], hashes[i - 1] if i else ROOT_HASH, seq.tokens(i * size, (i + 1) * size))

    def hash_new_blocks(self, seq: Any, start: int, end: int) -> None:
        """Hash the full blocks tokens ``start .. end`` will fill, checking their ids: call it before changing anything."""
        cache, size = self.prefix_cache, self.block_size
        if cache is None or end // size <= start // size or seq.prompt_token_ids is None:
            return
        first = max(start // size * size, seq.num_prompt_tokens)   # the prompt's ids were checked on the record
        if first < end // size * size:
            check_token_ids(seq.tokens(first, end // size * size), "output_token_ids")
        seq.block_hashes(cache.hasher, end // size)

    def check_new(self, seq: Any, n: Any, start: int) -> int:
        """``n``, after checking it is a whole count of tokens the record has and the memory could ever hold."""
        if not is_whole(n) or n < 0:
            raise ValueError(f"sequence {seq.seq_id!r}: the new tokens must be a whole number >= 0, got {n!r}")
        end = start + n
        if end > seq.num_tokens:
            raise ValueError(f"sequence {seq.seq_id!r} has {seq.num_tokens} tokens; {start} + {n} would be tokens "
                             f"it does not have")
        if (self.max_seq_len is not None and end > self.max_seq_len) or end > self.pool.capacity_tokens:
            raise ValueError(f"sequence {seq.seq_id!r}: {end} tokens can never be held (max_seq_len="
                             f"{self.max_seq_len}, {self.pool.num_blocks} blocks of {self.block_size})")
        return n

    def check_new_id(self, seq: Any) -> None:
        """Refuse a record that holds blocks already, or whose id another holding record has."""
        if seq in self.held:
            raise KeyError(f"sequence {seq.seq_id!r} holds blocks already: grow it")
        if any(s.seq_id == seq.seq_id for s in self.held):   # rare (an admission), and tables are named by id
            raise KeyError(f"another sequence named {seq.seq_id!r} holds blocks: sequence ids must be distinct")

    def _table(self, seq: Any) -> list[int]:
        try:
            return self.held[seq]
        except KeyError:
            name = getattr(seq, "seq_id", seq)
            raise KeyError(f"sequence {name!r} holds no blocks (never admitted, or already released)") from None

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.pool.num_blocks} blocks of {self.block_size}, {len(self.held)} "
                f"sequences, {self.pool.num_free} free)")


class BlockManager(ManagerBase):
    """The package's block manager: :class:`ManagerBase` with copy-on-write, a prefix cache and swapping.

    ``watermark_blocks`` stay free at admission while any sequence holds memory (room for the
    running to grow); ``max_seq_len`` caps a sequence's tokens; ``swap`` (a
    :class:`~pagedkv_edu.core.swap.SwapSpace`) lets the scheduler preempt by swapping.
    ``enable_prefix_caching`` builds a :class:`PrefixCache` hashing with ``hash_fn``;
    ``prefix_cache``, a function of the pool, builds another one instead (a reader's).
    """

    def __init__(self, num_blocks: int, block_size: int, max_seq_len: int | None = None, *,
                 enable_prefix_caching: bool = False, hash_fn: HashFn = hash_block, watermark_blocks: int = 0,
                 swap: SwapSpace | None = None, prefix_cache: Callable[[BlockPool], Any] | None = None) -> None:
        if swap is not None and swap.block_size != block_size:
            raise ValueError(f"the swap space's blocks hold {swap.block_size} tokens, the pool's {block_size}")
        if prefix_cache is None and enable_prefix_caching:
            prefix_cache = lambda pool: PrefixCache(pool, hash_fn)   # noqa: E731
        super().__init__(BlockPool(num_blocks, block_size), max_seq_len, watermark_blocks=watermark_blocks,
                         prefix_cache=prefix_cache)
        self.swap = swap

    @classmethod
    def over(cls, pool: BlockPool, max_seq_len: int | None = None) -> "BlockManager":
        """A manager over an existing pool (e.g. one built by ``BlockPool.from_free_order``)."""
        if not isinstance(pool, BlockPool):
            raise ValueError(f"BlockManager.over needs a BlockPool, got {pool!r}")
        manager = cls(1, pool.block_size, max_seq_len)
        manager.pool = pool
        return manager

    def blocks_to_grow(self, seq: Any, n: int) -> int:
        """Free blocks growing a held ``seq`` by ``n`` tokens takes: new ones, and one for a copy-on-write."""
        ids = self._table(seq)
        check_whole("n (tokens to grow by)", n)
        if -(-seq.num_computed_tokens // self.block_size) != len(ids):
            raise ValueError(f"sequence {seq.seq_id!r} holds {len(ids)} blocks of {self.block_size} but its record "
                             f"counts {seq.num_computed_tokens} tokens: the count changed without its memory")
        return -(-(seq.num_computed_tokens + n) // self.block_size) - len(ids) + self._must_copy(seq, ids, n)

    # --- a sequence's life: each call does it all, or returns None and changes nothing -------------
    def admit(self, seq: Any, num_new_tokens: int, hit: PrefixHit = NO_HIT) -> list[int] | None:
        """Blocks for a sequence that holds none: its cached prefix ``hit`` and ``num_new_tokens`` after it.

        A sequence swapped out gets fresh blocks for its K/V (queued to be copied back) and its
        new tokens. Returns its whole table, or None when the blocks and the watermark do not
        fit. The full blocks the new tokens fill become findable at once, so a sequence admitted
        later in the same step shares them (every layer writes the step's K/V before it attends).
        """
        self.check_new_id(seq)
        swapped = self.swap is not None and seq in self.swap
        start = seq.num_computed_tokens if swapped else hit.num_tokens
        end = start + self.check_new(seq, num_new_tokens, start)
        revived = sum(1 for b in hit.block_ids if self.pool.ref_counts[b] == 0)
        fresh = blocks_needed(end, self.block_size) - len(hit.block_ids)
        watermark = self.watermark_blocks if self.held else 0
        if fresh + revived + watermark > self.pool.num_free:
            return None
        if not swapped:
            self.hash_new_blocks(seq, start, end)
        for block_id in hit.block_ids:          # first, so allocating the rest cannot evict them
            self.pool.touch(block_id)
        ids = list(hit.block_ids) + self.pool.allocate(fresh)
        self.held[seq] = ids
        if swapped:
            self.copies.swap_in += self.swap.swap_in(seq, ids)   # type: ignore[union-attr]
        elif self.prefix_cache is not None and seq.prompt_token_ids is not None:
            self.prefix_cache.record(seq.num_tokens, hit.num_tokens)
        self.register(seq, ids, start, end)
        return list(ids)

    def grow(self, seq: Any, num_new_tokens: int) -> list[int] | None:
        """Room for ``num_new_tokens`` more tokens of a held sequence: the new block ids (often none), or None.

        If its last block is partly filled and shared, it first swaps it for a fresh block (the
        first id returned, at the table's old last index) and queues the copy: copy-on-write.
        """
        ids = self._table(seq)
        start = seq.num_computed_tokens
        end = start + self.check_new(seq, num_new_tokens, start)
        if self.blocks_to_grow(seq, num_new_tokens) > self.pool.num_free:
            return None
        self.hash_new_blocks(seq, start, end)
        new: list[int] = []
        if self._must_copy(seq, ids, num_new_tokens):
            shared, (own,) = ids[-1], self.pool.allocate(1)
            self.pool.free(shared)              # one reference fewer; the other sequences keep it unchanged
            ids[-1] = own
            self.copies.copy.append((shared, own))
            new.append(own)
        appended = self.pool.allocate(-(-end // self.block_size) - len(ids))
        ids += appended
        self.register(seq, ids, start, end)
        return new + appended

    def fork(self, parent: Any, child: Any) -> None:
        """A child that shares every block of ``parent`` (each gains a reference); nothing is copied yet."""
        ids = self._table(parent)
        self.check_new_id(child)
        for block_id in ids:
            self.pool.incref(block_id)
        self.held[child] = list(ids)

    def release(self, seq: Any) -> list[int]:
        """Give back every block of ``seq`` (its host blocks, if swapped out); returns them, last block first.

        Tail first: in chapter 8's prefix cache, the end of a sequence is evicted before its shared
        beginning. Shared blocks lose one reference and stay with their other holders. A queued
        copy into a block that is now free is dropped: nobody will read it.
        """
        if seq not in self.held:
            if self.swap is not None and seq in self.swap:
                self.swap.drop(seq)
                return []
            self._table(seq)       # raises, naming it
        released = self.held.pop(seq)[::-1]
        self.pool.free_all(released)
        self.copies.copy = [(src, dst) for src, dst in self.copies.copy if self.pool.ref_counts[dst] > 0]
        return released

    def swap_out(self, seq: Any) -> bool:
        """Move a held sequence's blocks to host blocks (queued to be copied before anything reuses them).

        False, changing nothing, when there is no swap space or it has too few free blocks.
        """
        ids = self._table(seq)
        if self.swap is None or not self.swap.can_hold(len(ids)):
            return False
        self.copies.swap_out += self.swap.swap_out(seq, ids)
        self.release(seq)   # its device blocks; the host ones stay until it is admitted again
        return True

    def _must_copy(self, seq: Any, ids: list[int], n: int) -> bool:
        """Growing by ``n`` tokens writes into a last block that another sequence can see."""
        return n > 0 and seq.num_computed_tokens % self.block_size != 0 and self.pool.ref_counts[ids[-1]] > 1


__all__ = ["BlockCopies", "BlockManager", "ManagerBase", "MemoryUsage", "memory_usage"]
