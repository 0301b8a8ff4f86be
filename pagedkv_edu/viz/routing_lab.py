"""Rerun chapter 11's comparison with the reader's inputs: every routing policy on one workload.

:class:`RoutingLabState` is the state model. It holds the experiment's inputs (the workload, its
arrival rate, the hybrid's three thresholds, the blocks of each replica's pool), refuses a bad one
before anything changes, and routes the workload under each of :data:`~pagedkv_edu.sim.routing.POLICIES`
with the package's :func:`~pagedkv_edu.sim.routing.route`. :func:`routing_lab_svg` draws the result,
a pure function of a :class:`LabFrame`; :func:`routing_lab_grid` draws a few settings side by side,
for the book's static pages. :mod:`.routing_lab_widget` only drives the state.

The run is smaller than the chapter's (160 requests of one seed, the first 40 a warm-up, against
600 and 150 over five seeds), so that nine policies rerun in about a second on a 2-core CPU:
the pictures show the shape of a trade-off, not an interval.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from html import escape
from math import log10
from typing import Any

from ..checks import check_whole
from ..sim.routing import MAX_REPLICAS, POLICIES, HybridThresholds, RouteResult, route
from ..sim.routing_workloads import TimedRequest, chats, consultants, tenants
from .language import Message, tr
from .render import ERROR_COLOUR, FREE_COLOUR

THINK_MS = 200.0
"""A chat's pause between turns: the chapter's 2 s at ten times the arrival rate (its cost model prefills ~10x faster)."""

LAB_WORKLOADS: dict[str, Callable[[int, float, int], list[TimedRequest]]] = {
    "consultants": consultants, "tenants": tenants, "chats": functools.partial(chats, think_ms=THINK_MS),
}
"""The chapter's three workloads, drawn as its section 2 draws them: ``make(num_requests, rate_per_s, seed)``."""

WORKLOAD_LABELS: dict[str, Message] = {"consultants": tr("consultants"), "tenants": tr("tenants"), "chats": tr("chats")}
"""How each workload is named to the reader (its key stays the input's value)."""


def workload_label(workload: str) -> Message | str:
    return WORKLOAD_LABELS.get(workload, workload)


def _reason(exc: Exception) -> object:
    """An exception's message as a field: the message itself where it is one (so it renders in the reader's
    language), else its text."""
    return exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], Message) else str(exc)


RATES: tuple[float, ...] = (200.0, 600.0, 1000.0, 1500.0, 2500.0)
"""Arrivals per second the lab offers: the chapter's rate (600) and its load sweep's."""

BLOCK_OPTIONS: tuple[int, ...] = (80, 128, 256, 512, 1024, 2048, 3072, 4096)
"""Blocks per replica the widget offers. 80 holds every tenant's request (at most 1,150 tokens, 72 blocks) but not the
consultants' longest: a combination the model refuses, as :func:`route` does."""

BLOCK_SIZE = 16
THRESHOLD_NAMES = ("cache_threshold", "abs_threshold", "rel_threshold")    # the hybrid's, as HybridThresholds names them
CONTROLS = ("workload", "rate_per_s", "num_blocks", *THRESHOLD_NAMES)
"""The inputs a reader may change, by the names :meth:`RoutingLabState.configure` takes."""

STEERED = frozenset({"hybrid", "hybrid-prefill", "hybrid-smallest-tree"})
"""The policies the thresholds steer (``hybrid-prefill`` reads ``cache_threshold`` and ``rel_threshold``, but counts its
absolute gap in tokens, ``abs_threshold_tokens``, which the lab leaves at its default)."""

MEMO_SIZE = 32


# --- the state model -----------------------------------------------------------------------------
@dataclass(frozen=True)
class LabInputs:
    """One setting of the experiment: what the reader chose."""

    workload: str
    rate_per_s: float
    num_blocks: int
    thresholds: HybridThresholds


@dataclass(frozen=True)
class PolicyFigures:
    """What one policy did on the measured requests (after the warm-up): the chapter's figures."""

    policy: str
    hit_rate: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    requests_per_replica: tuple[int, ...]
    load_imbalance: float

    @classmethod
    def of(cls, run: RouteResult) -> PolicyFigures:
        return cls(run.policy, run.hit_rate, run.ttft_ms(50), run.ttft_ms(99), tuple(run.requests_per_replica),
                   run.load_imbalance)


