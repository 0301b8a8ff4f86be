"""The engine's trace and its replay: frames agree with the engine, key frames follow their rules.

One run of the tiny random model under memory pressure, with prefix caching and a shared prompt
head, gives every kind of moment: an admission burst, preemptions, shared blocks and a drain.
The widget is driven headless through its Python side (the browser test drives the real slider).
"""

from __future__ import annotations

import random
import re
import xml.etree.ElementTree as ET

import pytest

from pagedkv_edu.engine import LLMEngine, SamplingParams
from pagedkv_edu.viz.trace import EngineTrace
from pagedkv_edu.model.loading import load_model
from pagedkv_edu.viz.replay import Filmstrip, ReplayState, filmstrip_svg, frame_svg, key_frames
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def run():
    tiny = load_model("tiny-random")
    rng = random.Random(0)
    vocab = tiny.model.config.vocab_size
    head = [rng.randrange(100, vocab) for _ in range(8)]            # two full blocks every prompt shares
    prompts = [head + [rng.randrange(100, vocab) for _ in range(rng.randint(3, 12))] for _ in range(8)]
    trace = EngineTrace()
    engine = LLMEngine(tiny.model, tiny.tokenizer, kv_budget_tokens=64, block_size=4, max_seq_len=64,
                       watermark=0.0, enable_prefix_caching=True, trace=trace)
    checks = []
    ids = [engine.add_request(p, SamplingParams(max_tokens=10, ignore_eos=True)) for p in prompts]
    outputs = []
    while engine.has_unfinished:
        outputs += engine.step()
        manager = engine.scheduler.memory
        step = engine.last_step
        checks.append((tuple(manager.pool.ref_counts), {k: tuple(t.block_ids) for k, t in manager.tables.items()},
                       [s.seq_id for s in engine.scheduler.running],
                       (sum(s.num_new_tokens for s in step.scheduled if s.is_prefill),
                        sum(s.num_new_tokens for s in step.scheduled if not s.is_prefill))))
    return trace, engine, {o.request_id: o for o in outputs}, ids, checks


def test_one_frame_per_step_matching_the_engine(run) -> None:
    trace, engine, _, _, checks = run
    assert len(trace) == len(engine.history) == len(checks)
    for frame, (refs, tables, running, tokens) in zip(trace, checks):
        assert (frame.prefill_tokens, frame.decode_tokens) == tokens and frame.token_budget == 8192
        assert frame.ref_counts == refs
        assert {e.seq_id: e.block_ids for e in frame.tables} == tables
        assert list(frame.running) == running
        assert frame.num_used == sum(1 for r in refs if r)
        for entry in frame.tables:   # every table's blocks are referenced
            assert all(refs[b] > 0 for b in entry.block_ids)


def test_events_and_queues_account_for_every_request(run) -> None:
    trace, engine, outputs, ids, _ = run
    finished = [s for f in trace for s in f.finished]
    assert sorted(finished) == sorted(ids)                     # each finishes exactly once
    admitted = [s for f in trace for s in f.admitted]
    preempted = [s for f in trace for s in f.preempted_now]
    assert len(preempted) == engine.scheduler.num_preemptions > 0
    assert len(admitted) == len(ids) + len(preempted)          # a preempted request is admitted again
    first = trace[0]
    assert set(first.running) | set(first.waiting) == set(ids) and not first.preempted
    assert not trace[-1].running and not trace[-1].waiting and trace[-1].num_used == 0


