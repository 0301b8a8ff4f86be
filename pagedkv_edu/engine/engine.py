"""A serving engine: continuous batching over the paged KV cache (chapter 6; sharing in chapters 7-8).

Each ``step`` is one turn of the serving loop: the scheduler decides (:mod:`pagedkv_edu.core.scheduler`),
the model runner runs one forward pass over the mixed batch (:mod:`.model_runner`), the engine
samples and returns what finished. ``policy="contiguous"`` is the system before PagedAttention:
the same block manager with one block of ``max_seq_len`` slots per request (one reservation),
so the two policies differ by the memory policy alone. Time it on an idle machine, engines
compared within one process (``python -m pagedkv_edu serve-bench --peers``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from ..core.block_manager import BlockManager
from ..specs import hit_rate, utilisation
from ..checks import check_whole
from ..attention.kv_cache import PagedKVCache
from ..model.llama import Llama
from ..core.scheduler import POLICIES, PREEMPTION_MODES, KVMemory, ScheduledStep, Scheduler, Status
from ..core.swap import SwapSpace
from ..attention.kv_cache import HostKVCache
from .model_runner import ModelRunner, step_kind
from ..core.request import Request
from .runner import Runner, RunnerOutput
from .sampling import SamplingParams, make_generator, sample_rows
from ..viz.trace import EngineTrace


DEFAULT_MAX_SEQ_LEN = 2048
"""The contiguous engine's default ``max_seq_len`` (capped by the model's context).

