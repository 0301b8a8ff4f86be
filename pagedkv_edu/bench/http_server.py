"""``python -m pagedkv_edu serve``: the book's :class:`~pagedkv_edu.engine.LLMEngine` behind HTTP (chapter 11).

A reader can ``curl`` it, and a real router (SGLang's, chapter 11) can put several of them behind
one address: they answer what its worker registration asks (``GET /health``, ``/server_info``,
``/model_info``) and the two ways it forwards a request (``POST /generate`` in SGLang's shape,
``POST /v1/completions`` in OpenAI's). ``GET /cache`` lists the blocks the replica's prefix cache
holds, and every answer says how many prompt tokens it found cached, so a routing experiment can
read what each replica kept.

One thread owns the engine. HTTP handler threads parse and check a request, then queue it; the
engine thread admits queued requests between steps (continuous batching, chapter 6), steps, and
hands each finished output back. The queue is bounded: past ``max_queue`` requests waiting or
running (a request of ``n`` samples counts ``n``), a new one gets ``503`` at once rather than an
unbounded wait. Bad input gets a ``4xx`` naming the bad value before anything changes: the server's
own checks come first, then the engine's (a prompt over ``max_seq_len``), which refuse before the
engine changes. A refused request leaves no trace. The server binds to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..engine import LLMEngine, RequestOutput, SamplingParams

MAX_BODY_BYTES = 1 << 20
"""The largest request body read (1 MiB): a prompt longer than any model here holds, and no more."""

DEFAULT_MAX_NEW_TOKENS = 16
"""Tokens generated when a request does not say (OpenAI's default for completions; SGLang's is 128)."""

REQUEST_TIMEOUT_S = 600.0
"""How long a handler waits for its request's output before answering 504 (the request still runs)."""

SOCKET_TIMEOUT_S = 60.0
"""A connection that sends nothing for this long (a Content-Length larger than the body) is closed."""

MAX_N = 64
"""The most samples one request may ask for; each counts against ``max_queue`` (a sample is a sequence to run)."""

MAX_SEED = 2**63 - 1
MIN_TEMPERATURE = 1e-4
"""Below this a positive temperature is greedy to float32 precision; the server refuses it rather than guess."""

# SGLang's /generate fields this server accepts. A flag asking for something it does not do
# (streaming, log-probabilities, hidden states) is refused unless it is off; SGLang's router sends
# them all, off, with every request.
GENERATE_FIELDS = {"text", "input_ids", "sampling_params", "rid", "model"}
GENERATE_OFF_FLAGS = {"stream", "return_logprob", "return_hidden_states", "background", "return_bytes",
                      "return_entropy", "return_text_in_logprobs"}
GENERATE_IGNORED = {"log_metrics", "no_logs"}        # logging switches: nothing to log here
SAMPLING_FIELDS = {"max_new_tokens", "temperature", "top_p", "stop", "stop_token_ids", "ignore_eos", "n",
                   "sampling_seed"}
# OpenAI's /v1/completions fields accepted, and the ones SGLang's router adds (off, or no-ops here).
COMPLETION_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "n", "stop", "seed", "ignore_eos",
                     "user", "logprobs"}
COMPLETION_OFF_FLAGS = {"stream", "echo", "return_hidden_states"}
COMPLETION_IGNORED = {"no_stop_trim", "skip_special_tokens"}   # the text is always decoded without special tokens


class BadRequest(ValueError):
    """A request this server refuses; ``status`` is the HTTP code (400 unless said)."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


class QueueFull(RuntimeError):
    """``max_queue`` requests are already waiting or running."""


class Busy(RuntimeError):
    """An operation that needs an idle engine (flushing the cache) came while requests run."""


# --- checking a request: pure functions of the parsed JSON -------------------------------------------
def parse_body(body: bytes) -> dict[str, Any]:
    """The JSON object in ``body``; anything else is a :class:`BadRequest`."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest(f"the body must be a JSON object, got {type(data).__name__}")
    return data


