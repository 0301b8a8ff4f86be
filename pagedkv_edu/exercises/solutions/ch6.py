"""Reference solutions for chapter 6: block-aware admission with a watermark, and the scheduling policy.

The policy's reference is the package's own :func:`pagedkv_edu.core.scheduler.schedule`, the one
the engine runs: the reader rewrites that function, so there is one source of truth.
:func:`scheduler_file` is that function as a reader saves it, in ``my_engine/scheduler.py``.
"""

from __future__ import annotations

import inspect

from ...core.scheduler import schedule


def can_admit(num_tokens: int, block_size: int, num_free_blocks: int, watermark_blocks: int, num_running: int) -> bool:
    """Admit when the prompt's blocks fit and ``watermark_blocks`` stay free for running requests to grow.

    With nothing running there is no growth to protect, so the watermark does not apply.
    """
    need = -(-num_tokens // block_size)
    return need + (watermark_blocks if num_running else 0) <= num_free_blocks


def scheduler_file() -> str:
    """What a reader who solved "Your turn 2" saves as ``my_engine/scheduler.py``: the shipped policy, standalone.

    The source of :func:`~pagedkv_edu.core.scheduler.schedule` under the imports it needs, so the
    file defines a function of its own rather than naming the shipped one: the engine then runs it
    as a reader's policy (its plans checked), which is what a test of the wiring must exercise.
    """
    imports = ("from __future__ import annotations\n\nfrom typing import Any\n\n"
               "from pagedkv_edu.core.request import Status\nfrom pagedkv_edu.core.scheduler import SchedulerState\n")
    return f"{imports}\n\n{inspect.getsource(schedule)}"


__all__ = ["can_admit", "schedule", "scheduler_file"]
