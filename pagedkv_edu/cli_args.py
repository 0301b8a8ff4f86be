"""What every subcommand's parser shares: the ``--json`` flag, and flag types that refuse by name.

A leaf module, so that subcommands need not import :mod:`pagedkv_edu.cli`, which imports them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from .checks import check_whole


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Every subcommand takes --json: print one JSON object instead of the table."""
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def whole_number(minimum: int = 0, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: a whole number in ``[minimum, maximum]``.

    argparse puts the flag in front of the message (``argument --tokens: ...``), and the
    bound refuses an absurd size before anything is computed or allocated.
    """
    def parse(text: str) -> int:
        try:
            value = int(text) if len(text) <= 100 else None
        except ValueError:
            value = None
        if value is None:
            shown = text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
            bound = f"in {minimum}..{maximum}" if maximum is not None else f">= {minimum}"
            raise argparse.ArgumentTypeError(f"must be a whole number {bound}, got {shown!r}")
        try:
            return check_whole("value", value, minimum, maximum)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("value ")) from None

    parse.__name__ = "whole number"
    return parse


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line: the command, the flag and the value."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")