def _refuse_unknown(data: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise BadRequest(f"unknown field{'s' if len(unknown) > 1 else ''} in {where}: {', '.join(unknown)} "
                         f"(accepted: {', '.join(sorted(known))})")


def _refuse_on(data: dict[str, Any], flags: set[str]) -> None:
    on = sorted(f for f in flags if data.get(f) not in (None, False))
    if on:
        raise BadRequest(f"{', '.join(on)} is not supported by this server; leave it out or false")


def _whole(data: dict[str, Any], name: str, default: int | None, minimum: int, maximum: int) -> int | None:
    value = data.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}... ({len(repr(value))} characters)"
        raise BadRequest(f"{name} must be a whole number in {minimum}..{maximum}, got {shown}")
    return value


def _number(data: dict[str, Any], name: str, default: float) -> float:
    value = data.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _temperature(data: dict[str, Any]) -> float:
    t = _number(data, "temperature", 0.0)
    if 0 < t < MIN_TEMPERATURE:
        raise BadRequest(f"temperature={t!r} is below {MIN_TEMPERATURE:g}, where sampling is greedy to float32 "
                         f"precision; send 0 for greedy")
    return t


def _token_ids(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise BadRequest(f"{name} must be a list of token ids (whole numbers), got {str(value)[:80]}")
    return value


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise BadRequest(f"stop must be a string or a list of strings, got {value!r}")
    return tuple(stops)


def _params(max_tokens: int, temperature: float, top_p: float, n: int, seed: int | None, stop: tuple[str, ...],
            stop_token_ids: list[int], ignore_eos: Any) -> SamplingParams:
    if not isinstance(ignore_eos, bool):
        raise BadRequest(f"ignore_eos must be true or false, got {ignore_eos!r}")
    try:
        return SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, n=n, seed=seed,
                              stop=stop, stop_token_ids=tuple(stop_token_ids), ignore_eos=ignore_eos)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


@dataclass(frozen=True)
class Job:
    """A checked request: the prompt (text or token ids), its sampling parameters, and the client's id.

    ``length_field`` is what the client calls the output length (``max_new_tokens`` in SGLang's shape,
    ``max_tokens`` in OpenAI's), so that the engine's refusal names the field the client sent.
    """

    prompt: str | list[int]
    params: SamplingParams
    rid: str | None = None
    length_field: str = "max_tokens"


def generate_job(data: dict[str, Any]) -> Job:
    """A ``/generate`` body (SGLang's ``GenerateReqInput``: ``text`` or ``input_ids``, ``sampling_params``)."""
    _refuse_unknown(data, GENERATE_FIELDS | GENERATE_OFF_FLAGS | GENERATE_IGNORED, "the request")
    _refuse_on(data, GENERATE_OFF_FLAGS)
    if ("text" in data) == ("input_ids" in data):
        raise BadRequest("give exactly one of text and input_ids")
    if "text" in data and not isinstance(data["text"], str):
        raise BadRequest(f"text must be a string (one prompt), got {type(data['text']).__name__}")
    prompt = data["text"] if "text" in data else _token_ids(data["input_ids"], "input_ids")
    sp = data.get("sampling_params")
    sp = {} if sp is None else sp
    if not isinstance(sp, dict):
        raise BadRequest(f"sampling_params must be an object, got {sp!r}")
    _refuse_unknown(sp, SAMPLING_FIELDS, "sampling_params")
    rid = data.get("rid")
    if rid is not None and not isinstance(rid, str):
        raise BadRequest(f"rid must be a string, got {rid!r}")
    params = _params(_whole(sp, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS, 0, 1 << 20), _temperature(sp),
                     _number(sp, "top_p", 1.0), _whole(sp, "n", 1, 1, MAX_N), _whole(sp, "sampling_seed", None, 0, MAX_SEED),
                     _stops(sp.get("stop")), _token_ids(sp.get("stop_token_ids", []), "stop_token_ids"),
                     sp.get("ignore_eos", False))
    return Job(prompt, params, rid, "max_new_tokens")


