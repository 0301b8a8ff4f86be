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

import dataclasses
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
from ..core.prefix_cache import HashFn, PrefixCache, hash_block
from ..core.swap import SwapSpace
from ..engine.config import EngineConfig
from ..engine.engine import LLMEngine
from ..engine.guards import CheckedMemory
from ..engine.step import step as shipped_step
from .ch8_cache import ReaderBlockPool, ReaderFunctions, ReaderPrefixCache
from . import report
from .grading import describe_exception, grade
from .messages import tr

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
    file: Path | None = None     # where it lives if not my_engine/<name>.py (chapter 4's kernels: my_kernels/)

    def path(self, directory: Path = MY_ENGINE) -> Path:
        return directory / f"{self.name}.py" if self.file is None else directory.parent / self.file


PARTS: dict[str, Part] = {p.name: p for p in (
    Part("block_manager", "2", "BlockManager", tr("the block manager: admit, grow, release (and fork, chapter 7)")),
    Part("gather", "3", "gather_kv", tr("gathering a sequence's K/V through its block table: the torch attention")),
    Part("decode_kernel", "4", ("paged_decode_kernel", "merge_splits_kernel"), tr("the split-K paged decode kernel"),
         Path("my_kernels") / "paged_decode.py"),
    Part("scheduler", "6", "schedule", tr("the scheduling policy: schedule(state)")),
    Part("prefix_cache", "8", ("block_hashes", "cached_prefix_blocks", "free_blocks"),
         tr("the prefix cache: the hash chain, the checked lookup, the free queue's order")),
    Part("step", "12", "step", tr("the engine's step, over the parts")),
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
        return tr("{path} does not exist (chapter {chapter} writes it)", path=path, chapter=chapter)
    if not note.exists():
        return tr("{path} has not passed chapter {chapter}'s grader yet", path=path, chapter=chapter)
    if note.read_text().strip() != digest(path):
        return tr("{path} changed since it passed chapter {chapter}'s grader", path=path, chapter=chapter)
    return None


def load_file(path: str | Path) -> ModuleType:
    """Import a reader's file as a fresh module (an edited file is read again)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"reader_{path.stem}_{digest(path)[:8]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def function_in(path: str | Path, name: str, signature: str, shipped: tuple[Any, ...], what: str
                ) -> tuple[Callable[..., Any] | None, str]:
    """The function ``name`` a reader's file defines, or None and why not, in words a grader prints.

    ``shipped`` are the package's own versions: a file that imports one instead of defining its own is
    refused (it would pass without a line of the reader's). ``what`` names the part in the messages.
    """
    path = Path(path)
    if not path.exists():
        return None, tr("{path} does not exist: run the %%writefile cell above, which saves your {what} there",
                        path=path, what=what)
    try:
        module = load_file(path)
    except Exception as error:   # noqa: BLE001 (the reader's file may raise anything as it is imported)
        return None, tr("importing {path} {error}", path=path, error=describe_exception(error))
    fn = getattr(module, name, None)
    if not callable(fn):
        return None, tr("{path} defines no function {name}{signature}", path=path, name=name, signature=signature)
    if any(fn is s for s in shipped):
        return None, tr("{path} imports the shipped {name} instead of defining its own: write yours there", path=path,
                        name=name)
    return fn, ""


def grade_part(name: str, target: Any, cases: Any, hidden: Any, run: Callable[..., list[str]],
               find: Callable[[str | Path], tuple[Callable[..., Any] | None, str]], *,
               passed: str = tr("load_parts() gives it to the engine")) -> bool:
    """Grade a part given as a function, or as the file that defines it (``find`` reads it): a file that passes
    is marked passed as it is now, and ``passed`` says what runs it from then on."""
    if not isinstance(target, (str, Path)):
        return grade(name, target, cases, hidden, run)
    fn, problem = find(target)
    if fn is None:
        return report(name, [problem])
    if not grade(name, fn, cases, hidden, run):
        return False
    mark_passed(target)
    print(tr("  {path} is marked passed: {passed}, for as long as the file stays as it is", path=target,
             passed=passed))
    return True


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
    """Each part, "yours" or "shipped", and why: what the engine ran, and how many lines of it you wrote."""

    choices: list[Choice] = field(default_factory=list)
    directory: Path = MY_ENGINE

    @property
    def yours(self) -> list[str]:
        return [c.part.name for c in self.choices if c.yours]

    def __getitem__(self, name: str) -> Choice:
        """The choice for part ``name``."""
        return next(c for c in self.choices if c.part.name == name)

    def lines(self, name: str) -> int:
        """Lines of code in your file for part ``name`` (not blank, not a comment), 0 if it is not yours."""
        choice = self[name]
        return code_lines(choice.part.path(self.directory)) if choice.yours else 0

    @property
    def your_lines(self) -> int:
        """Lines of your own code the engine runs."""
        return sum(self.lines(c.part.name) for c in self.choices)

    def __str__(self) -> str:
        # rendered now, in the reader's language: join reads a message's English value
        rows = [str(tr("part             chapter  runs      lines  why"))]    # the columns of the rows below
        rows += [f"{c.part.name:16s}{c.part.chapter:>8s}  {tr('yours') if c.yours else tr('shipped'):9s}"
                 f"{self.lines(c.part.name) or '':>6}  {c.why}" for c in self.choices]
        return "\n".join(rows + [str(tr("your code the engine runs: {count} lines", count=self.your_lines))])


def code_lines(path: Path) -> int:
    """Lines that are code: not blank, not a comment, not a docstring's (a docstring's lines count as prose)."""
    import ast

    source = path.read_text()
    prose = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            prose.update(range(body[0].lineno, body[0].end_lineno + 1))
    return sum(1 for i, line in enumerate(source.splitlines(), 1)
               if line.strip() and not line.strip().startswith("#") and i not in prose)


def choose(name: str, shipped: Any, directory: Path = MY_ENGINE) -> Choice:
    """Your part ``name`` if its file passed and is unchanged, else ``shipped``."""
    part = PARTS[name]
    path = part.path(directory)
    why = why_not_passed(path, part.chapter)
    if why is not None:
        return Choice(part, False, shipped, why)
    if isinstance(part.defines, str):
        return Choice(part, True, getattr(load_file(path), part.defines),
                      tr("{path} passed chapter {chapter}", path=path, chapter=part.chapter))
    module = load_file(path)
    missing = [name for name in part.defines if not callable(getattr(module, name, None))]
    if missing:
        return Choice(part, False, shipped, tr("{path} defines no {names}", path=path,
                                               names=str(tr(", ")).join(missing)))
    return Choice(part, True, module, tr("{path} passed chapter {chapter}", path=path, chapter=part.chapter))


@dataclass
class Parts:
    """The engine's parts, each yours or shipped, and the engine they make (:meth:`engine`).

    ``prefix_cache``: your chapter-8 functions, or None for the shipped :class:`PrefixCache`;
    ``attention``: your chapter-4 kernel, else your chapter-3 gather, else the shipped torch path.
    """

    manager_class: type
    schedule: Callable[..., Any]
    card: ReportCard
    prefix_cache: ReaderFunctions | None = None
    attention: str | Callable[..., Any] = "torch"
    step: Callable[..., Any] = shipped_step

    def memory(self, num_blocks: int, block_size: int, max_seq_len: int | None = None, *,
               enable_prefix_caching: bool = False, hash_fn: HashFn = hash_block, watermark_blocks: int = 0,
               swap: SwapSpace | None = None) -> Any:
        """A block manager, called as :class:`BlockManager` is (``simulate(..., block_manager=parts.memory)``):
        yours (checked) or the shipped one, with your prefix cache or the shipped one when caching is on."""
        cache = self.prefix_cache if enable_prefix_caching else None
        if self.manager_class is BlockManager:
            if cache is not None:
                return cache.memory(num_blocks, block_size, max_seq_len, hash_fn=hash_fn,
                                    watermark_blocks=watermark_blocks, swap=swap)
            return BlockManager(num_blocks, block_size, max_seq_len, enable_prefix_caching=enable_prefix_caching,
                                hash_fn=hash_fn, watermark_blocks=watermark_blocks, swap=swap)
        if swap is not None:
            raise ValueError(tr("your block manager has no swap space: chapter 9 swaps with the shipped one"))
        pool = BlockPool(num_blocks, block_size) if cache is None else ReaderBlockPool(num_blocks, block_size, cache)
        factory = None
        if cache is not None:
            factory = lambda p: ReaderPrefixCache(p, cache, hash_fn)   # noqa: E731
        elif enable_prefix_caching:
            factory = lambda p: PrefixCache(p, hash_fn)                # noqa: E731
        mine = self.manager_class(pool, max_seq_len, watermark_blocks=watermark_blocks, prefix_cache=factory)
        return CheckedMemory(mine, tr("your block manager ({path})", path=PARTS["block_manager"].path()), tr=tr)

    def over(self, pool: BlockPool, max_seq_len: int | None = None) -> Any:
        """A block manager over an existing pool (the explorer's), yours or the shipped one."""
        if self.manager_class is BlockManager:
            return BlockManager.over(pool, max_seq_len)
        return self.manager_class(pool, max_seq_len)

    def engine(self, model: Any, tokenizer: Any = None, **settings: Any) -> LLMEngine:
        """An :class:`~pagedkv_edu.engine.engine.LLMEngine` over ``model`` running these parts, with ``settings``."""
        config = EngineConfig(**{"backend": self.attention, **settings})
        config = config.for_context(model.config.max_position_embeddings)
        return LLMEngine(model, tokenizer, config=config, memory=config.make_memory(self.memory),
                         schedule=self.schedule, step=self.step)


def attention_part(gather: Choice, kernel: Choice) -> str | Callable[..., Any]:
    """The attention the engine runs: your chapter-4 kernel (two splits: the merge runs), else your chapter-3
    gather, else the shipped torch path."""
    if kernel.yours:
        from .ch4_kernel import decode_backend

        return decode_backend(kernel.value.paged_decode_kernel, kernel.value.merge_splits_kernel, num_splits=2,
                              name="your_decode_kernel")
    if gather.yours:
        from .ch3 import gather_attention

        return gather_attention(gather.value)
    return "torch"


def load_parts(directory: str | Path = MY_ENGINE, *, quiet: bool = False) -> Parts:
    """Every part, yours where it passed unchanged; prints the report card unless ``quiet``."""
    directory = Path(directory)
    manager = choose("block_manager", BlockManager, directory)
    if manager.yours and not (isinstance(manager.value, type) and issubclass(manager.value, ManagerBase)):
        manager = Choice(manager.part, False, BlockManager, tr("{path} defines no BlockManager class built on "
                                                               "ManagerBase", path=manager.part.path(directory)))
    elif manager.yours:   # chapter 2's file shares nothing until chapter 7 adds fork: say so before n > 1 needs it
        shares = manager.value.fork is not ManagerBase.fork
        why = tr("{why} (with fork: shares blocks)", why=manager.why) if shares else \
            tr("{why} (no fork yet: chapter 7 adds it; n > 1 needs it)", why=manager.why)
        manager = dataclasses.replace(manager, why=why)
    gather = choose("gather", None, directory)
    kernel = choose("decode_kernel", None, directory)
    policy = choose("scheduler", shipped_scheduler.schedule, directory)
    cache = choose("prefix_cache", PrefixCache, directory)
    step = choose("step", shipped_step, directory)
    card = ReportCard([manager, gather, kernel, policy, cache, step], directory)
    if not quiet:
        print(card)
    mine = ReaderFunctions.of(cache.value, tr("your prefix cache ({path})", path=cache.part.path(directory))) \
        if cache.yours else None
    return Parts(manager.value, policy.value, card, mine, attention_part(gather, kernel), step.value)


__all__ = ["MY_ENGINE", "PARTS", "Part", "Parts", "ReportCard", "choose", "function_in", "grade_part", "load_file",
           "load_parts",
           "mark_passed",
           "why_not_passed"]
