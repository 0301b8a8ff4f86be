"""``python -m pagedkv_edu serve-bench``: the 50-consultant experiment on a real model (chapter 6).

The same requests, model and scheduler under the same KV budget, paged and with contiguous
``max_seq_len`` reservations; ``--peers`` adds transformers' own paths, ``--prefix-caching`` a
prefix-cached run, ``--breakdown`` the per-step time split and the decode floor. Record timings
only on an idle machine (a second busy process made the engine ten times slower in one run).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch

from ..specs import utilisation
from ..attention import BACKENDS
from ..engine import POLICIES, LLMEngine, RequestOutput, SamplingParams
from ..engine.config import DEFAULT_MAX_NUM_BATCHED_TOKENS
from ..model.loading import MODEL_NAMES, LoadedModel, load_model
from ..sim.sharing import few_shot_max_seq_len, few_shot_variant
from ..workload import Request, copilot50, prompt_token_ids
from . import add_out_flag, arrivals, emit, metadata


@dataclass(frozen=True)
class ServeSetup:
    """One experiment: the requests, their prompts, and the memory they share."""

    requests: list[Request]
    prompts: list[list[int]]
    max_seq_len: int
    kv_budget_tokens: int
    block_size: int


def make_setup(model: LoadedModel, *, num_requests: int = 50, length_scale: float = 1.0, output_scale: float = 1.0,
               block_size: int = 16, kv_budget_tokens: int | None = None, seed: int = 0, shots: int = 0) -> ServeSetup:
    """The paged-KV-cache article's workload as token ids, with a budget of ten ``max_seq_len`` reservations by default.

    ``shots > 0`` adds that many worked examples to the shared system prompt (and to ``max_seq_len``).
    """
    requests = few_shot_variant(copilot50(seed, num_requests, output_scale=output_scale, length_scale=length_scale),
                                shots, length_scale=length_scale)
    max_seq_len = few_shot_max_seq_len(shots, length_scale=length_scale)
    prompts = [prompt_token_ids(r, model.model.config.vocab_size, seed) for r in requests]
    return ServeSetup(requests, prompts, max_seq_len, kv_budget_tokens or 10 * max_seq_len, block_size)


def run_engine(model: LoadedModel, setup: ServeSetup, policy: str, *, backend: str = "torch",
               use_tqdm: bool = False, **engine_kw: Any) -> dict[str, Any]:
    """Serve every request with one engine; return its measurements (and its step history)."""
    engine = LLMEngine(model.model, model.tokenizer, policy=policy, kv_budget_tokens=setup.kv_budget_tokens,
                       block_size=setup.block_size, max_seq_len=setup.max_seq_len, backend=backend, **engine_kw)
    params = [SamplingParams(max_tokens=r.output_len, ignore_eos=True) for r in setup.requests]
    start = time.perf_counter()
    outputs = engine.generate(setup.prompts, params, use_tqdm=use_tqdm)
    wall = time.perf_counter() - start
    return summarise(policy, engine, outputs, wall)


def summarise(policy: str, engine: LLMEngine, outputs: list[RequestOutput], wall: float) -> dict[str, Any]:
    history = engine.history
    last = history[-1]
    saturated = [s.num_running for s in history if s.num_waiting] or [0]
    held = sum(s.kv_held_slots for s in history)
    ttft = [o.time_to_first_token for o in outputs if o.time_to_first_token is not None]
    latency = [o.latency for o in outputs]
    generated = sum(len(o.token_ids) for o in outputs)
    return {
        "policy": policy,
        "requests": len(outputs),
        "generated_tokens": generated,
        "wall_seconds": round(wall, 2),
        "throughput_tokens_per_s": round(generated / wall, 2),
        "steps": len(history),
        "peak_concurrency": max(s.num_running for s in history),
        "mean_concurrency": round(statistics.fmean(s.num_running for s in history), 2),
        "saturated_concurrency": round(statistics.fmean(saturated), 2),
        "kv_utilisation": round(utilisation(sum(s.kv_tokens for s in history), held), 4),
        "preemptions": engine.scheduler.num_preemptions,
        "prefill_tokens": last.tokens.prefill_tokens,
        "prompt_tokens": last.tokens.prompt_tokens,
        "prefix_hit_tokens": last.tokens.prefix_hit_tokens,
        "prefix_hit_rate": round(last.prefix_hit_rate, 4),
        "resumed_hit_tokens": last.tokens.resumed_hit_tokens,
        "ttft_mean_s": round(statistics.fmean(ttft), 2),
        "ttft_p90_s": round(_percentile(ttft, 0.9), 2),
        "latency_mean_s": round(statistics.fmean(latency), 2),
        "latency_p90_s": round(_percentile(latency, 0.9), 2),
        "finish_reasons": sorted({o.finish_reason for o in outputs}),
        "timeline": {
            "elapsed_s": [round(s.elapsed, 3) for s in history],
            "running": [s.num_running for s in history],
            "waiting": [s.num_waiting for s in history],
            "kv_usage": [round(s.kv_usage, 4) for s in history],
            "kv_utilisation": [round(s.kv_utilisation, 4) for s in history],
            "step_kind": [s.step_kind for s in history],
            "step_kv_tokens": [s.step_kv_tokens for s in history],
        },
        "per_request": [{"id": o.request_id, "ttft_s": round(o.time_to_first_token or 0.0, 3),
                         "latency_s": round(o.latency, 3), "preemptions": o.num_preemptions,
                         "cached_tokens": o.num_cached_tokens} for o in outputs],
        "token_ids": [o.token_ids for o in outputs],
    }


# --- where the time goes (issue 20's performance targets) -------------------------------------------
CATEGORIES: dict[str, tuple[str, ...]] = {
    "linear": ("aten::linear", "aten::addmm", "aten::mm", "aten::matmul"),
    "attention": ("scaled_dot_product",),
    "kv_gather": ("aten::index", "aten::index_select"),
}
"""Profiler op names (prefixes for attention) of each category; what no category claims is "other"."""


def _category(name: str) -> str | None:
    for cat, names in CATEGORIES.items():
        if name in names or (cat == "attention" and any(n in name for n in names)):
            return cat
    return None


def breakdown_from_events(events: Any) -> dict[str, dict[str, float]]:
    """Seconds per step kind and category, from ``torch.profiler`` events of steps labelled by the runner.

    Each ``pagedkv.step.<kind>`` range's time is split among the top-most ops of each category
    (an op inside a linear layer counts as linear); the rest is ``other``. Also counts the steps.
    """
    out: dict[str, dict[str, float]] = {}
    for event in events:
        if not event.name.startswith("pagedkv.step."):
            continue
        kind = event.name.removeprefix("pagedkv.step.")
        row = out.setdefault(kind, {"steps": 0, "total_s": 0.0, **{c: 0.0 for c in CATEGORIES}, "other": 0.0})
        row["steps"] += 1
        row["total_s"] += event.cpu_time_total / 1e6
        stack = list(event.cpu_children)
        claimed = 0.0
        while stack:
            child = stack.pop()
            cat = _category(child.name)
            if cat is None:
                stack.extend(child.cpu_children)
            else:
                row[cat] += child.cpu_time_total / 1e6
                claimed += child.cpu_time_total / 1e6
        row["other"] += event.cpu_time_total / 1e6 - claimed
    return {k: {key: round(v, 4) if isinstance(v, float) else v for key, v in row.items()} for k, row in out.items()}


def profile_engine(model: LoadedModel, setup: ServeSetup, *, backend: str = "torch") -> dict[str, dict[str, float]]:
    """One more paged run under ``torch.profiler``; its :func:`breakdown_from_events` (profiling slows it)."""
    from torch.profiler import ProfilerActivity, profile

    engine = LLMEngine(model.model, model.tokenizer, kv_budget_tokens=setup.kv_budget_tokens,
                       block_size=setup.block_size, max_seq_len=setup.max_seq_len, backend=backend)
    params = [SamplingParams(max_tokens=r.output_len, ignore_eos=True) for r in setup.requests]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        engine.generate(setup.prompts, params, use_tqdm=False)
    return breakdown_from_events(prof.events())


def copy_bandwidth(num_bytes: int = 256 * 2**20, repeats: int = 5, device: str | torch.device = "cpu") -> float:
    """Bytes per second one large tensor copy reads here (best of ``repeats``): the roofline of a decode step."""
    src = torch.ones(num_bytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        if src.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        dst.copy_(src)
        if src.is_cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return num_bytes / best


def weight_bytes(model: LoadedModel) -> int:
    """Bytes of every weight a forward pass reads (tied embeddings once)."""
    seen: set[int] = set()
    total = 0
    for t in [model.model.embed, model.model.lm_head, model.model.final_norm,
              *(w for layer in model.model.layers for w in vars(layer).values())]:
        if isinstance(t, torch.Tensor) and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def decode_floor(timeline: dict[str, list[Any]], weights: int, kv_bytes_per_token: int,
                 bandwidth: float) -> dict[str, Any]:
    """Each decode step's time against its floor: (weights + K/V read) / bandwidth. ``timeline`` is a run's."""
    steps, floors = [], []
    elapsed, kinds, kv = timeline["elapsed_s"], timeline["step_kind"], timeline["step_kv_tokens"]
    for i in range(1, len(elapsed)):
        if kinds[i] == "decode":
            steps.append(elapsed[i] - elapsed[i - 1])
            floors.append((weights + kv[i] * kv_bytes_per_token) / bandwidth)
    if not steps:
        return {"decode_steps": 0}
    return {"decode_steps": len(steps), "mean_step_s": round(statistics.fmean(steps), 5),
            "mean_floor_s": round(statistics.fmean(floors), 5),
            "ratio_to_floor": round(statistics.fmean(steps) / statistics.fmean(floors), 2),
            "weights_bytes": weights, "copy_bandwidth_bytes_per_s": round(bandwidth)}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_hf_static(model: LoadedModel, setup: ServeSetup, batch_size: int = 8) -> dict[str, Any]:
    """transformers ``generate`` in static, left-padded batches: everyone waits for the batch's longest.

    Returns the useful tokens of each request too (its own ``output_len``, the padding's tail
    dropped), in request order, so the caller can check they are the engine's.
    """
    run_batch = arrivals.hf_static_batch(model, setup)
    start = time.perf_counter()
    tokens: list[list[int]] = []
    for b in range(0, len(setup.prompts), batch_size):
        batch = list(range(b, min(b + batch_size, len(setup.prompts))))
        tokens += [out[:setup.requests[i].output_len] for i, out in zip(batch, run_batch(batch))]
    generated = sum(r.output_len for r in setup.requests)   # useful tokens only
    wall = time.perf_counter() - start
    return {"policy": f"transformers generate (static batches of {batch_size})", "generated_tokens": generated,
            "wall_seconds": round(wall, 2), "throughput_tokens_per_s": round(generated / wall, 2),
            "token_ids": tokens}


def run_hf_generate_batch(model: LoadedModel, setup: ServeSetup) -> dict[str, Any] | None:
    """transformers' own continuous batching (``generate_batch``), if this version has it and it runs here."""
    hf = model.hf_model
    if not hasattr(hf, "generate_batch"):
        return None
    from transformers import GenerationConfig

    longest = max(r.output_len for r in setup.requests)
    config = GenerationConfig(max_new_tokens=longest, do_sample=False, eos_token_id=-1,
                              pad_token_id=model.tokenizer.pad_token_id or 0)
    start = time.perf_counter()
    try:
        with torch.inference_mode():
            hf.generate_batch(inputs=setup.prompts, generation_config=config, progress_bar=False)
    except Exception as exc:  # report, do not hide: this path is transformers', not ours
        return {"policy": "transformers generate_batch", "error": f"{type(exc).__name__}: {exc}"}
    wall = time.perf_counter() - start
    generated = len(setup.requests) * longest
    return {"policy": "transformers generate_batch", "generated_tokens": generated, "wall_seconds": round(wall, 2),
            "throughput_tokens_per_s": round(generated / wall, 2),
            "note": "every request generates the longest output (no per-request max_tokens)"}