def completion_job(data: dict[str, Any], model_name: str) -> Job:
    """A ``/v1/completions`` body (OpenAI's: one ``prompt``, text or token ids; ``max_tokens`` default 16)."""
    _refuse_unknown(data, COMPLETION_FIELDS | COMPLETION_OFF_FLAGS | COMPLETION_IGNORED, "the request")
    _refuse_on(data, COMPLETION_OFF_FLAGS)
    if data.get("model") not in (None, model_name):
        raise BadRequest(f"model {data['model']!r} is not served here; this server serves {model_name!r}",
                         HTTPStatus.NOT_FOUND)
    if "prompt" not in data:
        raise BadRequest("prompt is required (a string, or one list of token ids)")
    prompt = data["prompt"]
    if not isinstance(prompt, str):
        prompt = _token_ids(prompt, "prompt (a string, or one list of token ids)")
    if data.get("logprobs") is not None:
        raise BadRequest(f"logprobs={data['logprobs']!r} is not supported by this server; leave it out or null")
    params = _params(_whole(data, "max_tokens", DEFAULT_MAX_NEW_TOKENS, 0, 1 << 20), _temperature(data),
                     _number(data, "top_p", 1.0), _whole(data, "n", 1, 1, MAX_N), _whole(data, "seed", None, 0, MAX_SEED),
                     _stops(data.get("stop")), [], data.get("ignore_eos", False))
    return Job(prompt, params)


# --- the answers ---------------------------------------------------------------------------------------
def _finish_reason(reason: str) -> dict[str, Any]:
    return {"type": "length" if reason == "length" else "stop"}


def generate_answer(out: RequestOutput, job: Job, replica: str, serial: int) -> dict[str, Any] | list[dict[str, Any]]:
    """SGLang's ``/generate`` answer: ``text``, ``output_ids``, ``meta_info`` (one per sample when ``n > 1``)."""
    samples = out.completions or ()
    answers = [{"text": c.text, "output_ids": list(c.token_ids),
                "meta_info": {"id": job.rid or f"{replica}-{serial}", "replica": replica,
                              "prompt_tokens": len(out.prompt_token_ids), "completion_tokens": len(c.token_ids),
                              "cached_tokens": out.num_cached_tokens, "finish_reason": _finish_reason(c.finish_reason),
                              "e2e_latency": round(out.latency, 6)}}
               for c in samples]
    return answers[0] if len(answers) == 1 else answers


def completion_answer(out: RequestOutput, model_name: str, replica: str, serial: int) -> dict[str, Any]:
    """OpenAI's completion object, with ``usage.prompt_tokens_details.cached_tokens`` (its name for prefix hits)."""
    generated = sum(len(c.token_ids) for c in out.completions)
    return {"id": f"cmpl-{replica}-{serial}", "object": "text_completion", "created": int(time.time()),
            "model": model_name, "replica": replica,
            "choices": [{"index": c.index, "text": c.text, "finish_reason": "length" if c.finish_reason == "length"
                         else "stop", "logprobs": None} for c in out.completions],
            "usage": {"prompt_tokens": len(out.prompt_token_ids), "completion_tokens": generated,
                      "total_tokens": len(out.prompt_token_ids) + generated,
                      "prompt_tokens_details": {"cached_tokens": out.num_cached_tokens}}}


def _hex(block_hash: Any) -> str:
    return block_hash.hex() if isinstance(block_hash, bytes) else str(block_hash)


def cache_contents(engine: LLMEngine) -> dict[str, Any]:
    """What the replica's prefix cache holds now: every cached block, its hash and its parent's, in block order."""
    memory = engine.memory
    cache = getattr(memory, "prefix_cache", None)
    blocks = [] if cache is None else [
        {"block_id": b, "hash": _hex(held.block_hash), "parent_hash": _hex(held.parent_hash),
         "num_tokens": len(held.token_ids)}
        for b in range(memory.pool.num_blocks) if (held := cache.holds(b)) is not None]
    # A cached block is also free until a request holds it again (the free queue keeps it longest, chapter 8).
    return {"prefix_caching": cache is not None, "block_size": engine.config.block_size,
            "num_blocks": memory.pool.num_blocks, "held_blocks": memory.pool.num_blocks - memory.pool.num_free,
            "free_blocks": memory.pool.num_free, "cached_blocks": len(blocks),
            "cached_tokens": sum(b["num_tokens"] for b in blocks), "blocks": blocks}


