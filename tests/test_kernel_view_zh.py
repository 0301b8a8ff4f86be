"""Chapter 4's pictures of the cache rows a kernel touches (``viz.kernel_view``), in Traditional Chinese."""

from __future__ import annotations

import re
from html import unescape

from pagedkv_edu.viz.kernel_view import store_svg, tile_reads_svg
from tests.zh_output import CJK, untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)


def texts(svg: str) -> list[str]:
    """What a reader sees: every <text>, and the picture's aria-label."""
    return [unescape("".join(g)) for g in re.findall(r"<text[^>]*>([^<]*)</text>|aria-label=\"([^\"]*)\"", svg)]


def test_the_tile_reads_picture_speaks_zh_tw(zh_tw) -> None:
    view = tile_reads_svg([[4, 1, 7, 2]], [20], block_size=6, num_blocks=8, tile_n=4, num_splits=3)
    seen = texts(view.svg)
    assert untranslated("\n".join(seen)) == [] and untranslated(repr(view)) == []
    assert "token 位置，每個圖塊 4 個（區塊大小 6，每條序列 3 個分割）" in seen and "區塊 7" in seen
    assert "實體快取（每個區塊一列，每個槽位一個儲存格）" in seen
    assert view._repr_mimebundle_()["text/plain"] == repr(view) == str(view.summary) and CJK.search(repr(view))
    assert view.summary == "tile reads: 1 sequences, block size 6, tiles of 4, 3 splits, 20 slots read"   # its English value


def test_the_store_picture_speaks_zh_tw(zh_tw) -> None:
    view = store_svg([9, 20, -1, 0, 13], block_size=5, num_blocks=5)
    seen = texts(view.svg)
    assert untranslated("\n".join(seen)) == [] and {"新 token", "槽位", "略過"} <= set(seen)
    assert repr(view) == "儲存：5 個 token，寫入 4 個，區塊大小 5"


def test_english_pictures_do_not_change_after_a_zh_tw_one() -> None:
    from pagedkv_edu.viz import language

    english = tile_reads_svg([[7, 1, 3]], [9], 4, 8, 4).svg
    language.set_language("zh-TW")
    try:
        assert tile_reads_svg([[7, 1, 3]], [9], 4, 8, 4).svg != english
    finally:
        language.set_language("en")
    assert tile_reads_svg([[7, 1, 3]], [9], 4, 8, 4).svg == english and "physical cache (one row per block" in english
