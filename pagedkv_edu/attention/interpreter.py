"""The Triton interpreter's integer-overflow checks, switched off for long model runs (chapter 5).

The interpreter redoes every int32 operation in int64 to check its range, and re-patches
``triton.language`` on every device-function call: together up to two thirds of a decode launch.
The graders and tests keep both; a model generating through kernels they passed need not.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from .. import runtime


@contextlib.contextmanager
def no_overflow_checks() -> Iterator[None]:
    """Inside the block, the interpreter skips its int32 overflow checks and re-patching on device-function
    calls (nothing changes when compiled)."""
    if runtime.BACKEND == "cuda":
        yield
        return
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    before = builder.options
    device_call = interpreter.InterpretedFunction.__call__

    patched: set[object] = set()

    def call_without_repatching(self: "interpreter.InterpretedFunction", *args: object, **kwargs: object) -> object:
        # What the interpreter's own __call__ does, but _patch_lang(self.fn) only on a function's first
        # call: a device function's patches are never undone, so later calls find them in place.
        if self.fn not in patched:
            interpreter._patch_lang(self.fn)
            patched.add(self.fn)
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise interpreter.InterpreterError(repr(e)) from e

    builder.options = dataclasses.replace(before, sanitize_overflow=False)
    interpreter.InterpretedFunction.__call__ = call_without_repatching
    try:
        yield
    finally:
        builder.options = before
        interpreter.InterpretedFunction.__call__ = device_call