@dataclass(frozen=True)
class LabFrame:
    """A finished comparison: the inputs, the run's size, and one row of figures per policy (in ``POLICIES`` order)."""

    inputs: LabInputs
    num_requests: int
    warmup: int
    num_replicas: int
    seed: int
    rows: tuple[PolicyFigures, ...]

    def row(self, policy: str) -> PolicyFigures:
        for figures in self.rows:
            if figures.policy == policy:
                return figures
        raise ValueError(f"no policy {policy!r} in this frame; it has {', '.join(r.policy for r in self.rows)}")


class RoutingLabState:
    """The experiment's inputs and its result; every change reruns :func:`route` for every policy.

    The workloads are drawn once, at construction, for every offered rate (``rates``): a change
    only routes. Finished frames are kept by their inputs (the last ``MEMO_SIZE``), so going back
    to a setting shows it at once.
    """

    def __init__(self, workload: str = "tenants", rate_per_s: float = 600.0, num_blocks: int = 3072,
                 thresholds: HybridThresholds = HybridThresholds(), *, num_requests: int = 160, warmup: int = 40,
                 num_replicas: int = 4, seed: int = 0, rates: Sequence[float] = RATES) -> None:
        self.num_requests = check_whole("num_requests", num_requests, 2, 100_000)
        self.warmup = check_whole("warmup", warmup, 0, num_requests - 1)
        self.num_replicas = check_whole("num_replicas", num_replicas, 1, MAX_REPLICAS)
        self.seed = check_whole("seed", seed, 0)
        if not rates or len(set(rates)) != len(rates):
            raise ValueError(f"rates must be distinct and at least one, got {list(rates)!r}")
        self.rates = tuple(float(r) for r in rates)
        if not isinstance(thresholds, HybridThresholds):
            raise ValueError(f"thresholds must be a HybridThresholds, got {thresholds!r}")
        self.inputs = self._checked(workload, rate_per_s, num_blocks, thresholds)
        self._draws = {(name, rate): make(num_requests, rate, seed)
                       for name, make in LAB_WORKLOADS.items() for rate in self.rates}
        self._memo: dict[LabInputs, LabFrame] = {}
        self.frame = self.preview()

    def configure(self, **changes: Any) -> LabFrame:
        """Change some inputs (names from :data:`CONTROLS`) and rerun; a refused change raises and changes nothing."""
        frame = self.preview(**changes)
        self.inputs, self.frame = frame.inputs, frame
        return frame

    def preview(self, **changes: Any) -> LabFrame:
        """The frame the inputs with ``changes`` would give, without changing the state (the still grid's settings)."""
        inputs = self._inputs(**changes)
        if inputs not in self._memo:
            frame = self._run(inputs)
            if len(self._memo) >= MEMO_SIZE:
                del self._memo[next(iter(self._memo))]       # the oldest
            self._memo[inputs] = frame
        return self._memo[inputs]

    def _inputs(self, **changes: Any) -> LabInputs:
        """The current inputs with ``changes``, each checked; ``ValueError`` names the first bad one."""
        unknown = sorted(set(changes) - set(CONTROLS))
        if unknown:
            raise ValueError(f"unknown input {unknown[0]!r}; the lab's inputs are {', '.join(CONTROLS)}")
        for name in ("cache_threshold", "rel_threshold"):
            value = changes.get(name)
            if name in changes and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"{name} must be a number, got {value!r}")
        thresholds = replace(self.inputs.thresholds, **{k: changes[k] for k in THRESHOLD_NAMES if k in changes})
        return self._checked(changes.get("workload", self.inputs.workload),
                             changes.get("rate_per_s", self.inputs.rate_per_s),
                             changes.get("num_blocks", self.inputs.num_blocks), thresholds)

    def _checked(self, workload: Any, rate_per_s: Any, num_blocks: Any, thresholds: HybridThresholds) -> LabInputs:
        """The inputs, once each is known to be one the lab can run (the pool's fit is :func:`route`'s to check)."""
        if workload not in LAB_WORKLOADS:
            raise ValueError(f"unknown workload {workload!r}; choose one of {', '.join(LAB_WORKLOADS)}")
        if isinstance(rate_per_s, bool) or not isinstance(rate_per_s, (int, float)) or float(rate_per_s) not in self.rates:
            raise ValueError(f"rate_per_s must be one of the drawn rates ({', '.join(f'{r:g}' for r in self.rates)} "
                             f"per second), got {rate_per_s!r}")
        check_whole("num_blocks", num_blocks, 1, 1 << 21)
        return LabInputs(workload, float(rate_per_s), num_blocks, thresholds)

    def _run(self, inputs: LabInputs) -> LabFrame:
        requests = self._draws[(inputs.workload, inputs.rate_per_s)]
        rows = []
        for policy in POLICIES:
            try:
                run = route(requests, policy, self.num_replicas, num_blocks=inputs.num_blocks, block_size=BLOCK_SIZE,
                            seed=self.seed, thresholds=inputs.thresholds, warmup=self.warmup)
            except ValueError as exc:     # only the pool can be wrong here: route refuses a request it cannot hold
                raise ValueError(tr("{blocks:,} blocks per replica refused for the {workload} at {rate:g}/s: {reason}",
                                    blocks=inputs.num_blocks, workload=workload_label(inputs.workload),
                                    rate=inputs.rate_per_s, reason=_reason(exc))) from exc
            rows.append(PolicyFigures.of(run))
        return LabFrame(inputs, self.num_requests, self.warmup, self.num_replicas, self.seed, tuple(rows))


