"""Which token sits in each slot of a paged cache, as text (chapter 3's write through the slot mapping).

Chapter 3 fills every token's K with the token's own index in the batch, so the cache can be read
back as names: a wrong slot mapping then shows up as a token in the wrong block or offset, and a
padding token (slot -1) as nothing written at all. Never-written slots hold NaN and print as '.'.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def cache_contents(k_cache: torch.Tensor, names: Sequence[str], slots: Sequence[int]) -> str:
    """One line per block that ``slots`` touch, in block order: the name of the token in each of its slots.

    ``k_cache`` is ``[num_blocks, block_size, kv_heads, head_dim]`` whose written rows hold the index
    of their token in ``names`` (read from head 0, dimension 0); ``slots`` are the flat slots written,
    -1 for padding, which touches no block.
    """
    block_size = k_cache.shape[1]
    lines = []
    for block in sorted({s // block_size for s in slots if s >= 0}):
        row = [names[int(v)] if v == v else "." for v in k_cache[block, :, 0, 0].tolist()]   # v != v: NaN
        lines.append(f"  block {block:2d}: " + " ".join(f"{r:>3s}" for r in row))
    return "\n".join(lines)
