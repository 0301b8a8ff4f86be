"""Graders for chapter 8 (prefix caching): the hash chain, the checked lookup and the free-queue order.

Each runs the chapter's cases, then seeded hidden ones (:mod:`.grading`); the lookup's hidden
cases are taken from random traces with evictions. :func:`check_prefix_cache` grades the file the
chapter saves, ``my_engine/prefix_cache.py``, with the three, then runs it as the engine's prefix
cache (:mod:`.ch8_cache`), and marks it passed for :func:`~pagedkv_edu.exercises.my_engine.load_parts`.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..engine.guards import PartError
from ..sim.simulate import simulate
from ..workload import copilot50
from . import report
from .ch2 import HIDDEN_BLOCK_SIZES
from .ch8_cache import FUNCTIONS, ReaderFunctions
from .grading import Reader, as_int_list, describe_exception, grade, seeded, short
from .messages import Message, tr
from .my_engine import PARTS, load_file, mark_passed
from .solutions import ch8 as reference

Key = tuple[Hashable, tuple[int, ...]]


def strong_hash(parent: Hashable, tokens: Sequence[int]) -> int:
    """48 bits of SHA-256 over the pair: collisions never happen at this book's sizes."""
    data = repr((parent, tuple(int(t) for t in tokens))).encode()
    return int.from_bytes(hashlib.sha256(data).digest()[:6], "little")


def weak_hash(parent: Hashable, tokens: Sequence[int]) -> int:
    """A deliberately bad hash (11 values, blind to the tokens' order): it collides all the time."""
    return ((parent or 0) * 7 + sum(int(t) for t in tokens)) % 11


HASHES: dict[str, Callable[[Hashable, Sequence[int]], int]] = {"strong": strong_hash, "weak": weak_hash}
HASH_NAMES: dict[str, Message] = {"strong": tr("strong hash"), "weak": tr("weak hash")}


# --- the hash chain ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChainCase:
    name: Message
    token_ids: tuple[int, ...]
    block_size: int


CHAIN_CASES: tuple[ChainCase, ...] = (
    ChainCase(tr("a 10-token system prompt, block size 4: two full blocks and 2 tokens"), tuple(range(100, 110)), 4),
    ChainCase(tr("exactly two full blocks: both are hashed"), tuple(range(200, 208)), 4),
    ChainCase(tr("the same block twice: its two hashes differ, their parents do"), (5, 6, 5, 6, 5, 6), 2),
    ChainCase(tr("shorter than one block: nothing to hash"), (1, 2, 3), 4),
    ChainCase(tr("block size 1"), (9, 8, 7), 1),
)


def _draw_chain_case(rng: random.Random, i: int) -> ChainCase:
    b = rng.choice(HIDDEN_BLOCK_SIZES)
    n = rng.choice([0, 1, b - 1, b, b + 1, 3 * b, rng.randint(0, 6 * b)])
    return ChainCase(tr("hidden case {n}", n=i + 1), tuple(rng.randrange(3) for _ in range(n)), b)


HIDDEN_CHAIN_CASES = seeded(120, 12, _draw_chain_case)