# --- drawing -------------------------------------------------------------------------------------
HIT_COLOUR = "#44AA99"      # Tol's teal: prompt tokens found in a cache
P50_COLOUR = "#332288"      # Tol's indigo: the median TTFT
P99_COLOUR = "#CC6677"      # Tol's rose: the 99th percentile
LOAD_COLOUR = "#88CCEE"     # Tol's cyan: requests served per replica
STEERED_BACKGROUND = "#F2F2F2"
TTFT_RANGE_MS = (0.3, 100_000.0)   # the TTFT axis, log scale, the same for every setting: no prefill is under 0.5 ms


@dataclass(frozen=True)
class _Layout:
    """Where a panel's columns go: the widget's picture is wide, a still's panel narrow."""

    width: int
    hit_x: int
    hit_w: int
    ttft_x: int
    ttft_w: int
    row_h: int = 20
    top: int = 58

    @property
    def numbers_x(self) -> int:
        """Where a row's p50 / p99 are written, right of the axis."""
        return self.ttft_x + self.ttft_w + 8

    @property
    def load_x(self) -> int:
        return self.numbers_x + 80


WIDE = _Layout(width=800, hit_x=150, hit_w=130, ttft_x=340, ttft_w=240)
NARROW = _Layout(width=570, hit_x=128, hit_w=70, ttft_x=240, ttft_w=150)


def data_state(frame: LabFrame) -> str:
    """The inputs and the key results in one short string, so that a browser test can compare the page with the model."""
    i, t = frame.inputs, frame.inputs.thresholds
    hits = [r.hit_rate for r in frame.rows]
    p99s = [r.ttft_p99_ms for r in frame.rows]
    hybrid = frame.row("hybrid")
    return (f"workload={i.workload};rate={i.rate_per_s:g};blocks={i.num_blocks};cache_threshold={t.cache_threshold:g};"
            f"abs_threshold={t.abs_threshold};rel_threshold={t.rel_threshold:g};hit={min(hits):.3f}-{max(hits):.3f};"
            f"p99={min(p99s):.1f}-{max(p99s):.1f};hybrid={hybrid.hit_rate:.3f}/{hybrid.ttft_p99_ms:.1f}")


def _ms(value: float) -> str:
    """A TTFT in three or four characters: 0.72, 35.2, 413, 12.3 s."""
    if value >= 1000:
        return f"{value / 1000:.1f} s"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _log_x(ms: float, layout: _Layout) -> float:
    """Where ``ms`` falls on the TTFT axis; beyond its ends, at the end."""
    low, high = (log10(v) for v in TTFT_RANGE_MS)
    where = (log10(min(max(ms, TTFT_RANGE_MS[0]), TTFT_RANGE_MS[1])) - low) / (high - low)
    return layout.ttft_x + layout.ttft_w * where


