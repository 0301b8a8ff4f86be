"""Views of the block pool: a pure SVG renderer, the explorer's state model and its widget.

Nothing below ``viz`` imports it, so a pool does not draw itself: :func:`register_formatters`
(called by ``pagedkv_edu.setup()``) tells IPython how. ``viz.explorer`` needs ipywidgets.
"""

from __future__ import annotations

from typing import Any

from ..core.block_manager import BlockManager
from ..core.block_pool import BlockPool
from .figure_text import localise_when_shown
from .render import Picture, manager_svg, pool_svg, render_svg
from .snapshot import Snapshot, snapshot

__all__ = ["Picture", "Snapshot", "manager_svg", "pool_svg", "register_formatters", "render_svg", "snapshot"]


def register_formatters(shell: Any = None) -> bool:
    """Display pools and managers as pictures in ``shell`` (default: the running IPython, if any).

    In a zh-TW kernel with a CJK font, figures are also translated as they are shown
    (:func:`.figure_text.localise_when_shown`). Returns False outside IPython, where there is nothing to register.
    """
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None:
        return False
    formatter = shell.display_formatter.mimebundle_formatter
    for kind in (BlockPool, BlockManager):
        formatter.for_type(kind, _picture_bundle)
    localise_when_shown(shell)
    return True


def _picture_bundle(obj: BlockPool | BlockManager) -> dict[str, str]:
    return Picture(obj)._repr_mimebundle_()
