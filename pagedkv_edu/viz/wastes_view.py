"""The three wastes as an experiment a reader reruns: where a contiguous arena's slots go, step by step (chapter 1).

:class:`WastesState` is the state model: a workload, the paper's Figure 2 figures, and four inputs
(reservation policy, allocator, KV budget, ``max_seq_len``). Every accepted change reruns
:func:`~pagedkv_edu.sim.simulate.simulate` and keeps a :class:`WastesFrame`, the run reduced to
what the picture needs; a refused change raises ``ValueError`` and leaves the last accepted run.
:func:`wastes_svg` draws a frame and :func:`wastes_grid_svg` a few frames side by side (the book's
still), both pure functions; :mod:`.wastes_widget` only drives the state.

The colours are Paul Tol's muted scheme (colour-blind safe), and every colour is also named in the
legend with its share, so colour is never the only cue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape

from ..checks import check_whole
from ..sim.contiguous import ALLOCATORS, RESERVE_POLICIES, make_arena, reservation_size
from ..sim.simulate import WASTE_KINDS, SimResult, simulate
from ..workload import MAX_SEQ_LEN, Request
from .language import Message, tr
from .render import FREE_COLOUR, svg_document

KINDS = ("used", *WASTE_KINDS, "free")    # bottom to top of the timeline, as chapter 1's matplotlib timeline
COLOURS: dict[str, str] = {
    "used": "#332288",            # Tol's indigo
    "over_reserved": "#88CCEE",   # cyan
    "internal": "#DDCC77",        # sand
    "external": "#CC6677",        # rose
    "free": FREE_COLOUR,
}
LABELS: dict[str, Message] = {
    "used": tr("holds tokens"),
    "over_reserved": tr("over-reserved (used later)"),
    "internal": tr("internal fragmentation (never used)"),
    "external": tr("external fragmentation (holes too small)"),
    "free": tr("free"),
}
SYSTEM_LABELS: dict[str, str] = {"max": "Max", "pow2": "Pow2", "oracle": "Oracle", "paged": "vLLM"}
"""The systems' names, the same in every language."""
ALLOCATOR_LABELS: dict[str, Message] = {"first-fit": tr("first-fit"), "buddy": tr("buddy")}
"""What the allocator control and the pictures show for each of ALLOCATORS (the values stay code)."""
ARENA_LABELS: dict[str, Message] = {"first-fit": tr("first-fit arena"), "buddy": tr("buddy arena")}
PAPER_COLOUR = "#BBBBBB"          # Tol's grey: the paper's bars
MAX_COLUMNS = 240                 # the timeline's resolution: a run of 16,000 steps is averaged into 240 columns


@dataclass(frozen=True)
class WastesFrame:
    """One run, reduced to what the picture draws: the inputs, the timeline and the run's figures."""

    policy: str
    allocator: str
    budget: int
    max_seq_len: int
    num_requests: int
    total_steps: int
    timeline: tuple[tuple[float, ...], ...]   # per column, the share of the budget of each of KINDS (sums to 1)
    utilisation: float
    waste: Mapping[str, float]                # each of WASTE_KINDS as a share of the held slots
    peak_concurrency: int
    mean_queue_delay: float
    paper: Mapping[str, float]                # the paper's Figure 2 utilisation by system (max, pow2, oracle, paged)

    @property
    def data_state(self) -> str:
        """The inputs and key results as one short string, for tests and the browser to compare with the model."""
        waste = ";".join(f"{k}={self.waste[k]:.3f}" for k in WASTE_KINDS)
        return (f"policy={self.policy};allocator={self.allocator};budget={self.budget};max_seq_len={self.max_seq_len};"
                f"util={self.utilisation:.3f};{waste};steps={self.total_steps};peak={self.peak_concurrency}")