def _panel(frame: LabFrame, x0: float, y0: float, layout: _Layout) -> list[str]:
    """One comparison as SVG elements, its top left corner at (x0, y0): a header, axes, a row per policy."""
    i, t = frame.inputs, frame.inputs.thresholds
    measured = frame.num_requests - frame.warmup
    best_hit = max(r.hit_rate for r in frame.rows)
    best_p99 = min(r.ttft_p99_ms for r in frame.rows)
    title = tr("{workload} at {rate:,.0f} requests/s, {replicas} replicas of {blocks:,} blocks",
               workload=workload_label(i.workload), rate=i.rate_per_s, replicas=frame.num_replicas, blocks=i.num_blocks)
    setting = tr("thresholds {cache:.2f}, {absolute}, {relative:g}x (the shaded rows use them); {measured} of {total} "
                 "requests measured", cache=t.cache_threshold, absolute=t.abs_threshold, relative=t.rel_threshold,
                 measured=measured, total=frame.num_requests)
    parts = [f'<g class="panel" data-state="{escape(data_state(frame))}" transform="translate({x0:g},{y0:g})">',
             f'<text x="8" y="16" font-size="13" font-weight="bold">{escape(str(title))}</text>',
             f'<text x="8" y="31" fill="#555">{escape(str(setting))}</text>']
    axis_y = layout.top - 6
    p50 = f'<tspan fill="{P50_COLOUR}">● p50</tspan>'     # en: not shown to readers (markup: the words are tr's)
    p99 = f'<tspan fill="{P99_COLOUR}">▮ p99</tspan>'     # en: not shown to readers
    parts.append(f'<text x="{layout.hit_x}" y="{axis_y}" fill="#333">{tr("prefix hit rate")}</text>')
    parts.append(f'<text x="{layout.ttft_x}" y="{axis_y}" fill="#333">'
                 f'{tr("TTFT, log: {p50} to {p99} (ms)", p50=p50, p99=p99)}</text>')
    parts.append(f'<text x="{layout.load_x}" y="{axis_y}" fill="#333">{tr("per replica")}</text>')
    bottom = layout.top + layout.row_h * len(frame.rows)
    for tick in (1, 10, 100, 1000, 10_000, 100_000):
        gx, label = _log_x(tick, layout), f"{tick}" if tick < 1000 else f"{tick // 1000} s"
        parts.append(f'<line x1="{gx:.1f}" y1="{layout.top}" x2="{gx:.1f}" y2="{bottom}" stroke="#E4E4E4"/>'
                     f'<text x="{gx:.1f}" y="{bottom + 12}" fill="#777" font-size="9" text-anchor="middle">'
                     f'{label}</text>')
    for k, row in enumerate(frame.rows):
        parts.extend(_row(row, layout.top + k * layout.row_h, layout, best_hit, best_p99))
    parts.append('</g>')
    return parts