# --- the engine thread ---------------------------------------------------------------------------------
@dataclass
class Ticket:
    """A queued job's claim: its future, its serial number (unique for the server's life) and its weight."""

    future: Future
    serial: int
    samples: int


class EngineWorker:
    """The one thread that touches the engine: admits queued jobs between steps, steps, resolves futures.

    ``make_engine`` builds a fresh engine (at start, and when the cache is flushed). ``call(fn)``
    runs ``fn(engine)`` on this thread between steps, so reading the cache never races a step.
    ``max_queue`` bounds the samples waiting or running (a request of ``n`` samples counts ``n``).
    """

    def __init__(self, make_engine: Callable[[], LLMEngine], max_queue: int = 64) -> None:
        if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
            raise ValueError(f"max_queue must be a whole number >= 1, got {max_queue!r}")
        self.make_engine, self.max_queue = make_engine, max_queue
        self.engine = make_engine()
        self._inbox: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
        self._pending: dict[int, tuple[Ticket, Job]] = {}
        self._admitted = 0                       # samples queued or running: what max_queue bounds
        self._serials = itertools.count()
        self._count_lock = threading.Lock()
        self._stop = threading.Event()
        self.served = self.refused = self.failed = self.prompt_tokens = self.prefix_hit_tokens = 0
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._thread.start()

    @property
    def in_flight(self) -> int:
        """Samples waiting or running."""
        return self._admitted

    def submit(self, job: Job) -> Ticket:
        """Queue ``job``; its ticket's future gets the :class:`RequestOutput` (or the engine's refusal).
        :class:`QueueFull` when its samples would pass ``max_queue``."""
        weight = job.params.n
        if weight > self.max_queue:
            raise BadRequest(f"n={weight} samples can never fit this server's max_queue={self.max_queue}")
        with self._count_lock:
            if self._admitted + weight > self.max_queue:
                raise QueueFull(f"{self._admitted} samples are waiting or running and this request adds {weight} "
                                f"(max_queue={self.max_queue})")
            self._admitted += weight
            ticket = Ticket(Future(), next(self._serials), weight)
        self._inbox.put(("job", job, ticket))
        return ticket

    def call(self, fn: Callable[[LLMEngine], Any], timeout: float = REQUEST_TIMEOUT_S) -> Any:
        """``fn(engine)`` on the engine thread, between steps; its result (or its exception)."""
        future: Future = Future()
        self._inbox.put(("call", fn, future))
        return future.result(timeout=timeout)

    def flush(self) -> None:
        """Start over with an empty cache (SGLang's ``/flush_cache``); only when nothing waits or runs."""
        def rebuild(engine: LLMEngine) -> None:
            if engine.has_unfinished or self._admitted:
                raise Busy(f"{self._admitted} samples are waiting or running; flush the cache when idle")
            self.engine = self.make_engine()
        self.call(rebuild)

    def stop(self) -> None:
        self._stop.set()
        self._inbox.put(("stop", None, None))
        self._thread.join(timeout=10)

    def _release(self, ticket: Ticket) -> None:
        with self._count_lock:
            self._admitted -= ticket.samples

    def _take(self, kind: str, item: Any, claim: Any) -> None:
        if kind == "call":
            try:
                claim.set_result(item(self.engine))
            except Exception as exc:     # the caller's function failed: it hears why
                claim.set_exception(exc)
        elif kind == "job":
            try:
                self._check_stop_ids(item)
                request_id = self.engine.add_request(item.prompt, item.params)
            except ValueError as exc:    # the engine refused before changing anything (e.g. over max_seq_len)
                self.refused += 1
                self._release(claim)
                message = str(exc).replace("max_tokens=", f"{item.length_field}=")
                claim.future.set_exception(BadRequest(f"the engine refused the request: {message}"))
                return
            self._pending[request_id] = (claim, item)

    def _check_stop_ids(self, job: Job) -> None:
        vocab = self.engine.vocab_size
        bad = [t for t in job.params.stop_token_ids if vocab is not None and not 0 <= t < vocab]
        if bad:
            raise ValueError(f"stop_token_ids outside the vocabulary 0..{vocab - 1}: {bad[:5]}")

    def _run(self) -> None:
        while not self._stop.is_set():
            idle = not self.engine.has_unfinished
            try:
                item = self._inbox.get(timeout=0.5) if idle else self._inbox.get_nowait()
                while True:          # everything queued joins before the next step
                    if item[0] != "stop":
                        self._take(*item)
                    item = self._inbox.get_nowait()
            except queue.Empty:
                pass
            if self._stop.is_set() or not self.engine.has_unfinished:
                continue
            try:
                finished = self.engine.step()
            except Exception as exc:  # a bug in a step: fail what was running, start again, keep serving
                self._fail_all(exc)
                continue
            for out in finished:
                ticket, _ = self._pending.pop(out.request_id)
                self.served += 1
                self.prompt_tokens += len(out.prompt_token_ids)
                self.prefix_hit_tokens += out.num_cached_tokens
                self._release(ticket)
                ticket.future.set_result(out)
        self._fail_all(RuntimeError("the server is stopping"), rebuild=False)

    def _fail_all(self, error: Exception, rebuild: bool = True) -> None:
        """Every running request fails with ``error`` (a 500: the engine's bug, not the client's); a fresh engine."""
        for ticket, _ in self._pending.values():
            self.failed += 1
            self._release(ticket)
            ticket.future.set_exception(error)
        self._pending.clear()
        if rebuild:
            self.engine = self.make_engine()


