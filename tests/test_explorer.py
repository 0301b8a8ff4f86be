"""The block-table explorer: its state model, the SVG renderer, and the widget driven headless."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_pool import BlockPool
from pagedkv_edu.core.block_table import BlockTable
from pagedkv_edu.core.request import Request
from pagedkv_edu.engine.guards import CheckedMemory, PartError
from pagedkv_edu.viz.explorer_state import ExplorerState
from pagedkv_edu.viz.render import (FREE_COLOUR, OTHER_COLOUR, Picture, manager_svg, pool_svg, render_svg,
                                    request_colour)
from pagedkv_edu.viz.snapshot import snapshot
from tests.zh_output import CJK, untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

SVG = "{http://www.w3.org/2000/svg}"
BLOCK_TABLE_ARTICLE_FREE_ORDER = [7, 1, 3, 0, 2, 4, 5, 6]


# --- helpers that read the SVG back ------------------------------------------------------
def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)   # also proves the SVG is well-formed XML


def blocks(svg: str) -> dict[int, ET.Element]:
    return {int(g.get("data-block")): g for g in parse(svg).iter(f"{SVG}g") if g.get("class") == "block"}


def fill_colours(block: ET.Element) -> list[str]:
    return [r.get("fill") for r in block.iter(f"{SVG}rect") if r.get("class") == "fill"]


def table_rows(svg: str) -> dict[str, list[tuple[int, int, int]]]:
    out = {}
    for g in parse(svg).iter(f"{SVG}g"):
        if g.get("class") == "table":
            out[g.get("data-request")] = [tuple(map(int, row.get("data-row").split()))
                                          for row in g.iter(f"{SVG}g") if row.get("class") == "table-row"]
    return out


def text_of(svg: str, cls: str) -> str:
    found = [t.text for t in parse(svg).iter(f"{SVG}text") if t.get("class") == cls]
    assert len(found) == 1, f"expected one <text class={cls!r}>, found {found}"
    return found[0]


def all_text(svg: str) -> str:
    return " ".join(t.text or "" for t in parse(svg).iter(f"{SVG}text"))


def table(state: ExplorerState, seq_id: object) -> BlockTable:
    """A live sequence's table, by the id the explorer names it with (a copy, read now)."""
    return state.manager.tables[seq_id]


def manager_state(state: ExplorerState) -> tuple:
    """Everything a refused action must leave alone."""
    m = state.manager
    return (m.pool.free_ids(), list(m.pool.ref_counts),
            {rid: (list(t.block_ids), t.num_tokens) for rid, t in m.tables.items()})


# --- the state model ----------------------------------------------------------------------
def test_state_reproduces_seed_004_walkthrough() -> None:
    state = ExplorerState(8, 4, free_order=BLOCK_TABLE_ARTICLE_FREE_ORDER)
    rid = state.add_request(7)
    assert rid == 0
    assert table(state, 0).block_ids == [7, 1] and table(state, 0).fills == [4, 3]
    assert state.decode_step()                      # the 8th token fills block 1
    assert table(state, 0).block_ids == [7, 1] and table(state, 0).fills == [4, 4]
    assert state.decode_step()                      # the 9th takes block 3
    assert table(state, 0).block_ids == [7, 1, 3] and table(state, 0).fills == [4, 4, 1]
    assert "r0 took block 3" in state.message and not state.is_error
    assert state.finish(0)
    assert state.manager.pool.free_ids()[-3:] == [3, 1, 7]   # returned last block first
    assert state.live_requests == []


def test_decode_step_on_a_full_pool_changes_nothing_and_names_the_requests() -> None:
    state = ExplorerState(3, 2)
    state.add_request(2)   # r0: block 0, full
    state.add_request(2)   # r1: block 1, full
    before = manager_state(state)
    assert state.decode_step() is False
    assert manager_state(state) == before
    assert state.is_error
    assert "r0, r1" in state.message and "2 in all" in state.message and "only 1 is free" in state.message
    # Once one request finishes, the step goes through.
    assert state.finish(0) and state.decode_step()
    assert table(state, 1).num_tokens == 3