def register(subparsers: argparse._SubParsersAction) -> None:
    from ..cli_args import add_json_flag, whole_number

    p = subparsers.add_parser("serve-bench", help="the 50-consultant experiment: paged vs contiguous engine (ch. 6)")
    p.add_argument("--workload", choices=["copilot50"], default="copilot50")
    p.add_argument("--policy", choices=[*POLICIES, "both"], default="both")
    p.add_argument("--model", choices=MODEL_NAMES, default="smollm2-135m")
    p.add_argument("--kv-budget-tokens", type=whole_number(1, 2**25), default=None, help="default: 10 x max_seq_len")
    p.add_argument("--block-size", type=whole_number(1, 4096), default=16)
    p.add_argument("--num-requests", type=whole_number(1, 100_000), default=50)
    p.add_argument("--length-scale", type=float, default=1.0, help="scale every length (e.g. 0.0625 = 1/16, with --block-size 1: chapter 6's run)")
    p.add_argument("--output-scale", type=float, default=1.0, help="scale outputs only (e.g. 0.2 = outputs / 5)")
    p.add_argument("--backend", choices=BACKENDS, default="torch")
    p.add_argument("--peers", action="store_true", help="also run transformers' static generate and generate_batch")
    p.add_argument("--prefix-caching", action="store_true",
                   help="also run paged with automatic prefix caching; report hit rate and TTFT gain (ch. 8)")
    p.add_argument("--few-shot", type=whole_number(0, 1000), default=0, metavar="SHOTS",
                   help="add SHOTS worked examples of 160 tokens to the shared system prompt (5 = about 1,000 shared)")
    p.add_argument("--seed", type=whole_number(0, 2**32 - 1), default=0)
    p.add_argument("--breakdown", action="store_true",
                   help="profile one more paged run: seconds per step kind in linear layers, attention, K/V gathers, "
                        "other; and each decode step against its memory-bandwidth floor")
    p.add_argument("--repeats", type=whole_number(1, 100), default=1,
                   help="with --peers: run the paged engine and transformers' static generate this many times, "
                        "alternating, and report the median of the paired ratios (a shared machine drifts between runs)")
    p.add_argument("--arrival-rate", type=float, default=None, metavar="PER_S",
                   help="with --peers: Poisson arrivals at this rate, replayed on the wall clock, instead of all at once")
    add_json_flag(p)
    add_out_flag(p)
    p.set_defaults(func=run_serve_bench)


