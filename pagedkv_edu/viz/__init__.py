"""Views of the block pool: a pure SVG renderer, the explorer's state model and its widget.

Nothing below ``viz`` imports it: the views sit on top of the memory layer. The widget
module (``viz.explorer``) needs ipywidgets and is imported only when asked for.
"""

from .render import Picture, manager_svg, pool_svg, render_svg
from .snapshot import Snapshot, snapshot

__all__ = ["Picture", "Snapshot", "manager_svg", "pool_svg", "render_svg", "snapshot"]