def test_text_so_far_is_the_prefix_of_the_reply(run) -> None:
    trace, _, outputs, ids, _ = run
    for seq_id in ids:
        counts = [f.outputs(seq_id) for f in trace]
        assert counts == sorted(counts) and counts[-1] == len(outputs[seq_id].token_ids)   # grows, ends complete
        assert trace.output_ids(seq_id) == outputs[seq_id].token_ids
        middle = counts.index(max(1, counts[-1] // 2))
        assert trace.output_ids(seq_id, middle) == outputs[seq_id].token_ids[:counts[middle]]
        assert trace.text(seq_id) == outputs[seq_id].text
    with pytest.raises(KeyError, match="no sequence 99"):
        trace.text(99)


def test_key_frames_follow_their_rules(run) -> None:
    trace, *_ = run
    keys = key_frames(trace)
    assert list(keys) == sorted(keys, key=keys.get)
    assert set(keys) == {"admission burst", "first preemption", "shared prefix", "drain"}
    most = max(len(f.admitted) for f in trace)
    assert len(trace[keys["admission burst"]].admitted) == most
    assert all(len(f.admitted) < most for f in trace.frames[:keys["admission burst"]])
    assert trace[keys["first preemption"]].preempted_now
    assert not any(f.preempted_now for f in trace.frames[:keys["first preemption"]])
    assert trace[keys["shared prefix"]].num_shared > 0
    assert all(f.num_shared == 0 for f in trace.frames[:keys["shared prefix"]])
    tail = trace.frames[keys["drain"]:]
    assert not any(f.waiting or f.preempted or f.admitted for f in tail)
    before = trace[keys["drain"] - 1]
    assert before.waiting or before.preempted or before.admitted


def test_frame_svg_shows_the_frame(run) -> None:
    trace, *_ = run
    index = key_frames(trace)["first preemption"]
    frame = trace[index]
    svg = ET.fromstring(frame_svg(trace, index, selected=frame.running[0]))
    assert svg.get("data-step") == str(index)
    grid = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "grid"][0]
    assert [int(r) for r in grid.get("data-refs").split()] == list(frame.ref_counts)
    assert {int(b) for b in grid.get("data-cached").split()} == set(frame.cached)
    owners = grid.get("data-owners").split()
    for entry in frame.tables:
        assert all(f"r{entry.seq_id}" in owners[b].split("+") for b in entry.block_ids)
    assert all(owners[b] == "-" for b, refs in enumerate(frame.ref_counts) if refs == 0)
    cells = [g for g in grid.iter(f"{SVG}g") if g.get("class") == "block"]
    assert [int(g.get("data-block")) for g in cells] == list(range(frame.num_blocks))   # every block, once
    assert [int(g.get("data-refs")) for g in cells] == list(frame.ref_counts)
    thick = [g for g in cells if any(r.get("stroke-width") == "2" for r in g.iter(f"{SVG}rect"))]
    assert len(thick) == frame.num_shared > 0                   # a shared block wears a thick border
    queues = {g.get("data-queue"): g.get("data-ids") for g in svg.iter(f"{SVG}g") if g.get("class") == "queue"}
    assert queues["running"].split() == [f"r{s}" for s in frame.running]
    assert queues["preempted"].split() == [f"r{s}" for s in frame.preempted]
    panel = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "request"][0]
    assert panel.get("data-blocks").split() == [str(b) for b in frame.table(frame.running[0]).block_ids]
    assert frame_svg(trace, index) == frame_svg(trace, index)   # deterministic
    with pytest.raises(IndexError, match="outside the trace"):
        frame_svg(trace, len(trace))


def test_filmstrip_draws_each_key_frame(run) -> None:
    trace, *_ = run
    strip = Filmstrip(trace)
    svg = ET.fromstring(strip._repr_mimebundle_()["image/svg+xml"])
    tiles = [(g.get("data-name"), int(g.get("data-step"))) for g in svg.iter(f"{SVG}g") if g.get("class") == "key-frame"]
    merged: dict[int, list[str]] = {}
    for name, index in key_frames(trace).items():
        merged.setdefault(index, []).append(name)
    assert tiles == [(" + ".join(names), index) for index, names in merged.items()]
    same = Filmstrip(trace, {"admission burst": 0, "shared prefix": 0, "drain": len(trace) - 1})
    svg = ET.fromstring(same.svg)
    tiles = [(g.get("data-name"), int(g.get("data-step"))) for g in svg.iter(f"{SVG}g") if g.get("class") == "key-frame"]
    assert tiles == [("admission burst + shared prefix", 0), ("drain", len(trace) - 1)]   # one tile per step
    assert "admission burst" in repr(strip)
    with pytest.raises(ValueError, match="columns"):
        filmstrip_svg(trace, columns=0)


def test_state_model_and_widget_follow_the_slider(run) -> None:
    trace, *_ = run
    state = ReplayState(trace)
    with pytest.raises(ValueError, match="outside"):
        state.seek(len(trace))
    with pytest.raises(ValueError, match="no request"):
        state.select("nobody")
    from pagedkv_edu.viz.replay_widget import ReplayWidget

    widget = ReplayWidget(trace)
    for index in (3, len(trace) - 1, 0):
        widget.slider.value = index
        assert widget.state.index == index and f'data-step="{index}"' in widget.drawing.value
    widget.picker.value = trace.seq_ids[2]
    widget.slider.value = len(trace) - 1
    assert widget.state.text()[1] == trace.text(trace.seq_ids[2])
    assert widget.play.max == widget.slider.max == len(trace) - 1
    assert "image/svg+xml" in widget._repr_mimebundle_()


def test_recording_is_bounded_and_validated() -> None:
    with pytest.raises(ValueError, match="max_frames"):
        EngineTrace(max_frames=0)
    with pytest.raises(ValueError, match="no frames"):
        ReplayState(EngineTrace())


