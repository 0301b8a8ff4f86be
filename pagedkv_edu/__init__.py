"""pagedkv-edu: the package behind a runnable textbook on paged KV-cache memory.

Importing it first chooses where Triton kernels run; ``pagedkv_edu.setup()`` seeds and self-tests.
The names a reader imports most (``BlockPool``, ``BlockTable``, ``BlockManager``, ``PrefixCache``,
``LLMEngine``, ``SamplingParams``, ``generate``, ``simulate``) are here too, loaded on first use so
that ``import pagedkv_edu`` stays light.
"""

from importlib import import_module
from typing import Any

from . import runtime  # noqa: F401  (must run before anything imports triton)
from .runtime import SetupReport, device

_LAZY = {  # name -> the module that defines it
    "BlockPool": "pagedkv_edu.core.block_pool",
    "BlockTable": "pagedkv_edu.core.block_table",
    "BlockManager": "pagedkv_edu.core.block_manager",
    "PrefixCache": "pagedkv_edu.core.prefix_cache",
    "Scheduler": "pagedkv_edu.core.scheduler",
    "Request": "pagedkv_edu.core.request",
    "SamplingParams": "pagedkv_edu.core.request",
    "LLMEngine": "pagedkv_edu.engine.engine",
    "EngineConfig": "pagedkv_edu.engine.config",
    "generate": "pagedkv_edu.engine.generate",
    "simulate": "pagedkv_edu.sim.simulate",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pagedkv_edu' has no attribute {name!r}")


def setup(seed: int = 0, *, lang: str | None = None, self_test: bool = True, quiet: bool = False) -> SetupReport:
    """The first call of every chapter: :func:`runtime.setup` (seed, versions, device, Triton self-test),
    and pools and managers shown as pictures in a notebook (the views sit above the runtime, so the
    package's top, not the runtime, registers them). ``lang`` is the language of the graders, widgets and
    figures, ``"en"`` (the default) or ``"zh-TW"`` (the zh-TW notebooks pass it; ``PAGEDKV_LANG`` sets it too)."""
    from .viz import register_formatters
    from .viz.language import set_language

    if lang is not None:
        set_language(lang)     # refuses an unknown language before anything else happens
    register_formatters()
    return runtime.setup(seed, self_test=self_test, quiet=quiet)


__all__ = ["device", "setup", "runtime", *_LAZY]
__version__ = "0.1.0"
