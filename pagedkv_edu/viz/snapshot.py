"""A frozen picture of a block manager: what the renderer draws and the tests compare.

The explorer widget, the static SVG and the notebooks all look at the same thing: which
physical block belongs to which request, how full it is, how many references it has, and
every request's block table. Taking that picture once, as plain immutable data, keeps the
renderer a pure function (same snapshot, same SVG) and lets a test assert on state without
reading pixels.

A block can be in one of four states:

* ``free``: in the pool's free queue (reference count 0);
* ``owned``: referenced by exactly one live request of this manager;
* ``shared``: referenced more than once (chapter 7's fork and copy-on-write, chapter 8's prefix cache);
* ``other``: in use, but by no table this manager knows, e.g. the busy blocks of a pool
  built with ``BlockPool.from_free_order`` for the articles' walk-throughs.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from ..block_manager import BlockManager
from ..block_pool import BlockPool
from ..block_table import BlockTable


@dataclass(frozen=True)
class BlockView:
    """One physical block as drawn: id, state, owners, filled slots and reference count."""

    block_id: int
    state: str
    owners: tuple[Hashable, ...]
    fill: int
    ref_count: int


@dataclass(frozen=True)
class TableView:
    """One request's block table: (logical, physical, filled) rows and its token count."""

    request_id: Hashable
    num_tokens: int
    rows: tuple[tuple[int, int, int], ...]

    @property
    def block_ids(self) -> tuple[int, ...]:
        return tuple(physical for _, physical, _ in self.rows)

    @property
    def fills(self) -> tuple[int, ...]:
        return tuple(fill for _, _, fill in self.rows)


@dataclass(frozen=True)
class Snapshot:
    """Everything the renderer needs, and nothing that changes between two identical states."""

    num_blocks: int
    block_size: int
    blocks: tuple[BlockView, ...]
    tables: tuple[TableView, ...]
    free_order: tuple[int, ...]
    message: str = ""
    is_error: bool = False
    events: tuple[str, ...] = ()

    @property
    def num_free(self) -> int:
        return len(self.free_order)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def num_other(self) -> int:
        """Blocks in use by requests outside this picture."""
        return sum(1 for b in self.blocks if b.state == "other")

    @property
    def num_tokens(self) -> int:
        """Tokens stored in this manager's blocks; a shared block's tokens count once."""
        return sum(b.fill for b in self.blocks if b.state in ("owned", "shared"))

    @property
    def allocated_slots(self) -> int:
        """Slots of the blocks this manager's requests hold."""
        return sum(self.block_size for b in self.blocks if b.state in ("owned", "shared"))

    @property
    def waste_slots(self) -> int:
        """Allocated but empty slots: the tails of last blocks."""
        return self.allocated_slots - self.num_tokens

    @property
    def waste_fraction(self) -> float:
        """Empty share of the allocated slots (0 when nothing is allocated)."""
        return self.waste_slots / self.allocated_slots if self.allocated_slots else 0.0

    def block(self, block_id: int) -> BlockView:
        return self.blocks[block_id]

    def table(self, request_id: Hashable) -> TableView:
        for table in self.tables:
            if table.request_id == request_id:
                return table
        raise KeyError(f"no request {request_id!r} in this snapshot; live: {[t.request_id for t in self.tables]}")

    def summary(self) -> str:
        """The counters as one line of text (the static picture's text/plain)."""
        line = (f"{self.num_used} of {self.num_blocks} blocks used, {self.num_free} free; "
                f"{self.num_tokens} tokens in {len(self.tables)} request{'' if len(self.tables) == 1 else 's'}; "
                f"waste {self.waste_slots} slots ({100 * self.waste_fraction:.1f}%)")
        if self.num_other:
            line += f"; {self.num_other} held by other requests"
        return line


def snapshot(
    source: BlockManager | BlockPool,
    tables: Mapping[Hashable, BlockTable] | None = None,
    *,
    message: str = "",
    is_error: bool = False,
    events: tuple[str, ...] = (),
) -> Snapshot:
    """Take the picture of a manager, or of a pool and the tables that point into it.

    Tables keep the order they were added in. A pool on its own shows its busy blocks as
    ``other``: the pool counts references but does not know who holds them.
    """
    if isinstance(source, BlockManager):
        if tables is not None:
            raise ValueError("pass tables only with a BlockPool; a BlockManager brings its own")
        pool, tables = source.pool, source.tables
    elif isinstance(source, BlockPool):
        pool, tables = source, dict(tables or {})
    else:
        raise TypeError(f"expected a BlockManager or BlockPool, got {type(source).__name__}")
    owners: list[list[Hashable]] = [[] for _ in range(pool.num_blocks)]
    fills = [0] * pool.num_blocks
    views = []
    for request_id, table in tables.items():
        if table.block_size != pool.block_size:
            raise ValueError(f"table {request_id!r} has block_size {table.block_size}, the pool {pool.block_size}")
        rows = tuple(table.rows())
        for _, physical, fill in rows:
            if not 0 <= physical < pool.num_blocks:
                raise IndexError(
                    f"table {request_id!r} points at block {physical}, outside a pool of {pool.num_blocks}")
            owners[physical].append(request_id)
            fills[physical] = max(fills[physical], fill)
        views.append(TableView(request_id, table.num_tokens, rows))
    blocks = []
    for block_id, refs in enumerate(pool.ref_counts):
        if refs == 0:
            state = "free"
        elif not owners[block_id]:
            state = "other"
        elif refs > 1 or len(owners[block_id]) > 1:
            state = "shared"
        else:
            state = "owned"
        blocks.append(BlockView(block_id, state, tuple(owners[block_id]), fills[block_id], refs))
    return Snapshot(
        num_blocks=pool.num_blocks,
        block_size=pool.block_size,
        blocks=tuple(blocks),
        tables=tuple(views),
        free_order=tuple(pool.free_ids()),
        message=message,
        is_error=is_error,
        events=tuple(events),
    )