def timeline_columns(result: SimResult, max_columns: int = MAX_COLUMNS) -> tuple[tuple[float, ...], ...]:
    """The run's steps averaged into at most ``max_columns`` columns, each the budget's shares of KINDS.

    Averaging (rather than sampling every n-th step) keeps each column's shares summing to 1 and
    keeps a short burst of external fragmentation visible at any run length.
    """
    check_whole("max_columns", max_columns, 1)
    steps, n = result.steps, len(result.steps)
    cols = min(n, max_columns)
    out = []
    for c in range(cols):
        chunk = steps[c * n // cols:(c + 1) * n // cols]
        total = len(chunk) * result.capacity
        out.append(tuple(sum(getattr(s, k) for s in chunk) / total for k in KINDS))
    return tuple(out)


def frame_of(result: SimResult, max_seq_len: int, paper: Mapping[str, float]) -> WastesFrame:
    """Reduce a contiguous run to a frame (``max_seq_len`` is the run's: the result does not keep it)."""
    if result.reserve is None or result.allocator is None:
        raise ValueError(f"a wastes frame draws a contiguous run, got policy={result.policy!r}")
    return WastesFrame(result.reserve, result.allocator, result.capacity, max_seq_len, len(result.requests),
                       result.total_steps, timeline_columns(result), result.utilisation, result.waste_fractions,
                       result.peak_concurrency, result.mean_queue_delay, dict(paper))


def check_paper(paper: Mapping[str, float]) -> dict[str, float]:
    """The paper's figures as a dict, after checking there is one share in [0, 1] for each reservation policy."""
    missing = [p for p in RESERVE_POLICIES if p not in paper]
    if missing:
        raise ValueError(f"paper figures lack {missing}; need one for each of {RESERVE_POLICIES}")
    unknown = [k for k in paper if k not in SYSTEM_LABELS]
    if unknown:
        raise ValueError(f"paper figures name unknown systems {unknown}; known: {list(SYSTEM_LABELS)}")
    bad = {k: v for k, v in paper.items() if not 0 <= v <= 1}
    if bad:
        raise ValueError(f"paper figures must be shares in [0, 1], got {bad}")
    return dict(paper)


class WastesState:
    """The state model: a workload served from a contiguous arena under four inputs the reader changes.

    ``paper`` is the paper's Figure 2 utilisation by system, as the chapter keeps it; the picture
    draws the run's utilisation beside it.
    """

    def __init__(self, requests: Iterable[Request], paper: Mapping[str, float], policy: str = "max",
                 allocator: str = "first-fit", budget: int = 10 * MAX_SEQ_LEN,
                 max_seq_len: int = MAX_SEQ_LEN) -> None:
        self.requests = tuple(requests)
        if not self.requests:
            raise ValueError("a wastes picture needs at least one request")
        self.paper = check_paper(paper)
        self._accept(policy, allocator, budget, max_seq_len)

    def update(self, *, policy: str | None = None, allocator: str | None = None, budget: int | None = None,
               max_seq_len: int | None = None) -> None:
        """Rerun with the given inputs changed (the others kept), all together or none.

        Inputs are checked as a combination (a budget fits one ``max_seq_len`` reservation or not),
        so a widget passes every control's value at once. A refused combination raises
        ``ValueError`` naming the value, and the last accepted run stays.
        """
        self._accept(self.policy if policy is None else policy, self.allocator if allocator is None else allocator,
                     self.budget if budget is None else budget,
                     self.max_seq_len if max_seq_len is None else max_seq_len)

    def frame(self) -> WastesFrame:
        """The last accepted run, as the picture draws it."""
        return self._frame

    def _accept(self, policy: str, allocator: str, budget: int, max_seq_len: int) -> None:
        self._check(policy, allocator, budget, max_seq_len)
        result = simulate(self.requests, "contiguous", budget, reserve=policy, allocator=allocator,
                          max_seq_len=max_seq_len)
        self.policy, self.allocator, self.budget, self.max_seq_len = policy, allocator, budget, max_seq_len
        self.result = result
        self._frame = frame_of(result, max_seq_len, self.paper)

    def _check(self, policy: str, allocator: str, budget: int, max_seq_len: int) -> None:
        """Refuse, with a reason a reader can act on, what :func:`simulate` would refuse.

        The simulator's own refusal lists every request id; this one names the input to change.
        """
        if policy not in RESERVE_POLICIES:      # not a choice the widget offers: a caller's mistake
            raise ValueError(f"unknown reservation policy {policy!r}; choose one of {RESERVE_POLICIES}")
        if allocator not in ALLOCATORS:
            raise ValueError(f"unknown allocator {allocator!r}; choose one of {ALLOCATORS}")
        check_whole("KV budget", budget, 1)   # en: not shown to readers (the widget's slider starts at 1,024)
        check_whole("max_seq_len", max_seq_len, 1)
        longest = max(self.requests, key=lambda r: r.final_len)
        if longest.final_len > max_seq_len:
            raise ValueError(tr("max_seq_len={max_seq_len:,} refused: request {request} reaches {final:,} tokens "
                                "({prompt:,} prompt + {output:,} output); raise max_seq_len to at least {final:,}",
                                max_seq_len=max_seq_len, request=longest.request_id, final=longest.final_len,
                                prompt=longest.prompt_len, output=longest.output_len))
        largest = max(reservation_size(r.prompt_len, r.output_len, max_seq_len, policy) for r in self.requests)
        room = make_arena(budget, allocator).max_allocation
        if largest > room:
            space = (tr("the largest block ({room:,} slots) of a {budget:,}-slot buddy arena", room=room, budget=budget)
                     if allocator == "buddy" else tr("the whole {budget:,}-slot arena", budget=budget))
            fix = (tr("raise the budget") if policy == "oracle"            # Oracle's reservation ignores max_seq_len
                   else tr("raise the budget or lower max_seq_len"))
            raise ValueError(tr("KV budget={budget:,} refused: {system} reserves up to {largest:,} slots for one "
                                "request (max_seq_len={max_seq_len:,}), more than {space}; {fix}", budget=budget,
                                system=SYSTEM_LABELS[policy], largest=largest, max_seq_len=max_seq_len, space=space,
                                fix=fix))


# --- drawing -------------------------------------------------------------------------------------
WIDTH, HEIGHT = 880, 356
TL_X, TL_Y, TL_W, TL_H = 56, 62, 520, 170        # the timeline
BAR_Y = 282                                       # the utilisation bar, under the timeline
FIG_X, FIG_W = 640, 220                           # the Figure 2 panel, to the right


def _text(x: float, y: float, content: str, *, size: int = 11, anchor: str = "start", colour: str = "#000000",
          weight: str = "normal") -> str:
    """A text element; ``content`` a :class:`~.language.Message` is written in the reader's language."""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-family="sans-serif" font-size="{size}" text-anchor="{anchor}" '
            f'fill="{colour}" font-weight="{weight}">{escape(str(content))}</text>')


