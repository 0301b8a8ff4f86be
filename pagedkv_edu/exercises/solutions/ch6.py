"""Reference solutions for chapter 6: block-aware admission with a watermark, and the scheduling policy.

The policy's reference is the package's own :func:`pagedkv_edu.core.scheduler.schedule`, the one
the engine runs: the reader rewrites that function, so there is one source of truth.
"""

from __future__ import annotations

from ...core.scheduler import schedule


def can_admit(num_tokens: int, block_size: int, num_free_blocks: int, watermark_blocks: int, num_running: int) -> bool:
    """Admit when the prompt's blocks fit and ``watermark_blocks`` stay free for running requests to grow.

    With nothing running there is no growth to protect, so the watermark does not apply.
    """
    need = -(-num_tokens // block_size)
    return need + (watermark_blocks if num_running else 0) <= num_free_blocks


__all__ = ["can_admit", "schedule"]
