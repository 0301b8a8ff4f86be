"""Moved to :mod:`pagedkv_edu.bench.batch`; this name stays so that chapters 3 and 4 still import it.

The builder uses the allocator, so the kernels' package does not load it: this module only
re-exports it for readers' code (``from pagedkv_edu.attention.batch import random_paged_batch``).
"""

from ..bench.batch import PagedBatch, random_paged_batch

__all__ = ["PagedBatch", "random_paged_batch"]
