"""Reference solution to chapter 5's exercise: the layout of one forward step."""

from __future__ import annotations

from collections.abc import Sequence


def step_layout(block_tables: Sequence[Sequence[int]], seq_lens: Sequence[int], query_lens: Sequence[int],
                block_size: int) -> tuple[list[int], list[int], list[int]]:
    """Positions, cache slots and logits rows of a step's tokens, laid end to end.

    Sequence ``i`` holds ``seq_lens[i]`` tokens after the step, of which the last
    ``query_lens[i]`` are new: their positions are ``seq_lens[i] - query_lens[i] .. seq_lens[i] - 1``.
    """
    positions: list[int] = []
    slots: list[int] = []
    last_token_index: list[int] = []
    for table, seq_len, new in zip(block_tables, seq_lens, query_lens):
        for pos in range(seq_len - new, seq_len):
            positions.append(pos)
            slots.append(table[pos // block_size] * block_size + pos % block_size)
        last_token_index.append(len(positions) - 1)
    return positions, slots, last_token_index