def _run_chain(fn: Reader, case: ChainCase) -> list[str]:
    b, tokens = case.block_size, case.token_ids
    expected = reference.block_hashes(tokens, b, strong_hash)
    got = fn(list(tokens), b, strong_hash)
    got = list(got) if isinstance(got, (list, tuple)) else got
    if got == expected:
        return []
    blocks = [tuple(tokens[e - b:e]) for e in range(b, len(tokens) + 1, b)]
    why: Message | None = None
    if not isinstance(got, list):
        why = tr("return a list of hashes, one per full block")
    elif len(got) == len(expected) + 1 and got[:-1] == expected:
        why = tr("a partly filled last block has no hash: {tokens} tokens fill {blocks} blocks of {size}",
                 tokens=len(tokens), blocks=len(expected), size=b)
    elif expected and got == expected[:-1]:
        why = tr("the last full block is missing: {tokens} tokens fill {blocks} blocks of {size}", tokens=len(tokens),
                 blocks=len(expected), size=b)
    elif got and got == [strong_hash(None, block) for block in blocks][:len(got)]:
        why = tr("each hash must include its parent's hash, or equal blocks after different beginnings get one hash")
    elif got and expected and got[0] != expected[0] and got[0] in (strong_hash(0, blocks[0]),
                                                                   strong_hash(b"", blocks[0])):
        why = tr("the first block's parent hash is None")
    fields = dict(count=len(expected), expected=short(expected, 90), got=short(got, 90))
    if why is None:
        result = (tr("expected {count} hash {expected}, got {got}", **fields) if len(expected) == 1 else
                  tr("expected {count} hashes {expected}, got {got}", **fields))
    else:
        result = (tr("expected {count} hash {expected}, got {got}  ({why})", **fields, why=why) if len(expected) == 1
                  else tr("expected {count} hashes {expected}, got {got}  ({why})", **fields, why=why))
    return [tr("prompt {prompt} ({count} tokens), block size {size}", prompt=short(list(tokens), 80),
               count=len(tokens), size=b),
            result]


def check_block_hashes(fn: Callable[[list[int], int, Callable[[Hashable, tuple[int, ...]], Hashable]],
                                    Sequence[Hashable]]) -> bool:
    """Grade ``fn(token_ids, block_size, hash_fn) -> the hash of every full block`` (first parent: None)."""
    return grade("block_hashes (雜湊鏈)", fn, CHAIN_CASES, HIDDEN_CHAIN_CASES, _run_chain)


# --- the lookup, checked ------------------------------------------------------------------------------
@dataclass(frozen=True)
class LookupCase:
    """A prompt, the cache's table (hash -> block, maybe stale) and what each block holds now."""

    name: Message
    token_ids: tuple[int, ...]
    block_size: int
    hash_name: str
    table: tuple[tuple[Hashable, int], ...]
    holds: tuple[tuple[int, Key], ...]


def _cached(tokens: Sequence[int], block_size: int, blocks: Sequence[int], hash_name: str = "strong",
            ) -> tuple[dict[Hashable, int], dict[int, Key]]:
    """The table and contents after ``tokens``' full blocks were computed into ``blocks``."""
    fn, table, holds, parent = HASHES[hash_name], {}, {}, None
    for i, block in enumerate(blocks):
        key = (parent, tuple(tokens[i * block_size:(i + 1) * block_size]))
        parent = fn(*key)
        table.setdefault(parent, block)
        holds[block] = key
    return table, holds


def _case(name: Message, tokens: Sequence[int], block_size: int, table: dict[Hashable, int], holds: dict[int, Key],
          hash_name: str = "strong") -> LookupCase:
    return LookupCase(name, tuple(tokens), block_size, hash_name, tuple(table.items()), tuple(holds.items()))