def test_fork_shares_every_block_and_the_step_copies_on_write() -> None:
    state = ExplorerState(12, 4)
    state.add_request(6)                                  # r0: blocks [0, 1], block 1 half full
    assert state.fork(0) == "r0.1" and state.fork(0) == "r0.2"
    assert "shares blocks [0, 1], no block taken" in state.message
    assert state.manager.pool.num_used == 2 and state.manager.pool.ref_counts[:2] == [3, 3]
    assert state.decode_step()
    # Two samples copy the shared half-full block; the last writer finds it private and writes in place.
    assert state.manager.pool.num_used == 4
    assert [table(state, r).block_ids[-1] for r in (0, "r0.1", "r0.2")] == [2, 3, 1]
    assert state.manager.pool.ref_counts[:2] == [3, 1]
    assert "r0 copied shared block 1 to block 2" in state.message
    assert "r0.1 copied shared block 1 to block 3" in state.message and "r0.2" not in state.message.split(";", 1)[1]
    assert state.finish("r0.1")
    assert "blocks [3] back to the free queue; blocks [0] still shared" in state.message
    assert state.fork(7) is None and "cannot fork r7" in state.message and state.is_error


def test_decode_step_counts_copy_on_write_blocks_before_changing_anything() -> None:
    # Three samples share a half-full block; one block is free, but the step needs two copies.
    state = ExplorerState(3, 4)
    state.add_request(6)
    state.fork(0)
    state.fork(0)
    before = manager_state(state)
    assert state.decode_step() is False
    assert manager_state(state) == before
    assert "r0, r0.1 each need a new block (2 in all) but only 1 is free" in state.message
    # Two samples need only one copy: the step fits the one free block exactly.
    assert state.finish("r0.2") and state.decode_step()
    assert state.manager.pool.num_free == 0
    assert [table(state, r).num_tokens for r in (0, "r0.1")] == [7, 7]


def test_the_explorer_drives_the_engines_scheduler() -> None:
    """Clicks go through the same Scheduler and BlockManager as the engine, so they count what the picture shows."""
    state = ExplorerState(12, 4)
    state.add_request(6)
    state.fork(0)
    state.add_request(3)
    assert state.step_n(3) == 3
    assert [s.seq_id for s in state.scheduler.running] == state.live_requests == [0, "r0.1", 1]
    assert [s.num_computed_tokens for s in state.scheduler.running] == [9, 9, 6]
    usage, snap = state.manager.usage(), state.snapshot()
    assert usage.stored_tokens == snap.num_tokens and usage.held_slots == snap.allocated_slots
    assert state.scheduler.num_preemptions == 0 and state.scheduler.counts.prompt_tokens == 9
    assert state.finish("r0.1") and [s.seq_id for s in state.scheduler.running] == [0, 1]


def test_forked_names_skip_a_sample_made_on_the_manager() -> None:
    state = ExplorerState(8, 4)
    state.add_request(3)
    parent = state.manager.sequences[0]
    state.manager.fork(parent, parent.fork("r0.1", 1))
    assert state.fork(0) == "r0.2"


def test_step_n_stops_at_the_first_refused_step() -> None:
    state = ExplorerState(2, 4)
    state.add_request(3)
    assert state.step_n(10) == 5                   # 3 -> 8 tokens fills both blocks
    assert table(state, 0).num_tokens == 8
    assert state.message.startswith("ran 5 of 10 steps") and state.is_error
    assert state.step_n(0) == 0 and "N >= 1" in state.message


def test_refused_add_keeps_state_and_does_not_use_an_id() -> None:
    state = ExplorerState(4, 4)
    state.add_request(9)                           # 3 blocks
    before = manager_state(state)
    assert state.add_request(5) is None            # needs 2, 1 free
    assert manager_state(state) == before
    assert "r1 needs 2 blocks for 5 tokens but only 1 are free" in state.message
    assert state.add_request(100) is None          # more than the whole pool
    for bad in (0, -3, 2.5, True):
        assert state.add_request(bad) is None and repr(bad) in state.message
    assert manager_state(state) == before
    assert state.add_request(4) == 1               # the next id is still r1


def test_finish_unknown_or_twice_is_reported() -> None:
    state = ExplorerState(4, 4)
    state.add_request(5)
    assert state.finish(0)
    before = manager_state(state)
    assert not state.finish(0) and "cannot finish r0" in state.message
    assert not state.finish(42) and "r42" in state.message
    assert manager_state(state) == before


def test_max_seq_len_refuses_the_step() -> None:
    state = ExplorerState(8, 4, max_seq_len=6)
    state.add_request(6)
    assert not state.decode_step() and "max_seq_len=6" in state.message
    assert state.add_request(7) is None and "exceed max_seq_len" in state.message