def test_budget_bar_and_partly_filled_blocks(run) -> None:
    trace, *_ = run
    for index in (0, key_frames(trace)["first preemption"], len(trace) - 2):
        frame = trace[index]
        svg = ET.fromstring(frame_svg(trace, index))
        budget = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "budget"][0]
        assert (int(budget.get("data-prefill")), int(budget.get("data-decode"))) == (frame.prefill_tokens,
                                                                                    frame.decode_tokens)
        grid = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "grid"][0]
        fills = [int(f) for f in grid.get("data-fills").split()]
        assert sum(fills) >= max((e.num_tokens for e in frame.tables), default=0)
        for entry in frame.tables:   # full blocks hold 4 tokens, the last one what is left
            assert [fills[b] for b in entry.block_ids[:-1]] == [4] * (len(entry.block_ids) - 1)
            if entry.block_ids:
                assert fills[entry.block_ids[-1]] >= entry.num_tokens - 4 * (len(entry.block_ids) - 1)
        pale = [r for r in grid.iter(f"{SVG}rect") if r.get("fill-opacity")]
        assert len(pale) == sum(0 < f < 4 for f in fills)
    assert trace[0].prefill_tokens > 0 and trace[0].decode_tokens == 0
    assert any(f.decode_tokens and not f.prefill_tokens for f in trace)


def test_contiguous_runs_and_long_runs_record_what_they_can() -> None:
    """A contiguous reservation is one block of max_seq_len, drawn with its empty tail; a full trace stops, flagged."""
    tiny = load_model("tiny-random")
    prompts = [[100 + i + j for j in range(6)] for i in range(3)]
    trace = EngineTrace(max_frames=2)
    engine = LLMEngine(tiny.model, tiny.tokenizer, policy="contiguous", kv_budget_tokens=128, max_seq_len=32,
                       trace=trace)
    outputs = engine.generate(prompts, SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)
    assert len(engine.history) > 2 and len(trace) == 2 and trace.truncated
    frame = trace[1]
    assert (frame.block_size, frame.num_blocks, frame.num_used, set(frame.running)) == (32, 4, 3, {0, 1, 2})
    assert [(t.seq_id, len(t.block_ids), t.num_tokens) for t in frame.tables] == [(0, 1, 7), (1, 1, 7), (2, 1, 7)]
    assert (frame.allocated_slots, frame.num_tokens, frame.waste_slots) == (96, 21, 75)   # prompt 6 + 1 sampled
    svg = ET.fromstring(frame_svg(trace, 1))
    grid = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "grid"][0]
    assert (grid.get("data-block-size"), grid.get("data-fills")) == ("32", "7 7 7 0")
    tails = [r for r in grid.iter(f"{SVG}rect") if r.get("fill-opacity")]
    assert len(tails) == 3 and all(abs(float(r.get("width")) / 47 - 25 / 32) < 1e-3 for r in tails)   # the empty tails
    assert trace.output_ids(0) == outputs[0].token_ids     # the text is read from the live sequence


def test_one_picture_the_explorer_and_the_replay_draw_the_same_blocks(run) -> None:
    """A trace frame is the explorer's Snapshot: both renderers draw its blocks with the same grid."""
    from pagedkv_edu.viz.render import render_svg

    trace, engine, *_ = run
    index = key_frames(trace)["shared prefix"]

    def cells(svg: str) -> list[dict[str, str]]:
        return [{k: v for k, v in g.attrib.items() if k.startswith("data-")}
                for g in ET.fromstring(svg).iter(f"{SVG}g") if g.get("class") == "block"]

    assert cells(render_svg(trace[index])) == cells(frame_svg(trace, index))
    assert any(c["data-state"] == "shared" for c in cells(frame_svg(trace, index)))


def test_the_replay_speaks_zh_tw(run, zh_tw: None) -> None:
    """The frame's words in Chinese (a request's text is the model's, so only the picture's own lines are read)."""
    from pagedkv_edu.viz.replay_widget import ReplayWidget

    trace, *_ = run
    keys = key_frames(trace)
    index = keys["first preemption"]
    svg = frame_svg(trace, index, selected=trace[index].running[0])
    own = [re.sub(r"<[^>]+>", "", t) for t in re.findall(r'<text(?! class="(?:prompt|reply)")[^>]*>(.*?)</text>', svg)]
    assert untranslated("\n".join(own)) == [] and own[0].startswith(f"第 {index + 1}/{len(trace)} 步")
    assert "被搶佔" in svg and "個區塊" in svg
    strip = Filmstrip(trace)
    assert "允入高峰" in strip.svg and repr(strip).startswith("關鍵影格：")
    assert 'data-name="admission burst' in strip.svg           # the rule's own name stays the key
    widget = ReplayWidget(trace)
    assert (widget.play.description, widget.slider.description, widget.picker.description) == ("播放", "步驟", "請求")
    widget.slider.value = index
    assert f"第 {index + 1}/{len(trace)} 步" in widget.drawing.value
    assert widget._repr_mimebundle_()["text/plain"] == f"重播 {len(trace)} 步，目前在第 {index + 1} 步"
