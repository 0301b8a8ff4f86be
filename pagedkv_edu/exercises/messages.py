"""What the graders say, in the reader's language: one catalogue of verdict templates, English and zh-TW.

``pagedkv_edu.setup(lang="zh-TW")`` (the zh-TW notebooks' setup cell) or ``PAGEDKV_LANG=zh-TW`` picks the
language; English is the default. The templates are the verdicts every grader prints (passed, failed, not
solved yet, a prediction's outcome). A failure's own lines, which name the case and the value, are still
written by each chapter's grader in English.
"""

from __future__ import annotations

import os
import string

LANGUAGES: tuple[str, ...] = ("en", "zh-TW")
LANG_VAR = "PAGEDKV_LANG"

MESSAGES: dict[str, dict[str, str]] = {
    "not_solved": {
        "en": "○ {name}: not solved yet ({why}). Write your version above and run the cell again.",
        "zh-TW": "○ {name}：尚未解答（{why}）。請在上方寫下你的版本，再執行一次這個儲存格。",
    },
    "passed": {"en": "✓ {name}: passed", "zh-TW": "✓ {name}：通過"},
    "passed_cases": {
        "en": "✓ {name}: passed ({shown} cases from the text and {hidden} hidden random ones)",
        "zh-TW": "✓ {name}：通過（內文的 {shown} 個案例，加上 {hidden} 個隱藏的隨機案例）",
    },
    "failed": {"en": "✗ {name}: failed", "zh-TW": "✗ {name}：未通過"},
    "no_prediction": {
        "en": "○ {name}（{zh}）: no prediction yet. Write your number above, then run the measurement.",
        "zh-TW": "○ {zh}（{name}）：還沒有預測。請在上方寫下你的數字，再執行量測。",
    },
    "not_a_number": {"en": "✗ {name}（{zh}）: {value} is not a number", "zh-TW": "✗ {zh}（{name}）：{value} 不是數字"},
    "prediction_close": {
        "en": "✓ {name}（{zh}）: you predicted {predicted}{unit}; measured {measured}{unit}",
        "zh-TW": "✓ {zh}（{name}）：你預測 {predicted}{unit}；量測結果 {measured}{unit}",
    },
    "prediction_off": {
        "en": "✗ {name}（{zh}）: you predicted {predicted}{unit}; measured {measured}{unit}",
        "zh-TW": "✗ {zh}（{name}）：你預測 {predicted}{unit}；量測結果 {measured}{unit}",
    },
}


def _checked(lang: str) -> str:
    if lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {', '.join(LANGUAGES)}, got {lang!r}")
    return lang


_language = _checked(os.environ.get(LANG_VAR) or "en")


def set_language(lang: str) -> None:
    """The language every grader speaks from now on in this process."""
    global _language
    _language = _checked(lang)


def language() -> str:
    return _language


def say(key: str, **fields: object) -> str:
    """The verdict ``key`` in the current language, its ``{fields}`` filled in."""
    return MESSAGES[key][_language].format(**fields)


def fields_of(template: str) -> set[str]:
    """The ``{names}`` a template needs: the same in every language (tested)."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}
