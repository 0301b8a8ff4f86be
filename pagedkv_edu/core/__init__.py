"""The serving core a reader can rewrite: pure Python, no tensors (chapters 2, 6, 7, 8).

* :mod:`.request`: one record per sequence, with its only token count (``num_computed_tokens``);
* :mod:`.block_pool`, :mod:`.block_table`: blocks, reference counts, the free queue; one table alone;
* :mod:`.block_manager`: admit / grow / release / fork, each one call that says no without changing anything;
* :mod:`.prefix_cache`: the hash chain, the checked lookup, lazy eviction;
* :mod:`.scheduler`: the policy (vLLM's two loops) and the scheduler that runs it;
* :mod:`.swap`: the host blocks of swapped-out sequences;
* :mod:`.protocols`: the seams, what a reader's part must answer to take the shipped part's place.
"""
