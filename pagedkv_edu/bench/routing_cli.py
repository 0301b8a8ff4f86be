"""``python -m pagedkv_edu route``: route a workload over replicas with each policy and compare (chapter 11)."""

from __future__ import annotations

import argparse
from typing import Any

from ..cli_args import add_json_flag, whole_number
from ..sim.routing import MAX_REPLICAS, POLICIES, route
from ..sim.routing_workloads import WORKLOADS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("route", help="route requests over replicas with prefix caches, per policy (ch. 11)")
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="tenants",
                   help="consultants (one shared system prompt), tenants (Zipf over many system prompts) or "
                        "chats (multi-turn conversations); default tenants")
    p.add_argument("--policy", choices=[*POLICIES, "all"], default="all",
                   help="one policy, or all (default); hybrid sends a weak match to the least-loaded replica, "
                        "hybrid-smallest-tree to the smallest router tree")
    p.add_argument("--replicas", type=whole_number(1, MAX_REPLICAS), default=4, help="number of replicas (default 4)")
    p.add_argument("--requests", type=whole_number(1, 5000), default=200, help="requests in the trace (default 200)")
    p.add_argument("--rate", type=whole_number(1, 100_000), default=60,
                   help="mean arrivals per second, Poisson (default 60)")
    p.add_argument("--blocks", type=whole_number(64, 1 << 20), default=2048,
                   help="KV blocks per replica, of 16 tokens (default 2048)")
    p.add_argument("--seed", type=whole_number(0, 2**32 - 1), default=0)
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict[str, Any]:
    requests = WORKLOADS[args.workload](args.requests, float(args.rate), args.seed)
    policies = POLICIES if args.policy == "all" else (args.policy,)
    rows = [route(requests, name, args.replicas, num_blocks=args.blocks, seed=args.seed).summary() for name in policies]
    if not args.json:
        print(f"workload {args.workload} ({args.requests} requests, {args.rate}/s, seed {args.seed}), "
              f"{args.replicas} replicas of {args.blocks} blocks")
        print(f"{'policy':22s}{'hit rate':>9s}{'prefill tokens':>16s}{'TTFT p50 ms':>13s}{'TTFT p99 ms':>13s}"
              f"{'imbalance':>11s}")
        for r in rows:
            print(f"{r['policy']:22s}{r['hit_rate']:>9.1%}{r['prefill_tokens']:>16,}{r['ttft_p50_ms']:>13.1f}"
                  f"{r['ttft_p99_ms']:>13.1f}{r['load_imbalance']:>11.2f}")
    return {"workload": args.workload, "requests": args.requests, "rate_per_s": args.rate, "seed": args.seed,
            "replicas": args.replicas, "blocks_per_replica": args.blocks, "policies": rows}