A contiguous cache must reserve ``max_seq_len`` slots per sequence up front. Llama-3.2-1B's
context is 131,072 tokens: reserving that per sequence would need 4 GiB of K/V for each
request in bf16, and no reservation would fit the default budget. 2,048 is the context of
the book's workload (the paged-KV-cache article's: prompts of 625-1,025 tokens, outputs up to 500); pass
``max_seq_len`` for longer requests. The paged engine reserves nothing, so it defaults to the
model's whole context.
"""

DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
"""Tokens computed per step at most (vLLM's ``max_num_batched_tokens``): longer prompts are chunked."""


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
    token_times: tuple[float, ...] = ()   # when each of the first sample's tokens was sampled

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def inter_token_latency(self) -> float | None:
        """Mean time between the first sample's consecutive tokens (None with fewer than two)."""
        t = self.token_times
        return (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None

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
    step_kind: str = ""           # "prefill" (only prompt chunks), "decode" (one token each), "mixed", or "" (idle)
    step_tokens: int = 0          # tokens this step computed
    step_kv_tokens: int = 0       # context tokens its attention read (every scheduled sequence's length)

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens found in the prefix cache over prompt tokens, first prefills only."""
        return hit_rate(self.prefix_hit_tokens, self.prompt_tokens)

    @property
    def kv_utilisation(self) -> float:
        """Share of the held slots that hold a token (chapter 1's measure)."""
        return utilisation(self.kv_tokens, self.kv_held_slots)

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.elapsed if self.elapsed > 0 else 0.0


class LLMEngine:
    """Continuous batching with block-aware admission, chunked prefill and preemption (by recompute or swap).

    ``kv_budget_tokens`` is the KV memory in token slots: ``// block_size`` blocks (paged), or
    ``// max_seq_len`` reservations (contiguous). ``max_seq_len`` defaults to the model's
    context when paged and to :data:`DEFAULT_MAX_SEQ_LEN` (capped by the context) when
    contiguous, since a contiguous cache reserves it for every sequence. ``watermark`` is the
    share of blocks kept free at admission. ``max_num_seqs`` caps the running sequences, every
    sample of an ``n > 1`` request counted from its admission on; ``max_num_batched_tokens``
    caps the tokens one step computes (longer prompts are prefilled in chunks; None: no cap).
    ``trace`` (an :class:`~pagedkv_edu.viz.trace.EngineTrace`) records every step;
    ``last_step`` is the :class:`~pagedkv_edu.core.scheduler.ScheduledStep` just run.
    ``preemption_mode`` is ``"recompute"`` (free the victim's blocks) or ``"swap"`` (copy them to
    ``swap_space_tokens`` slots of host memory, by default as many as the KV budget; paged only).
    ``keep_logprobs`` keeps, on each sequence's record, the log-probabilities it last sampled from.
    """

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
        trace: EngineTrace | None = None,
        max_num_batched_tokens: int | None = DEFAULT_MAX_NUM_BATCHED_TOKENS,
        preemption_mode: str = "recompute",
        swap_space_tokens: int | None = None,
        keep_logprobs: bool = False,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose one of {POLICIES}")
        if preemption_mode not in PREEMPTION_MODES:
            raise ValueError(f"unknown preemption_mode {preemption_mode!r}; choose one of {PREEMPTION_MODES}")
        if preemption_mode == "swap" and policy != "paged":
            raise ValueError("swapping moves blocks through block tables: preemption_mode='swap' needs policy='paged'")
        if enable_prefix_caching and policy != "paged":
            raise ValueError("prefix caching shares blocks: it needs policy='paged'")
        for name, value in (("kv_budget_tokens", kv_budget_tokens), ("block_size", block_size),
                            ("max_seq_len", max_seq_len), ("swap_space_tokens", swap_space_tokens)):
            if value is not None:
                check_whole(name, value, 1)
        if isinstance(watermark, bool) or not isinstance(watermark, (int, float)) or not 0 <= watermark < 1:
            raise ValueError(f"watermark must be a fraction in [0, 1), got {watermark!r}")
        context = model.config.max_position_embeddings
        if max_seq_len is None:
            max_seq_len = context if policy == "paged" else min(context, DEFAULT_MAX_SEQ_LEN)
        # Paged: blocks of block_size. Contiguous: one block of max_seq_len per request, its reservation.
        size = block_size if policy == "paged" else max_seq_len
        num_blocks = kv_budget_tokens // size
        if num_blocks < 1:
            raise ValueError(f"a budget of {kv_budget_tokens} tokens holds no {policy} block of {size} slots; raise "
                             f"kv_budget_tokens" + ("" if policy == "paged" else " or lower max_seq_len"))
        cfg = model.config
        swap, host_cache = None, None
        if preemption_mode == "swap":
            host_blocks = max(1, (swap_space_tokens or kv_budget_tokens) // size)
            swap = SwapSpace(host_blocks, size)
            host_cache = HostKVCache(cfg.num_layers, host_blocks, size, cfg.num_kv_heads, cfg.head_dim, model.dtype)
        memory = BlockManager(num_blocks, size, max_seq_len, enable_prefix_caching=enable_prefix_caching,
                              watermark_blocks=math.ceil(watermark * num_blocks) if policy == "paged" else 0, swap=swap)
        self.kv_cache = PagedKVCache.for_model(cfg, num_blocks, size, dtype=model.dtype, device=model.device,
                                               backend=backend, check=False)
        self.host_cache = host_cache
        self.enable_prefix_caching = enable_prefix_caching
        self._setup(memory, ModelRunner(model, self.kv_cache, max_seq_len, host_cache), policy=policy,
                    max_seq_len=max_seq_len, vocab_size=cfg.vocab_size, tokenizer=tokenizer,
                    max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                    preemption_mode=preemption_mode, stop_token_ids=stop_token_ids, seed=seed, trace=trace,
                    keep_logprobs=keep_logprobs)
        self.model = model

    @classmethod
    def over(cls, memory: KVMemory, runner: Runner, *, max_seq_len: int, policy: str = "paged",
             vocab_size: int | None = None, tokenizer: object | None = None, max_num_seqs: int | None = None,
             max_num_batched_tokens: int | None = None, preemption_mode: str = "recompute",
             stop_token_ids: Iterable[int] = (), seed: int = 0, free_finished: bool = True,
             keep_history: bool = True) -> "LLMEngine":
        """The same loop around any runner and memory: the simulator's stand-in, or chapter 5's exactly sized pool.

        ``free_finished=False`` keeps a finished sequence's memory (its table stays readable);
        ``keep_history=False`` skips the per-step :class:`EngineStats` (the simulator keeps its own).
        """
        engine = cls.__new__(cls)
        engine.model = engine.kv_cache = engine.host_cache = None    # the runner holds whatever computes
        engine.enable_prefix_caching = getattr(memory, "prefix_cache", None) is not None
        engine._setup(memory, runner, policy=policy, max_seq_len=max_seq_len, vocab_size=vocab_size,
                      tokenizer=tokenizer, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                      preemption_mode=preemption_mode, stop_token_ids=stop_token_ids, seed=seed,
                      free_finished=free_finished, keep_history=keep_history)
        return engine

    def _setup(self, memory: KVMemory, runner: Runner, *, policy: str, max_seq_len: int, vocab_size: int | None,
               tokenizer: object | None, max_num_seqs: int | None, max_num_batched_tokens: int | None,
               preemption_mode: str, stop_token_ids: Iterable[int], seed: int, trace: EngineTrace | None = None,
               keep_logprobs: bool = False, free_finished: bool = True, keep_history: bool = True) -> None:
        self.memory = memory
        self.runner = runner
        self.policy = policy
        self.max_seq_len = max_seq_len
        self.vocab_size = vocab_size
        self.tokenizer = tokenizer
        self.eos_token_ids = tuple(int(t) for t in stop_token_ids)
        self.seed = seed
        self.preemption_mode = preemption_mode
        self.keep_logprobs = keep_logprobs
        self.free_finished = free_finished
        self.keep_history = keep_history
        self.scheduler = Scheduler(memory, max_num_seqs, max_num_batched_tokens, preemption_mode)
        self.trace = trace   # opt in: one frame per step, for the replay (chapter 6)
        self.last_step: ScheduledStep | None = None      # the step just run, for hooks and traces
        self.last_logits: torch.Tensor | None = None     # its logits, a row per scheduled sequence (model runners)
        self.requests: dict[int, Request] = {}           # each request's first sample
        self._samples: dict[int, list[Request]] = {}     # unfinished requests' samples, index order (a group, not state)
        self._no_tokens: list[Request] = []              # asked for no tokens: done at the next step, holding nothing
        self.history: list[EngineStats] = []
        self._next_id = 0
        self._generated = 0
        self._start: float | None = None

    @property
    def block_manager(self) -> BlockManager:
        """The scheduler's memory (contiguous: one ``max_seq_len`` block per request)."""
        return self.memory

    # --- requests in ---------------------------------------------------------------------
    def add_request(self, prompt: str | Sequence[int], params: SamplingParams | None = None,
                    arrival_time: float | None = None) -> int:
        """Queue a prompt (text, or token ids); returns its request id. Bad input raises here."""
        params = params or SamplingParams()
        ids = self._encode(prompt)
        if not ids:
            raise ValueError("the prompt is empty: there is no last token to predict from")
        vocab = self.vocab_size
        bad = [] if vocab is None else [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt has token ids outside the vocabulary 0..{vocab - 1}: {bad[:5]}")
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be SamplingParams, got {params!r}")
        if len(ids) + params.max_tokens > self.max_seq_len:
            raise ValueError(f"prompt of {len(ids)} tokens + max_tokens={params.max_tokens} exceeds "
                             f"max_seq_len={self.max_seq_len}")
        if params.n > 1 and self.policy != "paged":
            raise ValueError(f"n={params.n} samples share the prompt's blocks: parallel sampling needs policy='paged'")
        if self.scheduler.max_num_seqs is not None and params.n > self.scheduler.max_num_seqs:
            raise ValueError(f"n={params.n} samples can never run under max_num_seqs={self.scheduler.max_num_seqs}")
        request_id = self._next_id
        request = self._sequence(request_id, 0, ids, params,
                                 time.perf_counter() if arrival_time is None else arrival_time)
        if params.max_tokens == 0:   # done before it needs any memory
            self._no_tokens.append(request)
        else:
            self.scheduler.add(request)  # refuses a prompt that can never fit, before anything changes
        self._next_id += 1
        self.requests[request_id] = request
        self._samples[request_id] = [request]
        return request_id

    def _sequence(self, request_id: int, index: int, prompt: list[int], params: SamplingParams,
                  arrival_time: float) -> Request:
        seq_id: int | str = request_id if index == 0 else f"r{request_id}.{index}"
        return Request(seq_id, prompt, params, make_generator(params, request_id, self.seed, index), arrival_time,
                       request_id, index)

    def _encode(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("a text prompt needs a tokenizer; pass token ids or give the engine a tokenizer")
            return list(self.tokenizer(prompt)["input_ids"]) if prompt else []
        return [int(t) for t in prompt]

    @property
    def has_unfinished(self) -> bool:
        return bool(self._no_tokens) or self.scheduler.has_unfinished

    # --- one iteration -------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One iteration: schedule, run the model once on the mixed batch, sample; return what finished."""
        finished: list[RequestOutput] = []
        for request in self._no_tokens:
            finished += self._finish(request, "length", release=False)
        self._no_tokens.clear()
        step, out = self.forward_step()
        for request in step.failed:
            finished += self._finish(request, "error: needs more KV memory than the whole budget", release=False)
        sampled = self._sample(step, out) if out is not None else []
        for request in sampled:
            reason = self._stop_reason(request)
            if reason is not None:
                finished += self._finish(request, reason, release=True)
        self._record(step)
        if self.trace is not None:
            self.trace.record(self, step, step.copies)
        return finished

    def forward_step(self) -> tuple[ScheduledStep, RunnerOutput | None]:
        """Schedule and run one forward pass, without sampling: the step and its logits (one row per scheduled sequence).

        :meth:`step` samples from these rows; a caller that picks tokens itself (beam search)
        calls this, then :meth:`append_token`, :meth:`fork_sequence` and :meth:`free_sequence`.
        """
        if self._start is None:
            self._start = time.perf_counter()
        step = self.scheduler.schedule()
        self.last_step = step
        for request in step.preempted:
            request.num_preemptions += 1
            self.runner.release(request.seq_id)
        for request in step.failed:
            self.runner.release(request.seq_id)
        for request in step.admitted:
            if request.first_token_time is None and request.num_preemptions == 0:
                request.num_cached_tokens = next(s.num_computed_tokens for s in step.scheduled if s.seq is request)
        if step.is_empty:
            self.last_logits = None
            return step, None
        inputs = [t for s in step.scheduled for t in s.seq.tokens(s.num_computed_tokens, s.seq_len)]
        out = self.runner.execute(step, inputs)
        self.last_logits = out if isinstance(out, torch.Tensor) else None
        return step, out

    # --- sequences, for callers that drive the loop themselves (beam search) ------------------
    def append_token(self, request: Request, token: int, logprobs: torch.Tensor | None = None) -> None:
        """Give a sequence its next token (what :meth:`step` does after sampling)."""
        now = time.perf_counter()
        request.output_token_ids.append(int(token))
        request.token_times.append(now)
        if request.first_token_time is None:
            request.first_token_time = now
        if logprobs is not None:
            request.last_logprobs = logprobs
        self._generated += 1

    def fork_sequence(self, parent: Request, index: int | None = None, seq_id: str | None = None) -> Request:
        """A new running sequence continuing ``parent``'s tokens, sharing all its blocks (copy on write later).

        ``index`` numbers it among its request's samples (default: the next free one), and
        names it ``r{request}.{index}`` unless ``seq_id`` is given. It is the newest sequence,
        so it is the first to be preempted.
        """
        if parent.status is not Status.RUNNING:
            raise ValueError(f"sequence {parent.seq_id!r} is {parent.status.value}; only a running one can be forked")
        samples = self._samples.setdefault(parent.request_id, [parent])
        index = len(samples) if index is None else index
        seq_id = f"r{parent.request_id}.{index}" if seq_id is None else seq_id
        if any(s.seq_id == seq_id for s in samples):
            raise ValueError(f"sequence {seq_id!r} exists already")
        child = parent.fork(seq_id, index, make_generator(parent.params, parent.request_id, self.seed, index))
        self.scheduler.fork(parent, child)
        samples.append(child)
        return child

    def free_sequence(self, request: Request) -> list[RequestOutput]:
        """Drop a sequence wherever it is (running, waiting, swapped out), giving its memory back; it has no output.

        Returns its request's output if the sequences left had all finished (else an empty list).
        """
        self.scheduler.abort(request)
        self.runner.release(request.seq_id)
        samples = self._samples.get(request.request_id, [])
        i = next((k for k, s in enumerate(samples) if s is request), None)
        if i is not None:
            del samples[i]
        if samples and all(s.finish_reason is not None for s in samples):
            del self._samples[request.request_id]
            return [self._output(samples)]
        if not samples:
            self._samples.pop(request.request_id, None)
        return []

    def finish_sequence(self, request: Request, reason: str = "stop") -> list[RequestOutput]:
        """End a running sequence now, with the tokens it has; its request's output once all its sequences ended."""
        return self._finish(request, reason, release=True)

    def _sample(self, step: ScheduledStep, out: RunnerOutput) -> list[Request]:
        """A token for every sequence whose step reached its last token (forking ``n > 1`` requests first).

        ``out`` is the runner's: logits to sample from, or (a stand-in) each row's token itself.
        """
        rows: list[tuple[int, Request]] = []
        for row, s in enumerate(step.scheduled):
            if not s.samples:
                continue       # a chunk of a prompt: no token yet
            rows.append((row, s.seq))
            if s.seq.index == 0 and not s.seq.forked:
                rows += [(row, child) for child in self._fork(s.seq)]
        if isinstance(out, torch.Tensor):
            tokens = sample_rows(out, [(row, r.params, r.generator) for row, r in rows])
            logprobs = torch.log_softmax(out.float(), dim=-1).cpu() if self.keep_logprobs else None
        else:
            tokens, logprobs = [out[row] for row, _ in rows], None
        for (row, request), token in zip(rows, tokens):
            self.append_token(request, token, None if logprobs is None else logprobs[row])
        return [r for _, r in rows]

    def _fork(self, parent: Request) -> list[Request]:
        """Samples 1..n-1 of ``parent``'s request, sharing every block of its prefilled prompt."""
        parent.forked = True
        return [self.fork_sequence(parent, i) for i in range(1, parent.params.n)]

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
            self.scheduler.finish(request, release=self.free_finished)
            self.runner.release(request.seq_id)
        samples = self._samples[request.request_id]
        if len(samples) < request.params.n and not self.requests[request.request_id].forked:
            # it ended before its prefill forked it: so do the others
            samples += [self._sequence(request.request_id, i, request.prompt_token_ids, request.params,
                                       request.arrival_time) for i in range(len(samples), request.params.n)]
            ending = samples
        else:
            ending = [request]
        for sample in ending:
            sample.finish_reason, sample.status = reason, Status.FINISHED
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
                             max(s.finish_time or 0.0 for s in samples), completions, first.num_cached_tokens,
                             tuple(first.token_times))

    # --- state ---------------------------------------------------------------------------
    @property
    def kv_usage(self) -> float:
        """Share of the KV budget held by requests: blocks in use, or slots reserved."""
        return self.memory.usage().usage

    def stats(self) -> EngineStats:
        elapsed = time.perf_counter() - self._start if self._start is not None else 0.0
        usage, counts = self.memory.usage(), self.scheduler.counts
        return EngineStats(len(self.history), usage.usage, len(self.scheduler.running), len(self.scheduler.waiting),
                           self.scheduler.num_preemptions, self._generated, elapsed, usage.stored_tokens,
                           usage.held_slots, counts.prefill_tokens, counts.prompt_tokens, counts.prefix_hit_tokens,
                           counts.resumed_hit_tokens)

    def _record(self, step: ScheduledStep) -> None:
        if not self.keep_history:
            return
        stats = self.stats()
        if not step.is_empty:
            stats = dataclasses.replace(stats, step_kind=step_kind(step), step_tokens=step.num_tokens,
                                        step_kv_tokens=sum(s.seq_len for s in step.scheduled))
        self.history.append(stats)

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


__all__ = ["LLMEngine", "Request", "RequestOutput", "CompletionOutput", "EngineStats", "SamplingParams",
           "ScheduledStep", "POLICIES", "PREEMPTION_MODES", "DEFAULT_MAX_SEQ_LEN", "DEFAULT_MAX_NUM_BATCHED_TOKENS"]
