"""Reference solutions to chapter 8's exercises: the hash chain, the checked lookup, the free-queue order."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

HashFn = Callable[[Hashable, tuple[int, ...]], Hashable]


def block_hashes(token_ids: Sequence[int], block_size: int, hash_fn: HashFn) -> list[Hashable]:
    """The hash of every full block, ``hash_fn(parent_hash, block_tokens)``; the first block's parent is None.

    Through the chain each hash names the whole prefix up to the end of its block. A partly
    filled last block has no hash: it is still being written.
    """
    hashes: list[Hashable] = []
    parent = None
    for end in range(block_size, len(token_ids) + 1, block_size):
        parent = hash_fn(parent, tuple(token_ids[end - block_size:end]))
        hashes.append(parent)
    return hashes


def cached_prefix_blocks(token_ids: Sequence[int], block_size: int, hash_fn: HashFn,
                         table: Mapping[Hashable, int],
                         holds: Mapping[int, tuple[Hashable, tuple[int, ...]]]) -> list[int]:
    """The blocks of the longest cached prefix of full blocks, leaving at least one token to compute.

    ``table`` maps a hash to the block registered under it, and may be stale; ``holds`` says
    what each block holds now, ``(parent_hash, block_tokens)``. A block counts only if it holds
    exactly the pair just hashed: a different pair is a collision or a block reused since.
    """
    blocks: list[int] = []
    parent = None
    for end in range(block_size, len(token_ids), block_size):    # end < len: the last token stays
        tokens = tuple(token_ids[end - block_size:end])
        block_hash = hash_fn(parent, tokens)
        block = table.get(block_hash)
        if block is None or holds.get(block) != (parent, tokens):
            break
        blocks.append(block)
        parent = block_hash
    return blocks


def free_blocks(free_queue: list[int], ref_counts: list[int], blocks: Sequence[int], cached: set[int]) -> None:
    """Drop one reference to each of ``blocks`` (first to be evicted first), as vLLM v1 at ``c59cb79``.

    Blocks that become free keep their order: those holding nothing findable go to the front
    of the queue (reused first), the ``cached`` ones to the back (kept longest).
    """
    fresh, kept = [], []
    for block in blocks:
        ref_counts[block] -= 1
        if ref_counts[block] == 0:
            (kept if block in cached else fresh).append(block)
    free_queue[:0] = fresh
    free_queue.extend(kept)


def touch(free_queue: list[int], ref_counts: list[int], block: int) -> None:
    """A cache hit takes a reference; a free block is pulled out of the middle of the queue first."""
    if ref_counts[block] == 0:
        free_queue.remove(block)
    ref_counts[block] += 1
