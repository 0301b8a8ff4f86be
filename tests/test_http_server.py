"""``python -m pagedkv_edu serve``: every endpoint answers; bad input gets a 4xx and changes nothing.

The server runs in this process on a free loopback port (the tiny random model), so the tests can
look at the engine behind it before and after each request.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from pagedkv_edu import LLMEngine, SamplingParams
from pagedkv_edu.bench import http_server as hs
from pagedkv_edu.cli import build_parser
from pagedkv_edu.engine.runner import StandInRunner


@pytest.fixture(scope="module")
def server() -> Iterator[hs.EngineHTTPServer]:
    srv = hs.make_server("tiny-random", port=0, name="r0", kv_budget_tokens=8192)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    srv.worker.stop()


def call(srv: hs.EngineHTTPServer, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    host, port = srv.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=60)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    conn.request(method, path, body=data, headers=headers or {})
    response = conn.getresponse()
    payload = response.read()
    conn.close()
    return response.status, json.loads(payload) if payload else None


def engine_state(srv: hs.EngineHTTPServer) -> tuple[Any, ...]:
    """Everything a refused request must leave as it was: requests known, blocks free, the cache's contents."""
    def look(engine: LLMEngine) -> tuple[Any, ...]:
        return (len(engine.requests), engine.memory.pool.num_free, engine.has_unfinished,
                json.dumps(hs.cache_contents(engine), sort_keys=True))
    return srv.worker.call(look) + (srv.worker.served, srv.worker.in_flight)


PROMPT = "The block table maps each logical block of a sequence to a physical block in the pool."


def test_the_router_endpoints_answer(server: hs.EngineHTTPServer) -> None:
    assert call(server, "GET", "/health") == (200, {"status": "ok"})
    status, info = call(server, "GET", "/model_info")
    assert status == 200 and info["model_path"] == "tiny-random" and info["is_generation"] is True
    assert (hs.Path(info["tokenizer_path"]) / "tokenizer.json").is_file()     # what a router loads offline
    status, info = call(server, "GET", "/server_info")
    assert status == 200 and info["name"] == "r0" and info["block_size"] == 16 and info["enable_prefix_caching"]
    assert {"served", "refused", "failed", "prefix_hit_tokens", "in_flight_samples"} <= set(info)
    # SGLang's fields: the name clients use, and a local directory a router loads the tokenizer from
    assert info["served_model_name"] == "tiny-random" and (hs.Path(info["model_path"]) / "tokenizer.json").is_file()
    assert call(server, "GET", "/v1/models")[1]["data"][0]["id"] == "tiny-random"
    status, cache = call(server, "GET", "/cache")
    assert status == 200 and cache["num_blocks"] == 512 and cache["block_size"] == 16


def test_generate_answers_as_the_engine_does_and_reports_prefix_hits(server: hs.EngineHTTPServer) -> None:
    assert call(server, "POST", "/flush_cache")[0] == 200
    status, first = call(server, "POST", "/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 5,
                                                                                         "ignore_eos": True}})
    assert status == 200, first
    meta = first["meta_info"]
    assert meta["replica"] == "r0" and meta["completion_tokens"] == 5 and meta["cached_tokens"] == 0
    assert meta["finish_reason"] == {"type": "length"}
    # The same greedy tokens as the engine run directly on the same model.
    direct = LLMEngine(server.worker.engine.model, server.worker.engine.tokenizer, kv_budget_tokens=8192)
    [out] = direct.generate([PROMPT], SamplingParams(max_tokens=5, ignore_eos=True), use_tqdm=False)
    assert first["output_ids"] == out.token_ids and first["text"] == out.text
    # Again: its full prompt blocks are cached now (the last token is always computed).
    status, again = call(server, "POST", "/generate", {"input_ids": out.prompt_token_ids,
                                                       "sampling_params": {"max_new_tokens": 1}})
    prompt_len = len(out.prompt_token_ids)
    assert status == 200 and again["meta_info"]["cached_tokens"] == (prompt_len - 1) // 16 * 16 > 0
    status, cache = call(server, "GET", "/cache")
    assert cache["cached_blocks"] >= prompt_len // 16 and all(b["num_tokens"] == 16 for b in cache["blocks"])


