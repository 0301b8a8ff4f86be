"""Chapter 4's online-softmax picture: the model against float64, its refusals, the SVG, the widget headless."""

from __future__ import annotations

import html
import math
import random
import re
import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from pagedkv_edu.attention import paged_decode_attention_float64
from pagedkv_edu.exercises.solutions.ch4 import online_softmax_update
from pagedkv_edu.viz.online_softmax_view import (SCORE_PATTERNS, OnlineSoftmaxState, draw_inputs, softmax_grid_svg,
                                                 softmax_svg)
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

SVG = "{http://www.w3.org/2000/svg}"


def random_states(count: int, seed: int = 4) -> list[OnlineSoftmaxState]:
    """Seeded random shapes: keys, a power-of-two tile, splits that fit, any pattern, head_dim 1..8."""
    rng, states = random.Random(seed), []
    while len(states) < count:
        keys, tile = rng.randint(4, 64), rng.choice((1, 2, 4, 8, 16, 32))
        tiles = -(-keys // tile)
        states.append(OnlineSoftmaxState(keys, tile, rng.randint(1, min(8, tiles)), rng.randrange(1000),
                                         rng.choice(SCORE_PATTERNS), rng.randrange(tiles), head_dim=rng.randint(1, 8)))
    return states


def direct(state: OnlineSoftmaxState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The scores, values and softmax(scores) @ values from the drawn inputs, in torch float64."""
    q, keys, values = (torch.from_numpy(a) for a in draw_inputs(state.seed, state.pattern, state.head_dim))
    scores = keys[:state.num_keys] @ q / math.sqrt(state.head_dim)
    return scores, values[:state.num_keys], torch.softmax(scores, 0) @ values[:state.num_keys]


# --- the state model ---------------------------------------------------------------------------------
def test_the_running_update_keeps_its_contract_after_every_tile() -> None:
    for state in random_states(30):
        scores, values, want = direct(state)
        m, l, acc = (torch.full((1,), -math.inf, dtype=torch.float64), torch.zeros(1, dtype=torch.float64),
                     torch.zeros(1, state.head_dim, dtype=torch.float64))
        for st in state.steps:
            s, v = scores[st.start:st.end], values[st.start:st.end]
            m, l, acc = online_softmax_update(m, l, acc, s[None], v)      # the chapter's reference solution
            seen = torch.exp(scores[:st.end] - st.m_new)                  # the contract, from scratch
            assert st.m_new == pytest.approx(float(scores[:st.end].max()), rel=1e-14, abs=1e-15)
            assert st.m_new == pytest.approx(float(m[0]), rel=1e-14, abs=1e-15)
            assert st.l_new == pytest.approx(float(seen.sum()), rel=1e-12) == pytest.approx(float(l[0]), rel=1e-12)
            np.testing.assert_allclose(st.acc_new, (seen @ values[:st.end]).numpy(), rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(st.acc_new, acc[0].numpy(), rtol=1e-12, atol=1e-12)
            assert st.alpha == pytest.approx(math.exp(st.m_old - st.m_new) if st.index else 0.0, rel=1e-15)
        np.testing.assert_allclose(np.array(state.steps[-1].acc_new) / state.steps[-1].l_new, want.numpy(),
                                   rtol=1e-12, atol=1e-13)
        assert [(st.start, st.end) for st in state.steps] == [(a, min(a + state.tile_n, state.num_keys))
                                                              for a in range(0, state.num_keys, state.tile_n)]


def test_each_split_weighs_its_share_of_the_softmax_and_the_merge_is_exact() -> None:
    for state in random_states(30, seed=9):
        scores, values, want = direct(state)
        n, t, s = state.num_keys, state.tile_n, state.num_splits
        chunk = math.ceil(math.ceil(n / s) / t) * t                       # the kernel's cut, restated
        assert [(p.start, p.end) for p in state.partials] == [(min(i * chunk, n), min((i + 1) * chunk, n))
                                                              for i in range(s)]
        mass = torch.exp(scores - scores.max())
        for p in state.partials:
            share = float(mass[p.start:p.end].sum() / mass.sum())       # its share of the whole softmax
            assert p.weight == pytest.approx(share, rel=1e-12, abs=1e-300)
            if p.end > p.start:
                assert p.m == pytest.approx(float(scores[p.start:p.end].max()), rel=1e-14, abs=1e-15)
                part = torch.softmax(scores[p.start:p.end], 0) @ values[p.start:p.end]
                np.testing.assert_allclose(p.output, part.numpy(), rtol=1e-12, atol=1e-13)
                assert p.lse == pytest.approx(float(torch.logsumexp(scores[p.start:p.end], 0)) / math.log(2),
                                              rel=1e-12)
            else:
                assert (p.l, p.weight, p.lse) == (0.0, 0.0, -math.inf)
        assert sum(p.weight for p in state.partials) == pytest.approx(1.0, rel=1e-12)
        np.testing.assert_allclose(state.merged, want.numpy(), rtol=1e-12, atol=1e-13)
        assert state.merged_error <= 1e-12 and state.online_error <= 1e-12


def test_the_answer_is_the_packages_float64_paged_attention() -> None:
    """Through a paged float32 cache (its K/V rounded to float32: agreement to about 1e-7)."""
    state = OnlineSoftmaxState(37, 8, 3, 5, "random", head_dim=8)
    q, keys, values = (torch.from_numpy(a).float() for a in draw_inputs(5, "random", 8))
    block_size, blocks = 4, -(-37 // 4)
    k_cache = torch.zeros(blocks, block_size, 1, 8)
    v_cache = torch.zeros_like(k_cache)
    k_cache.view(-1, 1, 8)[:37, 0], v_cache.view(-1, 1, 8)[:37, 0] = keys[:37], values[:37]
    out = paged_decode_attention_float64(q.view(1, 1, 8), k_cache, v_cache,
                                         torch.arange(blocks, dtype=torch.int32)[None],
                                         torch.tensor([37], dtype=torch.int32))
    np.testing.assert_allclose(state.merged, out[0, 0].numpy(), rtol=0, atol=2e-6)


def test_the_patterns_do_what_they_say() -> None:
    rising = OnlineSoftmaxState(32, 8, 1, 0, "rising")
    assert all(st.rescaled for st in rising.steps[1:])                    # the max grows every tile
    falling = OnlineSoftmaxState(32, 8, 1, 0, "falling")
    assert [st.alpha for st in falling.steps[1:]] == [1.0, 1.0, 1.0]      # the first tile's max stands
    hot = OnlineSoftmaxState(32, 8, 2, 0, "near 1,000")
    assert hot.naive_sum == math.inf and 990 < hot.steps[-1].m_new < 1010     # exp(s) overflows float64 ...
    assert math.isfinite(hot.steps[-1].l_new) and hot.merged_error <= 1e-12   # ... the running max does not
    assert OnlineSoftmaxState(32, 8, 1, 0, "random").naive_sum < math.inf


def test_more_keys_append_to_the_same_sequence() -> None:
    short, long = OnlineSoftmaxState(16, 4, 1, 3), OnlineSoftmaxState(40, 4, 1, 3)
    assert np.array_equal(short.scores, long.scores[:16]) and np.array_equal(short.values, long.values[:16])
    assert OnlineSoftmaxState(16, 4, 1, 4).scores[0] != short.scores[0]    # another seed, other keys


def snapshot_of(state: OnlineSoftmaxState) -> tuple:
    return (state.data_state(), state.num_keys, state.tile_n, state.num_splits, state.seed, state.pattern,
            state.step, state.merged, state.steps)


@pytest.mark.parametrize("action, named", [
    (lambda s: s.set_num_splits(5), "num_splits=5"),          # 4 tiles of 8: a fifth split would read nothing
    (lambda s: s.set_tile_n(16), "num_splits=3"),             # 2 tiles, fewer than the 3 splits
    (lambda s: s.set_num_keys(16), "num_splits=3"),
    (lambda s: s.set_tile_n(6), "tile_n=6"),
    (lambda s: s.set_tile_n(0), "got 0"),
    (lambda s: s.set_num_keys(65), "got 65"),
    (lambda s: s.set_num_keys(True), "got True"),
    (lambda s: s.set_seed(-1), "got -1"),
    (lambda s: s.set_pattern("sorted"), "'sorted'"),
    (lambda s: s.seek(4), "got 4"),
])
def test_refusals_name_the_value_and_change_nothing(action, named) -> None:
    state = OnlineSoftmaxState(32, 8, 3, 1, "rising", 2)
    before = snapshot_of(state)
    with pytest.raises(ValueError, match=named.replace("(", r"\(")):
        action(state)
    assert snapshot_of(state) == before


def test_fewer_tiles_move_the_step_to_the_last_one() -> None:
    state = OnlineSoftmaxState(32, 4, 1, 0, step=6)
    state.set_tile_n(16)
    assert (state.num_tiles, state.step) == (2, 1)
    state.set_tile_n(2)
    assert state.step == 1 and state.current.start == 2


# --- the renderer ----------------------------------------------------------------------------------
def test_the_svg_carries_the_state_and_the_numbers() -> None:
    state = OnlineSoftmaxState(20, 4, 4, 0, "falling", 4)
    svg = softmax_svg(state)
    root = ET.fromstring(svg)                                             # well-formed XML
    assert root.tag == f"{SVG}svg" and root.get("class") == "pagedkv-softmax"
    assert root.get("data-state") == state.data_state() == (
        "keys=20;tile=4;splits=4;seed=0;scores=falling;step=4;m=0.4097;l=2.673;alpha=1;"
        "weights=0.888/0.105/0.007/0.000;match=yes")
    assert svg == softmax_svg(OnlineSoftmaxState(20, 4, 4, 0, "falling", 4)) and "<defs" not in svg
    groups = {g.get("class"): g for g in root.iter(f"{SVG}g")}
    assert [float(x) for x in groups["merged"].get("data-values").split()] == pytest.approx(state.merged, rel=1e-5)
    assert [float(x) for x in groups["acc-new"].get("data-values").split()] == pytest.approx(
        state.current.acc_new, rel=1e-5)
    partials = [g for g in root.iter(f"{SVG}g") if g.get("class") == "partial"]
    assert [float(g.get("data-weight")) for g in partials] == pytest.approx([p.weight for p in state.partials],
                                                                             abs=1e-6)
    text = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "split 3: no keys left" in text and "after the last tile" in text and "inf" not in text
    state.seek(1)
    moved = softmax_svg(state)
    assert moved != svg and "step=1;" in ET.fromstring(moved).get("data-state") and "after the last tile" not in moved


def test_the_svg_says_when_exp_overflows() -> None:
    root = ET.fromstring(softmax_svg(OnlineSoftmaxState(24, 8, 2, 0, "near 1,000")))
    assert "scores=near 1,000" in root.get("data-state")
    assert any("inf (float64 overflows" in (t.text or "") for t in root.iter(f"{SVG}text"))


def test_the_still_shows_each_setting() -> None:
    svg = softmax_grid_svg([(8, 1), (4, 1), (8, 4)])
    root = ET.fromstring(svg)
    assert root.get("class") == "pagedkv-softmax-grid"
    panels = [g.get("data-state") for g in root.iter(f"{SVG}g") if g.get("class") == "panel"]
    assert [p.split(";")[1:3] for p in panels] == [["tile=8", "splits=1"], ["tile=4", "splits=1"],
                                                   ["tile=8", "splits=4"]]
    assert all(p.endswith("match=yes") for p in panels) and root.get("data-state") == " | ".join(panels)
    for bad in ([(8, 1)], [(8, 1)] * 5):
        with pytest.raises(ValueError, match=f"got {len(bad)}"):
            softmax_grid_svg(bad)
    with pytest.raises(ValueError, match="tile_n=3"):
        softmax_grid_svg([(8, 1), (3, 1)])


# --- the widget, headless ------------------------------------------------------------------------------
def test_the_widget_redraws_from_the_model_and_refuses_with_a_message() -> None:
    widgets = pytest.importorskip("ipywidgets")
    from pagedkv_edu.viz.online_softmax_widget import OnlineSoftmaxWidget

    widget = OnlineSoftmaxWidget()
    cases = widget.redraw_cases()
    assert 3 <= len(cases) <= 6
    assert isinstance(getattr(widget, cases[0][0]), (widgets.Dropdown, widgets.IntSlider, widgets.SelectionSlider))
    assert widget.drawing.value == softmax_svg(widget.state) and widget.message.value == ""
    for name, value in cases:
        before = widget.drawing.value
        started = time.perf_counter()
        getattr(widget, name).value = value
        assert time.perf_counter() - started < 2.0, f"redraw of {name}={value!r} took too long"
        assert widget.drawing.value != before, f"{name}={value!r} did not change the picture"
        assert widget.drawing.value == softmax_svg(widget.state) and widget.message.value == ""
        assert getattr(widget.state, "step" if name == "step" else name) == value
    # After the cases: 20 keys in tiles of 4 (5 tiles), 3 splits.
    good = widget.drawing.value
    widget.num_splits.value = 6
    assert "num_splits=6" in widget.message.value and "5 tiles" in widget.message.value
    assert widget.drawing.value == good and widget.state.num_splits == widget.num_splits.value == 3
    widget.tile_n.value = 6
    assert "not a power of two" in widget.message.value and widget.tile_n.value == 4 and widget.drawing.value == good
    widget.tile_n.value = 16                                              # 2 tiles: the step slider shrinks too
    assert "num_splits=3" in widget.message.value and widget.step.max == 4
    widget.num_splits.value = 2
    widget.tile_n.value = 16
    assert widget.message.value == "" and (widget.step.max, widget.step.value, widget.state.step) == (1, 1, 1)
    bundle = widget._repr_mimebundle_()
    assert bundle["image/svg+xml"] == widget.drawing.value and "tiles of 16" in bundle["text/plain"]


# --- in zh-TW --------------------------------------------------------------------------------------
def drawn_text(svg: str) -> str:
    """Every line the picture writes for a reader: its texts, one a line, and its aria-label."""
    texts = re.findall(r"<text\b[^>]*>([^<]*)</text>", svg) + re.findall(r'aria-label="([^"]*)"', svg)
    return "\n".join(html.unescape(t) for t in texts)


def test_the_widget_and_its_pictures_speak_zh_tw(zh_tw: None) -> None:
    pytest.importorskip("ipywidgets")
    from pagedkv_edu.viz.online_softmax_widget import OnlineSoftmaxWidget

    widget = OnlineSoftmaxWidget(num_keys=17, tile_n=4, num_splits=4, pattern="falling")   # split 3 reads nothing
    assert widget.step.description == "圖塊"         # chapter 4 tells the reader to drag the tile slider
    assert (widget.tile_n.description, widget.num_splits.description, widget.num_keys.description,
            widget.seed.description, widget.pattern.description) == ("圖塊大小", "分割", "key 數", "種子", "分數")
    assert list(widget.pattern.options) == [("隨機", "random"), ("上升", "rising"), ("下降", "falling"),
                                            ("接近 1,000", "near 1,000")]
    text = drawn_text(widget.drawing.value)
    assert untranslated(text) == [] and "（分數：下降，種子 0）" in text and "分割 3：沒有分到 key" in text
    assert "α = exp(−∞ − m_new) = 0：還沒有累加任何東西，不必重新縮放" in text
    widget.step.value = 4                           # the last tile
    text = drawn_text(widget.drawing.value)
    assert untranslated(text) == [] and "最後一個圖塊之後，acc / l 等於對全部 17 個 key 直接計算的 softmax" in text
    widget.pattern.value = "near 1,000"
    assert "inf（float64 超過 709.8 就溢位）" in drawn_text(widget.drawing.value)
    widget.tile_n.value = 6                         # refused: not a power of two
    assert "tile_n=6 不是二的次方" in html.unescape(widget.message.value) and widget.state.tile_n == 4
    widget.num_splits.value = 6                     # refused: 5 tiles
    assert "num_splits=6 多於 17 個 key 以圖塊大小 4 切出的 5 個圖塊" in widget.message.value
    assert widget._repr_mimebundle_()["text/plain"].startswith("線上 softmax：17 個 key（分數：接近 1,000）")
    still = drawn_text(softmax_grid_svg([(8, 1), (4, 2)]))
    assert untranslated(still) == [] and "線上 softmax，2 種設定" in still and "圖塊大小 4（共 8 個），2 個分割" in still