def test_resizing_rebuilds_an_empty_pool_and_says_so() -> None:
    state = ExplorerState(8, 4, free_order=BLOCK_TABLE_ARTICLE_FREE_ORDER)
    state.add_request(7)
    state.add_request(2)
    assert state.set_block_size(8)
    assert state.block_size == 8 and state.num_blocks == 8 and state.live_requests == []
    assert state.manager.pool.free_ids() == list(range(8))
    assert "rebuilt empty" in state.message and "2 live requests dropped" in state.message
    assert state.set_pool_size(3) and state.num_blocks == 3 and state.block_size == 8
    assert state.add_request(1) == 0               # ids start again
    before = manager_state(state)
    assert not state.set_pool_size(0) and "num_blocks" in state.message
    assert not state.set_block_size(-1) and "block_size" in state.message
    assert manager_state(state) == before and state.num_blocks == 3


def test_event_log_is_bounded() -> None:
    state = ExplorerState(4, 4, log_size=5)
    for _ in range(20):
        state.decode_step()
    assert len(state.events) == 5 and all(e.startswith("✗") for e in state.events)
    with pytest.raises(ValueError, match="log_size"):
        ExplorerState(4, 4, log_size=0)


def test_the_explorer_runs_a_readers_block_manager_checked() -> None:
    """Chapter 2 passes the reader's class: built over the explorer's pool (free_order's, or a rebuilt one), checked."""
    from pagedkv_edu.exercises.solutions.block_manager import BlockManager as Readers
    from pagedkv_edu.viz.explorer import BlockExplorer

    state = ExplorerState(8, 4, free_order=BLOCK_TABLE_ARTICLE_FREE_ORDER, block_manager=Readers)
    assert isinstance(state.manager, CheckedMemory) and type(state.manager.memory) is Readers
    state.add_request(7)
    assert state.decode_step() and state.decode_step()
    assert table(state, 0).block_ids == [7, 1, 3] and "r0 took block 3" in state.message
    assert state.finish(0) and state.manager.pool.free_ids()[-3:] == [3, 1, 7]
    assert state.set_block_size(8) and type(state.manager.memory) is Readers    # the rebuilt pool: the same factory
    assert type(BlockExplorer(8, 4, block_manager=Readers, fork=False).state.manager.memory) is Readers
    assert type(ExplorerState(8, 4).manager) is BlockManager                     # the package's runs unwrapped

    class Leaks(Readers):
        def release(self, seq: Request) -> list[int]:
            return self.held[seq][::-1]

    state = ExplorerState(8, 4, block_manager=Leaks)
    state.add_request(3)
    with pytest.raises(PartError, match=r"^your block manager: release\(0\): the sequence still holds blocks"):
        state.finish(0)


def test_constructor_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="block_size"):
        ExplorerState(4, 0)
    with pytest.raises(ValueError, match="num_blocks"):
        ExplorerState(0, 4)


# --- the renderer on fixed states --------------------------------------------------------
def seed_004_manager() -> BlockManager:
    """The article's r0: a 7-token prompt, then 2 more tokens (playing the scheduler, which advances the count)."""
    manager = BlockManager.over(BlockPool.from_free_order(8, 4, BLOCK_TABLE_ARTICLE_FREE_ORDER))
    seq = Request(0, None, num_prompt_tokens=7)
    manager.admit(seq, 7)
    seq.num_computed_tokens = 7
    seq.output_token_ids += [0, 0]
    manager.grow(seq, 2)
    seq.num_computed_tokens += 2
    return manager


def test_render_draws_every_block_with_owner_fill_and_colour() -> None:
    svg = manager_svg(seed_004_manager())
    drawn = blocks(svg)
    assert sorted(drawn) == list(range(8))
    owned = {b: g for b, g in drawn.items() if g.get("data-state") == "owned"}
    assert sorted(owned) == [1, 3, 7]
    assert {b: int(g.get("data-fill")) for b, g in owned.items()} == {7: 4, 1: 4, 3: 1}
    for g in owned.values():
        assert g.get("data-owner") == "r0" and fill_colours(g) == [request_colour(0)]
    for b in (0, 2, 4, 5, 6):
        assert drawn[b].get("data-state") == "free" and fill_colours(drawn[b]) == [FREE_COLOUR]
    assert table_rows(svg) == {"r0": [(0, 7, 4), (1, 1, 4), (2, 3, 1)]}
    assert text_of(svg, "counters").startswith("used 3/8 blocks · free 5 · tokens 9 · waste 3 slots (25.0%)")
    assert text_of(svg, "free-queue") == "block size 4 · next free: [0, 2, 4, 5, 6]"


