"""pagedkv-edu: the package behind a runnable textbook on paged KV-cache memory.

Importing it first chooses where Triton kernels run; ``pagedkv_edu.setup()`` seeds and self-tests.
"""

from . import runtime  # noqa: F401  (must run before anything imports triton)
from .runtime import SetupReport, device


def setup(seed: int = 0, *, self_test: bool = True, quiet: bool = False) -> SetupReport:
    """The first call of every chapter: :func:`runtime.setup` (seed, versions, device, Triton self-test),
    and pools and managers shown as pictures in a notebook (the views sit above the runtime, so the
    package's top, not the runtime, registers them)."""
    from .viz import register_formatters

    register_formatters()
    return runtime.setup(seed, self_test=self_test, quiet=quiet)


__all__ = ["device", "setup", "runtime"]
__version__ = "0.1.0"
