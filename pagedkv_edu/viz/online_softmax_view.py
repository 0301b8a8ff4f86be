"""The online softmax and the split-K merge, replayed tile by tile on one query (chapter 4).

:class:`OnlineSoftmaxState` is the state model: a seeded query with its keys and values, a tile size, a
number of splits and a step. It runs the decode kernel's running update (max, rescale, sum, accumulator)
in float64 NumPy, once as one program over the whole sequence and once per split, and then the merge, so a
reader can change the inputs and see what each tile does. :func:`softmax_svg` draws it, a pure function;
:func:`softmax_grid_svg` draws a few settings side by side, the book's still; :mod:`.online_softmax_widget`
only drives the state.

The arithmetic is the PyTorch specification of chapter 4's piece 4, in natural exponentials. The kernel
works in base 2 (scores times ``log2 e``, ``exp2``): its ``m`` is this ``m`` times ``log2 e``, and its
rescaling factors, sums, accumulators and merge weights are these same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np

from ..checks import check_whole
from .kernel_view import split_ranges
from .language import Message, tr
from .render import ERROR_COLOUR, FREE_COLOUR, PALETTE, _text_colour, svg_document
from .render import _text as _svg_text

SCORE_PATTERNS: tuple[str, ...] = ("random", "rising", "falling", "near 1,000")
"""How the keys are drawn: at random; drifting so later keys score higher (the max grows, old sums are
rescaled) or lower (the first tile's max stands); or shifted to scores near 1,000, where exp overflows."""
PATTERN_LABELS: dict[str, Message] = {"random": tr("random"), "rising": tr("rising"), "falling": tr("falling"),
                                      "near 1,000": tr("near 1,000")}
"""What the scores control and the pictures show for each of SCORE_PATTERNS (the values stay code)."""
TILE_SIZES: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 16, 32)
"""The widget's choices; 3 and 6 are there to be refused (a kernel tile is a power of two, a block need not be)."""
MIN_KEYS, MAX_KEYS = 4, 64
MAX_SPLITS = 8
MAX_HEAD_DIM = 8
MAX_SEED = 2**32 - 1
DRIFT = {"random": 0.0, "rising": 0.3, "falling": -0.3, "near 1,000": 0.0}   # score added per key position
SHIFT = {"random": 0.0, "rising": 0.0, "falling": 0.0, "near 1,000": 1000.0}
MATCH_TOLERANCE = 1e-12   # float64: the online and merged outputs equal the direct one to rounding


@dataclass(frozen=True)
class TileStep:
    """What one tile does to one program's running state: ``m, l, acc`` before and after."""

    index: int                    # the tile's number within its program
    start: int                    # its keys are positions start .. end - 1
    end: int
    tile_max: float
    m_old: float                  # -inf before the first tile
    m_new: float
    alpha: float                  # exp(m_old - m_new): what the old l and acc are multiplied by
    p_sum: float                  # the tile's sum of exp(s - m_new)
    l_old: float
    l_new: float
    acc_old: tuple[float, ...]
    pv: tuple[float, ...]         # the tile's sum of exp(s - m_new) * v
    acc_new: tuple[float, ...]

    @property
    def rescaled(self) -> bool:
        """The max grew over something already summed: the old l and acc shrank."""
        return self.l_old > 0 and self.alpha < 1.0


@dataclass(frozen=True)
class SplitPartial:
    """One split-K program's final state over its keys, and its share of the merge."""

    index: int
    start: int
    end: int
    num_tiles: int
    m: float                      # -inf for an empty split
    l: float                      # 0 for an empty split
    acc: tuple[float, ...]
    weight: float                 # exp(m_i - m) * l_i / L, 0 for an empty split

    @property
    def output(self) -> tuple[float, ...]:
        """The normalised partial output ``acc / l`` the kernel writes (0 for an empty split)."""
        return tuple(a / self.l for a in self.acc) if self.l > 0 else tuple(0.0 for _ in self.acc)

    @property
    def lse(self) -> float:
        """The base-2 log-sum-exp the kernel writes beside it: ``m log2 e + log2 l``, -inf when empty."""
        return self.m * math.log2(math.e) + math.log2(self.l) if self.l > 0 else -math.inf