def test_render_is_deterministic() -> None:
    assert manager_svg(seed_004_manager()) == manager_svg(seed_004_manager())
    svg = manager_svg(seed_004_manager())
    assert " id=" not in svg and "<defs" not in svg


def test_seed_000_pool_with_blocks_held_elsewhere() -> None:
    pool = BlockPool.from_free_order(16, 16, [7, 3, 12, 0, 14])
    table = BlockTable(16)
    table.append_tokens(pool, 41)
    svg = pool_svg(pool, {"seq A": table})
    drawn = blocks(svg)
    assert [b for b, g in drawn.items() if g.get("data-state") == "owned"] == [3, 7, 12]
    assert [int(drawn[b].get("data-fill")) for b in (7, 3, 12)] == [16, 16, 9]
    held = [b for b, g in drawn.items() if g.get("data-state") == "other"]
    assert held == [1, 2, 4, 5, 6, 8, 9, 10, 11, 13, 15]
    assert all(fill_colours(drawn[b]) == [OTHER_COLOUR] for b in held)
    assert table_rows(svg) == {"seq A": [(0, 7, 16), (1, 3, 16), (2, 12, 9)]}
    assert "held elsewhere 11" in text_of(svg, "counters")
    assert "waste 7 slots" in text_of(svg, "counters")


def test_shared_block_is_striped_and_badged() -> None:
    pool = BlockPool(4, 4)
    a = BlockTable(4)
    a.append_tokens(pool, 6)                       # blocks 0, 1
    pool.incref(0)
    b = BlockTable(4, [0], 4)                      # shares the full block 0
    b.append_tokens(pool, 1)                       # and takes block 2
    snap = snapshot(pool, {0: a, 1: b})
    assert snap.block(0).state == "shared" and snap.block(0).ref_count == 2
    assert snap.block(0).owners == (0, 1)
    assert snap.num_tokens == 4 + 2 + 1           # the shared block's tokens count once
    svg = render_svg(snap)
    g = blocks(svg)[0]
    assert fill_colours(g) == [request_colour(0), request_colour(1)]
    badges = [t.text for t in g.iter(f"{SVG}text") if t.text and t.text.startswith("×")]
    assert badges == ["×2"]
    assert blocks(svg)[1].get("data-refs") == "1" and "×" not in all_text(ET.tostring(blocks(svg)[1], "unicode"))


def test_long_tables_are_elided_but_keep_the_last_row() -> None:
    manager = BlockManager(40, 2)
    seq = Request("long", None, num_prompt_tokens=61)
    manager.admit(seq, 61)                  # 31 blocks
    seq.num_computed_tokens = 61
    svg = render_svg(snapshot(manager), max_rows=6)
    rows = table_rows(svg)["long"]
    assert [r[0] for r in rows] == [0, 1, 2, 3, 30]
    assert rows[-1] == (30, 30, 1)
    assert "⋯ 26 more rows" in all_text(svg)


def test_message_and_error_appear_in_the_picture() -> None:
    state = ExplorerState(1, 4)
    state.add_request(9)
    svg = render_svg(state.snapshot())
    assert "needs 3 blocks for 9 tokens but only 1 are free" in text_of(svg, "message")
    assert [t.get("fill") for t in parse(svg).iter(f"{SVG}text") if t.get("class") == "message"] == ["#B2182B"]


def test_snapshot_rejects_bad_input() -> None:
    pool = BlockPool(4, 4)
    with pytest.raises(ValueError, match="block_size 8"):
        snapshot(pool, {"x": BlockTable(8)})
    with pytest.raises(TypeError, match="BlockManager or BlockPool"):
        snapshot("pool")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tables only with a BlockPool"):
        snapshot(BlockManager(4, 4), {"x": BlockTable(4)})
    with pytest.raises(IndexError, match="block 9, outside a pool of 4"):
        snapshot(pool, {"x": BlockTable(4, [9], 1)})
    with pytest.raises(ValueError, match="columns"):
        render_svg(snapshot(pool), columns=0)


def test_picture_mimebundle_is_svg_and_text_of_the_state_at_creation() -> None:
    manager = seed_004_manager()
    picture = Picture(manager)
    manager.release(manager.sequences[0])           # later changes do not alter the picture
    bundle = picture._repr_mimebundle_()
    assert set(bundle) == {"image/svg+xml", "text/plain"}
    assert table_rows(bundle["image/svg+xml"]) == {"r0": [(0, 7, 4), (1, 1, 4), (2, 3, 1)]}
    assert bundle["text/plain"].startswith("3 of 8 blocks used, 5 free; 9 tokens in 1 request;")


