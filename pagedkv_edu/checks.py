"""Argument checks shared by every layer: sizes, counts and token ids.

A bool is never a size (``True == 1`` would build a one-block pool), and a token id must fit
the prefix cache's little-endian int64. This module imports nothing from the package.
"""

from __future__ import annotations

from collections.abc import Iterable
from numbers import Integral
from typing import Any

MAX_TOKEN_ID = 2**63 - 1
"""Largest token id the prefix cache can hash (int64); real vocabularies stop near 2**18."""


def is_whole(value: Any) -> bool:
    """An ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_whole(name: str, value: Any, minimum: int = 0, maximum: int | None = None) -> int:
    """``value`` if it is a whole number in ``[minimum, maximum]``; otherwise ``ValueError`` naming ``name``.

    ``minimum=1`` is a size that must be positive; the default 0 is a count.
    """
    if not is_whole(value) or value < minimum or (maximum is not None and value > maximum):
        bound = f"in {minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise ValueError(f"{name} must be a whole number {bound}, got {_short(value)}")
    return value


def check_token_ids(token_ids: Iterable[Any], name: str = "token_ids") -> list[int]:
    """The ids as a list of ``int``, after checking each is a whole number in ``0..MAX_TOKEN_ID``.

    NumPy integers are accepted (a tokenizer may return them) and converted; bools are not.
    """
    if isinstance(token_ids, (str, bytes)) or not isinstance(token_ids, Iterable):
        raise ValueError(f"{name} must be a sequence of token ids, got {_short(token_ids)}")
    ids = list(token_ids)
    if set(map(type, ids)) <= {int} and (not ids or 0 <= min(ids) and max(ids) <= MAX_TOKEN_ID):
        return ids       # the common case, checked at C speed: plain ints (no bools) in range
    for i, token in enumerate(ids):
        if not isinstance(token, Integral) or isinstance(token, bool) or not 0 <= token <= MAX_TOKEN_ID:
            raise ValueError(f"{name}[{i}] must be a token id (a whole number in 0..2**63-1), got {_short(token)}")
    return [int(token) for token in ids]


def _short(value: Any) -> str:
    """``repr(value)``, cut to 60 characters: a 400-digit number is named, not printed whole."""
    if is_whole(value) and value.bit_length() > 192:
        return f"an integer of {value.bit_length()} bits"     # repr() of a huge int is slow, or refused
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}...({len(text)} characters)"
