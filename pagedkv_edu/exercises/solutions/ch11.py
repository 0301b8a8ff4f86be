"""Reference solution for chapter 11 (prefix-aware routing): the hybrid decision of SGLang's cache-aware router."""

from __future__ import annotations


def hybrid_choice(loads: list[int], matches: list[int], prompt_len: int, cache_threshold: float,
                  abs_threshold: int, rel_threshold: float) -> int:
    """Least loaded when imbalanced (both thresholds exceeded), else the longest match if it is long enough."""
    least = loads.index(min(loads))
    if max(loads) - min(loads) > abs_threshold and max(loads) > rel_threshold * min(loads):
        return least
    best = matches.index(max(matches))
    return best if matches[best] / prompt_len > cache_threshold else least
