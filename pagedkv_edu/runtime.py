"""Where the kernels run, and the setup every notebook calls first.

Triton chooses at import time between a GPU and the interpreter, so this module, imported first
by the package, sets ``TRITON_INTERPRET=1`` when there is no CUDA device. :func:`setup` seeds,
prints versions and runs a known-answer kernel with a loop bound from an argument: some
triton/numpy pairings (triton 3.6 with numpy 2.4) silently returned zeros or failed there.
"""

from __future__ import annotations

import os
import platform
import random
import sys
import warnings
from dataclasses import dataclass

import numpy as np
import torch

_INTERPRET_VAR = "TRITON_INTERPRET"


def _choose_backend() -> str:
    """Set ``TRITON_INTERPRET=1`` when there is no CUDA device; return 'cuda' or 'interpreter'."""
    if torch.cuda.is_available() and os.environ.get(_INTERPRET_VAR, "0") != "1":
        return "cuda"
    if "triton" in sys.modules and os.environ.get(_INTERPRET_VAR) != "1":
        # triton was imported before us without the interpreter: its kernels would try a GPU.
        warnings.warn(
            "triton was imported before pagedkv_edu on a machine without CUDA; "
            "restart the kernel and import pagedkv_edu first (or set TRITON_INTERPRET=1).",
            RuntimeWarning,
            stacklevel=3,
        )
    os.environ[_INTERPRET_VAR] = "1"
    return "interpreter"


BACKEND: str = _choose_backend()
"""'cuda' when Triton compiles for a GPU, 'interpreter' when it runs kernels on the CPU."""


def device() -> torch.device:
    """The device tensors for kernels live on: CUDA when Triton compiles, else the CPU."""
    return torch.device("cuda" if BACKEND == "cuda" else "cpu")


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and torch (and CUDA) so a notebook reruns identically."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def versions() -> dict[str, str]:
    """Versions of everything whose behaviour the book's numbers depend on."""
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("torch", "triton", "numpy", "transformers"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "not installed"
    return out


def device_name() -> str:
    """A human-readable name of the compute device, for printed reports and result files."""
    if BACKEND == "cuda":
        return torch.cuda.get_device_name(0)
    return f"CPU ({platform.processor() or platform.machine()}), Triton interpreter"


class TritonSelfTestError(RuntimeError):
    """The Triton known-answer test gave a wrong result: kernels cannot be trusted here."""


def triton_self_test() -> None:
    """Run a tiny Triton kernel with a known answer; raise if the answer is wrong.

    The kernel computes ``out[i] = (2 + reps) * x[i] + 1 + reps`` with a masked tail and two
    loops whose trip count ``reps`` is a kernel argument (a runtime value, as a sequence
    length is): one written with Python's ``range``, one with ``tl.range``. That exercises
    loads, stores, masks, arithmetic and runtime-bounded loops: the pieces every kernel in
    this book uses. An exception inside the kernel is reported as a failed self-test too.
    """
    import triton
    import triton.language as tl

    @triton.jit
    def _axpb(x_ptr, out_ptr, n, reps, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        acc = 2.0 * x + 1.0
        for _ in range(0, reps):  # the bound is a runtime value: the pattern triton 3.6 + numpy 2.4 broke
            acc += x
        for _ in tl.range(0, reps):
            acc += 1.0
        tl.store(out_ptr + offs, acc, mask=mask)

    n, reps = 37, 3
    x = torch.arange(n, dtype=torch.float32, device=device())
    out = torch.full_like(x, float("nan"))
    try:
        _axpb[(triton.cdiv(n, 16),)](x, out, n, reps, BLOCK=16)
    except Exception as exc:  # any failure inside triton means kernels cannot run here
        raise TritonSelfTestError(
            f"Triton self-test failed on {device_name()}: the kernel raised {type(exc).__name__}: {exc}. "
            f"Versions: {versions()}. A known cause is a triton/numpy mismatch under the interpreter "
            f"(a loop whose bound is a kernel argument fails with triton 3.6 and numpy 2.4)."
        ) from exc
    expected = (2.0 + reps) * x + 1.0 + reps
    if not torch.equal(out, expected):
        bad = int((out != expected).sum())
        raise TritonSelfTestError(
            f"Triton self-test failed on {device_name()}: {bad} of {n} outputs wrong "
            f"(first values {out[:4].tolist()}, expected {expected[:4].tolist()}). "
            f"Versions: {versions()}. A known cause is a triton/numpy mismatch under the interpreter."
        )


@dataclass(frozen=True)
class SetupReport:
    """What ``setup()`` found: printed in every notebook's first cell."""

    backend: str
    device: str
    seed: int
    versions: dict[str, str]

    def __str__(self) -> str:
        lines = [f"{'backend':12s}: {self.backend} ({self.device})", f"{'seed':12s}: {self.seed}"]
        lines += [f"{k:12s}: {v}" for k, v in self.versions.items()]
        lines.append("triton self-test: passed")
        return "\n".join(lines)


def setup(seed: int = 0, *, self_test: bool = True, quiet: bool = False) -> SetupReport:
    """The first call of every chapter: seed, report versions and device, self-test Triton."""
    seed_everything(seed)
    if self_test:
        triton_self_test()
    report = SetupReport(BACKEND, device_name(), seed, versions())
    if not quiet:
        print(report)
    return report