def test_completions_in_openai_shape_with_n_samples(server: hs.EngineHTTPServer) -> None:
    status, body = call(server, "POST", "/v1/completions", {"model": "tiny-random", "prompt": PROMPT, "max_tokens": 3,
                                                            "n": 2, "temperature": 0.8, "seed": 3,
                                                            "ignore_eos": True})
    assert status == 200 and body["object"] == "text_completion" and [c["index"] for c in body["choices"]] == [0, 1]
    assert body["usage"]["completion_tokens"] == 6
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] % 16 == 0
    status, listed = call(server, "POST", "/generate", {"text": PROMPT, "sampling_params": {"n": 2, "max_new_tokens": 2,
                                                                                          "temperature": 1.0}})
    assert status == 200 and isinstance(listed, list) and len(listed) == 2


# What SGLang's router adds to every /generate it forwards: all accepted while off.
ROUTER_EXTRAS = {"model": None, "return_text_in_logprobs": False, "stream": False, "log_metrics": True,
                 "return_hidden_states": False, "background": False, "no_logs": False, "return_bytes": False,
                 "return_entropy": False}


def test_the_fields_sglangs_router_forwards_are_accepted(server: hs.EngineHTTPServer) -> None:
    status, body = call(server, "POST", "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 1},
                                                      **ROUTER_EXTRAS})
    assert status == 200, body


BAD = [  # (path, raw body, the status, words the message must hold)
    ("/generate", b"{not json", 400, "not valid JSON"),
    ("/generate", b"[1, 2]", 400, "JSON object"),
    ("/generate", json.dumps({"text": "x", "temprature": 0.5}).encode(), 400, "unknown field in the request: temprature"),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"max_tokens": 3}}).encode(), 400, "max_tokens"),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"max_new_tokens": -1}}).encode(), 400, "-1"),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"max_new_tokens": 2.5}}).encode(), 400, "2.5"),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"max_new_tokens": True}}).encode(), 400, "True"),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"max_new_tokens": 600}}).encode(), 400,
     "max_new_tokens=600 exceeds max_seq_len=512"),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"n": 65}}).encode(), 400, "n must be a whole number in 1..64"),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"temperature": 1e-300}}).encode(), 400, "send 0 for greedy"),
    ("/generate", b'{"text": "x", "sampling_params": {"temperature": Infinity}}', 400, "finite"),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"sampling_seed": 10**23}}).encode(), 400, "sampling_seed"),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"stop_token_ids": [-5]}}).encode(), 400,
     "stop_token_ids outside the vocabulary"),
    ("/generate", json.dumps({"input_ids": list(range(1, 520))}).encode(), 400, "max_seq_len=512"),
    ("/generate", json.dumps({"input_ids": [1, 999_999]}).encode(), 400, "outside the vocabulary"),
    ("/generate", json.dumps({"input_ids": [1, "a"]}).encode(), 400, "token ids"),
    ("/generate", json.dumps({"text": ""}).encode(), 400, "empty"),
    ("/generate", json.dumps({"text": "x", "input_ids": [1]}).encode(), 400, "exactly one"),
    ("/generate", json.dumps({"sampling_params": {}}).encode(), 400, "exactly one"),
    ("/generate", json.dumps({"text": ["a", "b"]}).encode(), 400, "one prompt"),
    ("/generate", json.dumps({"text": "x", "stream": True}).encode(), 400, "stream is not supported"),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"temperature": -1}}).encode(), 400, "temperature"),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"top_p": 0}}).encode(), 400, "top_p"),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"n": 0}}).encode(), 400, "n must"),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"stop": 3}}).encode(), 400, "stop"),
    ("/generate", json.dumps({"text": "x", "sampling_params": []}).encode(), 400, "sampling_params"),
    ("/v1/completions", json.dumps({"model": "gpt-4", "prompt": "x"}).encode(), 404, "gpt-4"),
    ("/v1/completions", json.dumps({"prompt": ["a", "b"]}).encode(), 400, "prompt"),
    ("/v1/completions", json.dumps({"prompt": "x", "logprobs": 2}).encode(), 400, "logprobs=2 is not supported"),
    ("/v1/completions", json.dumps({"max_tokens": 2}).encode(), 400, "prompt is required"),
    ("/v1/completions", json.dumps({"prompt": "x", "max_tokens": 600}).encode(), 400, "max_tokens=600 exceeds"),
    ("/v1/completions", json.dumps({"prompt": "x", "max_tokens": -3}).encode(), 400, "max_tokens"),
    ("/v1/completions", json.dumps({"prompt": "x", "echo": True}).encode(), 400, "echo"),
    ("/nowhere", b"{}", 404, "no endpoint"),
]


