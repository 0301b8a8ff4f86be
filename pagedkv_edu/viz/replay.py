"""Replay a recorded engine run (chapter 6): key frames by rule, a pure state model, and the frame picture.

A frame is a :class:`~pagedkv_edu.viz.snapshot.Snapshot`; its blocks are drawn by
``viz.render``'s grid, with the queues, the step's token budget, its events and one chosen
request's text around them. The book shows a filmstrip of :func:`key_frames`; the widget
(``viz.replay_widget``) redraws the frame under its slider.
"""

from __future__ import annotations

import textwrap
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from html import escape

from .language import Message, tr
from .snapshot import Snapshot
from .trace import EngineTrace
from .render import _grid, _text, _text_colour, request_colour, request_label, svg_document

WIDTH = 760
PAD, LINE = 12, 16
CHIP_W, CHIP_H, CHIP_GAP = 34, 15, 3
QUEUES = ("running", "preempted", "waiting")
KEY_FRAMES = ("admission burst", "first preemption", "shared prefix", "drain")  # en: not shown to readers (rule names: keys)
KEY_FRAME_LABELS: dict[str, Message] = {
    "admission burst": tr("admission burst"), "first preemption": tr("first preemption"),  # en: not shown to readers (rule names: keys)
    "shared prefix": tr("shared prefix"), "drain": tr("drain"),  # en: not shown to readers (rule names: keys)
}
"""How each key frame's rule is named to the reader (the rule's own name stays the key and the ``data-name``)."""
WHERE: dict[str, Message] = {
    "running": tr("running"), "preempted": tr("preempted"), "waiting": tr("waiting"), "finished": tr("finished"),
    "": tr("not arrived"),
}
"""Where a request without blocks is, as its panel says it."""


def _queue_label(name: str, count: int) -> Message:
    if name == "running":
        return tr("running ({n})", n=count)
    if name == "preempted":
        return tr("preempted ({n})", n=count)
    return tr("waiting ({n})", n=count)


def _key_frame_names(names: list[str]) -> str:
    """Rules' names as the reader reads them, joined (two rules may pick one step)."""
    return " + ".join(str(KEY_FRAME_LABELS.get(name, name)) for name in names)


def key_frames(trace: EngineTrace) -> dict[str, int]:
    """The frames worth a picture, each found by a rule (absent when the run has no such moment).

    * **admission burst**: the first step that admitted the most requests;
    * **first preemption**: the first step that preempted a request;
    * **shared prefix**: the first step after which a block has more than one reference;
    * **drain**: the first step from which nobody waits and nobody is admitted again: from
      here the batch only shrinks.

    Returned in step order.
    """
    frames = trace.frames
    if not frames:
        return {}
    found: dict[str, int] = {}
    most = max(len(f.admitted) for f in frames)
    if most:
        found["admission burst"] = next(i for i, f in enumerate(frames) if len(f.admitted) == most)  # en: not shown to readers (rule names: keys)
    for name, rule in (("first preemption", lambda f: bool(f.preempted_now)),  # en: not shown to readers (rule names: keys)
                       ("shared prefix", lambda f: f.num_shared > 0)):  # en: not shown to readers (rule names: keys)
        hit = next((i for i, f in enumerate(frames) if rule(f)), None)
        if hit is not None:
            found[name] = hit
    drain = len(frames)
    while drain > 0 and not (frames[drain - 1].waiting or frames[drain - 1].preempted or frames[drain - 1].admitted):
        drain -= 1
    if drain < len(frames):
        found["drain"] = drain
    return dict(sorted(found.items(), key=lambda kv: (kv[1], KEY_FRAMES.index(kv[0]))))


