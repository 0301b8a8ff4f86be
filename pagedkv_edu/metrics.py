"""The book's two ratios, defined once: the prefix hit rate (chapter 8) and KV utilisation (chapter 1)."""

from __future__ import annotations


def hit_rate(hit_tokens: int, prompt_tokens: int) -> float:
    """Prompt tokens found in a prefix cache over the prompt tokens looked up, each prompt once (vLLM's
    measure); 0.0 when nothing was looked up."""
    return hit_tokens / prompt_tokens if prompt_tokens else 0.0


def utilisation(stored_tokens: int, held_slots: int) -> float:
    """Of the K/V slots held by sequences, the share holding a token (the paper's 20.4-38.2% before vLLM);
    1.0 when nothing is held, since nothing is wasted."""
    return stored_tokens / held_slots if held_slots else 1.0
