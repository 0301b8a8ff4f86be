"""The graders' verdicts in both languages: one catalogue, the same fields in each, picked by setup(lang=...)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import pagedkv_edu
from pagedkv_edu.exercises import messages, report
from pagedkv_edu.exercises.predict import check_prediction


@pytest.fixture(autouse=True)
def english_after() -> Iterator[None]:
    yield
    messages.set_language("en")


def test_every_verdict_has_both_languages_with_the_same_fields() -> None:
    for key, by_lang in messages.MESSAGES.items():
        assert set(by_lang) == set(messages.LANGUAGES), key
        assert messages.fields_of(by_lang["en"]) == messages.fields_of(by_lang["zh-TW"]), key
        assert any("\u4e00" <= ch <= "\u9fff" for ch in by_lang["zh-TW"]), key


def test_setup_switches_the_graders_language(capsys: pytest.CaptureFixture[str]) -> None:
    assert report("check_x", [], shown=2, hidden=3) is True
    assert capsys.readouterr().out == "✓ check_x: passed (2 cases from the text and 3 hidden random ones)\n"
    pagedkv_edu.setup(seed=0, lang="zh-TW", self_test=False, quiet=True)
    assert report("check_x", ["case 1: wrong"]) is False
    assert capsys.readouterr().out == "✗ check_x：未通過\n  case 1: wrong\n"
    assert report("check_y", [], not_solved="it raises NotImplementedError") is False
    assert "尚未解答（it raises NotImplementedError）" in capsys.readouterr().out
    assert check_prediction("free blocks", "空閒區塊", 10, 12) is False
    assert capsys.readouterr().out == "✗ 空閒區塊（free blocks）：你預測 10；量測結果 12\n"


def test_an_unknown_language_is_refused_and_nothing_changes() -> None:
    with pytest.raises(ValueError, match="lang must be one of en, zh-TW, got 'fr'"):
        pagedkv_edu.setup(seed=0, lang="fr", self_test=False, quiet=True)
    assert messages.language() == "en"