# --- the widget, driven headless ------------------------------------------------------------
ipywidgets = pytest.importorskip("ipywidgets")


@pytest.fixture
def explorer():
    from pagedkv_edu.viz.explorer import BlockExplorer

    return BlockExplorer(8, 4, free_order=BLOCK_TABLE_ARTICLE_FREE_ORDER, prompt_tokens=7, steps=3)


def test_widget_buttons_drive_the_state_and_the_picture(explorer) -> None:
    assert len(blocks(explorer.drawing.value)) == 8
    explorer.add_button.click()
    assert table(explorer.state, 0).block_ids == [7, 1]
    assert table_rows(explorer.drawing.value) == {"r0": [(0, 7, 4), (1, 1, 3)]}
    explorer.step_button.click()
    explorer.step_button.click()
    assert table_rows(explorer.drawing.value) == {"r0": [(0, 7, 4), (1, 1, 4), (2, 3, 1)]}
    assert explorer.counters.value.startswith("3 of 8 blocks used, 5 free; 9 tokens")
    explorer.prompt_tokens.value = 5
    explorer.add_button.click()                    # r1 takes blocks 0 and 2
    assert [label for label, _ in explorer.request_choice.options] == ["r0", "r1"]
    explorer.step_n_button.click()                 # 3 more steps: r0 -> 12 tokens, r1 -> 8 tokens
    assert table(explorer.state, 0).num_tokens == 12
    assert table(explorer.state, 1).fills == [4, 4]
    drawn = blocks(explorer.drawing.value)
    assert {b for b, g in drawn.items() if g.get("data-owner") == "r1"} == {0, 2}
    assert "decode step 5" in explorer.event_log.value


def test_widget_finish_uses_the_dropdown(explorer) -> None:
    explorer.add_button.click()
    explorer.add_button.click()
    explorer.request_choice.value = 1
    explorer.finish_button.click()
    assert explorer.state.live_requests == [0]
    assert [label for label, _ in explorer.request_choice.options] == ["r0"]
    assert explorer.request_choice.value == 0
    assert "finish r1" in text_of(explorer.drawing.value, "message")
    explorer.finish_button.click()
    assert explorer.request_choice.options == () and explorer.request_choice.value is None
    explorer.finish_button.click()                 # nothing chosen: reported, not raised
    assert explorer.state.is_error and "not a live request" in explorer.state.message
    assert all(g.get("data-state") == "free" for g in blocks(explorer.drawing.value).values())


def test_widget_fork_uses_the_dropdown(explorer) -> None:
    explorer.prompt_tokens.value = 6
    explorer.add_button.click()
    explorer.fork_button.click()
    assert [label for label, _ in explorer.request_choice.options] == ["r0", "r0.1"]
    explorer.step_button.click()
    assert "copied shared block" in text_of(explorer.drawing.value, "message")
    explorer.request_choice.value = "r0.1"
    explorer.fork_button.click()                   # a fork of a fork
    assert explorer.state.live_requests == [0, "r0.1", "r0.1.1"]


def test_widget_errors_show_in_the_picture(explorer) -> None:
    explorer.prompt_tokens.value = 40              # 10 blocks > 8
    explorer.add_button.click()
    assert explorer.state.live_requests == []
    assert "needs 10 blocks" in text_of(explorer.drawing.value, "message")


def test_widget_sliders_rebuild_the_pool(explorer) -> None:
    explorer.add_button.click()
    explorer.block_size_slider.value = 8
    assert explorer.state.block_size == 8 and explorer.state.live_requests == []
    assert "rebuilt empty" in text_of(explorer.drawing.value, "message")
    explorer.pool_size_slider.value = 12
    assert len(blocks(explorer.drawing.value)) == 12
    assert text_of(explorer.drawing.value, "free-queue").startswith("block size 8 · next free: [0, 1, 2")
    explorer.add_button.click()
    assert table_rows(explorer.drawing.value) == {"r0": [(0, 0, 7)]}