def run_serve_bench(args: argparse.Namespace) -> dict[str, Any]:
    if args.arrival_rate is not None and (not args.peers or args.policy != "paged" or not args.arrival_rate > 0):
        raise SystemExit(f"--arrival-rate {args.arrival_rate} compares the paged engine with transformers on arrivals: "
                         "give a positive rate with --peers --policy paged")
    if args.repeats > 1 and (not args.peers or args.policy != "paged" or args.arrival_rate is not None):
        raise SystemExit(f"--repeats {args.repeats} pairs the paged engine with transformers' static generate: "
                         "give it with --peers --policy paged (not with --arrival-rate)")
    meta = metadata("serve")    # the date the run started, as every record's
    torch.manual_seed(args.seed)
    model = load_model(args.model)
    setup = make_setup(model, num_requests=args.num_requests, length_scale=args.length_scale,
                       output_scale=args.output_scale, block_size=args.block_size,
                       kv_budget_tokens=args.kv_budget_tokens, seed=args.seed, shots=args.few_shot)
    if args.arrival_rate is not None:
        record = {**meta, **_setup_fields(args, setup), "arrivals": arrivals.compare(model, setup, args.arrival_rate,
                                                                                     args.seed, args.backend)}
        return emit(args, record, arrivals.print_table)
    policies = list(POLICIES) if args.policy == "both" else [args.policy]
    if args.prefix_caching and "paged" not in policies:
        policies.insert(0, "paged")          # the baseline the gain is measured against
    runs = {p: run_engine(model, setup, p, backend=args.backend, use_tqdm=not args.json) for p in policies}
    if args.prefix_caching:
        runs[PREFIX_RUN] = run_engine(model, setup, "paged", backend=args.backend, use_tqdm=not args.json,
                                      enable_prefix_caching=True)
        runs[PREFIX_RUN]["policy"] = PREFIX_RUN
    record: dict[str, Any] = {**meta, **_setup_fields(args, setup), "runs": runs}
    if args.prefix_caching:
        record["prefix_caching"] = prefix_caching_gain(runs["paged"], runs[PREFIX_RUN])
    if args.breakdown and "paged" in runs:
        record["decode_floor"] = decode_floor(runs["paged"]["timeline"], weight_bytes(model),
                                              model.model.kv_bytes_per_token(), copy_bandwidth(device=model.model.device))
        record["breakdown"] = profile_engine(model, setup, backend=args.backend)
    if "paged" in runs and "contiguous" in runs:
        paged, contiguous = runs["paged"], runs["contiguous"]
        record["ratios"] = {  # None where the contiguous figure is 0 (e.g. no request ever waited)
            key: round(paged[key] / contiguous[key], 2) if contiguous[key] else None
            for key in ("peak_concurrency", "saturated_concurrency", "throughput_tokens_per_s")
        }
        record["same_tokens"] = paged["token_ids"] == contiguous["token_ids"]
    if args.peers:
        static = run_hf_static(model, setup)
        peers = [static]
        batch = run_hf_generate_batch(model, setup)
        if batch is not None:
            peers.append(batch)
        record["peers"] = peers
        if "paged" in runs:   # the engine against transformers' static batching, at identical greedy tokens
            pairs = [(runs["paged"], static)]
            for _ in range(args.repeats - 1):   # alternate, so a drifting machine slows both sides of a pair alike
                pairs.append((run_engine(model, setup, "paged", backend=args.backend), run_hf_static(model, setup)))
            ratios = [e["throughput_tokens_per_s"] / s["throughput_tokens_per_s"] for e, s in pairs]
            record["vs_transformers_static"] = {
                "throughput_ratio": round(statistics.median(ratios), 2),
                "same_tokens": all(e["token_ids"] == s["token_ids"] for e, s in pairs),
                "pairs": [{"engine_s": e["wall_seconds"], "static_s": s["wall_seconds"], "ratio": round(r, 2)}
                          for (e, s), r in zip(pairs, ratios)],
            }
        del static["token_ids"]
    for run in runs.values():   # compared above; tens of thousands of ids would be most of the record
        del run["token_ids"]
    return emit(args, record, print_table)


