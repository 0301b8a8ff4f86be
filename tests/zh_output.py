"""What the graders' zh-TW tests share: a fixture that switches the graders to zh-TW, and a reading of their
output that finds lines still in English."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from pagedkv_edu.exercises import messages

CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
QUOTED = re.compile(r"`[^`]*`|'[^']*'|\"[^\"]*\"|<[^>]*>")
TWO_WORDS = re.compile(r"\b[A-Za-z]{2,}[ ,;:]+[A-Za-z]{2,}\b")


@pytest.fixture
def zh_tw() -> Iterator[None]:
    """The graders speak zh-TW during the test, English again after it."""
    messages.set_language("zh-TW")
    try:
        yield
    finally:
        messages.set_language("en")


def untranslated(output: str) -> list[str]:
    """Lines of ``output`` with no Chinese and two English words in a row outside code, quotes and <...>: what a
    grader printed without its zh-TW translation. Identifiers, numbers and printed values pass."""
    return [line for line in output.splitlines()
            if line.strip() and not CJK.search(line) and TWO_WORDS.search(QUOTED.sub(" ", line))]
