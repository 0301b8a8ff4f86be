"""Chapter 11 on a real router: the book's engines as HTTP replicas behind SGLang's router, on loopback.

:class:`Processes` starts every process itself (replicas from ``python -m pagedkv_edu serve``,
the router from ``sglang-router``), each on a free port of 127.0.0.1, waits for it with a time
limit, and stops all of them by process id when the block ends, a cell failing included. The
router is pointed at the replicas' local tokenizer, so it never tries the network.
:func:`run_real` sends one workload through the router under each policy, one request at a time,
and reads back which replica served each request and how many prompt tokens it found cached.
:func:`simulated` routes the same prompts (tokenised as the replicas tokenise them) through the
chapter's simulator, so the two can be put side by side request by request.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..sim.routing import HybridThresholds, RouteResult, route
from ..sim.routing_workloads import WORKLOADS, TimedRequest, as_text

ROUTER = "sglang-router==0.3.2"
ROUTER_POLICIES: dict[str, str] = {"round_robin": "round-robin", "cache_aware": "hybrid"}
"""The router's policies run here, and the simulator's policy that states the same rule."""

LOOPBACK = "127.0.0.1"
GUARD = Path(__file__).with_name("orphan_guard.py")
START_TIMEOUT_S = 90.0
REQUEST_TIMEOUT_S = 60.0
MAX_REQUESTS = 400
"""The most requests :func:`run_real` sends under one policy: every loop here is bounded in count and in time."""

# The router's own command-line defaults, passed explicitly so the run does not depend on them.
THRESHOLDS = HybridThresholds(cache_threshold=0.3, abs_threshold=64, rel_threshold=1.5)


def router_problem() -> str | None:
    """Why SGLang's router cannot run on this machine, or None when it can."""
    if importlib.util.find_spec("sglang_router") is None:
        return f"{ROUTER} is not installed (pip install {ROUTER}, or make install)"
    try:
        probe = subprocess.run([sys.executable, "-m", "sglang_router.launch_router", "--help"],
                               capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sglang-router does not start here: {exc}"
    if probe.returncode != 0:
        return f"sglang-router does not start here: {(probe.stderr or probe.stdout).strip()[-300:]}"
    return None


def free_port() -> int:
    """A port of 127.0.0.1 free now (the OS's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def post_json(url: str, payload: dict[str, Any], timeout: float = REQUEST_TIMEOUT_S) -> Any:
    """POST ``payload``; the decoded answer. An HTTP error raises ``RuntimeError`` with the server's message."""
    request = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{url} answered {exc.code}: {exc.read().decode(errors='replace')[:300]}") from None


def _loopback_only(url: str) -> str:
    if not url.startswith(f"http://{LOOPBACK}:"):
        raise ValueError(f"this experiment talks to {LOOPBACK} only, not {url!r}")
    return url


@dataclass
class Started:
    """A process this module started: its name, its ``Popen`` and where its output goes."""

    name: str
    process: subprocess.Popen
    log: Path
    url: str = ""

    def tail(self, n: int = 1500) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


class Processes:
    """Every process of one experiment; leaving the ``with`` block stops them all (also at interpreter exit).

    Each starts in its own process group, so stopping it stops anything it spawned: SIGTERM,
    then SIGKILL after ``grace_s``. Each also runs under :mod:`.orphan_guard`, which stops it if this
    process dies without stopping it (a kernel killed or restarted).
    """

    def __init__(self, log_dir: Path | None = None, grace_s: float = 5.0) -> None:
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="pagedkv-router-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.grace_s = grace_s
        self.started: list[Started] = []        # running now
        self.ever: list[Started] = []           # every process started, stopped or not
        atexit.register(self.stop_all)

    def __enter__(self) -> "Processes":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()
        atexit.unregister(self.stop_all)     # nothing left to stop: do not keep this object alive until exit

    @property
    def pids(self) -> list[int]:
        return [s.process.pid for s in self.started]

    def start(self, name: str, argv: Sequence[str]) -> Started:
        """``argv`` in a session of its own, under :mod:`.orphan_guard`: if this process dies, so does it."""
        log = self.log_dir / f"{name}.log"
        guarded = [sys.executable, str(GUARD), str(os.getpid()), "--", *argv]
        with open(log, "wb") as out:
            process = subprocess.Popen(guarded, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        started = Started(name, process, log)
        self.started.append(started)
        self.ever.append(started)
        return started

    def wait_for(self, started: Started, ready: Any, timeout_s: float = START_TIMEOUT_S) -> Any:
        """Poll ``ready()`` until it returns something truthy; fail with the process's log if it exits or times out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if started.process.poll() is not None:
                raise RuntimeError(f"{started.name} exited with {started.process.returncode}:\n{started.tail()}")
            try:
                value = ready()
            except (OSError, ValueError, RuntimeError):
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"{started.name} was not ready within {timeout_s:g} s:\n{started.tail()}")

    def stop(self, *stopping: Started) -> None:
        """SIGTERM to each one's process group, all at once; SIGKILL to any still running after ``grace_s``."""
        for started in stopping:
            if started.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(started.process.pid, signal.SIGTERM)
        for started in stopping:
            try:
                started.process.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(started.process.pid, signal.SIGKILL)
                started.process.wait(timeout=self.grace_s)
            if started in self.started:
                self.started.remove(started)

    def stop_all(self) -> None:
        self.stop(*reversed(self.started))

    # --- the two kinds of process ------------------------------------------------------------------
    def replica(self, name: str, model: str = "tiny-random", kv_budget_tokens: int = 65536) -> Started:
        """Start ``python -m pagedkv_edu serve`` on a free port; :meth:`wait_for_replica` waits for it."""
        return self.start(name, [sys.executable, "-m", "pagedkv_edu", "serve", "--model", model, "--port", "0",
                                 "--name", name, "--kv-budget-tokens", str(kv_budget_tokens)])

    def wait_for_replica(self, started: Started, timeout_s: float = START_TIMEOUT_S) -> Started:
        """Wait for the replica's ``serving ... on URL`` line, then for its ``/health``."""
        def url() -> str | None:
            for line in started.tail(10_000).splitlines():
                if line.startswith("serving ") and " on http://" in line:
                    return line.rsplit(" on ", 1)[1].strip()
            return None
        started.url = _loopback_only(self.wait_for(started, url, timeout_s))
        self.wait_for(started, lambda: get_json(f"{started.url}/health", 2.0), timeout_s)
        return started

    def router(self, policy: str, worker_urls: Sequence[str], tokenizer_path: str,
               thresholds: HybridThresholds = THRESHOLDS, timeout_s: float = START_TIMEOUT_S) -> Started:
        """SGLang's router on free ports of 127.0.0.1 (its metrics too), in front of ``worker_urls``; returns once
        it lists every worker healthy."""
        if policy not in ROUTER_POLICIES:
            raise ValueError(f"unknown router policy {policy!r}; this experiment runs {', '.join(ROUTER_POLICIES)}")
        port = free_port()
        argv = [sys.executable, "-m", "sglang_router.launch_router", "--host", LOOPBACK, "--port", str(port),
                "--worker-urls", *[_loopback_only(u) for u in worker_urls], "--policy", policy,
                "--cache-threshold", str(thresholds.cache_threshold),
                "--balance-abs-threshold", str(thresholds.abs_threshold),
                "--balance-rel-threshold", str(thresholds.rel_threshold),
                "--tokenizer-path", tokenizer_path, "--prometheus-host", LOOPBACK,
                "--prometheus-port", str(free_port()), "--log-level", "warn", "--disable-retries"]
        started = self.start(f"router-{policy}", argv)
        started.url = f"http://{LOOPBACK}:{port}"

        def all_healthy() -> bool:
            listed = get_json(f"{started.url}/workers", 2.0).get("workers", [])
            return len(listed) == len(worker_urls) and all(w.get("is_healthy") for w in listed)
        self.wait_for(started, all_healthy, timeout_s)
        return started


def worker_order(router_url: str) -> list[str]:
    """The workers as the router lists them: the order its ``min_by_key`` breaks ties in (the first of equals)."""
    return [w["url"] for w in get_json(f"{router_url}/workers")["workers"]]


# --- the experiment ------------------------------------------------------------------------------------
@dataclass
class RealRun:
    """One policy's run through the real router: who served each request and what it found cached."""

    policy: str
    order: list[str]                      # the router's worker list, replica names in that order
    replicas: list[str]                   # the replica that served each request, in sending order
    cached_tokens: list[int]
    prompt_tokens: list[int]
    cache_blocks: dict[str, int] = field(default_factory=dict)   # each replica's cached blocks at the end
    seconds: float = 0.0
    router: Started | None = field(default=None, repr=False)    # the router process (stopped when the run ends)

    @property
    def hit_rate(self) -> float:
        return sum(self.cached_tokens) / sum(self.prompt_tokens)

    def requests_per_replica(self, names: Sequence[str]) -> list[int]:
        return [self.replicas.count(n) for n in names]


def workload_texts(workload: str = "tenants", num_requests: int = 40, stride: int = 4, seed: int = 0) -> list[str]:
    """One of chapter 11's workloads as text, ``1/stride`` of its length (:func:`~pagedkv_edu.sim.routing_workloads.as_text`)."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose one of {', '.join(WORKLOADS)}")
    return [as_text(r.prompt, stride) for r in WORKLOADS[workload](num_requests, 600.0, seed)]


def start_replicas(procs: Processes, num_replicas: int = 2, model: str = "tiny-random") -> list[Started]:
    """``num_replicas`` replicas of ``model``, named ``replica-0``, ``replica-1``, ..., started side by side."""
    from ..cli_args import whole_number

    whole_number(1, 16)(str(num_replicas))
    starting = [procs.replica(f"replica-{i}", model) for i in range(num_replicas)]    # they load side by side
    return [procs.wait_for_replica(s) for s in starting]


def run_real(texts: Sequence[str], policies: Sequence[str] = tuple(ROUTER_POLICIES), *,
             replicas: Sequence[Started] | None = None, num_replicas: int = 2, model: str = "tiny-random",
             max_new_tokens: int = 4, concurrency: int = 1, time_limit_s: float = 120.0) -> list[RealRun]:
    """Each policy in turn: fresh caches, the router in front of the same replicas, ``texts`` sent in order.

    With ``concurrency=1`` (one request at a time) every decision sees every replica idle, so
    what a policy does with ties and weak matches shows plainly, and the run is deterministic;
    with more, up to that many are in flight at once. ``replicas``: running ones
    (:func:`start_replicas`, stopped by their caller); else ``num_replicas`` of ``model`` are
    started and stopped here. Bounded: at most :data:`MAX_REQUESTS` requests a policy and
    ``time_limit_s`` for the whole run; each router is stopped once its policy is done, even on failure.
    """
    if not 1 <= len(texts) <= MAX_REQUESTS:
        raise ValueError(f"send 1..{MAX_REQUESTS} requests, got {len(texts)}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 64:
        raise ValueError(f"concurrency must be a whole number in 1..64, got {concurrency!r}")
    unknown = [p for p in policies if p not in ROUTER_POLICIES]
    if unknown:
        raise ValueError(f"unknown router policy {unknown[0]!r}; this experiment runs {', '.join(ROUTER_POLICIES)}")
    problem = router_problem()
    if problem:
        raise RuntimeError(problem)
    deadline = time.monotonic() + time_limit_s
    with Processes() as own:
        replicas = list(replicas) if replicas is not None else start_replicas(own, num_replicas, model)
        name_of = {r.url: r.name for r in replicas}
        tokenizer_path = get_json(f"{replicas[0].url}/model_info")["tokenizer_path"]
        runs = []
        for policy in policies:
            start = time.monotonic()
            for r in replicas:
                post_json(f"{r.url}/flush_cache", {})
            router = own.router(policy, [r.url for r in replicas], tokenizer_path)
            run = RealRun(policy, [name_of[u] for u in worker_order(router.url)], [], [], [], router=router)
            for meta in _send(router.url, texts, max_new_tokens, concurrency, deadline):
                run.replicas.append(meta["replica"])
                run.cached_tokens.append(meta["cached_tokens"])
                run.prompt_tokens.append(meta["prompt_tokens"])
            run.cache_blocks = {r.name: get_json(f"{r.url}/cache")["cached_blocks"] for r in replicas}
            own.stop(router)
            run.seconds = time.monotonic() - start
            runs.append(run)
        return runs


def _send(router_url: str, texts: Sequence[str], max_new_tokens: int, concurrency: int,
          deadline: float) -> list[dict[str, Any]]:
    """Every text through the router (``ignore_eos``: each answer exactly ``max_new_tokens`` long); the answers'
    ``meta_info`` in sending order. Nothing outlives ``deadline``."""
    def one(text: str) -> dict[str, Any]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the run passed its time limit")
        payload = {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True}}
        return post_json(f"{router_url}/generate", payload, timeout=min(left, REQUEST_TIMEOUT_S))["meta_info"]
    if concurrency == 1:
        return [one(t) for t in texts]
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, texts, timeout=max(0.0, deadline - time.monotonic())))


def simulated(prompts: Sequence[Sequence[int]], policy: str, num_replicas: int = 2, *, max_new_tokens: int = 4,
              gap_ms: float = 10_000.0) -> RouteResult:
    """The simulator on the same prompts (token ids, as the replicas tokenised them), one every ``gap_ms``:
    far enough apart that every replica is idle when the next arrives, as in :func:`run_real`."""
    requests = [TimedRequest(i, i * gap_ms, tuple(p), tuple([0] * max_new_tokens), "")
                for i, p in enumerate(prompts)]
    return route(requests, policy, num_replicas, num_blocks=4096, thresholds=THRESHOLDS)


@dataclass(frozen=True)
class Comparison:
    """One real run beside one simulated rule on the same prompts: per replica (in the router's order) and per request."""

    policy: str                 # the router's
    rule: str                   # the simulator's
    real_per_replica: list[int]
    sim_per_replica: list[int]
    real_hit_rate: float
    sim_hit_rate: float
    same_replica: int           # requests the two sent to the same replica
    same_hits: int              # requests that found the same number of cached tokens
    requests: int


def compare(run: RealRun, prompts: Sequence[Sequence[int]], rule: str | None = None) -> Comparison:
    """``run`` beside the simulator's ``rule`` (default: the one stating the router's policy, :data:`ROUTER_POLICIES`).

    The simulator's replica ``r`` is the router's ``r``-th listed worker: where both break ties.
    """
    rule = rule or ROUTER_POLICIES[run.policy]
    if len(prompts) != len(run.replicas):
        raise ValueError(f"{len(prompts)} prompts for a run of {len(run.replicas)} requests")
    sim = simulated(prompts, rule, len(run.order))
    sim_replicas = [run.order[o.replica] for o in sim.outcomes]
    hits = [o.hit_tokens for o in sim.outcomes]
    return Comparison(run.policy, rule, run.requests_per_replica(run.order),
                      [sim_replicas.count(n) for n in run.order], run.hit_rate, sim.hit_rate,
                      sum(a == b for a, b in zip(sim_replicas, run.replicas)),
                      sum(a == b for a, b in zip(hits, run.cached_tokens)), len(run.replicas))


def comparison_table(rows: Sequence[Comparison], unmatched: Sequence[tuple[str, RealRun]] = ()) -> str:
    """The chapter's table: per policy, requests per replica and hit rate, real against simulated; ``unmatched``
    runs (a label, the run) have no simulated counterpart and show the real side only."""
    lines = [f"{'router policy':26s}{'simulator rule':22s}{'requests per replica*':>24s}{'hit rate':>16s}"
             f"{'same replica':>14s}{'same hits':>11s}",
             f"{'':48s}{'real':>11s}{'simulated':>13s}{'real':>8s}{'sim.':>8s}"]
    for c in rows:
        lines.append(f"{c.policy:26s}{c.rule:22s}{str(c.real_per_replica):>11s}{str(c.sim_per_replica):>13s}"
                     f"{c.real_hit_rate:>8.1%}{c.sim_hit_rate:>8.1%}{f'{c.same_replica}/{c.requests}':>14s}"
                     f"{f'{c.same_hits}/{c.requests}':>11s}")
    lines_after = ["* in the order the router lists its workers (GET /workers)"]
    for label, run in unmatched:
        lines.append(f"{label:26s}{'- (depends on timing)':22s}{str(run.requests_per_replica(run.order)):>11s}"
                     f"{'':13s}{run.hit_rate:>8.1%}")
    return "\n".join(lines + lines_after)


__all__ = ["Comparison", "compare", "comparison_table", "MAX_REQUESTS", "Processes", "Started", "start_replicas", "ROUTER", "ROUTER_POLICIES", "RealRun", "THRESHOLDS", "free_port",
           "router_problem", "run_real", "simulated", "workload_texts", "worker_order"]