@pytest.mark.parametrize("path, raw, status, words", BAD, ids=[f"{p}:{r[:30]!r}" for p, r, _, _ in BAD])
def test_bad_requests_get_a_4xx_naming_the_value_and_change_nothing(server: hs.EngineHTTPServer, path: str,
                                                                    raw: bytes, status: int, words: str) -> None:
    before = engine_state(server)
    got, body = call(server, "POST", path, raw=raw, headers={"Content-Type": "application/json"})
    assert got == status, body
    assert words in body["error"]["message"] and body["error"]["code"] == status
    assert engine_state(server) == before


def test_keep_alive_stays_in_step_after_a_refusal(server: hs.EngineHTTPServer) -> None:
    """A refused POST's body is read, never taken for the next request on the same connection."""
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("POST", "/nowhere", body=b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    first = conn.getresponse()
    assert first.status == 404 and b"no endpoint POST /nowhere" in first.read()
    conn.request("GET", "/server_info")      # the same connection: the next answer is this one's, not /health's
    second = conn.getresponse()
    assert second.status == 200 and json.loads(second.read())["name"] == "r0"
    conn.request("POST", "/generate", body=b"{bad json")
    third = conn.getresponse()
    assert third.status == 400 and third.getheader("Connection") != "close"
    third.read()
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200
    conn.close()


def test_a_too_long_body_closes_the_connection_and_other_methods_get_json(server: hs.EngineHTTPServer) -> None:
    status, body = call(server, "POST", "/generate", raw=b"x", headers={"Content-Length": str(hs.MAX_BODY_BYTES + 1)})
    assert status == 413
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("POST", "/generate", body=b"x", headers={"Content-Length": str(hs.MAX_BODY_BYTES + 1)})
    response = conn.getresponse()
    assert response.status == 413 and response.getheader("Connection") == "close"
    conn.close()
    status, body = call(server, "PUT", "/generate", {"text": "x"})
    assert status == 405 and body["error"]["code"] == 405
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("HEAD", "/health")
    response = conn.getresponse()
    assert response.status == 200 and response.read() == b""
    conn.close()


def test_a_client_that_stops_sending_is_cut_off_and_blocks_nobody(server: hs.EngineHTTPServer,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hs.Handler, "timeout", 1.0)
    host, port = server.server_address[:2]
    with socket.create_connection((host, port), timeout=30) as slow:
        slow.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"te")
        assert call(server, "GET", "/health") == (200, {"status": "ok"})     # another client is served meanwhile
        slow.settimeout(10)
        started = time.monotonic()
        answer = slow.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 1 s" in answer
        assert b"Connection: close" in answer and time.monotonic() - started < 8
        assert slow.recv(4096) == b""                                          # and the server hung up


def test_unseeded_samples_of_one_request_differ() -> None:
    """Each of n samples draws its own stream (a seed moved within the 32 bits torch's generator keeps)."""
    from pagedkv_edu.engine.sampling import make_generator

    draws = {float(torch.rand(1, generator=make_generator(SamplingParams(), 7, 0, i))) for i in range(16)}
    assert len(draws) == 16
    seeded = SamplingParams(seed=5)
    assert [float(torch.rand(1, generator=make_generator(seeded, 7, 0, i))) for i in range(3)] == \
        [float(torch.rand(1, generator=torch.Generator().manual_seed(5 + i))) for i in range(3)]