def fold_tile(m: float, l: float, acc: np.ndarray, scores: np.ndarray,
              values: np.ndarray) -> tuple[float, float, float, float, np.ndarray, np.ndarray]:
    """The kernel's running update for one tile: ``(m_new, alpha, p_sum, l_new, pv, acc_new)``.

    The new max first, so every exponent is at most 0; what was summed against the old max is
    multiplied by ``alpha = exp(m - m_new)`` (0 before the first tile, where there is nothing yet).
    """
    m_new = max(m, float(scores.max()))
    alpha = math.exp(m - m_new)
    p = np.exp(scores - m_new)
    pv = p @ values
    p_sum = float(p.sum())
    return m_new, alpha, p_sum, l * alpha + p_sum, pv, acc * alpha + pv


def run_program(scores: np.ndarray, values: np.ndarray, start: int, end: int,
                tile_n: int) -> tuple[TileStep, ...]:
    """One program's loop over its keys ``start .. end - 1`` in tiles of ``tile_n`` (the last may be ragged)."""
    m, l, acc = -math.inf, 0.0, np.zeros(values.shape[1])
    steps = []
    for index, a in enumerate(range(start, end, tile_n)):
        b = min(a + tile_n, end)
        m_new, alpha, p_sum, l_new, pv, acc_new = fold_tile(m, l, acc, scores[a:b], values[a:b])
        steps.append(TileStep(index, a, b, float(scores[a:b].max()), m, m_new, alpha, p_sum, l, l_new,
                              tuple(acc.tolist()), tuple(pv.tolist()), tuple(acc_new.tolist())))
        m, l, acc = m_new, l_new, acc_new
    return tuple(steps)


def merge_splits(parts: Sequence[tuple[int, int, tuple[TileStep, ...]]],
                 head_dim: int) -> tuple[tuple[SplitPartial, ...], tuple[float, ...]]:
    """The split-K merge: each split weighs ``exp(m_i - m) * l_i / L``; the output is the weighted mean.

    ``parts`` holds each split's ``(start, end, tile steps)``. An empty split (``l = 0``) weighs 0,
    as the kernel's ``lse = -inf`` does.
    """
    finals = [(a, b, steps[-1].m_new if steps else -math.inf, steps[-1].l_new if steps else 0.0,
               np.array(steps[-1].acc_new) if steps else np.zeros(head_dim)) for a, b, steps in parts]
    m = max(f[2] for f in finals)
    scaled = [math.exp(mi - m) * li if li > 0 else 0.0 for _, _, mi, li, _ in finals]
    total = sum(scaled)
    out = sum((s / total * acc / li for s, (_, _, _, li, acc) in zip(scaled, finals) if li > 0),
              np.zeros(head_dim))
    partials = tuple(SplitPartial(i, a, b, len(steps), mi, li, tuple(acc.tolist()), s / total)
                     for i, ((a, b, mi, li, acc), (_, _, steps), s) in enumerate(zip(finals, parts, scaled)))
    return partials, tuple(out.tolist())


