"""The block-size widget (chapter 9): its state model, the pure SVG renderer, the still, and the widget headless."""

from __future__ import annotations

import dataclasses
import html
import math
import re
import xml.etree.ElementTree as ET

import pytest

from pagedkv_edu.sim.block_size import BLOCK_SIZES
from pagedkv_edu.sim.decode_cost import A100_PCIE, H200
from pagedkv_edu.sim.preemption_cost import OPT_13B, preemption_cost
from pagedkv_edu.sim.radix_compare import replay_hash_chain
from pagedkv_edu.sim.simulate import simulate
from pagedkv_edu.viz.block_size_view import (DEVICE_LABELS, DEVICES, BlockSizeState, block_size_grid,
                                             block_size_svg)
from pagedkv_edu.workload import copilot50, prompt_token_ids
from tests.zh_output import CJK, untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

SVG = "{http://www.w3.org/2000/svg}"
REQUESTS = copilot50(seed=0)
SHORTEST = min(r.prompt_len for r in REQUESTS)


@pytest.fixture(scope="module")
def state() -> BlockSizeState:
    return BlockSizeState(REQUESTS)


@pytest.fixture()
def fresh(state: BlockSizeState) -> BlockSizeState:
    """The module's state, put back on the chapter's setting (the sweep is too slow to redo per test)."""
    state.set_block_size(16)
    state.set_shared_prefix(200)
    state.set_device("a100-pcie")
    return state


def setting(state: BlockSizeState) -> tuple[int, int, str, str]:
    return state.block_size, state.shared_prefix, state.device, state.frame().data_state


def panel_marks(svg: str, panel: str) -> list[ET.Element]:
    group = next(g for g in ET.fromstring(svg).iter(f"{SVG}g") if g.get("data-panel") == panel)
    return [e for e in group if e.get("class") == "mark"]


# --- the state model -------------------------------------------------------------------------------
def test_memory_curves_are_the_simulators_and_the_tables_lengths(fresh: BlockSizeState) -> None:
    frame = fresh.frame()
    assert frame.block_sizes == BLOCK_SIZES
    for b in (16, 256):
        i = BLOCK_SIZES.index(b)
        assert frame.unused_share[i] == pytest.approx(1 - simulate(REQUESTS, "paged", 20480, block_size=b).utilisation)
        assert frame.table_entries[i] == pytest.approx(sum(math.ceil(r.final_len / b) for r in REQUESTS) / len(REQUESTS))
    assert frame.unused_share[0] == 0 and list(frame.unused_share) == sorted(frame.unused_share)
    assert frame.unused_share[-1] > 0.1                           # a 256-token last block wastes over a tenth


