"""The scheduler lab (chapter 6): change the engine's settings, rerun the chapter's workload, see what follows.

The replay of chapter 6 shows one recorded run; a reader who wants to know what the token budget, the
watermark, the seats or the KV budget *do* needs a fresh run for every setting. Here the engine runs with
the simulator's :class:`~pagedkv_edu.engine.runner.StandInRunner` (no model, so a run takes milliseconds) on
the chapter's small workload (the 50 consultants at 1/32 scale, as the replay), records an
:class:`~pagedkv_edu.viz.trace.EngineTrace`, and prices every step with the chapter's step-cost model
(:class:`~pagedkv_edu.sim.decode_cost.StepCost`: Llama-3.2-1B on an H200), so time to first token and the
gaps between tokens come in the modelled milliseconds chapter 6 uses, the same on every machine.

Three parts, as the book's other widgets: :class:`SchedulerLab` is the state model (settings, a run, a step
to show; no widget), :func:`scheduler_svg` and :func:`scheduler_grid_svg` are pure renderers, and
:mod:`.scheduler_widget` only drives the model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from html import escape

from ..checks import check_whole
from ..core.request import SamplingParams
from ..engine.config import POLICIES, EngineConfig
from ..engine.engine import LLMEngine
from ..engine.runner import StandInRunner
from ..sim.decode_cost import H200, StepCost
from ..sim.sharing import few_shot_max_seq_len
from ..specs import get_spec
from ..workload import Request, copilot50
from .language import Message, tr
from .render import PALETTE, _text, svg_document
from .replay import WIDTH, frame_elements, key_frames
from .trace import EngineTrace

LENGTH_SCALE = 1 / 32
"""The chapter's small workload: the 50 consultants with every length divided by 32 (its replay's run)."""
MAX_SEQ_LEN = few_shot_max_seq_len(0, length_scale=LENGTH_SCALE)    # 2,048 / 32 = 64
BLOCK_SIZE = 4                                                     # the replay's blocks: 16 per context
DEFAULT_KV_BUDGET = 10 * MAX_SEQ_LEN                               # ten reservations, as the chapter's runs
MAX_STEPS = 100_000

TTFT_COLOUR, QUICK_COLOUR, STALL_COLOUR = PALETTE[4], PALETTE[0], PALETTE[1]   # Tol's indigo, cyan, rose
GAP_BINS: tuple[tuple[str, float], ...] = (("≤1.1×", 1.1), ("1.1–2×", 2.0), ("2–4×", 4.0), ("4–8×", 8.0),
                                           (">8×", math.inf))
"""Inter-token gaps in multiples of the decode floor (one read of the weights): the first bin is a gap no longer
than a decode step; the others are decodes held up by a prefill beside them, or by a preemption."""


MEMORY_LABELS: dict[str, Message] = {"paged": tr("paged"), "contiguous": tr("contiguous")}
"""How each memory policy is shown to the reader (the policy's name stays the setting's value)."""


def memory_label(memory: str) -> Message | str:
    return MEMORY_LABELS.get(memory, memory)


def _reason(exc: Exception) -> object:
    """An exception's message as a field: the message itself where it is one (so it renders in the reader's
    language), else its text."""
    return exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], Message) else str(exc)


def chapter_workload() -> list[Request]:
    """The requests every lab run serves: chapter 6's 50 consultants at 1/32 scale, all arriving at once."""
    return copilot50(seed=0, length_scale=LENGTH_SCALE)


def chapter_cost() -> StepCost:
    """The chapter's clock: a step of Llama-3.2-1B on an H200 (``decode_cost.StepCost``), in milliseconds."""
    return StepCost(get_spec("llama-3.2-1b"), H200)