def test_sampled_samples_differ_and_a_tiny_temperature_is_greedy(server: hs.EngineHTTPServer) -> None:
    status, samples = call(server, "POST", "/generate", {"text": PROMPT, "sampling_params": {
        "n": 4, "temperature": 1.0, "max_new_tokens": 6, "ignore_eos": True}})
    assert status == 200 and len({tuple(s["output_ids"]) for s in samples}) > 1
    engine = server.worker.engine
    ids = engine.tokenizer(PROMPT)["input_ids"]
    direct = LLMEngine(engine.model, engine.tokenizer, kv_budget_tokens=8192)
    [greedy, cold] = direct.generate([ids, ids], [SamplingParams(max_tokens=4, ignore_eos=True),
                                                  SamplingParams(max_tokens=4, temperature=1e-30, ignore_eos=True)],
                                     use_tqdm=False)
    assert cold.token_ids == greedy.token_ids           # no NaN from logits / 1e-30: the top token, every time


def test_ids_stay_unique_across_a_flush(server: hs.EngineHTTPServer) -> None:
    ask = {"text": "hello", "sampling_params": {"max_new_tokens": 1}}
    before = call(server, "POST", "/generate", ask)[1]["meta_info"]["id"]
    assert call(server, "POST", "/flush_cache")[0] == 200
    after = call(server, "POST", "/generate", ask)[1]["meta_info"]["id"]
    assert before != after and before.startswith("r0-") and after.startswith("r0-")


def test_samples_count_against_the_queue() -> None:
    worker = hs.EngineWorker(lambda: LLMEngine(StandInRunner(), max_seq_len=64, kv_budget_tokens=1024), max_queue=3)
    try:
        job = hs.Job([1, 2, 3], SamplingParams(max_tokens=40, n=2, temperature=1.0, ignore_eos=True))
        ticket = worker.submit(job)
        with pytest.raises(hs.QueueFull, match="2 samples are waiting or running and this request adds 2"):
            worker.submit(job)
        with pytest.raises(hs.BadRequest, match="n=4 samples can never fit this server's max_queue=3"):
            worker.submit(hs.Job([1], SamplingParams(n=4, temperature=1.0)))
        assert len(ticket.future.result(timeout=60).completions) == 2 and worker.in_flight == 0
    finally:
        worker.stop()


def test_bodies_without_a_length_or_too_long_are_refused(server: hs.EngineHTTPServer) -> None:
    before = engine_state(server)
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.putrequest("POST", "/generate")
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 411 and b"Content-Length" in response.read()
    conn.close()
    status, body = call(server, "POST", "/generate", raw=b"x", headers={"Content-Length": str(hs.MAX_BODY_BYTES + 1)})
    assert status == 413 and "at most" in body["error"]["message"]
    assert call(server, "GET", "/nowhere")[0] == 404
    assert engine_state(server) == before


def test_the_queue_is_bounded_and_flushing_waits_for_idle() -> None:
    """One request running fills a queue of one: the next gets 503 at once, a flush 409, and both leave it running."""
    srv = hs.make_server("tiny-random", port=0, max_queue=1, kv_budget_tokens=8192)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        long = {"text": "x", "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}}
        result: dict[str, Any] = {}
        runner = threading.Thread(target=lambda: result.update(answer=call(srv, "POST", "/generate", long)))
        runner.start()
        deadline = time.monotonic() + 30
        while srv.worker.in_flight == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert srv.worker.in_flight == 1
        status, body = call(srv, "POST", "/generate", {"text": "y"})
        assert status == 503 and "max_queue=1" in body["error"]["message"]
        status, body = call(srv, "POST", "/flush_cache")
        assert status == 409 and "when idle" in body["error"]["message"]
        runner.join(timeout=60)
        status, answer = result["answer"]
        assert status == 200 and answer["meta_info"]["completion_tokens"] == 500
        assert srv.worker.in_flight == 0 and srv.worker.served == 1
        assert call(srv, "POST", "/generate", {"text": "y", "sampling_params": {"max_new_tokens": 1}})[0] == 200
    finally:
        srv.shutdown()
        srv.server_close()
        srv.worker.stop()


def test_the_serve_command_binds_to_loopback_by_default() -> None:
    args = build_parser().parse_args(["serve"])
    assert args.host == "127.0.0.1" and args.port == 8000 and not args.no_prefix_caching and args.max_queue == 64
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--max-queue", "0"])


def test_a_worker_refuses_a_bad_queue_size() -> None:
    with pytest.raises(ValueError, match="max_queue must be a whole number >= 1, got 0"):
        hs.EngineWorker(lambda: None, max_queue=0)   # type: ignore[arg-type, return-value]
