"""Graders for chapter 4's Triton pieces: five ``@triton.jit`` steps towards the whole decode kernel.

Each ``check_*`` launches the piece inside a small harness kernel on named, then seeded hidden
cases, with outputs and unwritten cache slots poisoned with NaN; :func:`watched_loads` makes the
interpreter's blind spots visible, and :func:`refused_stores` stops a store outside its tensors
before it writes. Chapter 4's "How the graders work" explains them.
"""

from __future__ import annotations

import contextlib
import linecache
import math
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from .. import runtime  # noqa: F401  (sets TRITON_INTERPRET before triton is imported)
from .grading import NotSolved, grade_in_order
from .messages import Message, tr
from .solutions import ch4_triton as solution

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

STUB = tr("it raises NotImplementedError")
NOT_SOLVED = tr("not solved yet ({why}). Write your version above and run the cell again.", why=STUB)
"""What a grader prints after the name for a piece that is still the stub."""


def _np2(n: int, floor: int = 1) -> int:
    return max(floor, triton.next_power_of_2(max(1, n)))


def _dot_floor() -> int:
    """A compiled tl.dot needs 16 or more in every dimension; the interpreter takes any."""
    return 16 if runtime.BACKEND == "cuda" else 1


def _root(exc: BaseException) -> BaseException:
    """The innermost cause: the reader's own error (or the watch's), under the interpreter's wrappers."""
    seen = exc
    while seen.__cause__ is not None and seen.__cause__ is not seen:
        seen = seen.__cause__
    return seen


def _root_message(exc: BaseException) -> str:
    """The reader's own error, unwrapped from the interpreter's InterpreterError layers."""
    seen = _root(exc)
    text = str(seen)
    while text.startswith("InterpreterError("):
        text = text[len("InterpreterError("):-1].strip("'\"")
    return f"{type(seen).__name__}: {text}" if type(seen).__name__ not in text[:40] else text


@dataclass(frozen=True)
class Forbidden:
    """Addresses ``[start, end)`` that no unmasked lane may load (``what`` names them in a failure).

    ``origin`` is the address of entry 0 of what ``what`` names (a block-table row's start), so a
    failure counts entries as the kernel indexes them; None counts from ``start``.
    """

    start: int
    end: int
    what: str
    item_bytes: int = 4
    origin: int | None = None

    def entry(self, address: int) -> int:
        return (address - (self.start if self.origin is None else self.origin)) // self.item_bytes