def _timeline(frame: WastesFrame, x0: float, y0: float, w: float, h: float, axes: bool) -> list[str]:
    """Stacked areas over a free-coloured ground; with ``axes``, the budget's 0/50/100% and the step range.

    Each held kind is painted as the area from the baseline up to its cumulative share, the tallest
    first, so each path needs only its top edge: a picture a few kilobytes smaller in every
    committed notebook, its widget state and the book.
    """
    cols = len(frame.timeline)
    out = [f'<g class="timeline" data-columns="{cols}">',
           f'<rect data-kind="free" x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{h:.1f}" '  # en: not shown to readers
           f'fill="{COLOURS["free"]}"/>']
    xs = [x0 + w * (i + 0.5) / cols for i in range(cols)]
    base = y0 + h
    for k in reversed(range(len(KINDS) - 1)):       # every kind but free, from the top of the stack down
        tops = [base - h * sum(column[:k + 1]) for column in frame.timeline]
        edge = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, tops))
        path = f"M{x0:.1f},{base:.1f} {x0:.1f},{tops[0]:.1f} {edge} {x0 + w:.1f},{tops[-1]:.1f} {x0 + w:.1f},{base:.1f}Z"
        out.append(f'<path data-kind="{KINDS[k]}" d="{path}" fill="{COLOURS[KINDS[k]]}"/>')  # en: not shown to readers
    out.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{h:.1f}" fill="none" stroke="#444444"/>')
    if axes:
        for share in (0, 0.5, 1):
            y = y0 + h * (1 - share)
            out.append(_text(x0 - 4, y + 4, f"{share:.0%}", size=10, anchor="end", colour="#333333"))
        out.append(_text(x0, y0 + h + 13, tr("step {step:,}", step=0), size=10, colour="#333333"))
        out.append(_text(x0 + w, y0 + h + 13, tr("step {step:,}", step=frame.total_steps), size=10, anchor="end",
                         colour="#333333"))
    out.append("</g>")
    return out