def _shown_lookup_cases() -> tuple[LookupCase, ...]:
    system = list(range(11, 21))
    t1, h1 = _cached(system + [40, 41], 4, [6, 2, 9])
    t2, h2 = _cached(system[:8], 4, [6, 2])
    t3, h3 = _cached(system[:8], 4, [6, 2])               # block 2 was handed out again for other tokens
    h3[2] = (999, (70, 71, 72, 73))
    t4, h4 = _cached([3, 4, 5, 1, 2], 5, [0], "weak")      # 3+4+5+1+2 = 15 = 5+5+5+0+0 (mod 11): a collision
    t5, h5 = _cached(system + [30, 31], 4, [6, 2, 9])
    del t5[strong_hash(strong_hash(None, tuple(system[:4])), tuple(system[4:8]))]   # block 2 evicted, cleaned
    t6, h6 = _cached([7, 7, 7, 7] + system[4:8], 4, [1, 3])   # block 3: these 4 tokens after another beginning
    t6.update(_cached(system[:4], 4, [6])[0])
    h6[6] = (None, tuple(system[:4]))
    t6[strong_hash(strong_hash(None, tuple(system[:4])), tuple(system[4:8]))] = 3   # a stale entry that names it
    return (
        _case(tr("a cached 10-token system prompt (block size 4), a new question after it"), system + [30, 31, 32],
              4, t1, h1),
        _case(tr("the whole prompt is cached (two full blocks): the last token must still be computed"), system[:8],
              4, t2, h2),
        _case(tr("one token more than the cached blocks: both hit"), system[:9], 4, t2, h2),
        _case(tr("block 2 was handed out again since (its table entry is stale): it holds other tokens now"),
              system + [30], 4, t3, h3),
        _case(tr("a weak hash: another block hashes the same and holds other tokens (a forced collision)"),
              [5, 5, 5, 0, 0, 9], 5, t4, h4, "weak"),
        _case(tr("block 2 was evicted: block 9 cannot be used without it"), system + [30, 31, 32], 4, t5, h5),
        _case(tr("the same 4 tokens after another beginning are other K/V: compare the parent too"),
              system[:8] + [0], 4, t6, h6),
        _case(tr("a shared prefix shorter than one block never hits (vLLM #54607)"), [11, 12, 13, 50, 51, 52, 53, 54],
              4, *_cached([11, 12, 13, 60, 61, 62, 63, 64], 4, [3, 5])),
        _case(tr("block size 1"), [5, 6, 7], 1, *_cached([5, 6, 7], 1, [4, 0, 1])),
    )


LOOKUP_CASES = _shown_lookup_cases()


