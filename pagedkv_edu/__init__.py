"""pagedkv-edu: the package behind a runnable textbook on paged KV-cache memory.

Importing it first chooses where Triton kernels run (CUDA, or the interpreter on a CPU),
before anything imports triton. Then ``pagedkv_edu.setup()`` seeds and self-tests.
"""

from . import runtime  # noqa: F401  (must run before anything imports triton)
from .runtime import device, setup

__all__ = ["device", "setup", "runtime"]
__version__ = "0.1.0"