def _utilisation_bar(frame: WastesFrame, x0: float, y0: float, w: float) -> list[str]:
    """The held slots as one bar, split into tokens and the three wastes, with a tick at the paper's figure."""
    shares = {"used": frame.utilisation, **{k: frame.waste[k] for k in WASTE_KINDS}}
    out = [f'<g class="utilisation" data-util="{frame.utilisation:.3f}">']
    x = x0
    for kind, share in shares.items():
        if share > 0:
            out.append(f'<rect data-kind="{kind}" x="{x:.1f}" y="{y0:.1f}" width="{w * share:.1f}" height="16" '  # en: not shown to readers
                       f'fill="{COLOURS[kind]}"/>')
        x += w * share
    out.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" height="16" fill="none" stroke="#444444"/>')
    paper = frame.paper[frame.policy]
    px = x0 + w * paper
    out.append(f'<line x1="{px:.1f}" y1="{y0 - 4:.1f}" x2="{px:.1f}" y2="{y0 + 20:.1f}" stroke="#000000" '
               f'stroke-width="2" stroke-dasharray="3,2"/>')
    out.append(_text(px, y0 - 6, tr("paper {share:.1%}", share=paper), size=10, anchor="middle"))
    out.append("</g>")
    return out


def _legend(frame: WastesFrame, x0: float, y0: float, columns: int) -> list[str]:
    """Each kind's swatch, name and share of the held slots (free: of the budget, averaged over the run)."""
    shares = {"used": frame.utilisation, **{k: frame.waste[k] for k in WASTE_KINDS}}
    out = ['<g class="legend">']
    entries = [*((k, tr("{label}: {share:.1%}", label=LABELS[k], share=shares[k])) for k in shares),
               ("free", tr("free (not held)"))]
    for i, (kind, label) in enumerate(entries):
        row, col = divmod(i, columns)
        x, y = x0 + col * 270, y0 + row * 15
        out.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" fill="{COLOURS[kind]}" '
                   f'stroke="#444444" stroke-width="0.5"/>')
        out.append(_text(x + 14, y, label, size=10))
    out.append("</g>")
    return out


def _figure2(frame: WastesFrame, x0: float, y0: float, w: float, h: float) -> list[str]:
    """The paper's Figure 2 utilisations as grey bars, and this run's beside its own system's."""
    systems = [s for s in SYSTEM_LABELS if s in frame.paper]
    slot = w / len(systems)
    out = ['<g class="figure2">', _text(x0, y0 - 24, tr("Utilisation: the paper's Figure 2"), size=11, weight="bold"),
           _text(x0, y0 - 10, tr("and this run (indigo)"), size=10, colour="#333333"),
           f'<line x1="{x0:.1f}" y1="{y0 + h:.1f}" x2="{x0 + w:.1f}" y2="{y0 + h:.1f}" stroke="#444444"/>']
    for i, system in enumerate(systems):
        bars = [("paper", frame.paper[system], PAPER_COLOUR)]
        if system == frame.policy:
            bars.append(("run", frame.utilisation, COLOURS["used"]))
        bar_w = slot * 0.7 / len(bars)
        for j, (who, value, colour) in enumerate(bars):
            x = x0 + i * slot + slot * 0.15 + j * bar_w
            out.append(f'<rect data-system="{system}" data-who="{who}" data-value="{value:.3f}" x="{x:.1f}" '  # en: not shown to readers
                       f'y="{y0 + h * (1 - value):.1f}" width="{bar_w:.1f}" height="{h * value:.1f}" fill="{colour}" '
                       f'stroke="#444444" stroke-width="0.5"/>')
            out.append(_text(x + bar_w / 2, y0 + h * (1 - value) - 3, f"{value:.0%}", size=9, anchor="middle"))
        chosen = system == frame.policy
        out.append(_text(x0 + (i + 0.5) * slot, y0 + h + 13, SYSTEM_LABELS[system], size=10, anchor="middle",
                         weight="bold" if chosen else "normal"))
    out.append("</g>")
    return out