def _row(row: PolicyFigures, y: float, layout: _Layout, best_hit: float, best_p99: float) -> list[str]:
    """One policy: its name, a hit-rate bar, its TTFT from p50 to p99 on the log axis, and each replica's load."""
    mid, h = y + layout.row_h / 2, layout.row_h
    per_replica = " ".join(str(n) for n in row.requests_per_replica)
    parts = [f'<g class="policy" data-policy="{escape(row.policy)}" data-hit="{row.hit_rate:.4f}" '
             f'data-p50="{row.ttft_p50_ms:.2f}" data-p99="{row.ttft_p99_ms:.2f}" data-per-replica="{per_replica}">']
    if row.policy in STEERED:
        parts.append(f'<rect x="2" y="{y:g}" width="{layout.width - 4}" height="{h}" fill="{STEERED_BACKGROUND}"/>')
    parts.append(f'<text x="8" y="{mid + 4:g}">{escape(row.policy)}</text>')
    bold = ' font-weight="bold"' if row.hit_rate >= best_hit - 5e-4 else ""
    parts.append(f'<rect x="{layout.hit_x}" y="{y + 4:g}" width="{layout.hit_w}" height="{h - 8}" fill="{FREE_COLOUR}"/>'
                 f'<rect x="{layout.hit_x}" y="{y + 4:g}" width="{layout.hit_w * row.hit_rate:.1f}" height="{h - 8}" '
                 f'fill="{HIT_COLOUR}"/>'
                 f'<text x="{layout.hit_x + layout.hit_w + 4}" y="{mid + 4:g}"{bold}>{row.hit_rate:.1%}</text>')
    x50, x99 = _log_x(row.ttft_p50_ms, layout), _log_x(row.ttft_p99_ms, layout)
    parts.append(f'<line x1="{x50:.1f}" y1="{mid:g}" x2="{x99:.1f}" y2="{mid:g}" stroke="#555" stroke-width="2"/>'  # en: not shown to readers
                 f'<rect x="{x99 - 2:.1f}" y="{y + 4:g}" width="4" height="{h - 8}" fill="{P99_COLOUR}"/>'
                 f'<circle cx="{x50:.1f}" cy="{mid:g}" r="4" fill="{P50_COLOUR}"/>')
    bold = ' font-weight="bold"' if row.ttft_p99_ms <= best_p99 * 1.0005 else ""
    parts.append(f'<text x="{layout.numbers_x}" y="{mid + 4:g}"{bold}>{_ms(row.ttft_p50_ms)} / '
                 f'{_ms(row.ttft_p99_ms)}</text>')
    most = max(row.requests_per_replica) or 1
    bar_w = max(3, min(10, 48 // len(row.requests_per_replica)))
    for r, count in enumerate(row.requests_per_replica):
        bh = (h - 6) * count / most
        parts.append(f'<rect x="{layout.load_x + r * (bar_w + 2)}" y="{y + h - 3 - bh:.1f}" width="{bar_w}" '
                     f'height="{bh:.1f}" fill="{LOAD_COLOUR}" stroke="{P50_COLOUR}" stroke-width="0.5"/>')
    lx = layout.load_x + len(row.requests_per_replica) * (bar_w + 2) + 4
    colour = ERROR_COLOUR if row.load_imbalance > 2 else "#000000"
    parts.append(f'<text x="{lx}" y="{mid + 4:g}" fill="{colour}">×{row.load_imbalance:.2f}</text></g>')
    return parts


def _height(layout: _Layout) -> int:
    return layout.top + layout.row_h * len(POLICIES) + 20


def routing_lab_svg(frame: LabFrame) -> str:
    """The comparison as one SVG: per policy, the hit rate, TTFT p50 to p99, and requests per replica (× imbalance)."""
    height = _height(WIDE) + 16
    note = tr("Seed {seed}; the first {warmup} requests warm the caches. Bold: the highest hit rate, the lowest p99. "
              "×: the busiest replica over the mean (red above 2).", seed=frame.seed, warmup=frame.warmup)
    parts = [f'<svg class="pagedkv-routinglab" data-state="{escape(data_state(frame))}" '  # en: not shown to readers
             f'xmlns="http://www.w3.org/2000/svg" width="{WIDE.width}" height="{height}" font-family="sans-serif" '
             f'font-size="11" role="img" aria-label="{escape(str(tr("routing policies compared")))}">',
             f'<rect width="{WIDE.width}" height="{height}" fill="white"/>',  # en: not shown to readers
             *_panel(frame, 0, 0, WIDE),
             f'<text x="8" y="{height - 6}" fill="#555">{escape(str(note))}</text>',
             '</svg>']
    return "".join(parts)


def routing_lab_grid(frames: Sequence[LabFrame], columns: int = 2) -> str:
    """Two to four comparisons in one SVG, ``columns`` to a row: for the book, where one setting cannot show a trade-off."""
    if not 2 <= len(frames) <= 4:
        raise ValueError(f"a still grid shows 2 to 4 settings, got {len(frames)}")
    check_whole("columns", columns, 1, 4)
    rows = -(-len(frames) // columns)
    cell_h = _height(NARROW) + 8
    width, height = NARROW.width * min(columns, len(frames)), cell_h * rows + 18
    states = " | ".join(data_state(f) for f in frames)
    label = tr("routing policies compared in {count} settings", count=len(frames))
    parts = [f'<svg class="pagedkv-routinglab-grid" data-state="{escape(states)}" xmlns="http://www.w3.org/2000/svg" '  # en: not shown to readers
             f'width="{width}" height="{height}" font-family="sans-serif" font-size="11" role="img" '
             f'aria-label="{escape(str(label))}">',
             f'<rect width="{width}" height="{height}" fill="white"/>']  # en: not shown to readers
    for k, frame in enumerate(frames):
        parts.extend(_panel(frame, NARROW.width * (k % columns), cell_h * (k // columns), NARROW))
    first = frames[0]
    note = tr("Each panel: seed {seed}, the first {warmup} requests warm the caches; the hit rate, TTFT p50 / p99 in ms, "
              "the requests each replica served and the busiest over the mean. Bold: the best of a panel.",
              seed=first.seed, warmup=first.warmup)
    parts.append(f'<text x="8" y="{height - 6}" fill="#555">{escape(str(note))}</text></svg>')
    return "".join(parts)


STILL_SETTINGS: tuple[Mapping[str, Any], ...] = (
    {"workload": "consultants", "rate_per_s": 600.0, "num_blocks": 3072},
    {"workload": "tenants", "rate_per_s": 600.0, "num_blocks": 3072},
    {"workload": "tenants", "rate_per_s": 2500.0, "num_blocks": 3072},
    {"workload": "tenants", "rate_per_s": 600.0, "num_blocks": 512},
)
"""The book's still: one shared prompt (affinity overloads one replica), many tenants, the tenants at a higher load,
and on smaller pools (affinity's gain grows)."""


def still_grid(state: RoutingLabState, settings: Sequence[Mapping[str, Any]] = STILL_SETTINGS) -> str:
    """:func:`routing_lab_grid` of ``settings``, each applied to ``state``'s inputs without changing them."""
    return routing_lab_grid([state.preview(**s) for s in settings])
