"""The Triton interpreter's integer-overflow checks, switched off for long model runs (chapter 5).

Under ``TRITON_INTERPRET=1`` every int32 add, subtract and multiply is redone in int64 and
checked against int32's range; compiled code checks only when built with ``debug=True``. On
the kernels of this book that check costs up to about a third of the interpreter's time. The
graders and tests keep it on; :func:`no_overflow_checks` turns it off for a block of code,
such as a model generating dozens of tokens through kernels those checks have already passed.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from .. import runtime


@contextlib.contextmanager
def no_overflow_checks() -> Iterator[None]:
    """Inside the block, the interpreter skips its int32 overflow checks (nothing changes when compiled)."""
    if runtime.BACKEND == "cuda":
        yield
        return
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    before = builder.options
    builder.options = dataclasses.replace(before, sanitize_overflow=False)
    try:
        yield
    finally:
        builder.options = before