def _title(frame: WastesFrame) -> Message:
    return tr("Orca ({system}), {arena} · KV budget {budget:,} slots · max_seq_len {max_seq_len:,} · "
              "{requests} requests", system=SYSTEM_LABELS[frame.policy], arena=ARENA_LABELS[frame.allocator],
              budget=frame.budget, max_seq_len=frame.max_seq_len, requests=frame.num_requests)


def _subtitle(frame: WastesFrame) -> Message:
    return tr("{share:.1%} of the held slots hold tokens; at most {peak} run at once; {steps:,} steps; a request "
              "waits {delay:,.0f} steps on average", share=frame.utilisation, peak=frame.peak_concurrency,
              steps=frame.total_steps, delay=frame.mean_queue_delay)


def wastes_svg(frame: WastesFrame) -> str:
    """The frame as SVG: the budget's slots over the run, the utilisation bar, and Figure 2 beside them."""
    body = [_text(12, 20, _title(frame), size=13, weight="bold"), _text(12, 38, _subtitle(frame), colour="#333333"),
            _text(TL_X, TL_Y - 6, tr("where the KV budget's slots are, step by step"), size=10, colour="#333333"),
            *_timeline(frame, TL_X, TL_Y, TL_W, TL_H, axes=True),
            _text(TL_X, BAR_Y - 22, tr("the held slots over the whole run"), size=10, colour="#333333"),
            *_utilisation_bar(frame, TL_X, BAR_Y, TL_W),
            *_legend(frame, TL_X, BAR_Y + 36, columns=2),
            *_figure2(frame, FIG_X, TL_Y + 30, FIG_W, TL_H - 30)]
    return svg_document(WIDTH, HEIGHT, body, "pagedkv-wastes", f' data-state="{escape(frame.data_state)}"')


CELL_W, CELL_H = 420, 150


def wastes_grid_svg(frames: Sequence[WastesFrame], columns: int = 2) -> str:
    """A few frames side by side (2 to 4), each its timeline and utilisation bar: the book's still of the trade-off."""
    if not 2 <= len(frames) <= 4:
        raise ValueError(f"a grid shows 2 to 4 settings, got {len(frames)}")
    check_whole("columns", columns, 1, len(frames))
    rows = -(-len(frames) // columns)
    body = []
    for i, frame in enumerate(frames):
        r, c = divmod(i, columns)
        x, y = 12 + c * (CELL_W + 16), 12 + r * (CELL_H + 12)
        body.append(f'<g class="cell" data-state="{escape(frame.data_state)}">')
        body.append(_text(x, y + 12, tr("{system}, {allocator}: {share:.1%} hold tokens",
                                        system=SYSTEM_LABELS[frame.policy], allocator=ALLOCATOR_LABELS[frame.allocator],
                                        share=frame.utilisation), size=12, weight="bold"))
        body.append(_text(x, y + 26, tr("budget {budget:,} · max_seq_len {max_seq_len:,} · peak {peak} running · "
                                        "{steps:,} steps", budget=frame.budget, max_seq_len=frame.max_seq_len,
                                        peak=frame.peak_concurrency, steps=frame.total_steps),
                          size=10, colour="#333333"))
        body += _timeline(frame, x, y + 34, CELL_W, 80, axes=False)
        body += _utilisation_bar(frame, x, y + 132, CELL_W)
        body.append("</g>")
    bottom = 12 + rows * (CELL_H + 12) + 14
    legend = _legend_keys(12, bottom)
    width = 12 + columns * (CELL_W + 16)
    state = " | ".join(f.data_state for f in frames)
    return svg_document(width, bottom + 36, body + legend, "pagedkv-wastes-grid", f' data-state="{escape(state)}"')


def _legend_keys(x0: float, y0: float) -> list[str]:
    """The kinds' swatches and names alone (each cell's shares are in its own title and bar)."""
    out = ['<g class="legend">']
    for i, kind in enumerate(KINDS):
        row, col = divmod(i, 3)
        x, y = x0 + col * 290, y0 + row * 15
        out.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" fill="{COLOURS[kind]}" '
                   f'stroke="#444444" stroke-width="0.5"/>')
        out.append(_text(x + 14, y, LABELS[kind], size=10))
    out.append(_text(x0 + 580, y0 + 15, tr("dashed tick: the paper's figure"), size=10))
    out.append("</g>")
    return out
