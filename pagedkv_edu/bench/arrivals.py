"""Serving requests that arrive over time: the engine against transformers' paths (chapter 6).

``serve-bench --peers --arrival-rate R`` gives every request a Poisson arrival time (R per
second, seeded) and replays them on the wall clock. The engine and transformers' continuous
batching (the manager behind ``generate_batch``) add each request when it arrives;
transformers' static ``generate`` takes what has arrived whenever it is free (up to 8), as a
left-padded batch that ends with its longest output. Latency counts from each arrival.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from ..engine import LLMEngine, SamplingParams
from ..model.loading import LoadedModel


def arrival_times(n: int, rate_per_s: float, seed: int = 0) -> list[float]:
    """``n`` Poisson arrival times in seconds from 0 (the first request arrives at 0)."""
    if not rate_per_s > 0:
        raise ValueError(f"arrival rate must be positive, got {rate_per_s!r}")
    rng, t, times = random.Random(seed), 0.0, []
    for _ in range(n):
        times.append(t)
        t += rng.expovariate(rate_per_s)
    return times


def _summary(name: str, generated: int, wall: float, latency: list[float], ttft: list[float] | None) -> dict[str, Any]:
    out = {"policy": name, "generated_tokens": generated, "wall_seconds": round(wall, 2),
           "throughput_tokens_per_s": round(generated / wall, 2),
           "latency_mean_s": round(statistics.fmean(latency), 3)}
    if ttft is not None:
        out["ttft_mean_s"] = round(statistics.fmean(ttft), 3)
    return out


def run_engine(model: LoadedModel, setup: Any, arrivals: list[float], **engine_kw: Any) -> dict[str, Any]:
    """The paged engine, each request added on arrival; tokens kept for the comparison."""
    engine = LLMEngine(model.model, model.tokenizer, kv_budget_tokens=setup.kv_budget_tokens,
                       block_size=setup.block_size, max_seq_len=setup.max_seq_len, **engine_kw)
    params = [SamplingParams(max_tokens=r.output_len, ignore_eos=True) for r in setup.requests]
    outputs: dict[int, Any] = {}
    ids: list[int] = []
    start = time.perf_counter()
    while len(ids) < len(arrivals) or engine.has_unfinished:
        now = time.perf_counter() - start
        while len(ids) < len(arrivals) and arrivals[len(ids)] <= now:
            i = len(ids)
            ids.append(engine.add_request(setup.prompts[i], params[i], arrival_time=start + arrivals[i]))
        if not engine.has_unfinished:
            time.sleep(max(0.0, arrivals[len(ids)] - now))
            continue
        for out in engine.step():
            outputs[out.request_id] = out
    wall = time.perf_counter() - start
    done = [outputs[i] for i in ids]
    record = _summary("paged engine (requests added on arrival)", sum(len(o.token_ids) for o in done), wall,
                      [o.latency for o in done], [o.time_to_first_token for o in done])
    record["token_ids"] = [o.token_ids for o in done]
    return record


def run_static(model: LoadedModel, setup: Any, arrivals: list[float], max_batch: int = 8) -> dict[str, Any]:
    """transformers' static ``generate``, fed what has arrived (at most ``max_batch``) whenever it is free."""
    run_batch = hf_static_batch(model, setup)
    tokens: dict[int, list[int]] = {}
    latency: list[float] = []
    waiting = list(range(len(arrivals)))
    start = time.perf_counter()
    while waiting:
        now = time.perf_counter() - start
        arrived = [i for i in waiting if arrivals[i] <= now]
        if not arrived:
            time.sleep(arrivals[waiting[0]] - now)
            continue
        batch = arrived[:max_batch]
        for i, out in zip(batch, run_batch(batch)):
            tokens[i] = out[:setup.requests[i].output_len]
        done = time.perf_counter() - start
        latency += [done - arrivals[i] for i in batch]
        waiting = [i for i in waiting if i not in batch]
    wall = time.perf_counter() - start
    record = _summary(f"transformers generate (static, what has arrived, up to {max_batch})",
                      sum(r.output_len for r in setup.requests), wall, latency, None)
    record["token_ids"] = [tokens[i] for i in range(len(arrivals))]
    return record


