"""A serving engine: continuous batching over the paged (or contiguous) KV cache.

``add_request`` queues a prompt; every ``step`` asks the scheduler what runs, prefills the
newly admitted sequences, decodes one token for every other running sequence, samples, and
returns the requests that finished. Nothing here decides memory: the scheduler does, with the
block manager (paged) or a first-fit arena of ``max_seq_len`` reservations (contiguous, the
system before PagedAttention). Both engines run the same model and the same scheduler, so
the difference between them is the memory policy alone.

Chapters 7 (parallel sampling) and 8 (prefix caching) let sequences share blocks, paged policy only:

* **parallel sampling** (``SamplingParams(n=4)``): the request is admitted and prefilled once;
  right after the prefill its sequence is forked into ``n`` samples that share the prompt's
  blocks, and each samples its first token from the same logits with its own generator. When
  a sample first appends into the shared, partly filled last block, the block manager
  queues a copy-on-write, which :meth:`LLMEngine.step` applies to the K/V tensors before the
  forward pass;
* **automatic prefix caching** (``enable_prefix_caching=True``, off by default as in chapter
  6): admission starts a sequence from the longest cached prefix of full blocks, including
  blocks that requests admitted earlier in the same step will compute, and the prefill
  computes only the rest. After every forward pass the engine reports the computed tokens
  (``BlockManager.mark_computed``), which makes blocks filled by decoding findable too. A
  preempted request resumes through the cache, which makes recompute cheap.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from ..contiguous import ContiguousArena
from ..model.kv_store import ContiguousKVStore, PagedKVStore, StepMetadata
from ..model.llama import Llama
from ..scheduler import ContiguousMemory, PagedMemory, ScheduledStep, Scheduler
from .sampling import SamplingParams, make_generator, sample_token

POLICIES = ("paged", "contiguous")


@dataclass
class Request:
    """One sequence inside the engine: its tokens so far, its sampler and its timeline.

    A request with ``n`` samples has ``n`` of them. Sample 0 carries the request's id as its
    sequence id; samples 1.. are forked from it after its prefill and are named ``r<id>.<i>``.
    """

    seq_id: int | str
    request_id: int
    index: int
    prompt_token_ids: list[int]
    params: SamplingParams
    generator: torch.Generator
    arrival_time: float
    output_token_ids: list[int] = field(default_factory=list)
    text: str | None = None      # set when a stop string cut it; else decoded at the end
    first_token_time: float | None = None
    finish_time: float | None = None
    finish_reason: str | None = None
    num_preemptions: int = 0
    num_cached_tokens: int = 0   # prompt tokens found in the prefix cache at its first prefill

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens: all must be in the cache when the request runs."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def token_ids(self) -> list[int]:
        """Prompt plus generated tokens, the ids the prefix cache hashes."""
        return self.prompt_token_ids + self.output_token_ids


@dataclass(frozen=True)
class CompletionOutput:
    """One of a request's ``n`` samples (vLLM calls the list ``RequestOutput.outputs``)."""

    index: int
    token_ids: list[int]
    text: str
    finish_reason: str
    num_preemptions: int


@dataclass(frozen=True)
class RequestOutput:
    """A finished request, as ``step`` and ``generate`` return it.

    ``completions`` holds all ``n`` samples in index order; ``token_ids``, ``text`` and
    ``finish_reason`` are the first one's, so code written for ``n == 1`` reads as before.
    ``num_preemptions`` counts every sample's; ``finish_time`` is the last sample's.
    """

    request_id: int
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    num_preemptions: int
    arrival_time: float
    first_token_time: float | None
    finish_time: float
    completions: tuple[CompletionOutput, ...] = ()
    num_cached_tokens: int = 0    # prompt tokens the prefix cache saved at the first prefill

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def latency(self) -> float:
        """End to end: from arrival to the last token."""
        return self.finish_time - self.arrival_time