# --- HTTP ------------------------------------------------------------------------------------------------
@dataclass
class ServerInfo:
    """What ``/model_info`` and ``/server_info`` say about this replica."""

    name: str                   # the replica's name, in every answer's meta_info
    model: str
    tokenizer_path: str | None  # a directory with tokenizer.json, for a router's tokenizer (offline)
    settings: dict[str, Any]


class Handler(BaseHTTPRequestHandler):
    """Routes a request to its endpoint; every failure is one JSON ``{"error": {"message", "code"}}``.

    HTTP/1.1 keeps a connection open between requests, so a request refused before its body was
    read closes the connection: the unread body must not be taken for the next request.
    """

    server: "EngineHTTPServer"
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:   # noqa: A002 (BaseHTTPRequestHandler's name)
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, payload: Any, *, close: bool = False, head: bool = False) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(self, status: int, message: str, *, close: bool = False) -> None:
        self._send(status, {"error": {"message": message, "code": int(status)}}, close=close)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (a bad request line, an unsupported method) as JSON too; the connection closes."""
        try:
            self._error(code, message or HTTPStatus(code).phrase, close=True)
        except OSError:
            self.close_connection = True

    def _method_not_allowed(self) -> None:
        self._read_body_if_any()
        self._error(HTTPStatus.METHOD_NOT_ALLOWED, f"{self.command} is not served; use GET or POST",
                    close=self.close_connection)

    do_PUT = do_DELETE = do_PATCH = _method_not_allowed   # noqa: N815

    def do_HEAD(self) -> None:   # noqa: N802 (the base class's name)
        self.do_GET(head=True)

    def do_GET(self, head: bool = False) -> None:   # noqa: N802
        srv, path = self.server, self.path.split("?", 1)[0]
        info, w = srv.info, srv.worker
        try:
            if path == "/health":
                payload: Any = {"status": "ok"}
            elif path == "/model_info":
                payload = {"model_path": info.model, "tokenizer_path": info.tokenizer_path, "is_generation": True}
            elif path == "/server_info":
                # SGLang's shape: model_path is where the model's files are (here its tokenizer's, which is what a
                # router loads from it: a local path keeps it offline), served_model_name the name clients use.
                payload = {"name": info.name, "served_model_name": info.model,
                           "model_path": info.tokenizer_path or info.model, "tokenizer_path": info.tokenizer_path,
                           **info.settings, "max_queue": w.max_queue, "in_flight_samples": w.in_flight,
                           "served": w.served, "refused": w.refused, "failed": w.failed,
                           "prompt_tokens": w.prompt_tokens, "prefix_hit_tokens": w.prefix_hit_tokens}
            elif path == "/v1/models":
                payload = {"object": "list", "data": [{"id": info.model, "object": "model"}]}
            elif path == "/cache":
                payload = w.call(cache_contents, timeout=SOCKET_TIMEOUT_S)
            else:
                self._error(HTTPStatus.NOT_FOUND, f"no endpoint GET {path}")
                return
            self._send(HTTPStatus.OK, payload, head=head)
        except TimeoutError:
            self._error(HTTPStatus.GATEWAY_TIMEOUT, f"the engine did not come round within {SOCKET_TIMEOUT_S:g} s")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        try:
            body = self._read_body()
            if path == "/flush_cache":
                self.server.worker.flush()
                self._send(HTTPStatus.OK, {"flushed": True})
                return
            if path not in ("/generate", "/v1/completions"):
                raise BadRequest(f"no endpoint POST {path}", HTTPStatus.NOT_FOUND)
            data = parse_body(body)
            info = self.server.info
            job = generate_job(data) if path == "/generate" else completion_job(data, info.model)
            ticket = self.server.worker.submit(job)
            out = ticket.future.result(timeout=REQUEST_TIMEOUT_S)
            answer = generate_answer(out, job, info.name, ticket.serial) if path == "/generate" else \
                completion_answer(out, info.model, info.name, ticket.serial)
            self._send(HTTPStatus.OK, answer)
        except (BrokenPipeError, ConnectionResetError):   # the client left: nobody to answer
            self.close_connection = True
        except BadRequest as exc:
            self._error(exc.status, str(exc), close=self.close_connection)
        except QueueFull as exc:
            self._error(HTTPStatus.SERVICE_UNAVAILABLE, str(exc))
        except Busy as exc:
            self._error(HTTPStatus.CONFLICT, str(exc))
        except TimeoutError:
            self._error(HTTPStatus.GATEWAY_TIMEOUT, f"no answer within {REQUEST_TIMEOUT_S:g} s; the request still runs")
        except Exception as exc:     # a bug, not the client's fault: say so, keep serving
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    def _read_body(self) -> bytes:
        """The body, by ``Content-Length``; refused (and the connection closed) without one, or over the limit."""
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise BadRequest("send the body with a Content-Length, not Transfer-Encoding", HTTPStatus.LENGTH_REQUIRED)
        length = self.headers.get("Content-Length")
        if length is None:
            if self.command == "POST" and self.path.split("?", 1)[0] == "/flush_cache":
                return b""
            self.close_connection = True
            raise BadRequest("a POST needs a Content-Length header", HTTPStatus.LENGTH_REQUIRED)
        if not length.isdigit():
            self.close_connection = True
            raise BadRequest(f"Content-Length must be a whole number, got {length!r}")
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            raise BadRequest(f"the body is {int(length):,} bytes; at most {MAX_BODY_BYTES:,} are read",
                             HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
        try:
            body = self.rfile.read(int(length))
        except TimeoutError:
            self.close_connection = True
            raise BadRequest(f"the body did not arrive within {self.timeout:g} s", HTTPStatus.REQUEST_TIMEOUT) from None
        if len(body) < int(length):
            self.close_connection = True
            raise BadRequest(f"the body ended after {len(body)} of its {int(length)} bytes")
        return body

    def _read_body_if_any(self) -> None:
        try:
            self._read_body()
        except BadRequest:
            self.close_connection = True


class EngineHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server holding the engine's worker and what it says about itself."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], worker: EngineWorker, info: ServerInfo,
                 verbose: bool = False) -> None:
        super().__init__(address, Handler)
        self.worker, self.info, self.verbose = worker, info, verbose

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


def tokenizer_dir(tokenizer: Any, name: str) -> str | None:
    """A directory holding ``tokenizer.json`` for ``tokenizer`` (saved once into the book's cache), for a router."""
    if tokenizer is None:
        return None
    from ..model.loading import cache_dir

    source = Path(getattr(tokenizer, "name_or_path", "") or ".")
    if (source / "tokenizer.json").is_file():     # loaded from a directory (the Llama-3.2 tokenizer's package)
        return str(source.resolve())
    directory = cache_dir() / "tokenizers" / name
    if not (directory / "tokenizer.json").exists():
        directory.mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(directory)
    return str(directory)


def make_server(model_name: str, *, host: str = "127.0.0.1", port: int = 0, name: str | None = None,
                max_queue: int = 64, seed: int = 0, verbose: bool = False, **settings: Any) -> EngineHTTPServer:
    """Load ``model_name`` and build a server over a fresh engine (``settings``: :class:`EngineConfig` fields;
    prefix caching on unless ``enable_prefix_caching=False``, as in vLLM v1)."""
    from ..model.loading import load_model

    loaded = load_model(model_name, seed=seed)
    settings.setdefault("stop_token_ids", loaded.stop_token_ids)
    settings.setdefault("enable_prefix_caching", True)

    def make_engine() -> LLMEngine:
        return LLMEngine(loaded.model, loaded.tokenizer, seed=seed, keep_history=False, **settings)

    worker = EngineWorker(make_engine, max_queue)
    config = worker.engine.config
    shown = {k: getattr(config, k) for k in ("kv_budget_tokens", "block_size", "max_seq_len", "max_num_seqs",
                                             "max_num_batched_tokens", "enable_prefix_caching", "backend")}
    try:
        server = EngineHTTPServer((host, port), worker, ServerInfo("", model_name, tokenizer_dir(loaded.tokenizer,
                                                                   model_name), shown), verbose)
    except OSError:
        worker.stop()
        raise
    server.info.name = name or f"{host}:{server.server_address[1]}"
    return server


# --- the command ---------------------------------------------------------------------------------------
def register(subparsers: argparse._SubParsersAction) -> None:
    from ..cli_args import whole_number
    from ..model.loading import DEFAULT_MODEL, MODEL_NAMES

    p = subparsers.add_parser(
        "serve", help="serve a model with the book's engine over HTTP: curl it, or put a router in front (ch. 11)",
        description="The book's LLMEngine behind HTTP on 127.0.0.1: POST /generate (SGLang's shape), "
                    "POST /v1/completions (OpenAI's), GET /health, /model_info, /server_info, /cache; "
                    "POST /flush_cache. Greedy unless a request sets temperature; 16 new tokens unless it says.")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"one of {', '.join(MODEL_NAMES)} (default {DEFAULT_MODEL})")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=whole_number(0, 65535), default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--name", default=None, help="the replica's name in every answer (default host:port)")
    p.add_argument("--kv-budget-tokens", type=whole_number(1, 2**25), default=20480, help="KV slots (default 20480)")
    p.add_argument("--block-size", type=whole_number(1, 4096), default=16)
    p.add_argument("--max-num-seqs", type=whole_number(1, 4096), default=None)
    p.add_argument("--no-prefix-caching", action="store_true", help="turn the prefix cache off (on by default)")
    p.add_argument("--max-queue", type=whole_number(1, 100_000), default=64,
                   help="samples waiting or running at most (a request of n samples counts n); past it, 503 "
                        "(default 64)")
    p.add_argument("--seed", type=whole_number(0, 2**32 - 1), default=0)
    p.add_argument("--verbose", action="store_true", help="log every HTTP request to stderr")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> dict[str, Any]:
    server = make_server(args.model, host=args.host, port=args.port, name=args.name, max_queue=args.max_queue,
                         seed=args.seed, verbose=args.verbose, kv_budget_tokens=args.kv_budget_tokens,
                         block_size=args.block_size, max_num_seqs=args.max_num_seqs,
                         enable_prefix_caching=not args.no_prefix_caching)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    print(f"serving {args.model} as {server.info.name} on {server.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.worker.stop()
    w = server.worker
    print(f"stopped: {w.served} requests served, {w.refused} refused", file=sys.stderr, flush=True)
    return {"served": w.served, "refused": w.refused}


__all__ = ["BadRequest", "EngineHTTPServer", "EngineWorker", "Job", "cache_contents", "completion_job",
           "generate_job", "make_server", "parse_body", "register"]