def _setup_fields(args: argparse.Namespace, setup: ServeSetup) -> dict[str, Any]:
    """What every serve record says about its experiment."""
    return {"attention_backend": args.backend, "model": args.model, "workload": args.workload,
            "num_requests": args.num_requests, "length_scale": args.length_scale, "output_scale": args.output_scale,
            "few_shot": args.few_shot, "shared_prefix_tokens": setup.requests[0].shared_prefix_len,
            "max_seq_len": setup.max_seq_len, "kv_budget_tokens": setup.kv_budget_tokens,
            "block_size": setup.block_size, "max_num_batched_tokens": DEFAULT_MAX_NUM_BATCHED_TOKENS,
            "torch_threads": torch.get_num_threads()}


PREFIX_RUN = "paged+prefix-cache"


def prefix_caching_gain(paged: dict[str, Any], cached: dict[str, Any]) -> dict[str, Any]:
    """What the prefix cache changed against plain paged serving of the same requests."""
    def mean_ttft(run: dict[str, Any]) -> float:
        return statistics.fmean(r["ttft_s"] for r in run["per_request"])

    return {
        "hit_rate": cached["prefix_hit_rate"],
        "prefill_tokens_saved": paged["prefill_tokens"] - cached["prefill_tokens"],
        "prefill_tokens": {"paged": paged["prefill_tokens"], PREFIX_RUN: cached["prefill_tokens"]},
        "ttft_gain": round(mean_ttft(paged) / mean_ttft(cached), 2) if mean_ttft(cached) > 0 else None,
        "throughput_gain": round(cached["throughput_tokens_per_s"] / paged["throughput_tokens_per_s"], 2),
        "same_tokens": paged["token_ids"] == cached["token_ids"],
    }