@dataclass(frozen=True)
class EngineStats:
    """The engine's state after a step."""

    step: int
    kv_usage: float
    num_running: int
    num_waiting: int
    num_preemptions: int
    generated_tokens: int
    elapsed: float
    kv_tokens: int        # tokens whose K/V are in the cache (a shared block's counted once)
    kv_held_slots: int    # slots held by requests: allocated blocks, or reserved ranges
    prefill_tokens: int = 0       # tokens the prefills computed so far (recomputation after preemption included)
    prompt_tokens: int = 0        # prompt tokens of the requests prefilled so far, each counted once
    prefix_hit_tokens: int = 0    # of those, found in the prefix cache at the first prefill: compute saved
    resumed_hit_tokens: int = 0   # tokens preempted requests found in the cache when they came back

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens found in the prefix cache over prompt tokens, first prefills only."""
        return self.prefix_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def kv_utilisation(self) -> float:
        """Share of the held slots that hold a token (chapter 1's measure)."""
        return self.kv_tokens / self.kv_held_slots if self.kv_held_slots else 1.0

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.elapsed if self.elapsed > 0 else 0.0


class LLMEngine:
    """Continuous batching with block-aware admission and preemption by recompute."""

    def __init__(
        self,
        model: Llama,
        tokenizer: object | None = None,
        *,
        policy: str = "paged",
        kv_budget_tokens: int = 20480,
        block_size: int = 16,
        max_seq_len: int | None = None,
        watermark: float = 0.01,
        max_num_seqs: int | None = None,
        backend: str = "torch",
        stop_token_ids: Iterable[int] = (),
        seed: int = 0,
        enable_prefix_caching: bool = False,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose one of {POLICIES}")
        if enable_prefix_caching and policy != "paged":
            raise ValueError("prefix caching shares blocks: it needs policy='paged'")
        if not isinstance(kv_budget_tokens, int) or kv_budget_tokens <= 0:
            raise ValueError(f"kv_budget_tokens must be a positive integer, got {kv_budget_tokens!r}")
        if not 0 <= watermark < 1:
            raise ValueError(f"watermark must be a fraction in [0, 1), got {watermark!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.policy = policy
        self.max_seq_len = max_seq_len or model.config.max_position_embeddings
        self.eos_token_ids = tuple(int(t) for t in stop_token_ids)
        self.seed = seed
        cfg, kw = model.config, {"dtype": model.dtype, "device": model.device}
        self.store: PagedKVStore | ContiguousKVStore
        if policy == "paged":
            num_blocks = kv_budget_tokens // block_size
            if num_blocks < 1:
                raise ValueError(f"a budget of {kv_budget_tokens} tokens holds no block of {block_size}")
            self.store = PagedKVStore(cfg, num_blocks, block_size, backend=backend, max_seq_len=self.max_seq_len, **kw)
            if enable_prefix_caching:
                self.store.manager.enable_prefix_caching()
            memory: PagedMemory | ContiguousMemory = PagedMemory(self.store.manager, math.ceil(watermark * num_blocks))
        else:
            rows = kv_budget_tokens // self.max_seq_len
            if rows < 1:
                raise ValueError(f"a budget of {kv_budget_tokens} tokens holds no reservation of {self.max_seq_len}")
            self.store = ContiguousKVStore(cfg, rows, self.max_seq_len, **kw)
            memory = ContiguousMemory(ContiguousArena(rows * self.max_seq_len), lambda _id, _n: self.max_seq_len)
        self.memory = memory
        self.scheduler = Scheduler(memory, max_num_seqs)
        self.enable_prefix_caching = enable_prefix_caching
        self.requests: dict[int, Request] = {}           # each request's first sample
        self._samples: dict[int, list[Request]] = {}     # unfinished requests' samples, index order
        self.history: list[EngineStats] = []
        self._next_id = 0
        self._generated = 0
        self._prefill = {"computed": 0, "prompt": 0, "hit": 0, "resumed_hit": 0}   # token counters
        self._start: float | None = None

    # --- requests in ---------------------------------------------------------------------
    def add_request(self, prompt: str | Sequence[int], params: SamplingParams | None = None,
                    arrival_time: float | None = None) -> int:
        """Queue a prompt (text, or token ids); returns its request id. Bad input raises here."""
        params = params or SamplingParams()
        ids = self._encode(prompt)
        if not ids:
            raise ValueError("the prompt is empty: there is no last token to predict from")
        vocab = self.model.config.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt has token ids outside the vocabulary 0..{vocab - 1}: {bad[:5]}")
        if len(ids) + params.max_tokens > self.max_seq_len:
            raise ValueError(f"prompt of {len(ids)} tokens + max_tokens={params.max_tokens} exceeds "
                             f"max_seq_len={self.max_seq_len}")
        if params.n > 1 and self.policy != "paged":
            raise ValueError(f"n={params.n} samples share the prompt's blocks: parallel sampling needs policy='paged'")
        request_id = self._next_id
        request = self._sequence(request_id, 0, ids, params,
                                 time.perf_counter() if arrival_time is None else arrival_time)
        self.scheduler.add(request)  # refuses a prompt that can never fit, before anything changes
        self._next_id += 1
        self.requests[request_id] = request
        self._samples[request_id] = [request]
        return request_id

    def _sequence(self, request_id: int, index: int, prompt: list[int], params: SamplingParams,
                  arrival_time: float) -> Request:
        seq_id: int | str = request_id if index == 0 else f"r{request_id}.{index}"
        return Request(seq_id, request_id, index, prompt, params,
                       make_generator(params, request_id, self.seed, index), arrival_time)

    def _encode(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("a text prompt needs a tokenizer; pass token ids or give the engine a tokenizer")
            return list(self.tokenizer(prompt)["input_ids"]) if prompt else []
        return [int(t) for t in prompt]

    @property
    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished

    # --- one iteration -------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One iteration: prefill the admitted, decode the running, return what finished."""
        if self._start is None:
            self._start = time.perf_counter()
        finished: list[RequestOutput] = []
        # A request asking for no tokens is done before it needs any memory.
        for request in [r for r in self.scheduler.waiting if r.params.max_tokens == 0]:
            self.scheduler.waiting.remove(request)
            finished += self._finish(request, "length", release=False)
        decided = self.scheduler.schedule()
        for request in decided.preempted:
            request.num_preemptions += 1
            self._release_rows(request)
        for request in decided.failed:
            finished += self._finish(request, "error: needs more KV memory than the whole budget", release=False)
        if isinstance(self.store, PagedKVStore):
            copies = self.store.manager.take_copies()   # copy-on-write decided by this schedule
            if copies:
                self.store.cache.copy_blocks(copies, self.store.backend)
        forked: list[Request] = []
        if decided.prefills:
            forked = self._run(decided.prefills, prefill=True)
        if decided.decodes:
            self._run(decided.decodes, prefill=False)
        for request in decided.prefills + forked + decided.decodes:
            reason = self._stop_reason(request)
            if reason is not None:
                finished += self._finish(request, reason, release=True)
        self._record()
        return finished

    def _run(self, batch: list[Request], *, prefill: bool) -> list[Request]:
        """One forward pass over ``batch``; sample a token for each. Returns the samples forked off."""
        ids = [r.seq_id for r in batch]
        if prefill:   # a prefill computes what the cache does not hold: with prefix caching, the tail only
            cached = ([self.store.manager.num_cached_tokens(i) for i in ids] if isinstance(self.store, PagedKVStore)
                      else [0] * len(batch))
            query_lens = [r.num_tokens - c for r, c in zip(batch, cached)]
            for request, c in zip(batch, cached):
                if request.first_token_time is None:    # first prefill: a hit is sharing with other requests
                    request.num_cached_tokens = c
                    self._prefill["prompt"] += request.num_tokens
                    self._prefill["hit"] += c
                else:                                   # back from preemption: often its own blocks
                    self._prefill["resumed_hit"] += c
            self._prefill["computed"] += sum(query_lens)
        else:
            query_lens = [1] * len(batch)
        if isinstance(self.store, PagedKVStore):  # the scheduler has already grown the block tables
            tables = [self.store.table(i) for i in ids]
            meta = StepMetadata.build(ids, [t.num_tokens for t in tables], query_lens, self.model.device, tables)
        else:
            meta = self.store.plan(ids, query_lens)
        tokens = ([t for r, q in zip(batch, query_lens) for t in r.token_ids[r.num_tokens - q:]] if prefill
                  else [r.output_token_ids[-1] for r in batch])
        logits = self.model(torch.tensor(tokens, device=self.model.device), meta, self.store)
        if self.enable_prefix_caching:   # their K/V exist now: blocks that just filled become findable
            block_size = self.store.block_size
            for request in batch:
                if prefill or request.num_tokens % block_size == 0:
                    self.store.manager.mark_computed(request.seq_id, request.token_ids)
        now = time.perf_counter()
        forked: list[Request] = []
        for request, row in zip(batch, logits):
            samples = [request]
            if prefill and len(self._samples[request.request_id]) < request.params.n:
                samples += self._fork(request)
                forked += samples[1:]
            for sample in samples:
                sample.output_token_ids.append(sample_token(row, sample.params, sample.generator))
                if sample.first_token_time is None:
                    sample.first_token_time = now
                self._generated += 1
        return forked

    def _fork(self, parent: Request) -> list[Request]:
        """Samples 1..n-1 of ``parent``'s request, sharing every block of its prefilled prompt."""
        children = [self._sequence(parent.request_id, i, parent.prompt_token_ids, parent.params, parent.arrival_time)
                    for i in range(1, parent.params.n)]
        for child in children:
            child.num_cached_tokens = parent.num_cached_tokens
            self.scheduler.fork(parent, child)
        self._samples[parent.request_id] += children
        return children

    def _stop_reason(self, request: Request) -> str | None:
        token, params = request.output_token_ids[-1], request.params
        if token in params.stop_token_ids or (not params.ignore_eos and token in self.eos_token_ids):
            return "stop"
        if params.stop and self.tokenizer is not None:
            text = self.tokenizer.decode(request.output_token_ids, skip_special_tokens=True)
            hits = [text.find(s) for s in params.stop if s in text]
            if hits:
                request.text = text[:min(hits)]
                return "stop"
        if len(request.output_token_ids) >= params.max_tokens:
            return "length"
        return None

    def _finish(self, request: Request, reason: str, *, release: bool) -> list[RequestOutput]:
        """End one sample; returns its request's output once every sample has ended."""
        if release:
            self.scheduler.finish(request)
            self._release_rows(request)
        samples = self._samples[request.request_id]
        if len(samples) < request.params.n:   # it ended before its prefill forked it: so do the others
            samples += [self._sequence(request.request_id, i, request.prompt_token_ids, request.params,
                                       request.arrival_time) for i in range(len(samples), request.params.n)]
            ending = samples
        else:
            ending = [request]
        for sample in ending:
            sample.finish_reason = reason
            sample.finish_time = time.perf_counter()
            if sample.text is None:
                sample.text = (self.tokenizer.decode(sample.output_token_ids, skip_special_tokens=True)
                               if self.tokenizer is not None else "")
        if any(s.finish_reason is None for s in samples):
            return []
        del self._samples[request.request_id]
        return [self._output(samples)]

    @staticmethod
    def _output(samples: list[Request]) -> RequestOutput:
        first = samples[0]
        completions = tuple(CompletionOutput(s.index, list(s.output_token_ids), s.text or "", s.finish_reason or "",
                                             s.num_preemptions) for s in samples)
        started = [s.first_token_time for s in samples if s.first_token_time is not None]
        return RequestOutput(first.request_id, first.prompt_token_ids, completions[0].token_ids, completions[0].text,
                             completions[0].finish_reason, sum(s.num_preemptions for s in samples),
                             first.arrival_time, min(started) if started else None,
                             max(s.finish_time or 0.0 for s in samples), completions, first.num_cached_tokens)

    def _release_rows(self, request: Request) -> None:
        """The contiguous store keeps its own rows; the paged store shares the scheduler's blocks."""
        if isinstance(self.store, ContiguousKVStore):
            self.store.finish(request.seq_id)

    # --- state ---------------------------------------------------------------------------
    @property
    def kv_usage(self) -> float:
        """Share of the KV budget held by requests: blocks in use, or slots reserved."""
        if isinstance(self.memory, PagedMemory):
            return self.memory.manager.pool.usage
        return self.memory.arena.reserved / self.memory.arena.capacity

    def stats(self) -> EngineStats:
        elapsed = time.perf_counter() - self._start if self._start is not None else 0.0
        if isinstance(self.memory, PagedMemory):
            manager = self.memory.manager
            tokens, held = manager.num_stored_tokens, manager.pool.num_used * manager.block_size
        else:
            tokens, held = sum(self.memory.lengths.values()), self.memory.arena.reserved
        counts = self._prefill
        return EngineStats(len(self.history), self.kv_usage, len(self.scheduler.running), len(self.scheduler.waiting),
                           self.scheduler.num_preemptions, self._generated, elapsed, tokens, held,
                           counts["computed"], counts["prompt"], counts["hit"], counts["resumed_hit"])

    def _record(self) -> None:
        self.history.append(self.stats())

    # --- convenience ---------------------------------------------------------------------
    def generate(self, prompts: Sequence[str | Sequence[int]],
                 params: SamplingParams | Sequence[SamplingParams] | None = None,
                 *, use_tqdm: bool = True) -> list[RequestOutput]:
        """Add every prompt, step until all finish, and return their outputs in prompt order."""
        from tqdm.auto import tqdm

        per_prompt = list(params) if isinstance(params, Sequence) else [params] * len(prompts)
        if len(per_prompt) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(per_prompt)} sampling parameters")
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, per_prompt)]
        outputs: dict[int, RequestOutput] = {}
        with tqdm(total=len(ids), desc=f"{self.policy} engine", disable=not use_tqdm, unit="req") as bar:
            while self.has_unfinished:
                for out in self.step():
                    outputs[out.request_id] = out
                    bar.update(1)
                s = self.history[-1]
                bar.set_postfix(kv=f"{s.kv_usage:.0%}", running=s.num_running, waiting=s.num_waiting,
                                preempted=s.num_preemptions, refresh=False)
        return [outputs[i] for i in ids]


__all__ = ["LLMEngine", "Request", "RequestOutput", "CompletionOutput", "EngineStats", "SamplingParams", "ScheduledStep", "POLICIES"]
