"""Sharing blocks without a model: what fork and the prefix cache save on a workload (chapters 7, 8).

Which blocks a sequence holds depends only on token counts (and ids, for the prefix cache), so
this drives the real block manager with the article's workload at full size: parallel sampling,
beam genealogies recorded from real beam searches, and a few-shot variant of the system prompt.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..core.block_manager import BlockManager
from ..core.block_table import blocks_needed
from ..checks import check_whole
from ..core.request import Request as Record
from ..engine.beam import BeamSearchParams, beam_search, regroup
from ..runtime import versions
from ..workload import MAX_SEQ_LEN, Request

SHOT_TOKENS = 160
"""Tokens of one worked example in the few-shot variant (5 shots + the 200-token system prompt ≈ 1,000)."""


def few_shot_variant(requests: list[Request], shots: int = 5, *, length_scale: float = 1.0) -> list[Request]:
    """The same requests with ``shots`` worked examples added to the shared part of every prompt.

    Pass the ``length_scale`` the requests were drawn with, so the examples shrink alike.
    Prompts grow by the same amount, so pair the variant with :func:`few_shot_max_seq_len`.
    """
    check_whole("shots", shots)
    extra = round(shots * SHOT_TOKENS * length_scale)
    return [dataclasses.replace(r, prompt_len=r.prompt_len + extra, shared_prefix_len=r.shared_prefix_len + extra)
            for r in requests]


def few_shot_max_seq_len(shots: int = 5, *, length_scale: float = 1.0) -> int:
    """The workload's context (2,048) plus the examples' tokens, at the same scale."""
    return max(1, round((MAX_SEQ_LEN + shots * SHOT_TOKENS) * length_scale))


# --- parallel sampling -------------------------------------------------------------------------
@dataclass(frozen=True)
class SamplingMemory:
    """Blocks held at each decode step by ``n`` forked samples, and by ``n`` independent copies."""

    shared: list[int]
    independent: list[int]
    copies: int        # copy-on-write block copies the samples made

    @property
    def saving(self) -> float:
        """Share of the independent copies' block-steps that sharing saves (the paper's measure)."""
        return 1 - sum(self.shared) / sum(self.independent)


def parallel_sampling_blocks(prompt_len: int, output_len: int, n: int, block_size: int) -> SamplingMemory:
    """Fork a ``prompt_len`` prompt into ``n`` samples that each decode ``output_len`` tokens.

    The first sample is prefilled, the others fork from it, and each decode step appends
    one token to every sample (copy-on-write on the first append into the shared last block):
    a beam search (:func:`beam_blocks`) whose every beam keeps itself. Independent copies hold
    ``n`` times the blocks of one sequence of the same length.
    """
    if min(prompt_len, n) < 1 or output_len < 0:
        raise ValueError(f"need prompt_len >= 1, n >= 1 and output_len >= 0, got {prompt_len}, {n}, {output_len}")
    if output_len == 0:  # the forks share the prompt's blocks
        return SamplingMemory([blocks_needed(prompt_len, block_size)], [n * blocks_needed(prompt_len, block_size)], 0)
    return beam_blocks(prompt_len, [[0] * n] + [list(range(n))] * (output_len - 1), block_size)


def workload_sampling_saving(requests: list[Request], n: int, block_size: int) -> float:
    """:attr:`SamplingMemory.saving` over every request of a workload, each sampled ``n`` times."""
    runs = [parallel_sampling_blocks(r.prompt_len, r.output_len, n, block_size) for r in requests]
    return 1 - sum(sum(m.shared) for m in runs) / sum(sum(m.independent) for m in runs)


# --- beam search -------------------------------------------------------------------------------
Genealogy = Sequence[Sequence[int]]
"""Step by step, the index of each new beam's parent among the previous step's beams (best first)."""

BEAM_RECORD = Path(__file__).parent.parent / "data" / "beam_genealogies.json"
"""Genealogies of real beam searches (SmolLM2-135M, widths 2, 4, 6), written by :func:`record_beam_genealogies`."""

ALPACA_STYLE_PROMPTS: tuple[str, ...] = (
    "Give three tips for staying healthy.",
    "Describe the water cycle to a ten-year-old.",
    "Write a short story about a lighthouse keeper.",
    "Explain why the sky is blue.",
)
"""Instructions in the style of the Alpaca dataset, for recording beam genealogies (our wording)."""


def beam_blocks(prompt_len: int, genealogy: Genealogy, block_size: int) -> SamplingMemory:
    """Replay a beam search's genealogy on the block manager and count blocks at every step.

    Step 1 forks the prefilled prompt into the first beams (its parents are all 0). At every
    step :func:`~pagedkv_edu.engine.beam.regroup` (the engine's own rule) frees the beams nobody
    chose and forks the parents chosen more than once; then every beam appends its token
    (copy-on-write on a shared, partly filled last block). The comparison is beams that each
    keep a full copy.
    """
    check_whole("prompt_len", prompt_len, 1)
    if not genealogy or any(p != 0 for p in genealogy[0]):
        raise ValueError("a genealogy starts with the fork of the prompt: its first step's parents are all 0")
    width = max(len(step) for step in genealogy)
    manager = BlockManager(width * blocks_needed(prompt_len + len(genealogy), block_size) + width, block_size)
    first = Record(0, None, num_prompt_tokens=prompt_len)
    manager.admit(first, prompt_len)
    first.num_computed_tokens = prompt_len
    live, ids = [first], iter(range(1, 1 << 62))
    shared, independent, copies = [], [], 0

    def fork(parent: Record) -> Record:
        child = parent.fork(next(ids), 0)
        manager.fork(parent, child)
        child.num_computed_tokens = parent.num_computed_tokens
        return child

    for step, parents in enumerate(genealogy, 1):
        if not parents or any(not 0 <= p < len(live) for p in parents):
            raise ValueError(f"step {step}: parents {list(parents)} must index the {len(live)} beams of step {step - 1}")
        live = regroup(live, parents, manager.release, fork)
        for seq in live:                  # every beam's new token needs a slot (copy-on-write included)
            seq.output_token_ids.append(0)
            manager.grow(seq, 1)
            seq.num_computed_tokens += 1
        copies += len(manager.take_copies().copy)
        shared.append(manager.pool.num_used)
        independent.append(len(live) * blocks_needed(prompt_len + step, block_size))
    return SamplingMemory(shared, independent, copies)


def workload_beam_saving(requests: list[Request], genealogies: Sequence[Genealogy], block_size: int,
                         seed: int = 0) -> float:
    """The block-steps that sharing saves when every request runs a beam search, over the whole workload.

    Request ``r`` needs ``r.output_len`` steps. Its genealogy is the fork of the prompt, then
    ``r.output_len - 1`` steps taken in order from the recorded ones (every recorded search
    after its first step, end to end) from a seeded random start, wrapping around: any run of
    recorded steps is a valid genealogy, since each step only names the previous step's beams.
    """
    later = [list(step) for g in genealogies for step in g[1:]]
    if not later:
        raise ValueError("need recorded genealogies of at least two steps")
    rng = random.Random(seed)
    runs = []
    for r in requests:
        start = rng.randrange(len(later))
        steps = [[0] * len(later[0])] + [later[(start + i) % len(later)] for i in range(r.output_len - 1)]
        runs.append(beam_blocks(r.prompt_len, steps, block_size))
    return 1 - sum(sum(m.shared) for m in runs) / sum(sum(m.independent) for m in runs)


def record_beam_genealogies(loaded: Any, prompts: Sequence[str] = ALPACA_STYLE_PROMPTS,
                            widths: Sequence[int] = (2, 4, 6), max_tokens: int = 48) -> dict[str, Any]:
    """Run beam searches on a real model (EOS ignored, as a trace with fixed output lengths) and keep their genealogies.

    ``loaded`` is a :class:`~pagedkv_edu.model.loading.LoadedModel`. The record says what ran,
    where and when; :func:`workload_beam_saving` replays it on any workload and block size.
    """
    from ..engine import LLMEngine

    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    runs = []
    for width in widths:
        for text in prompts:
            ids = loaded.encode(text)
            engine = LLMEngine(loaded.model, loaded.tokenizer, block_size=16,
                               kv_budget_tokens=16 * width * blocks_needed(len(ids) + max_tokens, 16) + 16 * width)
            out = beam_search(engine, ids, BeamSearchParams(width, max_tokens, ignore_eos=True))
            runs.append({"num_beams": width, "prompt": text, "prompt_len": len(ids),
                         "text": loaded.tokenizer.decode(out.token_ids),
                         "parents": [list(f.parents) for f in out.frames],
                         "saving_block_size_16": round(out.saving, 4)})
    return {"benchmark": "beam-genealogies", "model": loaded.name, "source": loaded.source,
            "device": "CPU", "date_utc": started, "versions": versions(), "max_tokens": max_tokens,
            "about": "Each run's parents: for every decode step, the index of each beam's parent among the "
                     "previous step's beams (best first); replayed by pagedkv_edu.sim.sharing.workload_beam_saving.",
            "runs": runs}


def load_beam_genealogies(num_beams: int, path: str | Path = BEAM_RECORD) -> list[list[list[int]]]:
    """The recorded genealogies of the searches with ``num_beams`` beams (the committed record by default)."""
    record = json.loads(Path(path).read_text())
    found = [run["parents"] for run in record["runs"] if run["num_beams"] == num_beams]
    if not found:
        raise ValueError(f"{path} holds no search with {num_beams} beams")
    return found