def test_widget_mimebundle_carries_the_static_picture(explorer) -> None:
    explorer.add_button.click()
    explorer.step_button.click()
    bundle = explorer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["image/svg+xml"] == explorer.drawing.value
    assert bundle["text/plain"] == explorer.counters.value
    assert table_rows(bundle["image/svg+xml"]) == {"r0": [(0, 7, 4), (1, 1, 4)]}
    picture = explorer.picture()._repr_mimebundle_()
    assert picture["image/svg+xml"] == explorer.drawing.value


def test_the_fork_button_can_be_left_out() -> None:
    """Chapter 2 shows the explorer before chapter 7 teaches forks: no fork button there."""
    from pagedkv_edu.viz.explorer import BlockExplorer

    def buttons(explorer: BlockExplorer) -> list[str]:
        return [w.description for box in explorer.children if hasattr(box, "children")
                for w in box.children if isinstance(w, ipywidgets.Button)]
    assert "fork" in buttons(BlockExplorer(8, 4))
    assert "fork" not in buttons(BlockExplorer(8, 4, fork=False)) and "finish" in buttons(BlockExplorer(8, 4, fork=False))


# --- in Traditional Chinese (zh-TW) ---------------------------------------------------------
def svg_texts(svg: str) -> str:
    """Every text a reader sees in the SVG, one a line: <text>s, <title>s and the aria-label."""
    from html import unescape

    found = re.findall(r"<text[^>]*>([^<]*)</text>|<title>([^<]*)</title>|aria-label=\"([^\"]*)\"", svg)
    return "\n".join(unescape("".join(groups)) for groups in found)


def test_the_explorers_messages_and_picture_speak_zh_tw(zh_tw) -> None:
    state = ExplorerState(8, 4, free_order=BLOCK_TABLE_ARTICLE_FREE_ORDER)
    state.add_request(7)
    assert state.decode_step() and state.decode_step()
    assert str(state.message) == "第 2 個解碼步驟：1 個請求 +1 個 token；r0 取用區塊 3"
    state.fork(0)
    assert state.decode_step()
    assert "r0 把共用的區塊 3 複製到區塊 0" in str(state.message)
    assert not state.fork(7) and str(state.message) == "無法分岔 r7：它不是進行中的請求（進行中：r0、r0.1）"
    assert state.add_request(40) is None
    assert str(state.message) == "r1 需要 10 個區塊來放 40 個 token，但只有 4 個空閒；未加入"
    assert state.step_n(20) < 20 and str(state.message).startswith("20 步中執行了")
    svg = render_svg(state.snapshot())
    assert untranslated(svg_texts(svg)) == [] and "空閒佇列" in svg and "邏輯" in svg
    assert untranslated("\n".join(map(str, state.events))) == []
    assert untranslated(repr(Picture(state.snapshot()))) == []
    held = pool_svg(BlockPool.from_free_order(4, 4, [0]))           # blocks held elsewhere, no tables
    assert untranslated(svg_texts(held)) == [] and "佔用" in svg_texts(held) and "沒有進行中的請求" in held


def test_the_widget_speaks_zh_tw_and_english_again_after(zh_tw) -> None:
    from pagedkv_edu.viz import language
    from pagedkv_edu.viz.explorer import BlockExplorer

    explorer = BlockExplorer(8, 4, free_order=BLOCK_TABLE_ARTICLE_FREE_ORDER, prompt_tokens=7)
    controls = [w for box in explorer.children if hasattr(box, "children") for w in box.children]
    labels = [w.description for w in controls if w.description != "N"] + \
        [w.tooltip for w in controls if isinstance(w, ipywidgets.Button)]
    assert len(labels) == 14 and all(CJK.search(label) for label in labels), labels
    explorer.add_button.click()
    explorer.fork_button.click()
    explorer.step_button.click()
    explorer.block_size_slider.value = 8                           # a slider: the pool is rebuilt
    for text in (explorer.counters.value, svg_texts(explorer.drawing.value), explorer.event_log.value):
        assert CJK.search(text) and untranslated(re.sub(r"<[^>]*>", "", text)) == [], text
    assert "區塊池已重建為空" in text_of(explorer.drawing.value, "message")
    language.set_language("en")
    assert text_of(explorer.drawing.value, "message").startswith("區塊大小 4 → 8")   # drawn when it was shown
    explorer.step_button.click()                                   # redrawn in English, the log too
    assert text_of(explorer.drawing.value, "message") == "nothing to decode: add a request first"
    assert explorer.event_log.value.endswith("✗ nothing to decode: add a request first</pre>")
    assert BlockExplorer(8, 4).add_button.description == "add request"
