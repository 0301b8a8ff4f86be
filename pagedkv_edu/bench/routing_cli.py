"""``python -m pagedkv_edu route``: route a workload over replicas with each policy and compare (chapter 11).

The defaults are the chapter's: Llama-3.2-1B on an H200 (:data:`~pagedkv_edu.sim.routing.GPU_COST`),
600 requests a second, 3,072 blocks a replica, the chats' 0.2 s pause, and the first quarter of the
requests left out of the figures as a warm-up. One seed per run: repeat with ``--seed`` for a spread.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..cli_args import add_json_flag, whole_number
from ..sim.routing import MAX_REPLICAS, POLICIES, offered_load, route
from ..sim.routing_workloads import WORKLOADS, chats


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("route", help="route requests over replicas with prefix caches, per policy (ch. 11)")
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="tenants",
                   help="consultants (one shared system prompt), tenants (Zipf over many system prompts) or "
                        "chats (multi-turn conversations); default tenants")
    p.add_argument("--policy", choices=[*POLICIES, "all"], default="all",
                   help="one policy, or all (default); hybrid sends a weak match to the least-loaded replica, "
                        "hybrid-smallest-tree to the smallest router tree; least-prefill and hybrid-prefill count "
                        "a replica's load in queued prefill tokens")
    p.add_argument("--replicas", type=whole_number(1, MAX_REPLICAS), default=4, help="number of replicas (default 4)")
    p.add_argument("--requests", type=whole_number(2, 5000), default=600, help="requests in the trace (default 600)")
    p.add_argument("--warmup", type=whole_number(0, 4999), default=None,
                   help="first requests that only warm the caches, left out of the figures (default: a quarter)")
    p.add_argument("--rate", type=whole_number(1, 100_000), default=600,
                   help="mean arrivals per second, Poisson (default 600)")
    p.add_argument("--think-ms", type=whole_number(0, 10**7), default=200,
                   help="chats: the pause before a conversation's next turn, ms (default 200)")
    p.add_argument("--blocks", type=whole_number(64, 1 << 20), default=3072,
                   help="KV blocks per replica, of 16 tokens (default 3072)")
    p.add_argument("--seed", type=whole_number(0, 2**32 - 1), default=0)
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict[str, Any]:
    warmup = args.requests // 4 if args.warmup is None else args.warmup
    if warmup >= args.requests:
        raise ValueError(f"--warmup {warmup} leaves none of the {args.requests} requests to measure")
    if args.workload == "chats":
        requests = chats(args.requests, float(args.rate), args.seed, think_ms=float(args.think_ms))
    else:
        requests = WORKLOADS[args.workload](args.requests, float(args.rate), args.seed)
    policies = POLICIES if args.policy == "all" else (args.policy,)
    rows = [route(requests, name, args.replicas, num_blocks=args.blocks, seed=args.seed, warmup=warmup).summary()
            for name in policies]
    rho = offered_load(requests, args.replicas)
    if not args.json:
        print(f"workload {args.workload} ({args.requests} requests, {args.rate}/s, seed {args.seed}; the first {warmup} "
              f"warm the caches), {args.replicas} replicas of {args.blocks} blocks; Llama-3.2-1B on an H200, "
              f"offered prefill load rho = {rho:.2f}")
        print(f"{'policy':22s}{'hit rate':>9s}{'prefill tokens':>16s}{'TTFT p50 ms':>13s}{'TTFT p99 ms':>13s}"
              f"{'imbalance':>11s}")
        for r in rows:
            print(f"{r['policy']:22s}{r['hit_rate']:>9.1%}{r['prefill_tokens']:>16,}{r['ttft_p50_ms']:>13.2f}"
                  f"{r['ttft_p99_ms']:>13.2f}{r['load_imbalance']:>11.2f}")
    return {"workload": args.workload, "requests": args.requests, "warmup": warmup, "rate_per_s": args.rate,
            "think_ms": args.think_ms if args.workload == "chats" else None, "seed": args.seed,
            "replicas": args.replicas, "blocks_per_replica": args.blocks, "offered_load": round(rho, 4),
            "policies": rows}