def print_table(record: dict[str, Any]) -> None:
    print(f"{record['model']} on {record['device']}: {record['num_requests']} requests, lengths x{record['length_scale']:g},"
          f" outputs x{record['output_scale']:g}, budget {record['kv_budget_tokens']:,} tokens,"
          f" block size {record['block_size']}, max_seq_len {record['max_seq_len']:,}")
    keys = [("peak_concurrency", "peak concurrency"), ("saturated_concurrency", "concurrency while queued"),
            ("kv_utilisation", "KV utilisation"), ("preemptions", "preemptions"),
            ("throughput_tokens_per_s", "throughput (tok/s)"), ("ttft_mean_s", "mean TTFT (s)"),
            ("latency_mean_s", "mean latency (s)"), ("wall_seconds", "wall time (s)"),
            ("prefill_tokens", "prefill tokens computed"), ("prefix_hit_rate", "prefix-cache hit rate")]
    runs = record["runs"]
    print(f"{'':28s}" + "".join(f"{p:>20s}" for p in runs))
    for key, label in keys:
        print(f"{label:28s}" + "".join(f"{runs[p][key]:>20}" for p in runs))
    for key, value in record.get("ratios", {}).items():
        print(f"paged / contiguous {key:28s}: " + (f"{value}x" if value is not None else "n/a (nobody waited)"))
    if "prefix_caching" in record:
        gain = record["prefix_caching"]
        print(f"prefix cache ({record['shared_prefix_tokens']} shared tokens): hit rate {gain['hit_rate']:.1%}, "
              f"{gain['prefill_tokens_saved']:,} prefill tokens saved, TTFT {gain['ttft_gain']}x faster, "
              f"throughput {gain['throughput_gain']}x, same tokens: {gain['same_tokens']}")
    for peer in record.get("peers", []):
        print(f"{peer['policy']:40s}: " + (peer.get("error") or f"{peer['throughput_tokens_per_s']} tok/s"))
    if "vs_transformers_static" in record:
        vs = record["vs_transformers_static"]
        pairs = [f"{pair['ratio']}x" for pair in vs.get("pairs", [])]
        median = f"(median of {len(pairs)} alternating pairs: {', '.join(pairs)}) " if len(pairs) > 1 else ""
        print(f"paged engine / transformers static batching: {vs['throughput_ratio']}x throughput {median}"
              f"({record['torch_threads']} threads), same greedy tokens: {vs['same_tokens']}")