@pytest.mark.parametrize("shared", [200, 300])
def test_hash_chain_shares_whole_blocks_and_the_radix_tree_every_token(fresh: BlockSizeState, shared: int) -> None:
    fresh.set_shared_prefix(shared)
    frame = fresh.frame()
    assert frame.hash_hits == tuple(float(shared // b * b) for b in BLOCK_SIZES)
    assert frame.radix_hit == shared


def test_hash_hits_agree_with_chapter_8s_replay(fresh: BlockSizeState) -> None:
    fresh.set_shared_prefix(300)
    prompts = [prompt_token_ids(dataclasses.replace(r, shared_prefix_len=300), 49152) for r in REQUESTS]
    room = sum(map(len, prompts)) + 51 * 256
    for b in (16, 256):
        replay = replay_hash_chain(prompts, b, room, len(prompts))
        assert fresh.frame().hash_hits[BLOCK_SIZES.index(b)] == replay.hit_tokens / (len(prompts) - 1)


def test_the_chapters_sweep_numbers_at_its_setting(fresh: BlockSizeState) -> None:
    frame = fresh.frame()
    hits = dict(zip(BLOCK_SIZES, frame.hash_hits))
    assert (hits[16], hits[128], hits[256]) == (192, 128, 0)
    assert frame.data_state.startswith("block=16;prefix=200;device=a100-pcie;")


@pytest.mark.parametrize("device", ["a100-pcie", "h200"])
def test_preemption_curves_are_the_cost_model(fresh: BlockSizeState, device: str) -> None:
    fresh.set_device(device)
    frame, gpu = fresh.frame(), {"a100-pcie": A100_PCIE, "h200": H200}[device]
    for i, b in enumerate(BLOCK_SIZES):
        cost = preemption_cost(b, 1024, device=gpu, **OPT_13B)
        assert frame.swap_ms[i] == pytest.approx(1e3 * cost.swap_s)
        blocks = math.ceil(1024 / b)      # the model written out: 2 x layers copies a block, each way
        one_way = 2 * 40 * blocks * gpu.copy_latency_s + blocks * b * OPT_13B["kv_bytes_per_token"] / gpu.host_bandwidth
        assert frame.swap_ms[i] == pytest.approx(2e3 * one_way)
        assert frame.recompute_ms[i] == pytest.approx(1e3 * 2 * 13e9 * 1024 / gpu.achieved_flops)


def test_the_faster_prefill_moves_the_crossing(fresh: BlockSizeState) -> None:
    fresh.set_block_size(32)
    assert fresh.frame().swap_wins                 # the paper's A100: swap is cheaper at 32
    fresh.set_device("h200")
    assert not fresh.frame().swap_wins             # the H200 recomputes faster than it swaps at 32
    fresh.set_block_size(64)
    assert fresh.frame().swap_wins


@pytest.mark.parametrize("setter, bad", [
    ("set_block_size", 3), ("set_block_size", 16.0), ("set_block_size", True), ("set_block_size", 512),
    ("set_shared_prefix", SHORTEST + 1), ("set_shared_prefix", -1), ("set_shared_prefix", 2.5),
    ("set_device", "tpu"),
])
def test_a_refused_value_is_named_and_changes_nothing(fresh: BlockSizeState, setter: str, bad: object) -> None:
    fresh.set_block_size(64)
    before = setting(fresh)
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        getattr(fresh, setter)(bad)
    assert setting(fresh) == before


def test_the_longest_shared_prefix_is_the_shortest_prompt(fresh: BlockSizeState) -> None:
    with pytest.raises(ValueError, match=f"shortest prompt \\({SHORTEST} tokens\\)"):
        fresh.set_shared_prefix(SHORTEST + 1)
    fresh.set_shared_prefix(SHORTEST)
    # Every later prompt finds all of it but the shortest, whose hit stops a token short of its end.
    assert fresh.frame().radix_hit == pytest.approx(SHORTEST - 1 / (len(REQUESTS) - 1))


def test_bad_construction_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 requests"):
        BlockSizeState(REQUESTS[:1])
    with pytest.raises(ValueError, match="increasing"):
        BlockSizeState(REQUESTS[:4], block_sizes=[16, 4])


# --- the renderer ----------------------------------------------------------------------------------
def test_svg_root_carries_the_models_state_and_is_well_formed(fresh: BlockSizeState) -> None:
    svg = block_size_svg(fresh.frame())
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and root.get("class") == "pagedkv-blocksize"
    assert root.get("data-state") == fresh.frame().data_state
    assert {g.get("data-panel") for g in root.iter(f"{SVG}g") if g.get("class") == "panel"} == \
        {"waste", "table", "hits", "preemption"}
    assert svg == block_size_svg(fresh.frame()) and "<defs" not in svg
    assert "192 tokens" in svg and "swap is cheaper" in svg


def test_a_new_block_size_moves_the_marks_not_the_curves(fresh: BlockSizeState) -> None:
    first = block_size_svg(fresh.frame())
    fresh.set_block_size(64)
    second = block_size_svg(fresh.frame())
    assert [len(panel_marks(first, p)) for p in ("waste", "table", "hits", "preemption")] == [1, 1, 2, 2]
    x4, x16, x64 = (float(panel_marks(svg, "waste")[0].get("cx"))
                    for svg in (block_size_svg(fresh.frame_for(4, 200, "a100-pcie")), first, second))
    assert x4 < x16 < x64 and x64 - x16 == pytest.approx(x16 - x4)    # each doubling is one even step
    curves = [p.get("points") for p in ET.fromstring(first).iter(f"{SVG}polyline")]
    assert len(curves) == 6 and curves == [p.get("points") for p in ET.fromstring(second).iter(f"{SVG}polyline")]
    assert "B = 64" in second and "B = 64" not in first


def test_the_still_draws_each_setting_and_leaves_the_state(fresh: BlockSizeState) -> None:
    settings = [(16, 200, "a100-pcie"), (256, 200, "a100-pcie"), (32, 200, "h200")]
    before = setting(fresh)
    svg = block_size_grid(fresh, settings)
    root = ET.fromstring(svg)
    assert root.get("class") == "pagedkv-blocksize-grid"
    states = root.get("data-state").split("|")
    assert states == [fresh.frame_for(*s).data_state for s in settings]
    assert [g.get("data-state") for g in root if g.get("class") == "setting"] == states
    assert setting(fresh) == before
    for bad in ([settings[0]], settings * 2):
        with pytest.raises(ValueError, match="2 to 4 settings"):
            block_size_grid(fresh, bad)
    with pytest.raises(ValueError, match="block_size=5"):
        block_size_grid(fresh, [(5, 200, "h200"), settings[0]])


# --- the widget, headless ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def widget(state: BlockSizeState) -> object:
    pytest.importorskip("ipywidgets")
    from pagedkv_edu.viz.block_size_widget import BlockSizeWidget

    state.set_block_size(16)              # the chapter's setting, whatever the model's tests left
    state.set_shared_prefix(200)
    state.set_device("a100-pcie")
    return BlockSizeWidget(state)


def test_each_redraw_case_changes_the_picture_to_the_models(widget: object) -> None:
    import ipywidgets as widgets

    cases = widget.redraw_cases()
    assert 3 <= len(cases) <= 6
    assert isinstance(getattr(widget, cases[0][0]), (widgets.Dropdown, widgets.IntSlider, widgets.SelectionSlider))
    assert {name for name, _ in cases} == {"block_size", "shared_prefix", "device"}   # every control is exercised
    for name, value in cases:
        before = widget.drawing.value
        getattr(widget, name).value = value
        assert widget.message.value == ""
        assert widget.drawing.value != before, (name, value)
        assert widget.drawing.value == block_size_svg(widget.state.frame())
        root = ET.fromstring(widget.drawing.value)
        assert root.get("data-state") == widget.state.frame().data_state
    assert (widget.state.block_size, widget.state.shared_prefix, widget.state.device) == (256, 512, "h200")


def test_a_refused_value_shows_a_message_and_keeps_the_picture(widget: object) -> None:
    widget.block_size.value = 16
    picture, prefix = widget.drawing.value, widget.state.shared_prefix
    widget.shared_prefix.value = 800                                  # longer than the shortest prompt
    assert "shared_prefix=800" in widget.message.value and f"{SHORTEST} tokens" in widget.message.value
    assert widget.drawing.value == picture
    assert widget.state.shared_prefix == prefix and widget.shared_prefix.value == prefix   # the slider put back
    widget.block_size.value = 8                                       # the next accepted change clears it
    assert widget.message.value == "" and widget.drawing.value != picture


def test_static_render_shows_the_current_picture(widget: object) -> None:
    bundle = widget._repr_mimebundle_()
    assert bundle["image/svg+xml"] == widget.drawing.value
    assert bundle["text/plain"].startswith("block-size widget: B = ") and f"B = {widget.state.block_size}," in bundle["text/plain"]


# --- in zh-TW ----------------------------------------------------------------------------------------
def drawn_text(svg: str) -> str:
    """Every line the picture writes for a reader: its texts, one a line, and its aria-label if any."""
    texts = re.findall(r"<text\b[^>]*>([^<]*)</text>", svg) + re.findall(r'aria-label="([^"]*)"', svg)
    return "\n".join(html.unescape(t) for t in texts)


def test_a_device_label_is_the_devices_name_in_english() -> None:
    assert all(DEVICE_LABELS[key] == DEVICES[key].name for key in DEVICE_LABELS)


def test_the_widget_and_its_pictures_speak_zh_tw(fresh: BlockSizeState, zh_tw: None) -> None:
    pytest.importorskip("ipywidgets")
    from pagedkv_edu.viz.block_size_widget import BlockSizeWidget

    widget = BlockSizeWidget(fresh)                 # built after the language is set, as in the notebook
    assert (widget.block_size.description, widget.device.description) == ("區塊大小", "裝置")
    assert CJK.search(widget.shared_prefix.description)
    assert list(widget.device.options) == [("A100-40GB（PCIe 4.0 介面）", "a100-pcie"), ("H200", "h200")]
    text = drawn_text(widget.drawing.value)
    assert untranslated(text) == [] and "區塊大小 B = 16：共享前綴 200 個 token" in text
    assert "雜湊鏈 192 個 token，基數樹 200 個" in text and "置換 118 毫秒，重新計算 178 毫秒：置換的成本較低" in text
    widget.device.value = "h200"
    widget.block_size.value = 32                    # the H200 recomputes faster than it swaps at 32
    assert widget.message.value == "" and "重新計算的成本較低" in drawn_text(widget.drawing.value)
    widget.shared_prefix.value = 800                # refused: longer than the shortest prompt
    assert f"已拒絕：shared_prefix=800 比最短的提示詞（{SHORTEST} 個 token）還長" in html.unescape(widget.message.value)
    assert widget.state.shared_prefix == 200
    assert widget._repr_mimebundle_()["text/plain"].startswith("區塊大小的小工具：B = 32，共享前綴 200 個 token，H200：")
    still = drawn_text(block_size_grid(fresh, [(16, 200, "a100-pcie"), (256, 200, "h200")]))
    assert untranslated(still) == [] and "區塊大小 B = 256：" in still
