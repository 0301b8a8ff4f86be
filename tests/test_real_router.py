"""Two of the book's replicas behind SGLang's real router, on loopback: every request answered once, each policy
doing what the simulator's rule of the same name predicts request by request, and every process gone at the end.

Skips, with the reason, where the router cannot run (it is a binary wheel); this machine and CI run it.
"""

from __future__ import annotations

import os
import socket

import pytest

from pagedkv_edu.bench import real_router as rr
from pagedkv_edu.model.loading import llama3_tokenizer

PROBLEM = rr.router_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _listening(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) == 0


@pytest.fixture(scope="module")
def runs() -> dict:
    texts = rr.workload_texts("tenants", 24)
    with rr.Processes() as procs:
        replicas = rr.start_replicas(procs, 2)
        real = rr.run_real(texts, replicas=replicas, time_limit_s=240)
        busy = rr.run_real(texts[:12], ("cache_aware",), replicas=replicas, concurrency=4, time_limit_s=120)
        running = procs.pids
        served = sum(rr.get_json(f"{r.url}/server_info")["served"] for r in replicas)
    started = list(procs.ever) + [run.router for run in real + busy]
    return {"texts": texts, "real": real, "busy": busy[0], "started": started, "running": running, "served": served,
            "urls": [s.url for s in started]}


def test_every_request_is_answered_once_under_each_policy(runs: dict) -> None:
    for run in runs["real"]:
        assert len(run.replicas) == len(runs["texts"]) == 24
        assert sorted(run.order) == ["replica-0", "replica-1"]
        assert all(0 <= c < p for c, p in zip(run.cached_tokens, run.prompt_tokens))
        assert sum(run.cache_blocks.values()) > 0


def test_no_request_was_served_twice(runs: dict) -> None:
    # the replicas count what they served: no retry, no duplicate (the router runs with --disable-retries)
    assert runs["served"] == 2 * 24 + 12


def test_each_policy_routes_as_the_simulators_rule_of_the_same_name(runs: dict) -> None:
    tokenizer = llama3_tokenizer()
    prompts = [tokenizer(t)["input_ids"] for t in runs["texts"]]
    for run in runs["real"]:
        assert [len(p) for p in prompts] == run.prompt_tokens    # the replicas tokenised what we tokenise
        sim = rr.simulated(prompts, rr.ROUTER_POLICIES[run.policy])
        # simulated replica r is the router's r-th listed worker: the order its ties break in
        assert [run.order[o.replica] for o in sim.outcomes] == run.replicas, run.policy
        assert [o.hit_tokens for o in sim.outcomes] == run.cached_tokens, run.policy


def test_round_robin_alternates_and_cache_aware_sends_idle_weak_matches_to_one_replica(runs: dict) -> None:
    rr_run, ca_run = runs["real"]
    assert rr_run.policy == "round_robin" and ca_run.policy == "cache_aware"
    assert rr_run.replicas == [rr_run.order[i % 2] for i in range(24)]
    assert set(ca_run.replicas) == {ca_run.order[0]}          # every tie to the first listed worker
    assert ca_run.hit_rate > rr_run.hit_rate
    # the header comment's rule (smallest tree) would have spread them
    tokenizer = llama3_tokenizer()
    smallest = rr.simulated([tokenizer(t)["input_ids"] for t in runs["texts"]], "hybrid-smallest-tree")
    assert len({o.replica for o in smallest.outcomes}) == 2


def test_the_router_works_offline_from_the_replicas_local_tokenizer(runs: dict) -> None:
    for run in runs["real"] + [runs["busy"]]:
        log = run.router.tail(100_000).lower()
        assert "huggingface" not in log and "download" not in log, log[-600:]


def test_with_requests_in_flight_the_load_spreads_cache_aware(runs: dict) -> None:
    busy = runs["busy"]
    assert len(busy.replicas) == 12 and len(set(busy.replicas)) == 2


def test_every_process_started_is_stopped(runs: dict) -> None:
    assert len(runs["running"]) == 2         # the replicas; each router was stopped after its policy
    assert not any(_alive(s.process.pid) for s in runs["started"])
    assert all(s.process.returncode is not None for s in runs["started"])
    assert not any(_listening(u) for u in runs["urls"])


def test_only_loopback_is_spoken_to() -> None:
    with rr.Processes() as procs, pytest.raises(ValueError, match="127.0.0.1 only"):
        procs.router("round_robin", ["http://10.0.0.1:8000"], "/tmp")
    with pytest.raises(ValueError, match="unknown router policy 'random'"):
        rr.run_real(["x"], ("random",))
    with pytest.raises(ValueError, match="send 1..400 requests, got 0"):
        rr.run_real([])
