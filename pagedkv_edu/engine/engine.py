"""A serving engine: continuous batching over the paged KV cache (chapter 6; sharing in chapters 7-8).

Each ``step`` is one turn of the serving loop: the scheduler decides (:mod:`pagedkv_edu.core.scheduler`),
the runner runs one forward pass over the mixed batch (:mod:`.model_runner`, or the simulator's
stand-in), the engine samples, appends each token to its record and returns what finished.
Each part is a seam: the ``memory`` (a block manager), the scheduling policy ``schedule``, the prefix cache
(inside the memory), the attention ``backend``. Time it on an idle machine, engines compared
within one process (``python -m pagedkv_edu serve-bench --peers``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..core.request import Request, SamplingParams, Status
from ..core.scheduler import ScheduledStep, Scheduler, SchedulerState
from .config import EngineConfig
from .outputs import EngineStats, RequestOutput, SampleGroup
from .runner import Runner, RunnerOutput
from .sampling import make_generator
from .step import step as engine_step


class LLMEngine:
    """Continuous batching with block-aware admission, chunked prefill and preemption (by recompute or swap).

    ``model`` is a :class:`~pagedkv_edu.model.llama.Llama` (the engine builds its KV cache and
    runner) or a :class:`~pagedkv_edu.engine.runner.Runner` (the simulator's stand-in, or a runner
    over a cache of your own). ``memory`` replaces the block manager the config describes, ``schedule``
    the scheduling policy and ``step`` the loop's step (seams a reader's own parts plug into). Settings
    come as a ``config`` or as keywords (:class:`~pagedkv_edu.engine.config.EngineConfig`'s fields).
    ``trace`` (a :class:`~pagedkv_edu.viz.trace.EngineTrace`) records every step.
    """

    def __init__(self, model: Any, tokenizer: Any = None, *, config: EngineConfig | None = None,
                 memory: Any = None, schedule: Callable[[SchedulerState], Any] | None = None, trace: Any = None,
                 step: Callable[["LLMEngine"], list[RequestOutput]] | None = None, **settings: Any) -> None:
        if config is not None and settings:
            raise ValueError(f"pass a config or settings, not both (got settings {sorted(settings)})")
        config = config or EngineConfig(**settings)
        if isinstance(model, Runner) and config.max_seq_len is None:
            raise ValueError("an engine over a runner needs max_seq_len (there is no model context to take it from)")
        config = config if isinstance(model, Runner) else config.for_context(model.config.max_position_embeddings)
        self.config, self.memory = config, (config.make_memory() if memory is None else memory)
        if isinstance(model, Runner):
            self.model, self.runner, self.vocab_size = None, model, getattr(model, "vocab_size", None) or None
        else:
            from .model_runner import ModelRunner   # the kernels load only for a model: the simulator needs none
            self.model, self.vocab_size = model, model.config.vocab_size
            self.runner = ModelRunner.for_model(model, config, self.memory)
        self.scheduler = Scheduler(self.memory, config.max_num_seqs, config.max_num_batched_tokens,
                                   config.preemption_mode, **({} if schedule is None else {"schedule": schedule}))
        self.step_fn = engine_step if step is None else step
        self.tokenizer = tokenizer
        self.trace = trace                              # opt in: one frame per step, for the replay (chapter 6)
        self.requests: dict[int, Request] = {}          # each request's first sample, by request id
        self.groups: dict[int, SampleGroup] = {}        # the unfinished requests' samples
        self.history: list[EngineStats] = []
        self.last_step: ScheduledStep | None = None     # the step just run, for hooks and traces
        self.last_logits: Any = None                    # its logits, a row per scheduled sequence (model runners)
        self._no_tokens: list[Request] = []             # asked for no tokens: done at the next step, holding nothing
        self._generated = 0
        self._start: float | None = None

    @property
    def block_manager(self) -> Any:
        """The scheduler's memory (contiguous: one ``max_seq_len`` block per request)."""
        return self.memory

    @property
    def kv_cache(self) -> Any:
        return getattr(self.runner, "kv_cache", None)

    @property
    def has_unfinished(self) -> bool:
        return bool(self._no_tokens) or self.scheduler.has_unfinished

    # --- requests in ---------------------------------------------------------------------
    def add_request(self, prompt: str | Sequence[int], params: SamplingParams | None = None,
                    arrival_time: float | None = None) -> int:
        """Queue a prompt (text, or token ids); returns its request id. Bad input raises here, before any change."""
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be SamplingParams, got {params!r}")
        ids = self._encode(prompt)
        if not ids:
            raise ValueError("the prompt is empty: there is no last token to predict from")
        self.config.check_request(ids, params, self.vocab_size)
        request_id = len(self.requests)
        arrival = time.perf_counter() if arrival_time is None else arrival_time
        request = self._sample_record(request_id, 0, ids, params, arrival)
        request.num_seqs = params.n
        if params.max_tokens == 0:   # done before it needs any memory
            self._no_tokens.append(request)
        else:
            self.scheduler.add(request)  # refuses a prompt that can never fit, before anything changes
        self.requests[request_id] = request
        self.groups[request_id] = SampleGroup(request, lambda i: self._sample_record(request_id, i, ids, params,
                                                                                     arrival))
        return request_id

    def _sample_record(self, request_id: int, index: int, prompt: list[int], params: SamplingParams,
                       arrival: float) -> Request:
        seq_id: int | str = request_id if index == 0 else f"r{request_id}.{index}"
        return Request(seq_id, prompt, params, make_generator(params, request_id, self.config.seed, index), arrival,
                       request_id, index)

    def _encode(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("a text prompt needs a tokenizer; pass token ids or give the engine a tokenizer")
            return list(self.tokenizer(prompt)["input_ids"]) if prompt else []
        return [int(t) for t in prompt]

    # --- one iteration -------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One iteration (:func:`pagedkv_edu.engine.step.step`, or the step the engine was given): what finished."""
        return self.step_fn(self)

    def forward_step(self) -> tuple[ScheduledStep, RunnerOutput | None]:
        """Schedule and run one forward pass, without sampling: the step and its output (a row per scheduled sequence).

        :meth:`step` samples from these rows; a caller that picks tokens itself (beam search)
        calls this, then :meth:`append_token`, :meth:`fork_sequence` and :meth:`free_sequence`.
        """
        self._start = time.perf_counter() if self._start is None else self._start
        step = self.last_step = self.scheduler.schedule()
        for request in step.preempted + step.failed:
            self.runner.release(request.seq_id)
        out = None if step.is_empty else self.runner.execute(
            step, [t for s in step.scheduled for t in s.seq.tokens(s.num_computed_tokens, s.seq_len)])
        self.last_logits = None if isinstance(out, list) else out
        return step, out

    def samplers(self, seq: Request) -> list[Request]:
        """Who samples from ``seq``'s row: itself, and its siblings forked now if its prompt just finished."""
        group = self.groups[seq.request_id]
        if group.forked or seq is not group.first:
            return [seq]
        seq.num_seqs = 1
        return [seq] + [self.fork_sequence(seq, i) for i in range(1, group.n)]

    # --- sequences, for callers that drive the loop themselves (beam search, the explorer) ------
    def append_token(self, request: Request, token: int, logprobs: Any = None) -> None:
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
        """A new running sequence continuing ``parent``'s tokens, sharing all its blocks (copy on write later): sample
        ``index`` (default the next) of its request, ``r{request}.{index}`` unless named; the newest, preempted first."""
        if parent.status is not Status.RUNNING:
            raise ValueError(f"sequence {parent.seq_id!r} is {parent.status.value}; only a running one can be forked")
        group = self.groups[parent.request_id]
        index = group.next_index() if index is None else index
        child = parent.fork(f"r{parent.request_id}.{index}" if seq_id is None else seq_id, index,
                            make_generator(parent.params, parent.request_id, self.config.seed, index))
        group.add(child)
        self.scheduler.fork(parent, child)
        return child

    def free_sequence(self, request: Request) -> list[RequestOutput]:
        """Drop a sequence wherever it is, giving its memory back, with no output of its own; its request's output
        if every other sample had finished."""
        self.scheduler.abort(request)
        self.runner.release(request.seq_id)
        group = self.groups.get(request.request_id)
        if group is None:
            return []
        group.drop(request)
        if not group.samples:      # a lost beam was its request's last sequence
            del self.groups[group.request_id]
        return self._output(group) if group.done else []

    def finish_sequence(self, request: Request, reason: str = "stop", *, release: bool = True) -> list[RequestOutput]:
        """End a sequence now, with the tokens it has (``release=False``: it holds no memory); its request's output
        once all its samples ended."""
        if release:
            self.scheduler.finish(request, release=self.config.free_finished)
            self.runner.release(request.seq_id)
        group = self.groups[request.request_id]
        return self._output(group) if group.end(request, reason, self._decode) else []

    def take_ready(self) -> list[RequestOutput]:
        """The outputs of requests that asked for no tokens: done without memory, returned by the next step."""
        ready = [out for r in self._no_tokens for out in self.finish_sequence(r, "length", release=False)]
        self._no_tokens.clear()
        return ready

    def record(self, step: ScheduledStep) -> None:
        """Keep the step's statistics (unless ``keep_history`` is off) and its trace frame (if tracing)."""
        if self.config.keep_history:
            self.history.append(self.stats(step))
        if self.trace is not None:
            self.trace.record(self, step)

    def _output(self, group: SampleGroup) -> list[RequestOutput]:
        self.groups.pop(group.request_id, None)
        return [group.output()]

    def _decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True) if self.tokenizer is not None else ""

    # --- state ---------------------------------------------------------------------------
    def stats(self, step: ScheduledStep | None = None) -> EngineStats:
        """The engine's state now; with ``step``, that step's kind and sizes too."""
        elapsed = time.perf_counter() - self._start if self._start is not None else 0.0
        usage, scheduler = self.memory.usage(), self.scheduler
        sized = {} if step is None or step.is_empty else {
            "step_kind": step.kind, "step_tokens": step.num_tokens,
            "step_kv_tokens": sum(s.seq_len for s in step.scheduled)}
        return EngineStats(len(self.history), usage.usage, len(scheduler.running), len(scheduler.waiting),
                           scheduler.num_preemptions, self._generated, elapsed, usage.stored_tokens, usage.held_slots,
                           dataclasses.replace(scheduler.counts), **sized)

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
        with tqdm(total=len(ids), desc=f"{self.config.policy} engine", disable=not use_tqdm, unit="req") as bar:
            while self.has_unfinished:
                for out in self.step():
                    outputs[out.request_id] = out
                    bar.update(1)
                if self.history:
                    s = self.history[-1]
                    bar.set_postfix(kv=f"{s.kv_usage:.0%}", running=s.num_running, waiting=s.num_waiting,
                                    preempted=s.num_preemptions, refresh=False)
        return [outputs[i] for i in ids]


__all__ = ["LLMEngine"]
