"""Your engine: the parts you write in the chapters, saved under ``my_engine/``, and the engine that runs them.

A chapter's "your turn" for a part of the serving core ends in a ``%%writefile my_engine/<part>.py`` cell.
Its grader imports that file, grades it, and when it passes writes the file's SHA-256 beside it
(``<part>.py.passed``). :func:`load_parts` then gives the engine your part if its file passed and is
unchanged since, else the shipped part, and says which ran and why (:class:`ReportCard`). Your parts
run checked (:class:`~pagedkv_edu.engine.guards.CheckedMemory`; the scheduler checks a policy's plan),
so a case the grader never drew stops the engine with a message instead of giving wrong tokens.
Paths are relative to the notebooks, where git ignores ``my_engine/`` and ``my_kernels/``.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ..core import scheduler as shipped_scheduler
from ..core.block_manager import BlockManager, ManagerBase
from ..core.block_pool import BlockPool
from ..core.prefix_cache import PrefixCache
from ..engine.guards import CheckedMemory
from .ch8_cache import ReaderFunctions

MY_ENGINE = Path("my_engine")
"""Where the chapters save your parts, relative to the notebooks."""


@dataclass(frozen=True)
class Part:
    """One part you can write: its file, the name the file defines, and the chapter that grades it.

    A part of several functions (chapter 8's prefix cache) names them all; the part is then the module.
    """

    name: str
    chapter: str
    defines: str | tuple[str, ...]
    what: str

    def path(self, directory: Path = MY_ENGINE) -> Path:
        return directory / f"{self.name}.py"


PARTS: dict[str, Part] = {p.name: p for p in (
    Part("block_manager", "2", "BlockManager", "the block manager: admit, grow, release"),
    Part("scheduler", "6", "schedule", "the scheduling policy: schedule(state)"),
    Part("prefix_cache", "8", ("block_hashes", "cached_prefix_blocks", "free_blocks"),
         "the prefix cache: the hash chain, the checked lookup, the free queue's order"),
)}


# --- passed, unchanged ---------------------------------------------------------------------
def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def mark_passed(path: str | Path) -> None:
    """Record that ``path`` passed its grader, as it is now (its SHA-256, beside it)."""
    path = Path(path)
    path.with_name(path.name + ".passed").write_text(digest(path) + "\n")


def why_not_passed(path: str | Path, chapter: str) -> str | None:
    """None if ``path`` passed chapter ``chapter``'s grader and is unchanged since; else why not."""
    path = Path(path)
    note = path.with_name(path.name + ".passed")
    if not path.exists():
        return f"{path} does not exist (chapter {chapter} writes it)"
    if not note.exists():
        return f"{path} has not passed chapter {chapter}'s grader yet"
    if note.read_text().strip() != digest(path):
        return f"{path} changed since it passed chapter {chapter}'s grader"
    return None


def load_file(path: str | Path) -> ModuleType:
    """Import a reader's file as a fresh module (an edited file is read again)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"reader_{path.stem}_{digest(path)[:8]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the parts, yours or shipped ---------------------------------------------------------------
@dataclass(frozen=True)
class Choice:
    """Which implementation of a part runs, and why."""

    part: Part
    yours: bool
    value: Any
    why: str


@dataclass
class ReportCard:
    """Each part, "yours" or "shipped", and why: what the engine ran."""

    choices: list[Choice] = field(default_factory=list)

    @property
    def yours(self) -> list[str]:
        return [c.part.name for c in self.choices if c.yours]

    def __str__(self) -> str:
        rows = [f"{'part':16s}{'chapter':>8s}  {'runs':9s}why"]
        rows += [f"{c.part.name:16s}{c.part.chapter:>8s}  {'yours' if c.yours else 'shipped':9s}{c.why}"
                 for c in self.choices]
        return "\n".join(rows)


def choose(name: str, shipped: Any, directory: Path = MY_ENGINE) -> Choice:
    """Your part ``name`` if its file passed and is unchanged, else ``shipped``."""
    part = PARTS[name]
    path = part.path(directory)
    why = why_not_passed(path, part.chapter)
    if why is not None:
        return Choice(part, False, shipped, why)
    if isinstance(part.defines, str):
        return Choice(part, True, getattr(load_file(path), part.defines), f"{path} passed chapter {part.chapter}")
    module = load_file(path)
    missing = [name for name in part.defines if not callable(getattr(module, name, None))]
    if missing:
        return Choice(part, False, shipped, f"{path} defines no {', '.join(missing)}")
    return Choice(part, True, module, f"{path} passed chapter {part.chapter}")


@dataclass
class Parts:
    """The engine's parts, each yours or shipped; :meth:`memory` builds the block manager, checked if yours.

    ``prefix_cache``: your chapter-8 functions, or None for the shipped :class:`PrefixCache`.
    """

    manager_class: type
    schedule: Callable[..., Any]
    card: ReportCard
    prefix_cache: ReaderFunctions | None = None

    def memory(self, num_blocks: int, block_size: int, max_seq_len: int | None = None, **options: Any) -> Any:
        """A block manager, called as :class:`BlockManager` is (``simulate(..., block_manager=parts.memory)``).

        With ``enable_prefix_caching``, its prefix cache is yours if yours passed (:mod:`.ch8_cache`).
        """
        if self.manager_class is BlockManager:
            if self.prefix_cache is not None and options.get("enable_prefix_caching"):
                return self.prefix_cache.memory(num_blocks, block_size, max_seq_len, **options)
            return BlockManager(num_blocks, block_size, max_seq_len, **options)
        unsupported = {k for k, v in options.items() if v and k != "watermark_blocks"}
        if unsupported:
            raise ValueError(f"your block manager (chapter 2) has no {', '.join(sorted(unsupported))}: the shipped one "
                             f"does (chapters 8, 9)")
        mine = self.manager_class(BlockPool(num_blocks, block_size), max_seq_len,
                                  watermark_blocks=options.get("watermark_blocks", 0))
        return CheckedMemory(mine, f"your block manager ({PARTS['block_manager'].path()})")


def load_parts(directory: str | Path = MY_ENGINE, *, quiet: bool = False) -> Parts:
    """Every part, yours where it passed unchanged; prints the report card unless ``quiet``."""
    directory = Path(directory)
    manager = choose("block_manager", BlockManager, directory)
    if manager.yours and not (isinstance(manager.value, type) and issubclass(manager.value, ManagerBase)):
        manager = Choice(manager.part, False, BlockManager, f"{manager.part.path(directory)} defines no BlockManager "
                                                            f"class built on ManagerBase")
    policy = choose("scheduler", shipped_scheduler.schedule, directory)
    cache = choose("prefix_cache", PrefixCache, directory)
    card = ReportCard([manager, policy, cache])
    if not quiet:
        print(card)
    mine = ReaderFunctions.of(cache.value, f"your prefix cache ({cache.part.path(directory)})") if cache.yours else None
    return Parts(manager.value, policy.value, card, mine)


__all__ = ["MY_ENGINE", "PARTS", "Part", "Parts", "ReportCard", "choose", "load_file", "load_parts", "mark_passed",
           "why_not_passed"]
