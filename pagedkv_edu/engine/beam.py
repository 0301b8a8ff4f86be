"""Beam search on the block manager: beams fork, share blocks, copy on write, and the losers are freed (chapter 7).

PagedAttention runs beam search on reference counts (Kwon et al., SOSP 2023, §4.4).
:class:`BeamSearch` is the search alone, no model and no memory: transformers'
``generate(num_beams=k, do_sample=False)`` rule for rule (chapter 7 lists the rules), so the top
hypothesis is the same. (transformers' ``num_beams=1`` is greedy decoding, another loop; one beam
here still keeps a finished hypothesis and a running beam apart, so with EOS on it can differ.)
:func:`beam_search` drives a search through an idle :class:`~pagedkv_edu.engine.engine.LLMEngine`
with the engine's calls for a caller that picks tokens itself; the beams are the engine's requests.
:func:`regroup` is the one rule for freeing and forking beams (the engine's search and chapter 7's replay).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import torch

from ..checks import check_token_ids, check_whole
from ..core.block_table import blocks_needed
from ..core.request import SamplingParams, Status

if TYPE_CHECKING:   # the engine is only passed in
    from .engine import LLMEngine

B = TypeVar("B")


@dataclass(frozen=True)
class BeamSearchParams:
    """What a beam search asks for (transformers' names; vLLM calls ``num_beams`` ``beam_width``)."""

    num_beams: int
    max_tokens: int
    length_penalty: float = 1.0
    early_stopping: bool | Literal["never"] = False
    ignore_eos: bool = False
    num_return_sequences: int = 1

    def __post_init__(self) -> None:
        check_whole("num_beams", self.num_beams, 1)
        check_whole("max_tokens", self.max_tokens, 1)
        check_whole("num_return_sequences", self.num_return_sequences, 1, self.num_beams)
        if self.early_stopping not in (True, False, "never"):
            raise ValueError(f"early_stopping must be True, False or 'never', got {self.early_stopping!r}")
        if not isinstance(self.length_penalty, (int, float)) or isinstance(self.length_penalty, bool):
            raise ValueError(f"length_penalty must be a number, got {self.length_penalty!r}")


@dataclass(frozen=True)
class Hypothesis:
    """A finished beam: its generated tokens (an ending EOS included) and its length-normalised score."""

    token_ids: tuple[int, ...]
    score: float          # log_prob / len(token_ids) ** length_penalty: what the ranking uses
    log_prob: float       # the sum of its tokens' log-probabilities


class BeamSearch:
    """transformers' beam search bookkeeping, without a model: log-probs in, surviving (parent, token) out."""

    def __init__(self, params: BeamSearchParams, eos_token_ids: Sequence[int] = ()) -> None:
        self.params = params
        self.eos = frozenset(() if params.ignore_eos else check_token_ids(eos_token_ids, "eos_token_ids"))
        self.scores = torch.zeros(1)                   # float32: each running beam's cumulative log-prob
        self.beams: list[tuple[int, ...]] = [()]       # each running beam's generated tokens
        self.finished: list[Hypothesis] = []           # best first, at most num_beams
        self.num_steps = 0
        self.done = False

    def advance(self, log_probs: torch.Tensor) -> list[tuple[int, int]]:
        """One step: ``log_probs`` is ``[running beams, vocab]``; returns the new beams as (parent, token).

        The list is best first and empty once the search is done. A parent named twice must be
        forked, a parent not named is freed.
        """
        if self.done:
            raise RuntimeError("the search is done: no beam is running")
        if log_probs.dim() != 2 or log_probs.shape[0] != len(self.beams):
            raise ValueError(f"need log-probs of shape [{len(self.beams)} running beams, vocab], "
                             f"got {tuple(log_probs.shape)}")
        p, k = self.params, self.params.num_beams
        vocab = log_probs.shape[1]
        self.num_steps += 1
        t = self.num_steps                              # tokens generated, this step's included
        flat = (self.scores[:, None] + log_probs.float().cpu()).reshape(-1)
        kept = max(2, 1 + len(self.eos)) * k                 # candidates, so that k can go on whatever ends
        top, index = torch.topk(flat, min(kept, flat.numel()))
        parents, tokens = (index // vocab).tolist(), (index % vocab).tolist()
        ends = [t >= p.max_tokens or token in self.eos for token in tokens]
        normalised = top / (t ** p.length_penalty)
        new = [Hypothesis(self.beams[parents[i]] + (tokens[i],), float(normalised[i]), float(top[i]))
               for i in range(min(k, len(tokens))) if ends[i]]      # only the top k may finish
        self.finished = sorted(self.finished + new, key=lambda h: -h.score)[:k]
        going = [i for i in range(len(tokens)) if not ends[i]][:k]
        self.scores = top[going]
        self.beams = [self.beams[parents[i]] + (tokens[i],) for i in going]
        self.done = not going or (len(self.finished) == k and (p.early_stopping is True or not self._can_improve(t)))
        return [] if self.done else [(parents[i], tokens[i]) for i in going]

    def _can_improve(self, t: int) -> bool:
        """Could the best running beam still beat the worst finished one? (transformers' heuristic)"""
        p = self.params
        length = p.max_tokens if p.early_stopping == "never" and p.length_penalty > 0 else t
        best = self.scores[:1] / (length ** p.length_penalty)
        return bool(best[0] > torch.tensor(min(h.score for h in self.finished)))

    @property
    def best(self) -> list[Hypothesis]:
        """The finished hypotheses, best first (``num_return_sequences`` of them are returned)."""
        return list(self.finished)


# --- beams as sequences in the engine ----------------------------------------------------------------
@dataclass(frozen=True)
class BeamFrame:
    """The live beams during one decode step: each beam's block table, and who its parent was."""

    step: int
    tables: tuple[tuple[int, ...], ...]   # block tables of the live beams, best beam first
    num_tokens: int                       # tokens each beam holds (they are all the same length)
    parents: tuple[int, ...]              # index of each beam's parent in the previous frame
    block_size: int

    @property
    def blocks_shared(self) -> int:
        """Distinct blocks the beams hold: what memory holds when they share."""
        return len({b for table in self.tables for b in table})

    @property
    def blocks_copied(self) -> int:
        """Blocks the beams would hold if each kept a full copy of its sequence."""
        return len(self.tables) * blocks_needed(self.num_tokens, self.block_size)


@dataclass(frozen=True)
class BeamSearchOutput:
    """The hypotheses (best first), and every decode step's frame."""

    prompt_token_ids: list[int]
    hypotheses: list[Hypothesis]
    frames: list[BeamFrame]
    num_copies: int                        # copy-on-write block copies the beams made

    @property
    def token_ids(self) -> list[int]:
        """The best hypothesis's generated tokens."""
        return list(self.hypotheses[0].token_ids)

    @property
    def saving(self) -> float:
        """Share of the full copies' block-steps that sharing saves (the paper's Fig. 15 measure)."""
        copied = sum(f.blocks_copied for f in self.frames)
        return 1 - sum(f.blocks_shared for f in self.frames) / copied if copied else 0.0


def max_blocks(prompt_len: int, params: BeamSearchParams, block_size: int) -> int:
    """Blocks a search may hold at once: the prompt's full blocks once, the rest of each beam's own."""
    shared = prompt_len // block_size
    longest = blocks_needed(prompt_len + params.max_tokens - 1, block_size)
    return shared + params.num_beams * (longest - shared)


def beam_search(engine: "LLMEngine", prompt_token_ids: Sequence[int], params: BeamSearchParams, *,
                on_step: Callable[[int, Any], None] | None = None) -> BeamSearchOutput:
    """Run one beam search on an idle paged engine; every beam's blocks are free again at the end.

    The prompt is one request of the engine. Each step :meth:`~LLMEngine.forward_step` grows
    every live beam by its new token (copy-on-write included) and computes their logits in
    one forward pass; the search picks the survivors, and :func:`regroup` frees and forks the
    beams before each gets its token. ``on_step(step, block_manager)`` is called after each decode
    step's forward pass, with the step's memory in place (to draw it). The end-of-sequence
    tokens are the engine's ``stop_token_ids``.
    """
    manager, config = engine.block_manager, engine.config
    if config.policy != "paged":
        raise ValueError("beam search shares blocks between beams: it needs an engine with policy='paged'")
    if engine.has_unfinished:
        raise ValueError("beam search runs on an idle engine; this one still has unfinished requests")
    prompt = check_token_ids(prompt_token_ids, "prompt_token_ids")
    k = params.num_beams
    for name in ("max_num_seqs", "max_num_batched_tokens"):
        limit = getattr(config, name)
        if limit is not None and limit < k:
            raise ValueError(f"{k} beams run together in every step, but the engine's {name} is {limit}")
    need = max_blocks(len(prompt), params, manager.block_size)
    if need > manager.pool.num_free:
        raise ValueError(f"{k} beams over a {len(prompt)}-token prompt and {params.max_tokens} new tokens may hold "
                         f"{need} blocks at once; the pool has {manager.pool.num_free} free: raise kv_budget_tokens")
    request_id = engine.add_request(prompt, SamplingParams(max_tokens=params.max_tokens))   # checks the prompt
    search = BeamSearch(params, config.stop_token_ids)
    live = [engine.requests[request_id]]
    indices = iter(range(1, 1 << 62))     # each fork a new sample index: seq ids are never reused
    frames: list[BeamFrame] = []
    parents: tuple[int, ...] = (0,)
    copies = 0
    try:
        while True:
            step, logits = engine.forward_step()
            if step.preempted or step.failed or logits is None:   # the memory check above rules this out
                raise RuntimeError(f"a beam was preempted or failed in step {len(frames)}: out of KV memory")
            copies += len(step.copies.copy)
            if live[0].output_token_ids:
                frames.append(BeamFrame(len(frames) + 1, tuple(tuple(manager.block_ids(b)) for b in live),
                                        live[0].num_tokens, parents, manager.block_size))
                if on_step is not None:
                    on_step(len(frames), manager)
            rows = {id(s.seq): i for i, s in enumerate(step.scheduled) if s.samples}
            if any(id(b) not in rows for b in live):
                continue       # a chunk of the prompt: no logits yet
            log_probs = torch.log_softmax(logits[[rows[id(b)] for b in live]].float(), dim=-1)
            chosen = search.advance(log_probs)
            if not chosen:
                break
            parents = tuple(p for p, _ in chosen)
            live = regroup(live, parents, engine.free_sequence, lambda beam: engine.fork_sequence(beam, next(indices)))
            for beam, (_, token) in zip(live, chosen):
                engine.append_token(beam, token)
    finally:   # the beams still holding memory: a loser regroup freed already is not freed twice
        for beam in live:
            if beam.status is not Status.FINISHED:
                engine.free_sequence(beam)
    return BeamSearchOutput(prompt, search.best[:params.num_return_sequences], frames, copies)


def regroup(live: list[B], parents: Sequence[int], free: Callable[[B], Any], fork: Callable[[B], B]) -> list[B]:
    """The beams after a step chose ``parents`` (one per new beam): chapter 7's rule, for the engine and the replay.

    Losers go first (their blocks are free before any copy-on-write needs one). A parent's first
    child continues as the parent itself (no fork, no copy); each further child is a ``fork``,
    which shares every block. Forks come before anyone's next token, so a child starts from its
    parent's tokens as they were.
    """
    kept = set(parents)
    for i, beam in enumerate(live):
        if i not in kept:
            free(beam)
    taken: set[int] = set()
    result = []
    for p in parents:
        result.append(fork(live[p]) if p in taken else live[p])
        taken.add(p)
    return result