def draw_inputs(seed: int, pattern: str, head_dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The query ``[D]``, keys ``[MAX_KEYS, D]`` and values ``[MAX_KEYS, D]`` of a seed and a score pattern.

    Always ``MAX_KEYS`` keys, so more keys append to the same sequence. A pattern moves key ``j``
    along the query's direction so its score gains ``SHIFT + DRIFT * j``: the scores still are
    ``q . k / sqrt(D)``, only the keys differ.
    """
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(head_dim)
    keys = rng.standard_normal((MAX_KEYS, head_dim))
    values = rng.standard_normal((MAX_KEYS, head_dim))
    gain = SHIFT[pattern] + DRIFT[pattern] * np.arange(MAX_KEYS)
    keys += np.outer(gain * math.sqrt(head_dim) / float(q @ q), q)
    return q, keys, values


class OnlineSoftmaxState:
    """The inputs (keys, tile size, splits, seed, score pattern, step) and everything the kernel computes.

    Every setter checks the whole new combination before it changes anything, and raises ``ValueError``
    naming the bad value; a refused change leaves the state as it was. When a change leaves fewer
    tiles, the step moves to the last one (the tile the reader was on no longer exists).
    """

    def __init__(self, num_keys: int = 32, tile_n: int = 8, num_splits: int = 2, seed: int = 0,
                 pattern: str = "random", step: int = 0, *, head_dim: int = 4) -> None:
        self.head_dim = check_whole("head_dim", head_dim, 1, MAX_HEAD_DIM)
        self.step = 0
        self._apply(num_keys, tile_n, num_splits, seed, pattern)
        self.seek(step)

    # --- the inputs ------------------------------------------------------------------------------
    def set_num_keys(self, num_keys: int) -> None:
        self._apply(num_keys, self.tile_n, self.num_splits, self.seed, self.pattern)

    def set_tile_n(self, tile_n: int) -> None:
        self._apply(self.num_keys, tile_n, self.num_splits, self.seed, self.pattern)

    def set_num_splits(self, num_splits: int) -> None:
        self._apply(self.num_keys, self.tile_n, num_splits, self.seed, self.pattern)

    def set_seed(self, seed: int) -> None:
        self._apply(self.num_keys, self.tile_n, self.num_splits, seed, self.pattern)

    def set_pattern(self, pattern: str) -> None:
        self._apply(self.num_keys, self.tile_n, self.num_splits, self.seed, pattern)

    def seek(self, step: int) -> None:
        """Show the single program's state after tile ``step`` (0 = the first tile)."""
        self.step = check_whole("step", step, 0, len(self.steps) - 1)

    def _apply(self, num_keys: int, tile_n: int, num_splits: int, seed: int, pattern: str) -> None:
        """Check the combination, compute everything, and only then replace the state."""
        check_whole("num_keys", num_keys, MIN_KEYS, MAX_KEYS)
        check_whole("tile_n", tile_n, 1, MAX_KEYS)
        if tile_n & (tile_n - 1):
            raise ValueError(tr("tile_n={tile_n} is not a power of two: the kernel's tl.arange(0, TILE_N) needs one "
                                "(the block size need not be one; the tile is what the kernel loads at once)",
                                tile_n=tile_n))
        check_whole("num_splits", num_splits, 1, MAX_SPLITS)
        check_whole("seed", seed, 0, MAX_SEED)
        if pattern not in SCORE_PATTERNS:
            raise ValueError(f"unknown score pattern {pattern!r}; choose one of {', '.join(SCORE_PATTERNS)}")
        num_tiles = -(-num_keys // tile_n)
        if num_splits > num_tiles:
            raise ValueError(tr("num_splits={num_splits} is more than the {tiles} of {num_keys} keys in tiles of "
                                "{tile_n}: a split is a program over whole tiles, so {extra} would read nothing; use "
                                "at most {num_tiles} splits, smaller tiles or more keys", num_splits=num_splits,
                                tiles=_tiles(num_tiles), num_keys=num_keys, tile_n=tile_n,
                                extra=num_splits - num_tiles, num_tiles=num_tiles))
        q, keys, values = draw_inputs(seed, pattern, self.head_dim)
        scores = keys[:num_keys] @ q / math.sqrt(self.head_dim)
        values = values[:num_keys]
        steps = run_program(scores, values, 0, num_keys, tile_n)
        ranges = split_ranges(num_keys, num_splits, tile_n)
        partials, merged = merge_splits([(a, b, run_program(scores, values, a, b, tile_n)) for a, b in ranges],
                                        self.head_dim)
        weights = np.exp(scores - scores.max())
        direct = weights / weights.sum() @ values
        # Everything is computed: replace the state in one go.
        self.num_keys, self.tile_n, self.num_splits, self.seed, self.pattern = (num_keys, tile_n, num_splits,
                                                                                seed, pattern)
        self.scores, self.values, self.steps = scores, values, steps
        self.partials, self.merged, self.direct = partials, merged, tuple(direct.tolist())
        self.step = min(self.step, len(steps) - 1)

    # --- what follows from them ------------------------------------------------------------------
    @property
    def num_tiles(self) -> int:
        return len(self.steps)

    @property
    def current(self) -> TileStep:
        return self.steps[self.step]

    @property
    def output_so_far(self) -> tuple[float, ...]:
        """``acc / l`` after the current tile: the softmax over the keys seen so far, times their values."""
        return tuple(a / self.current.l_new for a in self.current.acc_new)

    @property
    def online_error(self) -> float:
        """Largest difference between the single program's final ``acc / l`` and the direct softmax."""
        last = self.steps[-1]
        return max(abs(a / last.l_new - d) for a, d in zip(last.acc_new, self.direct))

    @property
    def merged_error(self) -> float:
        """Largest difference between the merged split-K output and the direct softmax."""
        return max(abs(a - d) for a, d in zip(self.merged, self.direct))

    @property
    def naive_sum(self) -> float:
        """``sum(exp(s))`` without subtracting any max: inf once a score passes about 709.8 in float64."""
        with np.errstate(over="ignore"):
            return float(np.exp(self.scores).sum())

    def data_state(self) -> str:
        """A short deterministic summary of the inputs and results, for the SVG's ``data-state``."""
        weights = "/".join(f"{p.weight:.3f}" for p in self.partials)
        match = max(self.online_error, self.merged_error) <= MATCH_TOLERANCE
        return (f"keys={self.num_keys};tile={self.tile_n};splits={self.num_splits};seed={self.seed};"
                f"scores={self.pattern};step={self.step};m={self.current.m_new:.4g};l={self.current.l_new:.4g};"
                f"alpha={self.current.alpha:.4g};weights={weights};match={'yes' if match else 'no'}")

    def summary(self) -> Message:
        """One line for the same state (the picture's ``aria-label``, and what a plain-text display shows)."""
        verdict = (tr("merged output equals the direct one") if self.merged_error <= MATCH_TOLERANCE
                   else tr("merged output differs from the direct one"))
        return tr("online softmax: {keys} keys ({pattern}), tiles of {tile}, after tile t{step} of t0–t{last}; "
                  "{splits}, {verdict}", keys=self.num_keys, pattern=PATTERN_LABELS[self.pattern], tile=self.tile_n,
                  step=self.step, last=self.num_tiles - 1, splits=_splits(self.num_splits), verdict=verdict)


def _tiles(n: int) -> Message:
    return tr("{n} tile", n=n) if n == 1 else tr("{n} tiles", n=n)


def _splits(n: int) -> Message:
    return tr("{n} split", n=n) if n == 1 else tr("{n} splits", n=n)


# --- drawing ---------------------------------------------------------------------------------------
# Paul Tol's BuRd diverging scheme, for signed values in the heat rows (every cell also prints its number).
DIVERGING: tuple[str, ...] = ("#2166AC", "#4393C3", "#92C5DE", "#D1E5F0", "#F7F7F7",
                              "#FDDBC7", "#F4A582", "#D6604D", "#B2182B")
MAX_COLOUR = "#CC6677"        # Tol's rose: the running max
CURRENT_COLOUR = "#DDCC77"    # Tol's sand: the current tile
BAR_COLOUR = "#332288"        # Tol's indigo: alpha, l and the merge weights
WIDTH = 780
LABEL_W = 118
CELL_W, CELL_H = 64, 18


def _text(x: float, y: float, content: str, **style: object) -> str:
    """:func:`.render._text`, with ``content`` a :class:`~.language.Message` written in the reader's language."""
    return _svg_text(x, y, str(content), **style)


def _num(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` decimals with a true minus sign; -inf as ``−∞``, and no ``−0.000``."""
    if x == -math.inf:
        return "−∞"
    text = f"{x:.{digits}f}"
    return (text.lstrip("-") if float(text) == 0 else text).replace("-", "−")


def _heat(x: float, scale: float) -> str:
    level = 0.0 if scale <= 0 else max(-1.0, min(1.0, x / scale))
    return DIVERGING[round((level + 1) * 4)]


def _heat_row(x0: float, y: float, label: str, values: Sequence[float], scale: float, cls: str,
              cell_w: float = CELL_W) -> list[str]:
    """A labelled row of cells, one per head_dim coordinate, coloured by sign and size and printed."""
    out = [f'<g class="{cls}" data-values="{" ".join(f"{v:.6g}" for v in values)}">',
           _text(x0 - 6, y + 13, label, size=10, anchor="end")]
    for i, v in enumerate(values):
        fill = _heat(v, scale)
        out.append(f'<rect x="{x0 + i * cell_w:g}" y="{y:g}" width="{cell_w - 2:g}" height="{CELL_H}" '
                   f'fill="{fill}" stroke="#999999" stroke-width="0.5"/>')
        out.append(_text(x0 + i * cell_w + cell_w / 2 - 1, y + 13, _num(v, 3 if cell_w >= 50 else 2), size=10,
                         anchor="middle", colour=_text_colour(fill), mono=True))
    out.append("</g>")
    return out


def _key_axis(state: OnlineSoftmaxState, x0: float, width: float, y: float, compact: bool) -> tuple[list[str], float]:
    """Scores as dots over the key positions, the running max as a staircase, then the tiles, alpha, l and splits."""
    cw, top = width / state.num_keys, y
    lo, hi = float(state.scores.min()), float(state.scores.max())
    span = hi - lo or 1.0
    chart_h = 56 if compact else 84

    def to_y(score: float) -> float:
        return top + 6 + (hi - score) / span * (chart_h - 12)

    out = [_text(x0 - 6, y + 12, tr("scores s"), size=10, anchor="end"),
           _text(x0 - 6, y + 24, tr("{value} top", value=_num(hi, 2)), size=9, anchor="end", colour="#555555"),
           _text(x0 - 6, y + chart_h - 4, tr("{value} bottom", value=_num(lo, 2)), size=9, anchor="end",
                 colour="#555555"),
           f'<rect x="{x0:g}" y="{y:g}" width="{width:g}" height="{chart_h}" fill="none" stroke="#BBBBBB"/>']
    cur = state.current
    out.append(f'<rect class="current-tile" x="{x0 + cur.start * cw:g}" y="{y:g}" '  # en: not shown to readers
               f'width="{(cur.end - cur.start) * cw:g}" height="{chart_h}" fill="{CURRENT_COLOUR}" '
               f'fill-opacity="0.35"/>')
    for j, s in enumerate(state.scores):
        tile = j // state.tile_n
        done = tile <= state.step
        fill = PALETTE[tile % 2 * 4] if done else FREE_COLOUR   # alternate sky and indigo tiles; grey: not yet read
        out.append(f'<circle cx="{x0 + (j + 0.5) * cw:.1f}" cy="{to_y(float(s)):.1f}" r="{2.2 if compact else 3}" '  # en: not shown to readers
                   f'fill="{fill}" stroke="#555555" stroke-width="0.4"/>')
    stairs = []
    for st in state.steps[:state.step + 1]:
        yy = to_y(st.m_new)
        stairs += [f"{x0 + st.start * cw:.1f},{yy:.1f}", f"{x0 + st.end * cw:.1f},{yy:.1f}"]
    out.append(f'<polyline class="running-max" points="{" ".join(stairs)}" fill="none" stroke="{MAX_COLOUR}" '  # en: not shown to readers
               f'stroke-width="2"/>')
    y += chart_h + 4
    # The tiles, alpha and l, each drawn under its tile's keys.
    rows = (("tiles", tr("tiles"), 16), ("alpha", "α" if compact else "α = exp(m_old − m_new)", 26),
            ("l", "l" if compact else tr("l (running sum)"), 26))
    l_top = max(st.l_new for st in state.steps)
    for name, label, h in rows:
        out.append(_text(x0 - 6, y + h / 2 + 4, label, size=10, anchor="end"))
        for st in state.steps:
            tx, tw = x0 + st.start * cw, (st.end - st.start) * cw
            done = st.index <= state.step
            if name == "tiles":
                fill = CURRENT_COLOUR if st.index == state.step else ("#FFFFFF" if done else FREE_COLOUR)
                out.append(f'<rect x="{tx + 0.5:.1f}" y="{y:g}" width="{tw - 1:.1f}" height="{h}" fill="{fill}" '
                           f'stroke="#444444" stroke-width="{1.5 if st.index == state.step else 0.5}"/>')
                if tw >= 18:
                    out.append(_text(tx + tw / 2, y + 12, f"t{st.index}", size=9, anchor="middle"))
                continue
            if not done:
                continue
            value, frac = (st.alpha, st.alpha) if name == "alpha" else (st.l_new, st.l_new / l_top)
            out.append(f'<rect x="{tx + 1:.1f}" y="{y + h * (1 - frac):.1f}" width="{max(tw - 2, 0.5):.1f}" '
                       f'height="{h * frac:.1f}" fill="{BAR_COLOUR}" fill-opacity="0.75"/>')
            if tw >= 30:
                out.append(_text(tx + tw / 2, y + h - 3 if frac > 0.6 else y + h * (1 - frac) - 2,
                                 _num(value, 2), size=9, anchor="middle",
                                 colour="#FFFFFF" if frac > 0.6 else "#000000"))
        out.append(f'<line x1="{x0:g}" y1="{y + h:g}" x2="{x0 + width:g}" y2="{y + h:g}" stroke="#BBBBBB"/>')
        y += h + 4
    out.append(_text(x0 - 6, y + 12, tr("splits"), size=10, anchor="end"))
    for p in state.partials:
        colour = PALETTE[p.index % len(PALETTE)]
        if p.end > p.start:
            px, pw = x0 + p.start * cw, (p.end - p.start) * cw
            out.append(f'<rect class="split" data-split="{p.index}" x="{px + 0.5:.1f}" y="{y:g}" '  # en: not shown to readers
                       f'width="{pw - 1:.1f}" height="16" fill="{colour}"/>')
            if pw >= 40:
                out.append(_text(px + pw / 2, y + 12, tr("split {index}", index=p.index), size=9, anchor="middle",
                                 colour=_text_colour(colour)))
    return out, y + 20


def _step_lines(state: OnlineSoftmaxState) -> list[str]:
    st = state.current
    keys = (tr("key {start}", start=st.start) if st.end - st.start == 1 else
            tr("keys {start}–{last}", start=st.start, last=st.end - 1))
    if st.index == 0:
        rescale = tr("α = exp(−∞ − m_new) = 0: there is nothing summed yet to rescale")
    elif st.alpha < 1:
        rescale = tr("α = exp({m_old} − {m_new}) = {alpha:.4f}: the max grew, so the old l and acc, summed against "
                     "the old max, are multiplied by α", m_old=_num(st.m_old), m_new=_num(st.m_new), alpha=st.alpha)
    else:
        rescale = tr("α = exp(0) = 1: this tile's max is not higher, the old l and acc stand as they are")
    return [tr("tile t{index} ({keys}): its max {tile_max}; running max m: {m_old} → {m_new}", index=st.index,
               keys=keys, tile_max=_num(st.tile_max), m_old=_num(st.m_old), m_new=_num(st.m_new)),
            rescale,
            f"l = l_old·α + Σ exp(s − m_new) = {_num(st.l_old)} × {st.alpha:.4f} + {_num(st.p_sum)} = "
            f"{_num(st.l_new)}",
            tr("acc = acc_old·α + Σ exp(s − m_new)·v, one cell per head_dim coordinate:")]


def _accumulator(state: OnlineSoftmaxState, y: float) -> tuple[list[str], float]:
    st, x0 = state.current, 210
    acc_scale = max(max(map(abs, row)) for row in (st.acc_old, st.pv, st.acc_new)) or 1.0
    out_scale = max(max(map(abs, state.output_so_far)), max(map(abs, state.direct))) or 1.0
    rescaled = tuple(a * st.alpha for a in st.acc_old)
    out: list[str] = []
    for label, values, scale, cls in ((tr("acc before this tile"), st.acc_old, acc_scale, "acc-old"),
                                      (tr("× α (rescaled)"), rescaled, acc_scale, "acc-rescaled"),
                                      ("+ Σ exp(s − m_new)·v", st.pv, acc_scale, "acc-tile"),
                                      (tr("= acc after this tile"), st.acc_new, acc_scale, "acc-new"),
                                      (tr("acc / l: output so far"), state.output_so_far, out_scale, "output-so-far"),
                                      (tr("direct softmax(s)·V"), state.direct, out_scale, "direct")):
        out += _heat_row(x0, y, label, values, scale, cls)
        y += CELL_H + 3
    last = state.step == state.num_tiles - 1
    verdict = (tr("after the last tile, acc / l equals the direct softmax over all {keys} keys: max |difference| = "
                  "{error:.1e}", keys=state.num_keys, error=state.online_error) if last else
               tr("acc / l covers keys 0–{end} so far; step to tile t{last}, the last, for the whole softmax",
                  end=state.current.end - 1, last=state.num_tiles - 1))
    out.append(_text(x0, y + 12, verdict, size=10, cls="verdict", colour="#117733" if last else "#333333"))
    naive = state.naive_sum
    naive_text = tr("inf (float64 overflows past 709.8)") if naive == math.inf else f"{naive:.4g}"
    out.append(_text(x0, y + 27, tr("Σ exp(s) with no max subtracted: {naive}; with the running max every exponent "
                                    "is ≤ 0", naive=naive_text), size=10, colour="#555555"))
    return out, y + 36


def _split_panel(state: OnlineSoftmaxState, y: float) -> tuple[list[str], float]:
    m = max(p.m for p in state.partials)
    total = sum(math.exp(p.m - m) * p.l for p in state.partials if p.l > 0)
    programs = (tr("{n} program", n=state.num_splits) if state.num_splits == 1 else
                tr("{n} programs", n=state.num_splits))
    out = [_text(12, y + 12, tr("split-K: {programs} of whole tiles, each ends with its own (m_i, l_i, acc_i)",
                                programs=programs), size=11, weight="bold"),
           _text(12, y + 27, tr("merge weight w_i = exp(m_i − m)·l_i / L with m = max m_i = {m}, "
                                "L = Σ exp(m_i − m)·l_i = {total} (the kernel's 2^(lse_i − max lse) / Σ); "
                                "right: acc_i / l_i", m=_num(m), total=_num(total)), size=10, colour="#555555")]
    y += 36
    x_bar, x_out = 338, 500
    scale = max(abs(v) for row in (state.direct, *(p.output for p in state.partials)) for v in row) or 1.0
    cell_w = min(66, (WIDTH - x_out - 12) / state.head_dim)
    for p in state.partials:
        colour = PALETTE[p.index % len(PALETTE)]
        out.append(f'<g class="partial" data-split="{p.index}" data-weight="{p.weight:.6g}">')
        out.append(f'<rect x="12" y="{y + 3:g}" width="10" height="10" fill="{colour}" stroke="#444444"/>')
        if p.end > p.start:
            desc = tr("split {index}: keys {start}–{last} ({tiles}), m {m}, l {l}, lse {lse}", index=p.index,
                      start=p.start, last=p.end - 1, tiles=_tiles(p.num_tiles), m=_num(p.m), l=_num(p.l),
                      lse=_num(p.lse))
        else:
            desc = tr("split {index}: no keys left (l = 0, lse = −∞): weight 0", index=p.index)
        out.append(_text(26, y + 12, desc, size=10))
        out.append(f'<rect x="{x_bar}" y="{y + 2:g}" width="100" height="12" fill="#FFFFFF" stroke="#444444" '
                   f'stroke-width="0.5"/>')
        out.append(f'<rect x="{x_bar}" y="{y + 2:g}" width="{100 * p.weight:.2f}" height="12" fill="{BAR_COLOUR}"/>')
        out.append(_text(x_bar + 104, y + 12, f"w {p.weight:.3f}", size=10, mono=True))
        out.append("</g>")
        out += _heat_row(x_out, y, "", p.output, scale, "partial-output", cell_w)
        y += CELL_H + 3
    out += _heat_row(x_out, y + 2, tr("merged Σ w_i · acc_i / l_i"), state.merged, scale, "merged", cell_w)
    out += _heat_row(x_out, y + CELL_H + 5, tr("direct softmax(s)·V"), state.direct, scale, "direct", cell_w)
    y += 2 * CELL_H + 8
    ok = state.merged_error <= MATCH_TOLERANCE
    verdict = (tr("merged output equals the direct one: max |difference| = {error:.1e} (float64)",
                  error=state.merged_error) if ok else
               tr("merged output DIFFERS FROM the direct one: max |difference| = {error:.1e} (float64)",
                  error=state.merged_error))
    out.append(_text(12, y + 12, verdict, size=10, cls="merge-verdict", colour="#117733" if ok else ERROR_COLOUR))
    return out, y + 20


def softmax_svg(state: OnlineSoftmaxState) -> str:
    """The state as SVG: the key axis (scores, running max, tiles, α, l, splits), the current tile's
    update of ``l`` and ``acc``, and the split-K partials with their merge weights."""
    body = [_text(12, 18, tr("online softmax over {keys} keys ({pattern} scores, seed {seed}), tiles of {tile}: after "
                             "tile t{step} of t0–t{last}", keys=state.num_keys, pattern=PATTERN_LABELS[state.pattern],
                             seed=state.seed, tile=state.tile_n, step=state.step, last=state.num_tiles - 1),
                  size=13, weight="bold"),
            _text(12, 34, tr("dots: scores, coloured once their tile is read (grey: not yet); red line: the running "
                             "max m; sand: the current tile"), size=10, colour="#555555")]
    axis, y = _key_axis(state, LABEL_W + 30, WIDTH - LABEL_W - 46, 44, compact=False)
    body += axis
    for i, line in enumerate(_step_lines(state)):
        body.append(_text(12, y + 14 + 15 * i, line, size=11, cls="step-line"))
    acc, y = _accumulator(state, y + 68)
    body += acc
    split, y = _split_panel(state, y + 6)
    body += split
    extra = f' data-state="{escape(state.data_state())}" role="img" aria-label="{escape(str(state.summary()))}"'
    return svg_document(WIDTH, y + 8, body, "pagedkv-softmax", extra)


def _compact_panel(state: OnlineSoftmaxState, x: float, y: float, width: float) -> tuple[list[str], float]:
    """One setting of the still: its key axis (at the last tile), its rescales and merge weights, the verdict."""
    rescales = sum(st.rescaled for st in state.steps)
    out = [f'<g class="panel" data-state="{escape(state.data_state())}" transform="translate({x:g},{y:g})">',
           _text(8, 16, tr("tiles of {tile} ({count}), {splits}", tile=state.tile_n, count=state.num_tiles,
                           splits=_splits(state.num_splits)), size=12, weight="bold"),
           _text(8, 31, tr("{n} rescale (α < 1 after the first tile)", n=rescales) if rescales == 1 else
                 tr("{n} rescales (α < 1 after the first tile)", n=rescales), size=10, colour="#555555")]
    axis, yy = _key_axis(state, 120, width - 132, 40, compact=True)
    out += axis
    weights = ", ".join(f"{p.weight:.2f}" for p in state.partials)
    out.append(_text(8, yy + 12, tr("merge weights: {weights}", weights=weights), size=10))
    error = max(state.online_error, state.merged_error)
    ok = error <= MATCH_TOLERANCE
    out.append(_text(8, yy + 26, tr("max |out − direct|: {error:.1e} (equal)", error=error) if ok else
                     tr("max |out − direct|: {error:.1e} (DIFFERENT)", error=error), size=10,
                     colour="#117733" if ok else ERROR_COLOUR))
    out.append("</g>")
    return out, yy + 34


def softmax_grid_svg(settings: Sequence[tuple[int, int]], *, num_keys: int = 32, seed: int = 0,
                     pattern: str = "rising") -> str:
    """The book's still: the same keys cut into ``(tile_n, num_splits)`` settings (2 to 4), two a row.

    One picture cannot show that the cut changes the work (how many rescales, which weights) but not
    the answer; side by side, the same keys give the same output to float64 rounding.
    """
    if not 2 <= len(settings) <= 4:
        raise ValueError(f"the still shows 2 to 4 settings, got {len(settings)}")
    states = [OnlineSoftmaxState(num_keys, tile_n, num_splits, seed, pattern) for tile_n, num_splits in settings]
    for state in states:
        state.seek(state.num_tiles - 1)
    panel_w = WIDTH / 2
    body = [_text(12, 18, tr("the same {keys} keys ({pattern} scores, seed {seed}), cut {ways} ways, each after its "
                             "last tile", keys=num_keys, pattern=PATTERN_LABELS[pattern], seed=seed, ways=len(states)),
                  size=13, weight="bold")]
    y, bottom = 26.0, 26.0
    for i, state in enumerate(states):
        if i and i % 2 == 0:
            y = bottom
        panel, h = _compact_panel(state, (i % 2) * panel_w, y, panel_w)
        body += panel
        bottom = max(bottom, y + h)
    label = tr("online softmax, {n} settings", n=len(states))
    extra = (f' data-state="{escape(" | ".join(s.data_state() for s in states))}" role="img" '  # en: not shown to readers
             f'aria-label="{escape(str(label))}"')
    return svg_document(WIDTH, bottom + 8, body, "pagedkv-softmax-grid", extra)
