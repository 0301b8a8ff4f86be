"""A picture of a routed fleet: each replica's blocks, cached prefixes and queue (chapter 11).

:class:`RoutingState` is the state model, :func:`frame_of` reads a :class:`RoutingFrame` from it,
and :func:`routing_svg` draws it, a pure function; :mod:`.routing_widget` only drives the state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from ..specs import hit_rate
from ..checks import check_whole
from ..sim.routing import MAX_REPLICAS, POLICIES, RouteResult, route
from ..sim.routing_workloads import TimedRequest
from .language import tr
from .render import FREE_COLOUR, request_colour

USED_COLOUR = "#332288"       # Tol's indigo: blocks held by admitted requests
CACHED_COLOUR = "#44AA99"     # Tol's teal: free blocks that still hold a findable prefix
MAX_CHIPS = 8


@dataclass(frozen=True)
class ReplicaView:
    """One replica when the latest request has been routed."""

    index: int
    num_blocks: int
    used_blocks: int            # held by admitted requests (those queued behind a prefill included)
    cached_free_blocks: int     # free, but still findable by the prefix cache
    waiting: int
    prefilling: int
    decoding: int
    served: int
    hit_tokens: int
    prompt_tokens: int
    cached_groups: tuple[str, ...]

    @property
    def hit_rate(self) -> float:
        return hit_rate(self.hit_tokens, self.prompt_tokens)


@dataclass(frozen=True)
class RoutingFrame:
    """The fleet right after request ``request_id`` was routed to replica ``chosen``."""

    policy: str
    time_ms: float
    request_id: int
    group: str
    prompt_len: int
    chosen: int
    hit_tokens: int
    replicas: tuple[ReplicaView, ...]


class RoutingState:
    """The state model: a workload, a policy, a fleet size and how many of the requests have arrived."""

    def __init__(self, requests: Sequence[TimedRequest], policy: str = "hybrid", num_replicas: int = 4,
                 arrived: int | None = None, **route_kwargs: object) -> None:
        if not requests:
            raise ValueError("a routing picture needs at least one request")
        self.requests = sorted(requests, key=lambda r: (r.arrival_ms, r.request_id))
        self.route_kwargs = route_kwargs
        self.set_policy(policy)
        self.set_replicas(num_replicas)
        self.seek(len(self.requests) if arrived is None else arrived)

    def set_policy(self, policy: str) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
        self.policy = policy

    def set_replicas(self, num_replicas: int) -> None:
        self.num_replicas = check_whole("num_replicas", num_replicas, 1, MAX_REPLICAS)

    def seek(self, arrived: int) -> None:
        """Show the fleet after the first ``arrived`` requests (1..all) have been routed."""
        self.arrived = check_whole("arrived", arrived, 1, len(self.requests))

    def run(self) -> RouteResult:
        """Route the requests that have arrived (routing is causal: the first k decisions never see request k+1)."""
        return route(self.requests[:self.arrived], self.policy, self.num_replicas, **self.route_kwargs)  # type: ignore[arg-type]

    def frame(self) -> RoutingFrame:
        return frame_of(self.run(), self.requests[self.arrived - 1])


def frame_of(run: RouteResult, last: TimedRequest) -> RoutingFrame:
    """Read a frame from a finished run whose last routed request is ``last``."""
    now, outcome = last.arrival_ms, run.outcomes[-1]
    views = []
    for k, replica in enumerate(run.replicas):
        manager = replica.manager
        cached_free = len(manager.prefix_cache.cached_free_blocks())     # type: ignore[union-attr]
        views.append(ReplicaView(k, manager.pool.num_blocks, manager.pool.num_used, cached_free, *replica.queue(now),
                                 len(replica.outcomes), sum(o.hit_tokens for o in replica.outcomes),
                                 sum(o.prompt_tokens for o in replica.outcomes), tuple(replica.cached_groups())))
    return RoutingFrame(run.policy, now, last.request_id, last.group, last.prompt_len, outcome.replica,
                        outcome.hit_tokens, tuple(views))


# --- drawing -------------------------------------------------------------------------------------
WIDTH, ROW_H, TOP, BAR_X, BAR_W = 760, 58, 44, 90, 380


def routing_svg(frame: RoutingFrame) -> str:
    """The frame as SVG: one row per replica (blocks in use / cached / free, queue, cached groups)."""
    height = TOP + ROW_H * len(frame.replicas) + 22
    title = tr("{policy}: request {request} ({group}, {tokens} tokens) → replica {chosen}, {hits} tokens found in its "
               "cache", policy=frame.policy, request=frame.request_id, group=frame.group, tokens=frame.prompt_len,
               chosen=frame.chosen, hits=frame.hit_tokens)
    key = tr("at {ms:,.0f} ms. Bar: blocks in use (dark), cached and free (teal), free (grey). Squares: waiting "
             "(open), prefilling (filled); then decoding.", ms=frame.time_ms)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '  # en: not shown to readers
             f'font-family="sans-serif" font-size="11" role="img" '
             f'aria-label="{escape(str(tr("routing across replicas")))}">',
             f'<rect width="{WIDTH}" height="{height}" fill="white"/>',  # en: not shown to readers
             f'<text x="8" y="16" font-size="13" font-weight="bold">{escape(str(title))}</text>',
             f'<text x="8" y="32" fill="#555">{escape(str(key))}</text>']
    for row, view in enumerate(frame.replicas):
        y = TOP + row * ROW_H
        chosen = view.index == frame.chosen
        parts.append(f'<g class="replica" data-replica="{view.index}">')
        if chosen:
            parts.append(f'<rect x="2" y="{y - 2}" width="{WIDTH - 4}" height="{ROW_H - 4}" fill="none" '
                         f'stroke="#CC6677" stroke-width="2" rx="4"/>')
        parts.append(f'<text x="8" y="{y + 14}" font-weight="{"bold" if chosen else "normal"}">'
                     f'{tr("replica {index}", index=view.index)}</text>')
        parts.append(f'<text x="8" y="{y + 28}" fill="#555">{tr("{served} served", served=view.served)}</text>')
        parts.append(f'<text x="8" y="{y + 42}" fill="#555">{tr("hits {rate:.0%}", rate=view.hit_rate)}</text>')
        x = BAR_X
        for count, colour in ((view.used_blocks, USED_COLOUR), (view.cached_free_blocks, CACHED_COLOUR),
                              (view.num_blocks - view.used_blocks - view.cached_free_blocks, FREE_COLOUR)):
            w = BAR_W * count / view.num_blocks
            if w > 0:
                parts.append(f'<rect x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="14" fill="{colour}"/>')
            x += w
        blocks = tr("{used} in use, {cached} cached, of {total} blocks", used=view.used_blocks,
                    cached=view.cached_free_blocks, total=view.num_blocks)
        parts.append(f'<text x="{BAR_X}" y="{y + 30}" fill="#333">{blocks}</text>')
        qx = BAR_X + BAR_W + 14
        for i in range(min(view.waiting, 12)):
            parts.append(f'<rect x="{qx + 11 * i}" y="{y + 5}" width="9" height="12" fill="none" stroke="#333"/>')
        qx += 11 * min(view.waiting, 12)
        for i in range(view.prefilling):
            parts.append(f'<rect x="{qx + 11 * i}" y="{y + 5}" width="9" height="12" fill="#DDCC77" stroke="#333"/>')
        if view.waiting > 12:
            queue = tr("{waiting} waiting +{more} waiting, {decoding} decoding", waiting=view.waiting,
                       more=view.waiting - 12, decoding=view.decoding)
        else:
            queue = tr("{waiting} waiting, {decoding} decoding", waiting=view.waiting, decoding=view.decoding)
        parts.append(f'<text x="{qx + 11 * view.prefilling + 4}" y="{y + 15}">{queue}</text>')
        cx, shown = BAR_X, 0
        for group in view.cached_groups[:MAX_CHIPS]:
            width = 7 * len(group) + 8
            if cx + width > WIDTH - 130:
                break
            parts.append(f'<rect x="{cx}" y="{y + 35}" width="{width}" height="14" rx="3" fill="white" '
                         f'stroke="{request_colour(group)}" stroke-width="2"/>'
                         f'<text x="{cx + 4}" y="{y + 46}">{escape(group)}</text>')
            cx, shown = cx + width + 4, shown + 1
        if len(view.cached_groups) > shown:
            more = tr("+{count} more cached", count=len(view.cached_groups) - shown)
            parts.append(f'<text x="{cx}" y="{y + 46}">{more}</text>')
        parts.append('</g>')
    parts.append('</svg>')
    return "".join(parts)


class RoutingPicture:
    """The static picture of a frame, for notebooks and the book (``image/svg+xml``)."""

    def __init__(self, frame: RoutingFrame) -> None:
        self.frame = frame

    def _repr_svg_(self) -> str:
        return routing_svg(self.frame)

    def __repr__(self) -> str:
        loads = [v.served for v in self.frame.replicas]
        return str(tr("RoutingPicture({policy}, request {request} -> replica {chosen}, served {loads})",
                      policy=self.frame.policy, request=self.frame.request_id, chosen=self.frame.chosen, loads=loads))