def _trace_lookups(count: int = 160, seed: int = 13) -> list[LookupCase]:
    """Lookups taken from random traces: requests over a tiny vocabulary arrive, hit, allocate and finish.

    The pool is small, so blocks are evicted and handed out again. As in nano-vllm, the table
    is not cleaned when a block is reused: entries go stale, and only ``holds`` is current.
    """
    rng = random.Random(seed)
    cases: list[LookupCase] = []
    while len(cases) < count:
        b = rng.choice(HIDDEN_BLOCK_SIZES)
        hash_name = rng.choice(["strong", "strong", "weak"])
        fn = HASHES[hash_name]
        vocab, num_blocks = rng.randint(2, 3), rng.randint(3, 9)
        bases = [[rng.randrange(vocab) for _ in range(rng.randint(b, 4 * b))] for _ in range(2)]
        queue, refs = list(range(num_blocks)), [0] * num_blocks
        table: dict[Hashable, int] = {}
        holds: dict[int, Key] = {}
        running: list[list[int]] = []

        def finish(blocks: list[int]) -> None:
            cached = {x for x in blocks if x in holds and table.get(fn(*holds[x])) == x}
            reference.free_blocks(queue, refs, blocks[::-1], cached)

        for _ in range(rng.randint(3, 9)):
            base = rng.choice(bases)
            prompt = (base[:rng.randint(len(base) // 2, len(base))]
                      + [rng.randrange(vocab) for _ in range(rng.randint(0, b))])
            prompt = prompt or [rng.randrange(vocab)]
            if rng.random() < 0.6 and len(cases) < count:
                cases.append(_case(tr("hidden case {n}", n=len(cases) + 1), prompt, b, dict(table), dict(holds),
                                   hash_name))
            hit = reference.cached_prefix_blocks(prompt, b, fn, table, holds)
            need = -(-len(prompt) // b) - len(hit)
            while need > len(queue) - sum(1 for x in hit if refs[x] == 0) and running:
                finish(running.pop(0))
            if need > len(queue) - sum(1 for x in hit if refs[x] == 0):
                continue
            for x in hit:
                reference.touch(queue, refs, x)
            new, queue[:need] = queue[:need], []
            for x in new:
                refs[x] = 1
                holds.pop(x, None)          # lazy eviction: the table keeps its (now stale) entry
            blocks = hit + new
            parent = None
            for i, h in enumerate(reference.block_hashes(prompt, b, fn)):
                key = (parent, tuple(prompt[i * b:(i + 1) * b]))
                holds[blocks[i]] = key
                if h not in table or holds.get(table[h]) != key and table[h] not in blocks:
                    table[h] = blocks[i]
                parent = h
            running.append(blocks)
            if rng.random() < 0.5:
                finish(running.pop(0))
    return cases


HIDDEN_LOOKUP_CASES = _trace_lookups()


def _why_stop(case: LookupCase, index: int) -> Message:
    """Why block ``index`` of the prompt cannot be used (the reference stopped there)."""
    b, tokens, fn = case.block_size, case.token_ids, HASHES[case.hash_name]
    if (index + 1) * b >= len(tokens):
        return tr("{hit} of {tokens} tokens would hit: nothing would be left to compute the logits from",
                  hit=(index + 1) * b, tokens=len(tokens))
    parent = None
    for i in range(index):
        parent = fn(parent, tokens[i * b:(i + 1) * b])
    key = (parent, tuple(tokens[index * b:(index + 1) * b]))
    block = dict(case.table).get(fn(*key))
    held = dict(case.holds).get(block) if block is not None else None
    if block is None:
        return tr("block {index} of the prompt is not in the table: a block is usable only if every block before it "
                  "is cached too", index=index)
    if held is None:
        return tr("the table names block {block}, which holds no full block now: the entry is stale", block=block)
    if held[1] != key[1]:
        return tr("the table names block {block}, but it holds tokens {held}, not {wanted}: a collision or a block "
                  "handed out again; compare before using it", block=block, held=short(list(held[1])),
                  wanted=short(list(key[1])))
    return tr("block {block} holds these tokens, but after another prefix (parent hash {held!r}, not {wanted!r}): "
              "its K/V differ", block=block, held=held[0], wanted=key[0])


def _run_lookup(fn: Reader, case: LookupCase) -> list[str]:
    hash_fn, table, holds = HASHES[case.hash_name], dict(case.table), dict(case.holds)
    expected = reference.cached_prefix_blocks(case.token_ids, case.block_size, hash_fn, table, holds)
    got, problem = as_int_list(fn(list(case.token_ids), case.block_size, hash_fn, dict(table), dict(holds)),
                               tr("block id"))
    if got is None:
        return [problem]
    if got == expected:
        return []
    why: Message | None = None
    if len(got) > len(expected) and got[:len(expected)] == expected:
        why = _why_stop(case, len(expected))
    elif len(got) < len(expected) and expected[:len(got)] == got:
        why = tr("block {block} holds exactly the pair hashed: it is a hit", block=expected[len(got)])
    return [tr("prompt {prompt} ({count} tokens), block size {size}, {hash}, {entries} table entries",
               prompt=short(list(case.token_ids), 80), count=len(case.token_ids), size=case.block_size,
               hash=HASH_NAMES[case.hash_name], entries=len(table)),
            tr("expected blocks {expected}, got {got}", expected=expected, got=got) if why is None else
            tr("expected blocks {expected}, got {got}  ({why})", expected=expected, got=got, why=why)]


def check_cached_prefix_blocks(fn: Callable[..., Sequence[int]]) -> bool:
    """Grade ``fn(token_ids, block_size, hash_fn, table, holds) -> block ids`` (see the solution's docstring)."""
    return grade("cached_prefix_blocks (最長已快取前綴)", fn, LOOKUP_CASES, HIDDEN_LOOKUP_CASES, _run_lookup)


# --- the free queue's order -----------------------------------------------------------------------------
Op = tuple[str, object]   # ("alloc", n) ("share", block) ("cache", block) ("free", blocks) ("hit", block)


@dataclass(frozen=True)
class QueueCase:
    name: Message
    num_blocks: int
    ops: tuple[Op, ...]


QUEUE_CASES: tuple[QueueCase, ...] = (
    QueueCase(tr("a request finishes, freed tail first: its partial block 2 to the front, its cached 1 and 0 to the "
                 "back"), 8, (("alloc", 3), ("cache", 0), ("cache", 1), ("free", (2, 1, 0)))),
    QueueCase(tr("three uncached blocks freed together keep their order at the front"),
              6, (("alloc", 4), ("cache", 0), ("free", (3, 2, 1, 0)))),
    QueueCase(tr("a block another request shares loses one reference and stays out of the queue"),
              6, (("alloc", 2), ("share", 0), ("cache", 0), ("free", (1, 0)), ("free", (0,)))),
    QueueCase(tr("a hit on a free cached block pulls it out of the middle of the queue"),
              6, (("alloc", 3), ("cache", 0), ("cache", 1), ("free", (2, 1, 0)), ("hit", 0), ("hit", 1))),
    QueueCase(tr("a hit on a block in use only takes a reference"), 4, (("alloc", 1), ("cache", 0), ("hit", 0))),
    QueueCase(tr("freeing nothing changes nothing"), 3, (("alloc", 1), ("free", ()))),
)


def _apply(op: Op, queue: list[int], refs: list[int], cached: set[int], free_blocks: Callable[..., object],
           touch: Callable[..., object]) -> None:
    """One step of a queue case, in place; "free" and "hit" call these two functions (the reader's or ours)."""
    kind, arg = op
    if kind == "alloc":
        for x in queue[:arg]:
            refs[x] = 1
            cached.discard(x)
        queue[:arg] = []
    elif kind == "share":
        refs[arg] += 1
    elif kind == "cache":
        cached.add(arg)
    elif kind == "free":
        free_blocks(queue, refs, list(arg), set(cached))
    else:
        touch(queue, refs, arg)


def _draw_queue_case(rng: random.Random, i: int) -> QueueCase:
    n = rng.randint(1, 11)
    queue, refs, cached, ops = list(range(n)), [0] * n, set(), []
    for _ in range(rng.randint(2, 12)):
        held = [x for x in range(n) if refs[x]]
        kind = rng.choice(["alloc", "alloc", "free", "free", "free", "share", "cache", "cache", "hit"])
        if kind == "alloc" and queue:
            op: Op = ("alloc", rng.randint(1, len(queue)))
        elif kind == "free" and held:
            op = ("free", tuple(rng.sample(held, rng.randint(0, len(held)))))
        elif kind in ("share", "cache") and held:
            op = (kind, rng.choice(held))
        elif kind == "hit" and cached:
            op = ("hit", rng.choice(sorted(cached)))
        else:
            continue
        _apply(op, queue, refs, cached, reference.free_blocks, reference.touch)
        ops.append(op)
    return QueueCase(tr("hidden case {n}", n=i + 1), n, tuple(ops))


HIDDEN_QUEUE_CASES = seeded(100, 14, _draw_queue_case)


def _queue_hint(before: list[int], refs: list[int], blocks: Sequence[int], cached: set[int],
                got: list[int]) -> Message | None:
    freed = [x for x in blocks if refs[x] == 1]
    fresh, kept = [x for x in freed if x not in cached], [x for x in freed if x in cached]
    if got == before + freed and fresh:
        return tr("the older vLLM order (both appended); at c59cb79 a freed block without a hash goes to the front")
    if got == fresh[::-1] + before + kept and len(fresh) > 1:
        return tr("prepending one block at a time reverses them: the first block given must end up first")
    if got == kept + before + fresh:
        return tr("the cached blocks go to the back (they may still be hit), the others to the front")
    if any(refs[x] > 1 and x in got for x in blocks):
        return tr("a block with another reference is still in use: it does not join the queue")
    return None


def _run_queue(fn: Reader, case: QueueCase) -> list[str]:
    exp_q, exp_r = list(range(case.num_blocks)), [0] * case.num_blocks
    got_q, got_r = list(range(case.num_blocks)), [0] * case.num_blocks
    cached: set[int] = set()
    for op in case.ops:
        kind, arg = op
        before, refs = list(got_q), list(got_r)
        _apply(op, exp_q, exp_r, cached, reference.free_blocks, reference.touch)
        _apply(op, got_q, got_r, cached, lambda *a: fn("free", *a), lambda *a: fn("hit", *a))
        if kind == "free":
            step = f"free_blocks(free_queue={before}, ref_counts={refs}, blocks={list(arg)}, cached={sorted(cached)})"
        elif kind == "hit":
            step = f"touch(free_queue={before}, ref_counts={refs}, block={arg})"
        else:
            continue
        diff = []
        if list(got_q) != exp_q:
            hint = _queue_hint(before, refs, arg, cached, list(got_q)) if kind == "free" else (
                tr("a hit must take the block out of the free queue, or it could be handed out while in use")
                if arg in got_q else None)
            diff.append(tr("free queue: expected {expected}, got {got}", expected=exp_q, got=list(got_q))
                        if hint is None else
                        tr("free queue: expected {expected}, got {got}  ({hint})", expected=exp_q, got=list(got_q),
                           hint=hint))
        if list(got_r) != exp_r:
            diff.append(tr("reference counts: expected {expected}, got {got}", expected=exp_r, got=list(got_r)))
        if diff:
            return [tr("{case}:", case=step)] + [f"  {line}" for line in diff]
    return []


def check_free_queue(free_blocks: Callable[[list[int], list[int], list[int], set[int]], None],
                     touch: Callable[[list[int], list[int], int], None]) -> bool:
    """Grade ``free_blocks(free_queue, ref_counts, blocks, cached)`` and ``touch(free_queue, ref_counts, block)``.

    Both change the lists in place. Cases replay allocations (from the front of the queue),
    shares, frees and hits, and compare the queue and the reference counts after each call.
    """
    def either(kind: str, *args: object) -> str:
        (free_blocks if kind == "free" else touch)(*args)
        return kind   # both work in place: None is their answer, not the sign of a stub

    return grade(tr("free queue order (空閒佇列的順序)"), either, QUEUE_CASES, HIDDEN_QUEUE_CASES, _run_queue)


# --- the three, as the engine's prefix cache ------------------------------------------------------------
ENGINE_RUN = dict(kv_budget_tokens=3 * 128, block_size=3, max_seq_len=128)
"""The consultants at 1/16 scale in 128 blocks of 3: requests share the system prompt, are preempted,
and evict cached blocks (about 900 evictions), so the free order and the lookup both show."""


def check_prefix_cache(path: str | Path = PARTS["prefix_cache"].path()) -> bool:
    """Grade the file chapter 8 saves: its three functions by the three graders, then as the engine's cache.

    The engine run serves :data:`ENGINE_RUN` with the file's functions composed into the prefix
    cache (:class:`~.ch8_cache.ReaderPrefixCache`) and must find, evict and preempt exactly as the
    shipped cache does. A file that passes is marked (its hash beside it), so the engine runs it
    while it stays unchanged; ``touch`` is the pool's own unless the file defines one.
    """
    path = Path(path)
    name = f"{path} (你的前綴快取)"
    if not path.exists():
        return report(name, [tr("{path} does not exist: run the %%writefile cell above first", path=path)])
    try:
        module = load_file(path)
    except Exception as exc:   # noqa: BLE001 (a reader's file can raise anything on import)
        return report(name, [tr("importing it {error}", error=describe_exception(exc))])
    missing = [f for f in FUNCTIONS if not callable(getattr(module, f, None))]
    if missing:
        return report(name, [tr("it defines no {names}: the file holds your three functions",
                                names=str(tr(", ")).join(missing))])
    verdicts = [check_block_hashes(module.block_hashes),
                check_free_queue(module.free_blocks, getattr(module, "touch", reference.touch)),
                check_cached_prefix_blocks(module.cached_prefix_blocks)]
    if not all(verdicts):
        return False
    problem = _engine_differs(ReaderFunctions.of(module, tr("your prefix cache ({path})", path=path)))
    if problem is not None:
        return report(name, [problem])
    mark_passed(path)
    report(name, [])
    same = tr("in the engine it found, evicted and preempted as the shipped cache does; load_parts() now runs it")
    print(f"  {same}")
    return True


def _engine_differs(functions: ReaderFunctions) -> Message | None:
    """How ``functions``, as the engine's prefix cache, serve :data:`ENGINE_RUN` unlike the shipped one, or None."""
    requests = copilot50(seed=0, length_scale=1 / 16)
    shipped = simulate(requests, enable_prefix_caching=True, **ENGINE_RUN)
    try:
        mine = simulate(requests, enable_prefix_caching=True, block_manager=functions.memory, **ENGINE_RUN)
    except PartError as exc:
        return tr("in the engine (the consultants at 1/16 scale, blocks of 3): {error}",
                  error=exc.args[0] if exc.args else exc)
    got, want = [(r.tokens.prefix_hit_tokens, r.tokens.resumed_hit_tokens, r.evictions, r.preemptions)
                 for r in (mine, shipped)]
    if got == want:
        return None
    return tr("in the engine (the consultants at 1/16 scale, blocks of 3) your cache found {found} prompt tokens "
              "({resumed} more for preempted requests), evicted {evicted} blocks and {preempted} requests were "
              "preempted; with the shipped cache {want_found} ({want_resumed}), {want_evicted} and {want_preempted}",
              found=got[0], resumed=got[1], evicted=got[2], preempted=got[3], want_found=want[0],
              want_resumed=want[1], want_evicted=want[2], want_preempted=want[3])


def try_case(grader: str, index: int = 0, *fns: Callable[..., object]) -> dict[str, object]:
    """One shown case of ``grader`` ("hashes", "lookup" or "queue"): its inputs, the expected answer and yours.

    Pass your function(s) after the index (for "queue", ``free_blocks`` then ``touch``) to see what
    they return on the same inputs; without them, only the inputs and the expected answer.
    """
    if grader == "hashes":
        c = CHAIN_CASES[index]
        out: dict[str, object] = {"case": str(c.name), "token_ids": list(c.token_ids), "block_size": c.block_size,
                                  "hash_fn": strong_hash,
                                  "expected": reference.block_hashes(c.token_ids, c.block_size, strong_hash)}
        if fns:
            out["got"] = fns[0](list(c.token_ids), c.block_size, strong_hash)
        return out
    if grader == "lookup":
        c = LOOKUP_CASES[index]
        args = (list(c.token_ids), c.block_size, HASHES[c.hash_name], dict(c.table), dict(c.holds))
        out = {"case": str(c.name), "token_ids": args[0], "block_size": args[1], "hash_fn": args[2], "table": args[3],
               "holds": args[4], "expected": reference.cached_prefix_blocks(*args)}
        if fns:
            out["got"] = fns[0](list(c.token_ids), c.block_size, HASHES[c.hash_name], dict(c.table), dict(c.holds))
        return out
    if grader == "queue":
        c = QUEUE_CASES[index]
        out = {"case": str(c.name), "num_blocks": c.num_blocks, "ops": list(c.ops),
               "expected": _queue_states(c, reference.free_blocks, reference.touch)}
        if fns:
            out["got"] = _queue_states(c, *fns)
        return out
    raise ValueError(f"grader must be 'hashes', 'lookup' or 'queue', got {grader!r}")


def _queue_states(case: QueueCase, free_blocks: Callable[..., object], touch: Callable[..., object],
                  ) -> list[tuple[Op, list[int], list[int]]]:
    """The free queue and reference counts after each step of ``case``, with these two functions."""
    queue, refs, cached, states = list(range(case.num_blocks)), [0] * case.num_blocks, set(), []
    for op in case.ops:
        _apply(op, queue, refs, cached, free_blocks, touch)
        states.append((op, list(queue), list(refs)))
    return states