def hf_static_batch(model: LoadedModel, setup: Any) -> Callable[[list[int]], list[list[int]]]:
    """transformers ``generate`` on a left-padded batch of request indices, up to the batch's longest output."""
    hf, pad = model.hf_model, model.tokenizer.pad_token_id or 0

    def run(batch: list[int]) -> list[list[int]]:
        width = max(len(setup.prompts[i]) for i in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, i in enumerate(batch):
            ids[row, width - len(setup.prompts[i]):] = torch.tensor(setup.prompts[i])
            mask[row, width - len(setup.prompts[i]):] = 1
        longest = max(setup.requests[i].output_len for i in batch)
        with torch.inference_mode():
            out = hf.generate(input_ids=ids.to(hf.device), attention_mask=mask.to(hf.device), max_new_tokens=longest,
                              min_new_tokens=longest, do_sample=False, pad_token_id=pad)
        return [out[row, width:].tolist() for row in range(len(batch))]
    return run


def run_hf_continuous(model: LoadedModel, setup: Any, arrivals: list[float]) -> dict[str, Any]:
    """transformers' continuous batching (the manager behind ``generate_batch``), each request added on arrival."""
    from transformers import GenerationConfig

    hf = model.hf_model
    config = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=model.tokenizer.pad_token_id or 0,
                              max_new_tokens=max(r.output_len for r in setup.requests))
    tokens: dict[int, list[int]] = {}
    latency: list[float] = []
    manager = hf.init_continuous_batching(generation_config=config)
    with torch.inference_mode():
        manager.warmup()    # its cache and first batches: a server pays this once at start-up, not per request
        manager.start()
        start = time.perf_counter()
        try:
            added = 0
            while len(tokens) < len(arrivals):
                now = time.perf_counter() - start
                while added < len(arrivals) and arrivals[added] <= now:
                    manager.add_request(setup.prompts[added], request_id=f"r{added}",
                                        max_new_tokens=setup.requests[added].output_len)
                    added += 1
                result = manager.get_result(timeout=0.01)
                if result is not None and result.is_finished():
                    if result.error is not None:
                        raise RuntimeError(result.error)
                    i = int(result.request_id[1:])
                    tokens[i] = list(result.generated_tokens)
                    latency.append(time.perf_counter() - start - arrivals[i])
                elif result is None and not manager.is_running():
                    raise RuntimeError("transformers' generation thread stopped")
            wall = time.perf_counter() - start
        finally:
            manager.stop(block=True)
    record = _summary("transformers continuous batching (requests added on arrival)",
                      sum(len(t) for t in tokens.values()), wall, latency, None)
    record["token_ids"] = [tokens[i] for i in range(len(arrivals))]
    return record


def compare(model: LoadedModel, setup: Any, rate_per_s: float, seed: int = 0, backend: str = "torch", *,
            continuous_peer: bool = True) -> dict[str, Any]:
    """The engine, static ``generate`` (batches of 8) and transformers' continuous batching on one arrival schedule."""
    arrivals = arrival_times(len(setup.requests), rate_per_s, seed)
    engine = run_engine(model, setup, arrivals, backend=backend)
    static = run_static(model, setup, arrivals)
    peers = [static]
    if continuous_peer and hasattr(model.hf_model, "init_continuous_batching"):
        try:
            peers.append(run_hf_continuous(model, setup, arrivals))
        except Exception as exc:  # transformers' path, not ours: report it
            peers.append({"policy": "transformers continuous batching", "error": f"{type(exc).__name__}: {exc}"})
    result = {"arrival_rate_per_s": rate_per_s, "arrivals_s": [round(t, 3) for t in arrivals], "engine": engine,
              "peers": peers,
              "vs_transformers_static": {
                  "throughput_ratio": round(engine["throughput_tokens_per_s"] / static["throughput_tokens_per_s"], 2),
                  "latency_ratio": (round(static["latency_mean_s"] / engine["latency_mean_s"], 2)
                                    if engine["latency_mean_s"] > 0 else None),
                  "same_tokens": engine["token_ids"] == static["token_ids"]}}
    for run in [engine, *peers]:
        run.pop("token_ids", None)
    return result


def print_table(record: dict[str, Any]) -> None:
    result = record["arrivals"]
    print(f"{record['model']}: {record['num_requests']} requests arriving at {result['arrival_rate_per_s']}/s "
          f"(last at {result['arrivals_s'][-1]} s), outputs x{record['output_scale']:g}")
    for run in [result["engine"], *result["peers"]]:
        print(f"{run['policy']:62s}: " + (run.get("error") or f"{run['throughput_tokens_per_s']:>7} tok/s, "
                                          f"mean latency {run['latency_mean_s']} s"))
    vs = result["vs_transformers_static"]
    print(f"engine / static generate: {vs['throughput_ratio']}x throughput, {vs['latency_ratio']}x lower mean latency, "
          f"same greedy tokens: {vs['same_tokens']}")