def _blocks(frame: Snapshot, top: float, width: float) -> tuple[list[str], float]:
    """The blocks as small cells: the largest size that keeps the grid under about 140 pixels."""
    n = max(1, frame.num_blocks)
    cell = next((c for c in (48, 32, 24, 16, 12) if -(-n // int((width - 2 * PAD) // c)) * c <= 140), 8)
    cols = max(1, int((width - 2 * PAD) // cell))
    return _grid(frame, PAD, top, cols, cell - 1, cell - 1, 1, detailed=False)


def _queues(frame: Snapshot, top: float, width: float) -> tuple[list[str], float]:
    """Running, preempted and waiting requests as coloured chips, in queue order."""
    out = []
    per_row = max(1, int((width - 2 * PAD - 80) // (CHIP_W + CHIP_GAP)))
    for name in QUEUES:
        ids: tuple[Hashable, ...] = getattr(frame, name)
        out.append(f'<g class="queue" data-queue="{name}" data-ids="{escape(" ".join(map(request_label, ids)))}">')  # en: not shown to readers
        out.append(_text(PAD, top + 11, str(_queue_label(name, len(ids))), size=10, weight="bold"))
        if not ids:
            out.append(_text(PAD + 80, top + 11, "—", size=10, colour="#555555"))
        for i, seq_id in enumerate(ids):
            r, c = divmod(i, per_row)
            x, y = PAD + 80 + c * (CHIP_W + CHIP_GAP), top + r * (CHIP_H + 2)
            colour = request_colour(seq_id)
            dashed = ' stroke="#000000" stroke-dasharray="3 2"' if name == "preempted" else ""
            out.append(f'<rect x="{x:g}" y="{y:g}" width="{CHIP_W:g}" height="{CHIP_H:g}" rx="3" '
                       f'fill="{colour}"{dashed}/>')
            ink = _text_colour(colour)
            out.append(_text(x + CHIP_W / 2, y + 11, request_label(seq_id), size=9, anchor="middle", colour=ink))
        out.append("</g>")
        top += max(1, -(-len(ids) // per_row)) * (CHIP_H + 2) + 4
    return out, top


def _budget(frame: Snapshot, top: float, width: float) -> tuple[list[str], float]:
    """The step's token budget as a bar: prefill tokens, then decode tokens, out of the cap."""
    used = frame.prefill_tokens + frame.decode_tokens
    cap = frame.token_budget
    if cap is not None:
        label = tr("tokens this step: {prefill} prefill + {decode} decode of a budget of {cap}",
                   prefill=frame.prefill_tokens, decode=frame.decode_tokens, cap=cap)
    else:
        label = tr("tokens this step: {prefill} prefill + {decode} decode (no cap)", prefill=frame.prefill_tokens,
                   decode=frame.decode_tokens)
    scale = (width - 2 * PAD - 330) / max(1, cap if cap is not None else used)
    out = [f'<g class="budget" data-prefill="{frame.prefill_tokens}" data-decode="{frame.decode_tokens}" '
           f'data-budget="{cap if cap is not None else ""}">', _text(PAD, top + 10, str(label), size=10)]
    x0 = PAD + 330
    if cap is not None:
        out.append(f'<rect x="{x0:g}" y="{top + 2:g}" width="{cap * scale:g}" height="9" fill="none" stroke="#999999"/>')
    out.append(f'<rect x="{x0:g}" y="{top + 2:g}" width="{frame.prefill_tokens * scale:g}" height="9" fill="#332288"/>')
    out.append(f'<rect x="{x0 + frame.prefill_tokens * scale:g}" y="{top + 2:g}" width="{frame.decode_tokens * scale:g}" '
               f'height="9" fill="#88CCEE"/>')
    out.append("</g>")
    return out, top + LINE


def _events(frame: Snapshot) -> str:
    """The step's events in one line, in the reader's language."""
    parts: list[Message] = []
    for event, ids in ((lambda shown: tr("admitted {ids}", ids=shown), frame.admitted),
                       (lambda shown: tr("preempted {ids}", ids=shown), frame.preempted_now),
                       (lambda shown: tr("finished {ids}", ids=shown), frame.finished)):
        if ids:
            parts.append(event(" ".join(request_label(i) for i in ids[:12]) + (" …" if len(ids) > 12 else "")))
    if frame.copies:
        parts.append(tr("copy-on-write {pairs}", pairs=" ".join(f"{a}→{b}" for a, b in frame.copies[:6])))
    return " · ".join(str(part) for part in parts) or str(tr("decode only"))


def _request_panel(trace: EngineTrace, index: int, seq_id: Hashable, top: float) -> tuple[list[str], float]:
    frame = trace.frames[index]
    entry = frame.table(seq_id)
    if entry is None:
        where = next((q for q in QUEUES if seq_id in getattr(frame, q)), "finished" if frame.outputs(seq_id) else "")
        head = tr("{request}: no blocks ({where})", request=request_label(seq_id), where=WHERE[where])
    else:
        blocks = " ".join(map(str, entry.block_ids[:16])) + (" …" if len(entry.block_ids) > 16 else "")
        if len(entry.block_ids) == 1:
            head = tr("{request}: {tokens} tokens in 1 block of {size} [{blocks}]", request=request_label(seq_id),
                      tokens=entry.num_tokens, size=frame.block_size, blocks=blocks)
        else:
            head = tr("{request}: {tokens} tokens in {n} blocks of {size} [{blocks}]", request=request_label(seq_id),
                      tokens=entry.num_tokens, n=len(entry.block_ids), size=frame.block_size, blocks=blocks)
    out = [f'<g class="request" data-request="{escape(request_label(seq_id))}" '
           f'data-blocks="{" ".join(map(str, entry.block_ids)) if entry else ""}">',
           _text(PAD, top + 12, str(head), weight="bold")]
    top += LINE
    reply = trace.text(seq_id, index)
    prompt = trace.prompt_text(seq_id).replace("\n", " ")
    lines = [("…" + prompt[-90:]) if len(prompt) > 90 else prompt]
    lines += textwrap.wrap("→ " + reply.replace("\n", " "), 110)[-4:] or ["→"]
    for i, line in enumerate(lines):
        out.append(_text(PAD, top + 12, line, size=10, colour="#555555" if i == 0 else "#000000", mono=True,
                         cls="reply" if i else "prompt"))
        top += 14
    out.append("</g>")
    return out, top + 4


def frame_elements(trace: EngineTrace, index: int, selected: Hashable | None = None,
                   width: float = WIDTH) -> tuple[list[str], float]:
    """The SVG elements of frame ``index`` and the height they take (no ``<svg>`` wrapper)."""
    if not 0 <= index < len(trace.frames):
        raise IndexError(f"frame {index} is outside the trace's {len(trace.frames)} frames")
    frame = trace.frames[index]
    memory = tr("blocks of {size}: {used}/{total} used, {shared} shared, {cached} cached; {tokens} tokens in "
                "{slots} slots", size=frame.block_size, used=frame.num_used, total=frame.num_blocks,
                shared=frame.num_shared, cached=len(frame.cached), tokens=frame.num_tokens, slots=frame.allocated_slots)
    header = tr("step {step}/{steps} · running {running} · preempted {preempted} · waiting {waiting} · {memory}",
                step=index + 1, steps=len(trace.frames), running=len(frame.running), preempted=len(frame.preempted),
                waiting=len(frame.waiting), memory=memory)
    out = [_text(PAD, PAD + 12, str(header), weight="bold", cls="counters"),
           _text(PAD, PAD + 12 + LINE, _events(frame), size=10, colour="#333333", cls="events")]
    budget, top = _budget(frame, PAD + 2 * LINE + 2, width)
    out += budget
    grid, top = _blocks(frame, top + 4, width)
    queues, top = _queues(frame, top + 4, width)
    out += grid + queues
    if selected is not None:
        panel, top = _request_panel(trace, index, selected, top + 2)
        out += panel
    return out, top + PAD


def frame_svg(trace: EngineTrace, index: int, selected: Hashable | None = None) -> str:
    """The picture of one frame; with ``selected``, that request's table and text below it."""
    body, height = frame_elements(trace, index, selected)
    return svg_document(WIDTH, height, body, "pagedkv-replay", f' data-step="{index}"')


def filmstrip_svg(trace: EngineTrace, frames: Mapping[str, int] | None = None, *, columns: int = 2) -> str:
    """Key frames side by side, each captioned with its rule's name: the static replay for the book."""
    chosen = dict(frames if frames is not None else key_frames(trace))
    if not chosen:
        raise ValueError("no frame to show: the trace is empty")
    if columns < 1:
        raise ValueError(f"columns must be >= 1, got {columns}")
    merged: dict[int, list[str]] = {}   # two rules may pick the same step: one tile, both names
    for name, index in chosen.items():
        merged.setdefault(index, []).append(name)
    scale = 0.5
    tiles = [(names, index, *frame_elements(trace, index)) for index, names in merged.items()]
    tile_w = WIDTH * scale
    row_h = [LINE + max(t[3] for t in tiles[start:start + columns]) * scale for start in range(0, len(tiles), columns)]
    out, y = [], 0.0
    for i, (names, index, body, height) in enumerate(tiles):
        r, c = divmod(i, columns)
        x, y = c * (tile_w + PAD), sum(row_h[:r]) + r * PAD
        out.append(f'<g class="key-frame" data-name="{escape(" + ".join(names))}" data-step="{index}">')
        out.append(_text(x + PAD * scale, y + 12, str(tr("{name}: step {step}", name=_key_frame_names(names),
                                                          step=index + 1)), weight="bold"))
        out.append(f'<svg x="{x:g}" y="{y + LINE:g}" width="{tile_w:g}" height="{height * scale:g}" '
                   f'viewBox="0 0 {WIDTH:g} {height:g}">')
        out.append(f'<rect width="{WIDTH:g}" height="{height:g}" fill="#FFFFFF" stroke="#999999"/>')  # en: not shown to readers
        out += body
        out += ["</svg>", "</g>"]
    width = columns * tile_w + (columns - 1) * PAD
    return svg_document(width, sum(row_h) + (len(row_h) - 1) * PAD, out, "pagedkv-filmstrip")


@dataclass
class ReplayState:
    """Where the replay stands: a frame index and a chosen request. Pure; the widget only calls it."""

    trace: EngineTrace
    index: int = 0
    selected: Hashable | None = None

    def __post_init__(self) -> None:
        if not self.trace.frames:
            raise ValueError("the trace has no frames: run the engine with trace=EngineTrace() first")
        self.seek(self.index)
        if self.selected is None:
            self.selected = self.trace.seq_ids[0]
        self.select(self.selected)

    @property
    def num_frames(self) -> int:
        return len(self.trace.frames)

    @property
    def frame(self) -> Snapshot:
        return self.trace.frames[self.index]

    def seek(self, index: int) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.num_frames:
            raise ValueError(f"step index {index!r} is outside 0..{self.num_frames - 1}")
        self.index = index

    def select(self, seq_id: Hashable) -> None:
        if seq_id not in self.trace.seq_ids:
            raise ValueError(f"no request {seq_id!r} in this trace; choose one of {self.trace.seq_ids[:10]} …")
        self.selected = seq_id

    def svg(self) -> str:
        return frame_svg(self.trace, self.index, self.selected)

    def text(self) -> tuple[str, str]:
        """The chosen request's prompt and its reply so far, as of this frame."""
        assert self.selected is not None   # set in __post_init__
        return self.trace.prompt_text(self.selected), self.trace.text(self.selected, self.index)


class Filmstrip:
    """The key frames as a static picture that Jupyter, GitHub and the book display."""

    def __init__(self, trace: EngineTrace, frames: Mapping[str, int] | None = None, *, columns: int = 2) -> None:
        self.frames = dict(frames if frames is not None else key_frames(trace))
        self.svg = filmstrip_svg(trace, self.frames, columns=columns)

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        return {"image/svg+xml": self.svg, "text/plain": repr(self)}

    def __repr__(self) -> str:
        frames = str(tr(", ")).join(str(tr("{name} (step {step})", name=_key_frame_names([name]), step=i + 1))
                                    for name, i in self.frames.items())
        return str(tr("key frames: {frames}", frames=frames))


__all__ = ["Filmstrip", "ReplayState", "filmstrip_svg", "frame_elements", "frame_svg", "key_frames", "KEY_FRAMES"]