@dataclass(frozen=True)
class SchedulerSettings:
    """The inputs of one run; checked by :class:`EngineConfig` itself when built, so a refusal is the engine's."""

    memory: str = "paged"
    max_num_batched_tokens: int | None = None
    watermark: float = 0.01
    max_num_seqs: int | None = None
    kv_budget_tokens: int = DEFAULT_KV_BUDGET

    def __post_init__(self) -> None:
        self.config()

    def config(self) -> EngineConfig:
        """The engine's settings (the block size and ``max_seq_len`` are the replay's, fixed)."""
        return EngineConfig(policy=self.memory, kv_budget_tokens=self.kv_budget_tokens, block_size=BLOCK_SIZE,
                            max_seq_len=MAX_SEQ_LEN, watermark=self.watermark, max_num_seqs=self.max_num_seqs,
                            max_num_batched_tokens=self.max_num_batched_tokens, keep_history=False)

    @property
    def state(self) -> str:
        """A short, deterministic summary, for ``data-state`` and captions."""
        budget = "none" if self.max_num_batched_tokens is None else self.max_num_batched_tokens
        seats = "none" if self.max_num_seqs is None else self.max_num_seqs
        return (f"memory={self.memory};token_budget={budget};watermark={self.watermark:g};"
                f"max_num_seqs={seats};kv_budget={self.kv_budget_tokens}")

    @property
    def caption(self) -> Message:
        """The settings as the reader reads them (a message: rendered in the reader's language when shown)."""
        budget = tr("no cap") if self.max_num_batched_tokens is None else f"{self.max_num_batched_tokens}"
        seats = tr("no cap") if self.max_num_seqs is None else f"{self.max_num_seqs}"
        watermark = f"{self.watermark:g}" if self.memory == "paged" else tr("unused")
        return tr("{memory} · token budget {budget} · watermark {watermark} · seats {seats} · KV {kv} tokens",
                  memory=memory_label(self.memory), budget=budget, watermark=watermark, seats=seats,
                  kv=self.kv_budget_tokens)