@dataclass(frozen=True, eq=False)
class Guarded:
    """A tensor a kernel is given, as the leading corner (``buffer[:a, :b, ...]``) of a larger NaN buffer.

    An access to the buffer outside the tensor (its padding) is named by its coordinates in ``dims``,
    so "head 6 (past the last, 5)" says which mask is missing. Loads of the padding are recorded
    (:func:`watched_loads`); stores outside a ``writable`` tensor are refused (:func:`refused_stores`).
    """

    name: str
    buffer: torch.Tensor   # contiguous
    view: torch.Tensor
    dims: tuple[str, ...]
    writable: bool = False
    advice: dict[str, str] = field(default_factory=dict)   # a dim's name: what to mask when a lane is past it

    @cached_property
    def _valid(self) -> np.ndarray:
        """One flag per item of the buffer: is it an element of the view?"""
        flags = torch.zeros(self.buffer.numel(), dtype=torch.bool)
        flags.as_strided(self.view.shape, self.view.stride(),
                         self.view.storage_offset() - self.buffer.storage_offset()).fill_(True)
        return flags.numpy()

    def lanes(self, addresses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each address: (inside the buffer, an element of the view)."""
        item = self.buffer.element_size()
        offset = addresses.astype(np.int64) - self.buffer.data_ptr()
        inside = (offset >= 0) & (offset < self.buffer.numel() * item)
        element = inside & (offset % item == 0)
        element[element] = self._valid[offset[element] // item]
        return inside, element

    def describe(self, address: int) -> tuple[str, str]:
        """An address of the buffer by its coordinates, ``q[sequence 2, head 6 (past the last, 5), column 0]``,
        and the advice for the first dimension it is past (empty when there is none)."""
        index = (address - self.buffer.data_ptr()) // self.buffer.element_size()
        coords = [int(c) for c in np.unravel_index(index, tuple(self.buffer.shape))]
        past = [dim for dim, c, size in zip(self.dims, coords, self.view.shape) if c >= size]
        named = [str(tr("{dim} {index} (past the last, {last})", dim=dim, index=c, last=size - 1)) if c >= size
                 else f"{dim} {c}" for dim, c, size in zip(self.dims, coords, self.view.shape)]   # rendered now
        return f"{self.name}[{', '.join(named)}]", self.advice.get(past[0], "") if past else ""

    def fill_padding(self, value: float) -> None:
        """Set every item of the buffer outside the tensor to ``value`` (a confirming re-run's zeros)."""
        padding = torch.from_numpy(~self._valid).to(self.buffer.device)
        self.buffer.view(-1)[padding] = value


@dataclass(frozen=True, eq=False)
class Read:
    """A watched load: the region it touched (a :class:`Forbidden` or a :class:`Guarded`) and its name."""

    region: Forbidden | Guarded
    text: str
    advice: str = ""

    def __str__(self) -> str:
        return str(self.text)   # a Message renders in the reader's language


class OutOfBounds(Exception):
    """A load or store was about to touch memory outside every tensor the kernel was given.

    Raised before the access: the interpreter reads and writes raw addresses, so a store past a
    tensor corrupts the Python process (it has crashed it, with no message) instead of failing a case.
    """


def _kernel_line() -> str:
    """The kernel line the interpreter is executing: ``line 57 of paged_decode.py (`tl.store(...)`)``."""
    from triton.runtime import interpreter
    codes = {getattr(fn, "__code__", None) for fn in interpreter.InterpretedFunction.rewritten_fn.values()}
    frame = sys._getframe(1)
    while frame is not None and frame.f_code not in codes:
        frame = frame.f_back
    if frame is None:
        return tr("a line of the kernel")
    source = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return tr("line {line} of {file} (`{source}`)", line=frame.f_lineno, file=Path(frame.f_code.co_filename).name,
              source=source)


def _storages(tensors: tuple[torch.Tensor, ...]) -> list[tuple[int, int]]:
    """The ``[start, end)`` addresses of each tensor's whole allocation."""
    return [(t.untyped_storage().data_ptr(), t.untyped_storage().data_ptr() + t.untyped_storage().nbytes())
            for t in tensors]


def _outside(addresses: np.ndarray, ranges: list[tuple[int, int]]) -> np.ndarray:
    inside = np.zeros(addresses.shape, dtype=bool)
    signed = addresses.astype(np.int64)
    for start, end in ranges:
        inside |= (signed >= start) & (signed < end)
    return ~inside


def _interpreter_builder() -> object | None:
    """The interpreter's builder, whose load and store a watch patches; None when compiled."""
    if runtime.BACKEND == "cuda":
        return None
    try:
        from triton.runtime import interpreter
        builder = interpreter.interpreter_builder
    except (ImportError, AttributeError):   # compiled, or an interpreter without a builder: nothing to watch
        return None
    hooks = ("create_masked_load", "create_masked_store")
    return builder if all(hasattr(type(builder), hook) for hook in hooks) else None


@contextlib.contextmanager
def watched_loads(forbidden: tuple[Forbidden, ...] = (), guarded: tuple[Guarded, ...] = (),
                  inside: tuple[torch.Tensor, ...] = (), *, poison: bool = True) -> Iterator[list[Read]]:
    """While grading in the interpreter, make load bugs visible that it would otherwise hide.

    * A masked ``tl.load`` without ``other=`` reads NaN in its masked lanes (floats only; ``poison``).
      The interpreter fills them with 0, so a kernel that multiplies them in would pass here; on a
      GPU those lanes hold whatever the registers held, and ``0 x NaN`` poisons a sum.
    * A lane that is not masked and reads an address in ``forbidden`` (a block table's entries
      past the sequence's last block) or in a ``guarded`` tensor's padding (q's rows past the last
      query head) is recorded in the yielded list, named by its entry or coordinates.
    * With ``inside`` (the kernel's other tensors), a load any of whose unmasked lanes falls outside
      all of them and the guarded buffers raises :class:`OutOfBounds` before it reads.

    On a GPU the kernel is compiled and nothing is patched: the list stays empty.
    """
    seen: list[Read] = []
    builder = _interpreter_builder()
    if builder is None:
        yield seen
        return
    from triton.runtime import interpreter
    original = type(builder).create_masked_load
    allocations = _storages(tuple(g.buffer for g in guarded) + inside) if guarded or inside else []

    def load(ptrs, mask, other, cache_policy, is_volatile):  # noqa: ANN001, ANN202  (the interpreter's API)
        lanes = np.broadcast_to(mask.data, ptrs.data.shape)
        for f in forbidden:
            hit = lanes & (ptrs.data >= f.start) & (ptrs.data < f.end)
            if hit.any():
                seen.append(Read(f, tr("{what}, entry {entry}", what=f.what, entry=f.entry(int(ptrs.data[hit].min())))))
        for g in guarded:
            in_buffer, element = g.lanes(ptrs.data)
            hit = lanes & in_buffer & ~element
            if hit.any():
                seen.append(Read(g, *g.describe(int(ptrs.data[hit].min()))))
        if allocations:
            stray = lanes & _outside(ptrs.data, allocations)
            if stray.any():
                raise OutOfBounds(tr("the load at {line} would read outside every tensor the kernel was given "
                                     "({lanes} unmasked lane(s)): a stride or an index is off, or a mask is missing. "
                                     "Nothing was read", line=_kernel_line(), lanes=int(stray.sum())))
        element = ptrs.get_element_ty()
        if poison and other is None and element.is_floating():
            np_type = interpreter._get_np_dtype(element)
            fill = 0x7FC0 if element == tl.bfloat16 else float("nan")   # bf16 is carried as its 16 bits
            other = interpreter.TensorHandle(np.full(ptrs.data.shape, fill, dtype=np_type), element)
        return original(builder, ptrs, mask, other, cache_policy, is_volatile)

    builder.create_masked_load = load
    try:
        yield seen
    finally:
        del builder.create_masked_load


@contextlib.contextmanager
def refused_stores(writable: tuple[Guarded, ...]) -> Iterator[None]:
    """While grading in the interpreter, refuse a ``tl.store`` any unmasked lane of which falls outside the
    ``writable`` tensors: :class:`OutOfBounds` names the store's line and the first such address (by its
    coordinates in a tensor's padding, else as outside them all) before anything is written.

    The interpreter stores through raw addresses, so without this a store past a tensor writes over
    whatever lies there: another tensor, or the Python process's own memory. On a GPU nothing is patched.
    """
    builder = _interpreter_builder()
    if builder is None or not writable:
        yield
        return
    original = type(builder).create_masked_store
    names = ", ".join(g.name for g in writable)

    def store(ptrs, value, mask, cache_policy):  # noqa: ANN001, ANN202  (the interpreter's API)
        lanes = np.broadcast_to(mask.data, ptrs.data.shape)
        allowed = np.zeros(ptrs.data.shape, dtype=bool)
        for g in writable:
            allowed |= g.lanes(ptrs.data)[1]
        stray = lanes & ~allowed
        if stray.any():
            address = int(ptrs.data[stray].min())
            padding = [g.describe(address) for g in writable if g.lanes(np.array([address], dtype=np.uint64))[0][0]]
            where, advice = padding[0] if padding else (tr("memory outside {names}", names=names), "")
            raise OutOfBounds(tr("the store at {line} would write {where} ({lanes} unmasked lane(s) outside {names}): "
                                 "{advice}. Nothing was written", line=_kernel_line(), where=where,
                                 lanes=int(stray.sum()), names=names,
                                 advice=advice or tr("mask every lane that is not an element of the tensor it "
                                                     "stores to")))
        return original(builder, ptrs, value, mask, cache_policy)

    builder.create_masked_store = store
    try:
        yield
    finally:
        del builder.create_masked_store


def _launch(run: Callable[[], None], seen: list[Read] | None = None,
            forbidden: tuple[Forbidden, ...] = (), *, poison: bool = True, guarded: tuple[Guarded, ...] = (),
            inside: tuple[torch.Tensor, ...] = ()) -> str | None:
    """Run a launch; None when it ran, the error text when it raised; raise NotSolved for a stub.

    Under :func:`watched_loads`, masked lanes loaded without ``other=`` read NaN (``poison=False``:
    they read the interpreter's 0, a hint's second run to confirm that the poison is the cause), and
    loads of ``forbidden`` addresses or of ``guarded`` padding are appended to ``seen``. Under
    :func:`refused_stores`, a store outside the writable ``guarded`` tensors fails the launch with
    its message instead of writing.
    """
    try:
        with watched_loads(forbidden, guarded, inside, poison=poison) as reads, \
                refused_stores(tuple(g for g in guarded if g.writable)):
            run()
        if seen is not None:
            seen.extend(reads)
    except NotImplementedError as exc:
        raise NotSolved(STUB) from exc
    except Exception as exc:  # the reader's kernel may raise anything; its message is the diff
        if isinstance(_root(exc), OutOfBounds):
            return str(_root(exc))
        message = _root_message(exc)
        if "NotImplementedError" in message:
            raise NotSolved(STUB) from exc
        first = message.splitlines()[0][:300]
        if "unsupported dtype" in message:   # en: not shown to readers (the interpreter's own words, matched)
            return tr("the launch raised {error} (the interpreter refuses a mask that combines a block with a scalar "
                      "test, as in block_mask & (slot >= 0): section 2's 'How the graders work' says why; test the "
                      "scalar with if, or broadcast it first)", error=first)
        return tr("the launch raised {error}", error=first)
    return None


@dataclass
class Case:
    """One graded case: a name that never lists the inputs, and the parameters to build them."""

    name: str
    params: dict = field(default_factory=dict)


_CAPTURE: dict | None = None
"""While a ``try_*`` helper runs one case, the case's inputs and outputs are collected here."""


def _capture(**values: object) -> None:
    if _CAPTURE is not None:
        _CAPTURE.update(values)


def _try(run: Callable[[object, Case], list[str]], fn: object, cases: list[Case], case: int | str) -> dict:
    """Run one case (by index or name) and return its inputs, the outputs and ``problems`` (the grader's lines)."""
    global _CAPTURE
    chosen = cases[case] if isinstance(case, int) else next(c for c in cases if case in (c.name, str(c.name)))
    _CAPTURE = {"case": chosen.name}
    try:
        problems = run(fn, chosen)
    except NotSolved:
        raise NotImplementedError(tr("this piece is still the stub: write it first")) from None
    finally:
        captured, _CAPTURE = _CAPTURE, None
    captured["problems"] = problems
    return captured


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise equality that counts NaN == NaN."""
    return (a == b) | (torch.isnan(a) & torch.isnan(b))


def _first_mismatch(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> tuple[int, ...] | None:
    """The index of the first value of ``got`` off ``want`` by more than the tolerance (NaN always is), or None.

    Equal infinities match: a padded score of -inf is right."""
    bad = ~torch.isclose(got, want, rtol=rtol, atol=atol)
    return tuple(int(i) for i in bad.nonzero()[0]) if bool(bad.any()) else None


def _where(slot: int, block_size: int) -> Message:
    block, offset = divmod(slot, block_size)
    return tr("slot {slot} (block {block}, offset {offset} at block size {block_size})", slot=slot, block=block,
              offset=offset, block_size=block_size)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# --- the paged cache every harness uses ---------------------------------------------------------

GUARD_BLOCKS = 2
"""Blocks of poison before the cache; after it there is a whole cache's worth, so a block index
that is wrong (but not absurd) writes or reads inside our buffer, where the grader sees it."""


@dataclass
class PagedCache:
    """K and V caches as two views of one ``[guard + blocks + guard, 2, B, H, D + 1]`` buffer.

    K and V of a block sit side by side, and every row has one padding column, so the block,
    token and head strides are all different from the contiguous ones.
    """

    buffer: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor

    @staticmethod
    def empty(num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
              device: torch.device) -> "PagedCache":
        rows = GUARD_BLOCKS + num_blocks + max(GUARD_BLOCKS, num_blocks * block_size)
        buffer = torch.full((rows, 2, block_size, num_kv_heads, head_dim + 1), float("nan"), dtype=dtype,
                            device=device)
        end = GUARD_BLOCKS + num_blocks
        return PagedCache(buffer, buffer[GUARD_BLOCKS:end, 0, :, :, :head_dim],
                          buffer[GUARD_BLOCKS:end, 1, :, :, :head_dim])

    def strides(self) -> tuple[int, int, int]:
        return self.k.stride(0), self.k.stride(1), self.k.stride(2)

    def outside(self) -> torch.Tensor:
        """A mask over ``buffer``: True where nothing should ever be written (guards, padding column)."""
        mask = torch.ones(self.buffer.shape, dtype=torch.bool, device=self.buffer.device)
        end = GUARD_BLOCKS + self.k.shape[0]
        mask[GUARD_BLOCKS:end, :, :, :, :-1] = False
        return mask


# --- piece 1: the slot-mapped store --------------------------------------------------------------

def _store_cases() -> list[Case]:
    cases = [
        Case(tr("the block-table article's walk-through: block size 4, two tokens into blocks 7 and 1"),
             dict(B=4, blocks=8, heads=2, dim=8, slots=[28, 5], dtype=torch.float32)),
        Case(tr("padding (slot -1) between tokens, and slot 0, block size 5"),
             dict(B=5, blocks=4, heads=1, dim=4, slots=[7, -1, 0, -1, 19], dtype=torch.float32)),
        Case(tr("block size 3, three KV heads of head_dim 6, float16"),
             dict(B=3, blocks=5, heads=3, dim=6, slots=[14, 2, 9, 3], dtype=torch.float16)),
    ]
    rng = random.Random(404)
    for i in range(8):
        B = rng.choice([1, 3, 5, 6, 12, 16])
        blocks = rng.randint(2, 6)
        heads, dim = rng.choice([1, 2, 3, 4]), rng.choice([2, 3, 5, 8])
        dtype = rng.choice([torch.float32, torch.float16, torch.bfloat16])
        n = rng.randint(1, min(9, blocks * B))
        slots = rng.sample(range(blocks * B), n)
        if i % 2 == 0:
            slots[rng.randrange(n)] = -1
        if i == 1:
            slots[0] = blocks * B - 1  # the very last slot
        cases.append(Case(tr("hidden case {n} (seeded random): block size {B}, {heads} KV heads of head_dim {dim}, "
                             "{dtype}, {tokens} tokens", n=i + 1, B=B, heads=heads, dim=dim,
                             dtype=_dtype_name(dtype), tokens=n),
                          dict(B=B, blocks=blocks, heads=heads, dim=dim, slots=slots, dtype=dtype)))
    return cases


def _row_owner(row: torch.Tensor, k: torch.Tensor, v: torch.Tensor, head: int) -> str:
    """Whose row a (wrong) cache row holds: a token's K or V row, the poison, or something else."""
    if bool(torch.isnan(row).all()):
        return tr("the poison (NaN): nothing was written there")
    for name, src in (("K", k), ("V", v)):
        for t in range(src.shape[0]):
            if bool(_same(src[t, head], row).all()):
                return tr("token {t}'s {name} row", t=t, name=name)
    written = int((~torch.isnan(row)).sum())
    return tr("a row that is no token's ({written} of {total} values written)", written=written, total=row.numel())


def _run_store(kernel: object, case: Case) -> list[str]:
    p = case.params
    B, heads, dim, dtype, slots = p["B"], p["heads"], p["dim"], p["dtype"], p["slots"]
    device = runtime.device()
    gen = torch.Generator().manual_seed(len(slots) * 31 + B)
    n = len(slots)
    # K and V as views with a padded head_dim and a padded head count: token and head strides are not D.
    k_src = torch.randn(n, heads + 1, dim + 2, generator=gen).to(dtype).to(device)
    v_src = torch.randn(n, heads + 1, dim + 2, generator=gen).to(dtype).to(device)
    k, v = k_src[:, :heads, :dim], v_src[:, :heads, :dim]
    cache = PagedCache.empty(p["blocks"], B, heads, dim, dtype, device)
    slot_mapping = torch.tensor(slots, dtype=torch.int64, device=device)
    expected_k, expected_v = cache.k.clone(), cache.v.clone()
    for t, s in enumerate(slots):
        if s >= 0:
            expected_k[s // B, s % B] = k[t]
            expected_v[s // B, s % B] = v[t]
    outside = cache.outside()
    before = cache.buffer[outside].clone()
    error = _launch(lambda: kernel[(n,)](
        k, v, cache.k, cache.v, slot_mapping, k.stride(0), k.stride(1), v.stride(0), v.stride(1), *cache.strides(),
        NUM_KV_HEADS=heads, HEAD_DIM=dim, HEADS_PAD=_np2(heads), HEAD_DIM_PAD=_np2(dim), BLOCK_SIZE=B))
    _capture(k=k, v=v, slot_mapping=slots, block_size=B, k_cache=cache.k, v_cache=cache.v, expected_k_cache=expected_k,
             expected_v_cache=expected_v)
    if error:
        return [error]
    problems: list[str] = []
    for t, s in enumerate(slots):  # every token's rows, where they should be
        if s < 0:
            continue
        for name, got, want in (("K", cache.k, expected_k), ("V", cache.v, expected_v)):
            row_ok = _same(got[s // B, s % B], want[s // B, s % B]).all(dim=-1)
            if not bool(row_ok.all()):
                head = int((~row_ok).nonzero()[0])
                problems.append(tr("program {t} (token {t}) maps to {where}: {name} head {head} there should be "
                                   "token {t}'s {name} row, but it holds {owner} (dtype {dtype})", t=t,
                                   where=_where(s, B), name=name, head=head,
                                   owner=_row_owner(got[s // B, s % B, head], k, v, head), dtype=_dtype_name(dtype)))
                return problems + _store_hints(s, B, cache.k, k[t])
    for name, got, want in (("K", cache.k, expected_k), ("V", cache.v, expected_v)):
        stray = ~_same(got, want).flatten(2).all(dim=-1)  # [blocks, B]: slots that changed but should not
        if bool(stray.any()):
            block, offset = (int(x) for x in stray.nonzero()[0])
            s = block * B + offset
            padding = [t for t, x in enumerate(slots) if x < 0]
            if padding:
                problems.append(tr("{where} was written in the {name} cache, but no token maps there (tokens "
                                   "{padding} are padding, slot -1: skip them)", where=_where(s, B), name=name,
                                   padding=padding))
            else:
                problems.append(tr("{where} was written in the {name} cache, but no token maps there",
                                   where=_where(s, B), name=name))
            return problems
    if not bool(_same(cache.buffer[outside], before).all()):
        padding = [t for t, x in enumerate(slots) if x < 0]
        if padding:
            problems.append(tr("something was written outside the cache's rows: past head_dim (a mask with <= "
                               "instead of <?), or before block 0 / after the last block (tokens {padding} have "
                               "slot -1 and must not be written at all)", padding=padding))
        else:
            problems.append(tr("something was written outside the cache's rows: past head_dim (a mask with <= "
                               "instead of <?), or before block 0 / after the last block"))
    return problems


def _store_hints(slot: int, B: int, k_cache: torch.Tensor, k_row: torch.Tensor) -> list[str]:
    """Hints whose cause the cache confirms: the token's row sits where a power-of-two trick puts it, or
    slot 0 was skipped as if it were padding."""
    flat = k_cache.reshape(-1, *k_cache.shape[2:])
    found = [i for i in range(flat.shape[0]) if bool(_same(flat[i], k_row).all())]
    if B & (B - 1) and any((slot >> shift) * B + (slot & (B - 1)) in found for shift in range(6)):
        return [tr("hint: token's row is where a power-of-two trick puts it: block size {B} is not a power of two, "
                   "so shifts and masks (& (B - 1)) do not split a slot: use slot // B and slot % B", B=B)]
    if slot == 0 and not found:
        return [tr("hint: slot 0 is a real slot; only -1 means padding")]
    return []


def try_store_kv(kernel: object, case: int | str = 0) -> dict:
    """Run one shown case of piece 1; return k, v, the slot mapping, the caches and the expected caches."""
    return _try(_run_store, kernel, _store_cases(), case)


def check_store_kv(kernel: object) -> bool:
    """Grade piece 1, ``store_kv_kernel`` (grid: one program per token), against a torch copy.

    The kernel gets ``(k, v, k_cache, v_cache, slot_mapping, stride_kt, stride_kh, stride_vt,
    stride_vh, stride_cb, stride_ct, stride_ch)`` and the constexprs ``NUM_KV_HEADS,
    HEAD_DIM, HEADS_PAD, HEAD_DIM_PAD, BLOCK_SIZE``.
    """
    return grade_in_order("store_kv_kernel（槽位映射寫入）", _store_cases(), lambda case: _run_store(kernel, case))


# --- pieces 2 and 3: a tile's slots and its rows ------------------------------------------------

@triton.jit
def _tile_slots_harness(table_ptr,      # int32 [num_seqs, max_blocks], padded past each sequence
                        seq_lens_ptr,   # int32 [num_seqs]
                        out_ptr,        # float64 [num_seqs, n_tiles * TILE_N], NaN where not stored
                        stride_tb,      # table's row stride
                        stride_os,      # out's row stride
                        BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr,
                        FN: tl.constexpr):   # the reader's tile_slots
    """Program (sequence, tile): the reader's slots of the tile's positions, stored where unmasked."""
    seq = tl.program_id(0)
    tile = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    offs_n = tile * TILE_N + tl.arange(0, TILE_N)
    mask_n = offs_n < seq_len
    slots = FN(table_ptr + seq * stride_tb, offs_n, mask_n, BLOCK_SIZE)
    tl.store(out_ptr + seq * stride_os + offs_n, slots.to(tl.float64), mask=mask_n)


@triton.jit
def _load_tile_harness(cache_ptr,      # [num_blocks, block_size, num_kv_heads, head_dim], any strides but head_dim's
                       table_ptr,      # int32 [num_seqs, max_blocks]
                       seq_lens_ptr,   # int32 [num_seqs]
                       out_ptr,        # [num_seqs, n_tiles * TILE_N, num_kv_heads, HEAD_DIM_PAD]
                       stride_tb,                            # table's row stride
                       stride_cb, stride_ct, stride_ch,      # the cache's strides: block, slot, head
                       stride_os, stride_on, stride_oh,      # out's strides: sequence, position, head
                       HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                       TILE_N: tl.constexpr, FN: tl.constexpr):   # FN: the reader's load_tile
    """Program (sequence, KV head, tile): the reader's whole padded tile, masked rows included."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    tile = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    offs_n = tile * TILE_N + tl.arange(0, TILE_N)
    mask_n = offs_n < seq_len
    slots = solution.tile_slots(table_ptr + seq * stride_tb, offs_n, mask_n, BLOCK_SIZE)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    x = FN(cache_ptr, slots, mask_n, kv_head, offs_d, mask_d, stride_cb, stride_ct, stride_ch, BLOCK_SIZE)
    tl.store(out_ptr + seq * stride_os + offs_n[:, None] * stride_on + kv_head * stride_oh + offs_d[None, :],
             x.to(out_ptr.dtype.element_ty))


def _gather_cases(seed: int) -> list[Case]:
    """Sequences in shuffled blocks; lengths 0, 1, B - 1, B, 2B and random ones."""
    cases = [
        Case(tr("the block-table article: 9 tokens in blocks [7, 1, 3], block size 4, tiles of 4"),
             dict(B=4, blocks=8, lens=[9], tables=[[7, 1, 3, -1]], tile=4, heads=1, dim=4, dtype=torch.float32)),
        Case(tr("block size 5, lengths 5 and 11 (a full block and a ragged one), tiles of 8"),
             dict(B=5, blocks=7, lens=[5, 11], tables=None, tile=8, heads=2, dim=3, dtype=torch.float32)),
    ]
    rng = random.Random(seed)
    for i in range(7):
        B = rng.choice([1, 3, 5, 6, 12, 16])
        tile = rng.choice([1, 2, 4, 8, 16])
        lens = [rng.choice([0, 1, B - 1, B, 2 * B, rng.randint(1, 3 * B + 2)]) for _ in range(rng.randint(1, 3))]
        lens = [max(0, n) for n in lens]
        if i == 0:
            lens = [0, 1, 3 * B]  # the edges in one case
        heads, dim = rng.choice([(1, 4), (2, 3), (3, 5), (2, 6), (1, 8)])
        dtype = rng.choice([torch.float32, torch.float16, torch.bfloat16])
        blocks = sum(-(-n // B) for n in lens) + 2
        cases.append(Case(tr("hidden case {n} (seeded random): block size {B}, tiles of {tile}, {seqs} sequence(s), "
                             "{heads} KV head(s) of head_dim {dim}, {dtype}", n=i + 1, B=B, tile=tile,
                             seqs=len(lens), heads=heads, dim=dim, dtype=_dtype_name(dtype)),
                          dict(B=B, blocks=blocks, lens=lens, tables=None, tile=tile, heads=heads, dim=dim,
                               dtype=dtype, seed=seed + i)))
    return cases


@dataclass
class _Paged:
    """One gather case, built: the cache filled with random rows where sequences live, NaN elsewhere."""

    cache: PagedCache
    tables: list[list[int]]
    table: torch.Tensor  # int32 [num_seqs, width], inside a bigger buffer of -1s
    seq_lens: torch.Tensor
    n_tiles: int


def _build_paged(case: Case) -> _Paged:
    p = case.params
    B, lens, tile = p["B"], p["lens"], p["tile"]
    rng = random.Random(p.get("seed", 7))
    device = runtime.device()
    width = max([-(-n // B) for n in lens] + [1]) + 1
    tables = p["tables"]
    if tables is None:
        free = rng.sample(range(p["blocks"]), p["blocks"])
        tables = []
        for n in lens:
            need = -(-n // B)
            tables.append(free[:need] + [-1] * (width - need))
            free = free[need:]
    width = max(len(t) for t in tables)
    cache = PagedCache.empty(p["blocks"], B, p["heads"], p["dim"], p["dtype"], device)
    gen = torch.Generator().manual_seed(p.get("seed", 7))
    for t, n in zip(tables, lens):
        for pos in range(n):
            block, off = t[pos // B], pos % B
            cache.k[block, off] = torch.randn(p["heads"], p["dim"], generator=gen).to(p["dtype"])
    table_buffer = torch.full((len(lens) + 1, width + tile + B), -1, dtype=torch.int32)
    table_buffer[: len(lens), :width] = torch.tensor(tables, dtype=torch.int32)
    n_tiles = max(1, -(-max(lens + [1]) // tile))
    return _Paged(cache, tables, table_buffer.to(device), torch.tensor(lens, dtype=torch.int32, device=device),
                  n_tiles)


def table_padding(table: torch.Tensor, used: list[int]) -> tuple[Forbidden, ...]:
    """The entries of each row of ``table`` past its sequence's ``used[i]`` blocks, and any rows after them."""
    item = table.element_size()
    row = table.stride(0) * item
    base = table.data_ptr()
    # Entry 0 is always inside a row, so a clamped index (tl.where(mask_n, index, 0)) may read it.
    regions = [Forbidden(base + i * row + max(n, 1) * item, base + (i + 1) * row,
                         tr("sequence {i}'s block-table row", i=i), item, origin=base + i * row)
               for i, n in enumerate(used)]
    regions.append(Forbidden(base + len(used) * row, base + table.numel() * item, tr("a row past the last sequence"),
                             item))
    return tuple(regions)


def _slot_hint(got: int, pos: int, B: int, table: list[int]) -> Message | None:
    """Name a known mistake when the wrong slot is exactly what it would give."""
    shift = max(B.bit_length() - 1, 0)
    candidates = [
        (tr("hint: // and % swapped (the table is indexed by pos % B)"),
         table[pos % B] * B + pos // B if pos % B < len(table) and table[pos % B] >= 0 else None),
        (tr("hint: a power-of-two trick: pos >> {shift} and pos & (B - 1) split a position only when B = {B} is a "
            "power of two", shift=shift, B=B),
         table[pos >> shift] * B + (pos & (B - 1)) if (pos >> shift) < len(table) else None),
        (tr("hint: the offset is missing: block * B is the first slot of the block"), table[pos // B] * B),
        (tr("hint: block * B is missing: a table entry is a block number, not a slot"), table[pos // B] + pos % B),
        (tr("hint: the position itself was used as the offset (use pos % B)"), table[pos // B] * B + pos),
        (tr("hint: the table was skipped: pos is a logical position, the slot is physical"), pos),
    ]
    for hint, value in candidates:
        if value is not None and value == got:
            return hint
    for other in (1, 2, 4, 8, 16, 32):  # a block size from somewhere else: a global, or a typed-in number
        if other != B and pos // other < len(table) and table[pos // other] * other + pos % other == got:
            return tr("hint: that is the slot at block size {other}, but this case's block size is {B}: use the "
                      "BLOCK_SIZE argument, not a number or a global variable", other=other, B=B)
    return None


def _run_tile_slots(fn: object, case: Case) -> list[str]:
    p = case.params
    B, tile = p["B"], p["tile"]
    paged = _build_paged(case)
    num_seqs = len(p["lens"])
    out = torch.full((num_seqs, paged.n_tiles * tile), float("nan"), dtype=torch.float64, device=paged.table.device)
    reads: list[str] = []
    error = _launch(lambda: _tile_slots_harness[(num_seqs, paged.n_tiles)](
        paged.table, paged.seq_lens, out, paged.table.stride(0), out.stride(0), BLOCK_SIZE=B, TILE_N=tile, FN=fn),
        reads, table_padding(paged.table, [-(-n // B) for n in p["lens"]]))
    _capture(block_tables=paged.tables, seq_lens=p["lens"], block_size=B, tile_n=tile, slots=out,
             expected=[[t[pos // B] * B + pos % B for pos in range(n)] for t, n in zip(paged.tables, p["lens"])])
    if error:
        return [error]
    for seq, (table, n) in enumerate(zip(paged.tables, p["lens"])):
        for pos in range(n):
            want = table[pos // B] * B + pos % B
            got = float(out[seq, pos])
            if got != want:
                t = pos // tile
                got_text = tr("nothing (NaN)") if math.isnan(got) else (
                    f"{int(got)}" if got == int(got) else f"{got}")
                lines = [tr("program (sequence {seq}, tile {tile}) covers positions {first}..{last} of a {n}-token "
                            "sequence", seq=seq, tile=t, first=t * tile, last=t * tile + tile - 1, n=n),
                         tr("position {pos}: table entry {entry} is block {block}, so expected {where}; got {got}",
                            pos=pos, entry=pos // B, block=table[pos // B], where=_where(want, B), got=got_text)]
                if not math.isnan(got) and got == int(got):
                    hint = _slot_hint(int(got), pos, B, table)
                    lines += [hint] if hint else []
                return lines
    if reads:
        return [past_the_table(reads[0])]
    return []


def past_the_table(read: object, right: str | None = None) -> Message:
    """The failure of a kernel whose slots are right but which read the table past the sequence.

    ``right`` says what was right (a ``tr`` message); the slots, unless given."""
    return tr("{right}, but a load whose lanes were not masked read {read}, past the sequence's last block: load the "
              "table with mask=mask_n, so positions past the sequence read nothing (on a GPU the row may end there, "
              "and the read would fall outside it)", right=tr("the slots are right") if right is None else right,
              read=read.text if isinstance(read, Read) else read)


def try_tile_slots(fn: object, case: int | str = 0) -> dict:
    """Run one shown case of piece 2; return the tables, lengths, and your slots per position (NaN: not stored)."""
    return _try(_run_tile_slots, fn, _gather_cases(202), case)


def check_tile_slots(fn: object) -> bool:
    """Grade piece 2, ``tile_slots(table_row_ptr, offs_n, mask_n, BLOCK_SIZE) -> slots``."""
    return grade_in_order("tile_slots（經由區塊表查槽位）", _gather_cases(202), lambda case: _run_tile_slots(fn, case))


def _find_row(row: torch.Tensor, cache: PagedCache, B: int) -> str:
    """Name the cache row a (wrong) loaded row equals, if any."""
    if bool(torch.isnan(row).any()):
        return tr("NaN (an unwritten slot, or memory outside the row)")
    if bool((row == 0).all()):
        return tr("zeros")
    flat = cache.k.reshape(-1, cache.k.shape[2], cache.k.shape[3])
    for slot in range(flat.shape[0]):
        for head in range(flat.shape[1]):
            if bool(_same(flat[slot, head], row).all()):
                return tr("the K row of {where}, KV head {head}", where=_where(slot, B), head=head)
    return tr("values that are no single cache row's (a stride or a column offset is off?)")


def _run_load_tile(fn: object, case: Case) -> list[str]:
    p = case.params
    B, tile, heads, dim, dtype = p["B"], p["tile"], p["heads"], p["dim"], p["dtype"]
    paged = _build_paged(case)
    num_seqs = len(p["lens"])
    dim_pad = _np2(dim)
    out = torch.full((num_seqs, paged.n_tiles * tile, heads, dim_pad), float("nan"), dtype=dtype,
                     device=paged.table.device)
    error = _launch(lambda: _load_tile_harness[(num_seqs, heads, paged.n_tiles)](
        paged.cache.k, paged.table, paged.seq_lens, out, paged.table.stride(0), *paged.cache.strides(),
        out.stride(0), out.stride(1), out.stride(2),
        HEAD_DIM=dim, HEAD_DIM_PAD=dim_pad, BLOCK_SIZE=B, TILE_N=tile, FN=fn))
    _capture(k_cache=paged.cache.k, block_tables=paged.tables, seq_lens=p["lens"], block_size=B, tile_n=tile,
             tiles=out)
    if error:
        return [error]
    for seq, (table, n) in enumerate(zip(paged.tables, p["lens"])):
        for pos in range(paged.n_tiles * tile):
            for head in range(heads):
                got = out[seq, pos, head]
                t = pos // tile
                where = tr("program (sequence {seq}, KV head {head}, tile {tile}), row {row} of the tile (position "
                           "{pos} of a {n}-token sequence; dtype {dtype})", seq=seq, head=head, tile=t,
                           row=pos % tile, pos=pos, n=n, dtype=_dtype_name(dtype))
                if pos < n:
                    slot = table[pos // B] * B + pos % B
                    want = paged.cache.k[slot // B, slot % B, head]
                    if not bool(_same(got[:dim], want).all()):
                        return [where, tr("expected the row of {where}, KV head {head}; got {got}",
                                          where=_where(slot, B), head=head,
                                          got=_find_row(got[:dim], paged.cache, B))] + _load_hints(B)
                    if bool((got[dim:] != 0).any()):
                        return [where, tr("columns {first}..{last} pad head_dim {dim} up to {pad}: they must read as "
                                          "0 (mask them with mask_d), got {got}", first=dim, last=dim_pad - 1,
                                          dim=dim, pad=dim_pad, got=got[dim:].tolist())]
                elif bool((got != 0).any()):
                    return [where, tr("this position is past the sequence (masked): its row must read as 0, got "
                                      "{got}. Load with mask=... and other=0.0: an unwritten slot may hold NaN, and "
                                      "0 x NaN is NaN in the sum over V", got=_find_row(got[:dim], paged.cache, B))]
    return []


def _load_hints(B: int) -> list[str]:
    hints = [tr("hint: the row of a slot is (slot // B) * stride_block + (slot % B) * stride_token + "
                "kv_head * stride_head; here blocks are not B rows apart, so slot * stride_token is not it")]
    if B & (B - 1):
        hints.append(tr("hint: block size {B} is not a power of two: no shifts or & masks", B=B))
    return hints


def try_load_tile(fn: object, case: int | str = 0) -> dict:
    """Run one shown case of piece 3; return the cache, tables, lengths and your tiles [seq, position, head, dim]."""
    return _try(_run_load_tile, fn, _gather_cases(303), case)


def check_load_tile(fn: object) -> bool:
    """Grade piece 3, ``load_tile(cache_ptr, slots, mask_n, kv_head, offs_d, mask_d, stride_block,
    stride_token, stride_head, BLOCK_SIZE) -> [TILE_N, HEAD_DIM_PAD]`` (masked rows and columns 0)."""
    return grade_in_order("load_tile（帶遮罩載入圖塊）", _gather_cases(303), lambda case: _run_load_tile(fn, case))


# --- piece 4: one online-softmax tile update -----------------------------------------------------

@triton.jit
def _update_harness(m_ptr,     # float32 [G], the running max before the tile
                    l_ptr,     # float32 [G], the running sum
                    acc_ptr,   # float32 [G, D], the accumulator, contiguous
                    qk_ptr,    # float32 [G, T], the tile's base-2 scores, contiguous
                    v_ptr,     # float32 [T, D], the tile's values, contiguous
                    m_out,     # float32 [G], the state after the tile
                    l_out,     # float32 [G]
                    acc_out,   # float32 [G, D], contiguous
                    G: tl.constexpr, T: tl.constexpr, D: tl.constexpr,
                    FN: tl.constexpr):   # the reader's softmax_tile_update
    """One program: load the state and a tile, apply the reader's update, store the new state."""
    offs_g = tl.arange(0, G)
    offs_t = tl.arange(0, T)
    offs_d = tl.arange(0, D)
    m = tl.load(m_ptr + offs_g)
    l = tl.load(l_ptr + offs_g)
    acc = tl.load(acc_ptr + offs_g[:, None] * D + offs_d[None, :])
    qk = tl.load(qk_ptr + offs_g[:, None] * T + offs_t[None, :])
    v = tl.load(v_ptr + offs_t[:, None] * D + offs_d[None, :])
    m, l, acc = FN(m, l, acc, qk, v)
    tl.store(m_out + offs_g, m)
    tl.store(l_out + offs_g, l)
    tl.store(acc_out + offs_g[:, None] * D + offs_d[None, :], acc)


UPDATE_RTOL = 2e-5
"""float32 state against the float64 reference: a few ulps per tile."""


def _softmax_cases() -> list[Case]:
    cases = [
        Case(tr("random scores, four tiles of 8, GQA group 4"), dict(G=4, T=8, D=4, tiles=4, shift=0.0)),
        Case(tr("the max grows every tile (the old sum and output must be rescaled)"),
             dict(G=2, T=4, D=4, tiles=3, shift=4.0)),
        Case(tr("the max shrinks after the first tile"), dict(G=2, T=4, D=2, tiles=3, shift=-4.0)),
        Case(tr("scores near 1,400 in base 2 (exp2 overflows float32 without the running max)"),
             dict(G=1, T=4, D=2, tiles=2, shift=3.0, base=1400.0)),
        Case(tr("a ragged last tile padded with -inf"), dict(G=4, T=8, D=4, tiles=3, shift=0.0, ragged=True)),
        Case(tr("a last tile of only padding (all -inf), as a split's tail can be: nothing may change"),
             dict(G=2, T=4, D=4, tiles=3, shift=0.0, empty_last=True)),
        Case(tr("GQA group 3 padded to 4 rows (the padding row's query is 0, so its scores are 0)"),
             dict(G=4, T=4, D=4, tiles=3, shift=2.0, zero_rows=1)),
    ]
    rng = random.Random(505)
    for i in range(5):
        G, T, D = rng.choice([1, 2, 4]), rng.choice([1, 2, 4, 16]), rng.choice([2, 4, 8])
        cases.append(Case(tr("hidden case {n} (seeded random): group {G}, tiles of {T}, head_dim {D}", n=i + 1, G=G,
                             T=T, D=D),
                          dict(G=G, T=T, D=D, tiles=rng.randint(1, 4), shift=rng.uniform(-5, 5),
                               base=rng.choice([0.0, 0.0, 300.0]), ragged=rng.random() < 0.5, seed=i)))
    return cases


def _update_reference(m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor, qk: torch.Tensor,
                      v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m_new = torch.maximum(m, qk.max(1).values)
    alpha = torch.exp2(m - m_new)
    p = torch.exp2(qk - m_new[:, None])
    return m_new, l * alpha + p.sum(1), acc * alpha[:, None] + p @ v


def _run_update(fn: object, case: Case) -> list[str]:
    p = case.params
    G, T, D = p["G"], p["T"], p["D"]
    if runtime.BACKEND == "cuda":  # a compiled tl.dot needs 16 or more in every dimension
        G, T, D = max(G, 16), max(T, 16), max(D, 16)
    device = runtime.device()
    gen = torch.Generator().manual_seed(p.get("seed", 11) + 1000)
    state32 = (torch.full((G,), float("-inf")), torch.zeros(G), torch.zeros(G, D))
    for t in range(p["tiles"]):
        qk = (torch.randn(G, T, generator=gen) * 2 + p.get("base", 0.0) + t * p["shift"]).float()
        if p.get("zero_rows"):
            qk[G - p["zero_rows"]:] = 0.0
        if p.get("ragged") and t == p["tiles"] - 1:
            qk[:, max(1, T // 2):] = float("-inf")
        if p.get("empty_last") and t == p["tiles"] - 1:
            qk[:] = float("-inf")
        v = torch.randn(T, D, generator=gen).float()
        want = _update_reference(*(x.double() for x in state32), qk.double(), v.double())
        outs = tuple(torch.full_like(x, float("nan")).to(device) for x in state32)
        error = _launch(lambda: _update_harness[(1,)](
            *(x.contiguous().to(device) for x in state32), qk.to(device), v.to(device), *outs, G=G, T=T, D=D, FN=fn))
        if _CAPTURE is not None:
            _CAPTURE.setdefault("tiles", []).append(dict(qk=qk, v=v, state=tuple(x.cpu() for x in outs),
                                                         expected=tuple(x.float() for x in want)))
        if error:
            return [tr("tile {tile} of {tiles}: {error}", tile=t + 1, tiles=p["tiles"], error=error)]
        names = (tr("m (running max)"), tr("l (running sum)"), tr("acc (running output)"))
        for key, name, got, w in zip("mla", names, outs, want):
            got = got.cpu().double()
            scale = w.abs().clamp(min=1.0)
            idx = _first_mismatch(got, w, UPDATE_RTOL, 1e-6)
            if idx is not None:
                rel = float(((got - w).abs() / scale)[idx]) if math.isfinite(float(got[idx])) else math.inf
                values = dict(name=name, expected=float(w[idx]), got=float(got[idx]), rel=rel, tol=UPDATE_RTOL)
                lines = [tr("after tile {tile} of {tiles} (tiles of {T}, group {G}, head_dim {D}; float32 state "
                            "against a float64 reference), query row {row}:", tile=t + 1, tiles=p["tiles"], T=T, G=G,
                            D=D, row=idx[0]),
                         tr("{name} column {column}: expected {expected:.6g}, got {got:.6g} (relative error "
                            "{rel:.2g}, tolerance {tol:g})", column=idx[1], **values) if len(idx) > 1 else
                         tr("{name}: expected {expected:.6g}, got {got:.6g} (relative error {rel:.2g}, tolerance "
                            "{tol:g})", **values)]
                return lines + _update_hint(key, float(got[idx]), t, p)
        state32 = tuple(x.cpu() for x in outs)
    return []


def _update_hint(key: str, got: float, tile: int, p: dict) -> list[str]:
    """The hint for a wrong value of state ``key`` ("m", "l" or "a" for acc) after tile ``tile``."""
    if p.get("empty_last") and tile == p["tiles"] - 1 and not math.isfinite(got):
        return [tr("hint: this tile is all padding, so its own max is -inf and qk - (-inf) is NaN: subtract the "
                   "running max m_new = max(m_i, the tile's max), which is finite after the first tile")]
    if not math.isfinite(got):
        return [tr("hint: inf or NaN: exp2 of a large score overflows float32 unless the running max is "
                   "subtracted first (exp2(qk - m_new))")]
    if key == "m":
        return [tr("hint: m is the largest score so far: the max of the old m and this tile's row maxima (axis 1)")]
    if tile > 0:
        return [tr("hint: everything accumulated before this tile was computed against the old max; scale it by "
                   "alpha = exp2(m_old - m_new) before adding this tile. Scores are base 2: use exp2, not exp")]
    return [tr("hint: the scores are base-2 logits: p = exp2(qk - m_new), l sums p along the tile, acc adds p @ v")]


def try_softmax_tile_update(fn: object, case: int | str = 0) -> dict:
    """Run one shown case of piece 4; return, per tile, qk, v, your state (m, l, acc) and the expected one."""
    return _try(_run_update, fn, _softmax_cases(), case)


def check_softmax_tile_update(fn: object) -> bool:
    """Grade piece 4, ``softmax_tile_update(m_i, l_i, acc, qk, v) -> (m_i, l_i, acc)``, tile by tile."""
    return grade_in_order("softmax_tile_update（線上 softmax 更新）", _softmax_cases(), lambda case: _run_update(fn, case))


# --- piece 5: the split-K merge ------------------------------------------------------------------

@triton.jit
def _merge_harness(part_ptr,         # float32 [rows + 1, SPLITS_PAD, head_dim + 3], NaN past each row's splits
                   lse_ptr,          # float32 [rows + 1, SPLITS_PAD]
                   num_splits_ptr,   # int32 [rows]
                   out_ptr,          # float32 [rows, HEAD_DIM_PAD]
                   stride_pr, stride_ps,   # part's strides: row, split
                   stride_lr,              # lse's row stride
                   stride_or,              # out's row stride
                   HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, SPLITS_PAD: tl.constexpr,
                   FN: tl.constexpr):   # the reader's merge_splits
    """Program r: merge row r's splits with the reader's piece."""
    r = tl.program_id(0)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    num_splits = tl.load(num_splits_ptr + r)
    out = FN(part_ptr + r * stride_pr, lse_ptr + r * stride_lr, num_splits, stride_ps, offs_d, mask_d, SPLITS_PAD)
    tl.store(out_ptr + r * stride_or + offs_d, out, mask=mask_d)


MERGE_RTOL = 2e-5
JUNK_LSE = 60.0
"""The lse past num_splits: a split that does not exist, large enough to dominate if it is read."""


def _merge_cases() -> list[Case]:
    cases = [
        Case(tr("four query heads, 3 splits each, head_dim 4"),
             dict(rows=4, splits=[3] * 4, pad=4, dim=4, spread=2.0)),
        Case(tr("one split (the output is that split's)"), dict(rows=2, splits=[1, 1], pad=2, dim=3, spread=2.0)),
        Case(tr("an empty last split (lse -inf, part 0)"), dict(rows=2, splits=[3, 2], pad=4, dim=4, spread=2.0,
                                                                empty_last=True)),
        Case(tr("log-sum-exps 300 apart (2**300 overflows float32 unless the max is subtracted)"),
             dict(rows=2, splits=[2, 3], pad=4, dim=2, spread=300.0)),
    ]
    rng = random.Random(606)
    for i in range(5):
        pad = rng.choice([2, 4, 8])
        rows = rng.randint(1, 4)
        cases.append(Case(tr("hidden case {n} (seeded random): {rows} row(s), up to {pad} splits, head_dim {dim}",
                             n=i + 1, rows=rows, pad=pad, dim=rng.choice([3, 5, 6, 8])),
                          dict(rows=rows, splits=[rng.randint(1, pad) for _ in range(rows)], pad=pad,
                               dim=rng.choice([3, 5, 6, 8]), spread=rng.choice([1.0, 10.0, 200.0]),
                               empty_last=rng.random() < 0.4, seed=i)))
    return cases


def _run_merge(fn: object, case: Case) -> list[str]:
    p = case.params
    rows, pad, dim = p["rows"], p["pad"], p["dim"]
    device = runtime.device()
    gen = torch.Generator().manual_seed(p.get("seed", 3) + 77)
    # part[r, s, :dim] (row stride of dim + 3, so head_dim is not the split stride); NaN past num_splits.
    # One spare row at the end: a mask that reads one split too many stays inside the buffer.
    part = torch.full((rows + 1, pad, dim + 3), float("nan"))
    lse = torch.full((rows + 1, pad), JUNK_LSE)
    want = torch.zeros(rows, dim, dtype=torch.float64)
    for r, n in enumerate(p["splits"]):
        part[r, :n, :dim] = torch.randn(n, dim, generator=gen)
        lse[r, :n] = (torch.rand(n, generator=gen) - 0.5) * p["spread"]
        if p.get("empty_last") and n > 1:
            part[r, n - 1, :dim] = 0.0
            lse[r, n - 1] = float("-inf")
        w = torch.softmax(lse[r, :n].double() * math.log(2), 0)  # 2**lse normalised
        want[r] = (w[:, None] * part[r, :n, :dim].double()).sum(0)
    out = torch.full((rows, _np2(dim)), float("nan"), device=device)
    num_splits = torch.tensor(p["splits"], dtype=torch.int32, device=device)
    part, lse = part.to(device), lse.to(device)
    error = _launch(lambda: _merge_harness[(rows,)](
        part, lse, num_splits, out, part.stride(0), part.stride(1), lse.stride(0), out.stride(0),
        HEAD_DIM=dim, HEAD_DIM_PAD=_np2(dim), SPLITS_PAD=pad, FN=fn))
    _capture(part=part[:rows, :, :dim].cpu(), lse=lse[:rows].cpu(), num_splits=p["splits"], out=out[:, :dim].cpu(),
             expected=want.float())
    if error:
        return [error]
    got = out[:, :dim].cpu().double()
    bad = _first_mismatch(got, want, MERGE_RTOL, 1e-6)
    if bad is None:
        return []
    r, d = bad
    err = abs(float(got[r, d]) - float(want[r, d]))
    lines = [tr("program {r} (one (token, query head) row), {splits} split(s) of SPLITS_PAD {pad}, float32 against "
                "float64:", r=r, splits=p["splits"][r], pad=pad),
             tr("output column {d}: expected {expected:.6g}, got {got:.6g} (absolute error {err:.2g}, tolerance "
                "{tol:g} relative)", d=d, expected=float(want[r, d]), got=float(got[r, d]), err=err, tol=MERGE_RTOL)]
    if not math.isfinite(float(got[r, d])):
        lines.append(tr("hint: inf or NaN: subtract the largest lse before exp2, and read only the first num_splits "
                        "splits (mask = offs_s < num_splits; the rows after them are not splits)"))
    else:
        lines.append(tr("hint: split s's weight is exp2(lse[s] - max lse) / the sum of those weights; lse is base 2 "
                        "(exp2, not exp), and split s's row starts at part_ptr + s * stride_split"))
    return lines


def try_merge_splits(fn: object, case: int | str = 0) -> dict:
    """Run one shown case of piece 5; return the partial outputs, lse, split counts, your output and the expected."""
    return _try(_run_merge, fn, _merge_cases(), case)


def check_merge_splits(fn: object) -> bool:
    """Grade piece 5, ``merge_splits(part_ptr, lse_ptr, num_splits, stride_split, offs_d, mask_d,
    SPLITS_PAD) -> [HEAD_DIM_PAD]``, against a float64 softmax over the splits."""
    return grade_in_order("merge_splits（KV 分割匯合）", _merge_cases(), lambda case: _run_merge(fn, case))