def _nearest_rank(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile: always a value that occurred (a real gap, a real request's TTFT)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class LabRun:
    """One finished run: its settings, its trace, the modelled clock after each step, each request's token steps."""

    settings: SchedulerSettings
    trace: EngineTrace
    clock_ms: tuple[float, ...]                  # after each step (one per trace frame)
    token_steps: tuple[tuple[int, ...], ...]     # per request: the step index each of its tokens was sampled at
    preemptions: int
    preempted_requests: int
    decode_floor_ms: float                       # a step that only reads the weights: the shortest possible gap

    @property
    def num_steps(self) -> int:
        return len(self.clock_ms)

    @property
    def time_ms(self) -> float:
        return self.clock_ms[-1]

    @cached_property
    def ttft_ms(self) -> tuple[float, ...]:
        """Every request arrives at 0 ms, so its TTFT is the clock after the step that sampled its first token."""
        return tuple(self.clock_ms[steps[0]] for steps in self.token_steps)

    @cached_property
    def ttft_steps(self) -> tuple[int, ...]:
        return tuple(steps[0] + 1 for steps in self.token_steps)

    @cached_property
    def gaps_ms(self) -> tuple[float, ...]:
        """The time between each pair of consecutive tokens of one request, over every request."""
        return tuple(self.clock_ms[b] - self.clock_ms[a] for steps in self.token_steps for a, b in zip(steps, steps[1:]))

    @property
    def peak_running(self) -> int:
        return max(len(f.running) for f in self.trace.frames)

    def ttft_p(self, q: float) -> float:
        return _nearest_rank(self.ttft_ms, q)

    def gap_p(self, q: float) -> float:
        return _nearest_rank(self.gaps_ms, q)

    def gap_histogram(self) -> tuple[int, ...]:
        """How many gaps fall in each of :data:`GAP_BINS` (multiples of the decode floor)."""
        counts = [0] * len(GAP_BINS)
        for gap in self.gaps_ms:
            ratio = gap / self.decode_floor_ms
            counts[next(i for i, (_, top) in enumerate(GAP_BINS) if ratio <= top)] += 1
        return tuple(counts)

    @property
    def state(self) -> str:
        """The settings and the key results, for ``data-state``."""
        return (f"{self.settings.state};steps={self.num_steps};preemptions={self.preemptions};"
                f"ttft_p99_ms={self.ttft_p(0.99):.2f};gap_p99_ms={self.gap_p(0.99):.3f};"
                f"gap_max_ms={max(self.gaps_ms):.3f}")


def run_lab(settings: SchedulerSettings, requests: Sequence[Request] | None = None,
            cost: StepCost | None = None) -> LabRun:
    """Serve ``requests`` (default :func:`chapter_workload`) with a fresh engine under ``settings``, tracing each step.

    Every request is handed over before the first step (they all arrive at once, as in the replay); the clock
    advances by ``cost`` of each step's work, as ``sim.batching.serve`` prices it. Raises ``ValueError``, naming
    the setting, when the settings can never serve a request.
    """
    requests = chapter_workload() if requests is None else list(requests)
    cost = chapter_cost() if cost is None else cost
    if not requests:
        raise ValueError("the lab needs at least one request to serve")
    trace = EngineTrace()
    try:
        engine = LLMEngine(StandInRunner(), config=settings.config(), trace=trace)
        for r in requests:
            engine.add_request([0] * r.prompt_len, SamplingParams(max_tokens=r.output_len, ignore_eos=True))
    except ValueError as exc:
        raise ValueError(tr("kv_budget_tokens={kv} cannot serve this workload with {memory} memory: {reason}",
                            kv=settings.kv_budget_tokens, memory=memory_label(settings.memory),
                            reason=_reason(exc))) from exc
    clock, now = [], 0.0
    sampled: dict[int, list[int]] = {i: [] for i in engine.requests}
    while engine.has_unfinished:
        if len(clock) >= MAX_STEPS:
            raise RuntimeError(f"the run did not finish within {MAX_STEPS} steps under {settings.caption}")
        engine.step()
        step = engine.last_step
        assert step is not None and not step.failed, "every request was checked to fit the memory alone"
        now += cost([(s.num_new_tokens, s.num_computed_tokens) for s in step.scheduled])
        clock.append(now)
        for s in step.scheduled:
            if s.samples:                        # the step reached its last token: it sampled one
                sampled[s.seq.request_id].append(len(clock) - 1)
    records = engine.requests.values()
    return LabRun(settings, trace, tuple(clock), tuple(tuple(sampled[i]) for i in sorted(sampled)),
                  engine.scheduler.num_preemptions, sum(r.num_preemptions > 0 for r in records),
                  cost.decode_ms(1, 1))


class SchedulerLab:
    """The state model: the settings, the run they give, and the step of it on show.

    Every setter builds the new settings and reruns the engine *before* it changes anything, so a refused
    value (``ValueError``, naming it) leaves the settings, the run and the step as they were.
    """

    def __init__(self, settings: SchedulerSettings | None = None, *, requests: Sequence[Request] | None = None,
                 cost: StepCost | None = None, index: int | None = None) -> None:
        self.requests = chapter_workload() if requests is None else list(requests)
        self.cost = chapter_cost() if cost is None else cost
        self.settings = SchedulerSettings() if settings is None else settings
        self.run = run_lab(self.settings, self.requests, self.cost)
        default = key_frames(self.run.trace).get("first preemption", 0)  # en: not shown to readers (rule names: keys)
        self.index = 0
        self.seek(default if index is None else index)

    @property
    def num_frames(self) -> int:
        return self.run.num_steps

    def update(self, **changes: object) -> None:
        """Rerun with some settings changed (``memory=``, ``max_num_batched_tokens=``, ...); the step shown stays
        where it was, or moves to the new run's last step if that run is shorter."""
        new = dataclasses.replace(self.settings, **changes)   # EngineConfig checks each value here
        run = run_lab(new, self.requests, self.cost)           # ... and the engine refuses what never fits
        self.settings, self.run = new, run
        self.index = min(self.index, run.num_steps - 1)

    def set_memory(self, memory: str) -> None:
        if memory not in POLICIES:
            raise ValueError(f"unknown memory {memory!r}; choose one of {POLICIES}")
        self.update(memory=memory)

    def set_token_budget(self, max_num_batched_tokens: int | None) -> None:
        self.update(max_num_batched_tokens=max_num_batched_tokens)

    def set_watermark(self, watermark: float) -> None:
        self.update(watermark=watermark)

    def set_max_num_seqs(self, max_num_seqs: int | None) -> None:
        self.update(max_num_seqs=max_num_seqs)

    def set_kv_budget(self, kv_budget_tokens: int) -> None:
        self.update(kv_budget_tokens=kv_budget_tokens)

    def seek(self, index: int) -> None:
        """Show step ``index`` (0-based) of the current run."""
        self.index = check_whole("step index", index, 0, self.num_frames - 1)  # en: not shown to readers (a programming error's name)

    @property
    def state(self) -> str:
        return f"{self.run.state};step={self.index + 1}/{self.num_frames}"

    def svg(self) -> str:
        return scheduler_svg(self.run, self.index)


# --- drawing -------------------------------------------------------------------------------------
PAD, LINE = 12, 16
PANEL_H = 150
CHART_W, CHART_H = 330, 84


def _nice_ceiling(value: float) -> float:
    """The axis end: the first of 1, 2, 5 × 10^k at or above ``value``."""
    if value <= 0:
        return 1.0
    k = math.floor(math.log10(value))
    return next(m * 10.0 ** e for e in (k, k + 1) for m in (1, 2, 5) if m * 10.0 ** e >= value)


def _ttft_chart(run: LabRun, x0: float, top: float, axis_ms: float) -> list[str]:
    """Time to first token, as the share of requests that had their first token by each moment (a staircase)."""
    ttft, n = sorted(run.ttft_ms), len(run.ttft_ms)
    px = lambda ms: x0 + CHART_W * min(ms, axis_ms) / axis_ms            # noqa: E731
    py = lambda share: top + CHART_H * (1 - share)                        # noqa: E731
    points = [f"{px(0):.1f},{py(0):.1f}"]
    for i, t in enumerate(ttft):
        points += [f"{px(t):.1f},{py(i / n):.1f}", f"{px(t):.1f},{py((i + 1) / n):.1f}"]
    out = [f'<g class="ttft" data-p50="{run.ttft_p(0.5):.2f}" data-p99="{run.ttft_p(0.99):.2f}">',
           f'<rect x="{x0:g}" y="{top:g}" width="{CHART_W}" height="{CHART_H}" fill="none" stroke="#999999"/>',
           f'<polyline points="{" ".join(points)}" fill="none" stroke="{TTFT_COLOUR}" stroke-width="2"/>']  # en: not shown to readers
    for q, dash in ((0.5, "4 2"), (0.99, "1 2")):
        x = px(run.ttft_p(q))
        out.append(f'<line x1="{x:.1f}" y1="{top:g}" x2="{x:.1f}" y2="{top + CHART_H:g}" stroke="#000000" '
                   f'stroke-dasharray="{dash}"/>')
    title = tr("time to first token: p50 {p50:.1f} ms (dashed), p99 {p99:.1f} ms (dotted)", p50=run.ttft_p(0.5),
               p99=run.ttft_p(0.99))
    out += [_text(x0, top - 4, str(title), size=10),
            _text(x0, top + CHART_H + 12, "0", size=9, colour="#555555"),
            _text(x0 + CHART_W, top + CHART_H + 12, str(tr("{ms:g} ms (modelled)", ms=axis_ms)), size=9,
                  anchor="end", colour="#555555"),
            _text(x0 + CHART_W - 4, top + CHART_H - 5, str(tr("share of requests with their first token")), size=9,
                  anchor="end", colour="#555555"), "</g>"]
    return out


def _gap_chart(run: LabRun, x0: float, top: float) -> list[str]:
    """The inter-token gaps by length, in multiples of the decode floor; bar length on a log scale, so that the
    few stalls show beside the many ordinary gaps."""
    counts = run.gap_histogram()
    biggest = math.log10(1 + max(counts))
    row = CHART_H / len(GAP_BINS)
    out = [f'<g class="gaps" data-counts="{" ".join(map(str, counts))}" data-p99="{run.gap_p(0.99):.3f}" '
           f'data-max="{max(run.gaps_ms):.3f}">',
           _text(x0, top - 4, str(tr("gaps between tokens: p50 {p50:.2f}, p99 {p99:.2f}, worst {worst:.2f} ms",
                                     p50=run.gap_p(0.5), p99=run.gap_p(0.99), worst=max(run.gaps_ms))), size=10)]
    for i, ((label, _), count) in enumerate(zip(GAP_BINS, counts)):
        y = top + i * row
        w = (CHART_W - 110) * math.log10(1 + count) / biggest
        colour = QUICK_COLOUR if i == 0 else STALL_COLOUR
        out.append(_text(x0 + 44, y + row - 5, label, size=9, anchor="end"))
        out.append(f'<rect x="{x0 + 50:g}" y="{y + 2:.1f}" width="{w:.1f}" height="{row - 4:.1f}" fill="{colour}"/>')
        out.append(_text(x0 + 54 + w, y + row - 5, f"{count}", size=9))
    out.append(_text(x0 + CHART_W, top + CHART_H + 12,
                     str(tr("× the decode floor ({floor:.2f} ms); bars: log scale", floor=run.decode_floor_ms)), size=9,
                     anchor="end", colour="#555555"))
    out.append("</g>")
    return out


def panel_elements(run: LabRun, top: float, *, ttft_axis_ms: float | None = None) -> tuple[list[str], float]:
    """The metrics panel of ``run`` (its counts, TTFT and gap charts) from ``top``; the elements and the bottom edge.

    ``ttft_axis_ms`` fixes the TTFT axis, so the panels of a grid compare at a glance.
    """
    axis = _nice_ceiling(max(run.ttft_ms)) if ttft_axis_ms is None else ttft_axis_ms
    preempted = (tr("{preemptions} preemptions ({requests} requests)", preemptions=run.preemptions,
                    requests=run.preempted_requests) if run.preemptions else tr("no preemption"))
    summary = tr("this run: {steps} steps, {ms:.1f} ms modelled · {preempted} · peak {peak} running",
                 steps=run.num_steps, ms=run.time_ms, preempted=preempted, peak=run.peak_running)
    out = [f'<g class="metrics" data-steps="{run.num_steps}" data-preemptions="{run.preemptions}">',
           _text(PAD, top + 12, str(summary), weight="bold", cls="summary")]
    out += _ttft_chart(run, PAD, top + LINE + 18, axis)
    out += _gap_chart(run, PAD + CHART_W + 60, top + LINE + 18)
    out.append("</g>")
    return out, top + PANEL_H


def scheduler_svg(run: LabRun, index: int) -> str:
    """The lab's picture: the settings, step ``index`` of the run (the replay's frame) and the run's metrics."""
    header = _text(PAD, PAD + 12, str(run.settings.caption), weight="bold", cls="settings")
    frame, height = frame_elements(run.trace, index)
    body = [header, f'<g class="frame" transform="translate(0,{LINE + 4})">', *frame, "</g>"]
    panel, bottom = panel_elements(run, LINE + 4 + height)
    state = f"{run.state};step={index + 1}/{run.num_steps}"
    return svg_document(WIDTH, bottom + PAD, body + panel, "pagedkv-scheduler", f' data-state="{escape(state)}"')


TRADE_OFFS: tuple[SchedulerSettings, ...] = (
    SchedulerSettings(),
    SchedulerSettings(max_num_batched_tokens=128),
    SchedulerSettings(max_num_batched_tokens=32),
    SchedulerSettings(max_num_batched_tokens=128, watermark=0.1),
)
"""The still's four runs: no cap (the chapter's default here), a budget near the ridge, one far under it, and the
ridge's budget with a larger watermark."""


def scheduler_grid_svg(runs: Sequence[LabRun], *, columns: int = 2) -> str:
    """Several runs' metrics panels side by side, on one TTFT axis: the lab's still, for the book."""
    if not runs:
        raise ValueError("no run to draw: pass at least one LabRun")
    check_whole("columns", columns, 1)
    axis = _nice_ceiling(max(max(r.ttft_ms) for r in runs))
    scale, tile_w, tile_h = 0.75, WIDTH, PANEL_H + LINE + PAD
    out = []
    for i, run in enumerate(runs):
        r, c = divmod(i, columns)
        x, y = c * (tile_w * scale + PAD), r * (tile_h * scale + PAD)
        panel, _ = panel_elements(run, LINE + 2, ttft_axis_ms=axis)
        out += [f'<g class="lab-run" data-state="{escape(run.state)}">',
                f'<svg x="{x:g}" y="{y:g}" width="{tile_w * scale:g}" height="{tile_h * scale:g}" '
                f'viewBox="0 0 {tile_w:g} {tile_h:g}">',
                f'<rect width="{tile_w:g}" height="{tile_h:g}" fill="#FFFFFF" stroke="#999999"/>',  # en: not shown to readers
                _text(PAD, 14, str(run.settings.caption), weight="bold", cls="settings"), *panel, "</svg>", "</g>"]
    rows = -(-len(runs) // columns)
    cols = min(columns, len(runs))
    width, height = cols * tile_w * scale + (cols - 1) * PAD, rows * tile_h * scale + (rows - 1) * PAD
    state = " | ".join(r.settings.state for r in runs)
    return svg_document(width, height, out, "pagedkv-scheduler-grid", f' data-state="{escape(state)}"')


__all__ = ["BLOCK_SIZE", "DEFAULT_KV_BUDGET", "GAP_BINS", "LENGTH_SCALE", "LabRun", "MAX_SEQ_LEN", "SchedulerLab",
           "SchedulerSettings", "TRADE_OFFS", "chapter_cost", "chapter_workload", "panel_elements", "run_lab",
           "scheduler_grid_svg", "scheduler_svg"]
