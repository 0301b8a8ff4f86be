"""simulate and serve on the chapters' workloads, before one loop (e12d8a1) and after, in one process (issue 20).

Every run's figures (summary, per-step records, snapshots, token times) must be equal; the time
ratio after/before is printed per chapter group. Run on an idle machine, from the project root:

    mkdir -p /tmp/loopbase && git archive e12d8a1 pagedkv_edu | tar -x -C /tmp/loopbase
    mv /tmp/loopbase/pagedkv_edu /tmp/loopbase/pagedkv_base
    PYTHONPATH=$PWD:/tmp/loopbase python scripts/compare_loop.py [nb01 nb02 nb06 nb08] [--no-time]
"""
import math, sys, time, importlib

def workloads(pkg):
    sim = importlib.import_module(f"{pkg}.simulate").simulate
    wl = importlib.import_module(f"{pkg}.workload")
    pw = importlib.import_module(f"{pkg}.paper_workloads")
    sh = importlib.import_module(f"{pkg}.sharing")
    serve = importlib.import_module(f"{pkg}.engine.batching").serve
    dc = importlib.import_module(f"{pkg}.engine.decode_cost")
    specs = importlib.import_module(f"{pkg}.specs")
    reqs = wl.copilot50(seed=0)
    budget = 10 * 2048
    out = {}
    def nb01():
        r = {}
        r["max"] = sim(reqs, "contiguous", budget, reserve="max")
        for rule in ("max", "pow2", "oracle"):
            r["ff", rule] = sim(reqs, "contiguous", budget, reserve=rule, snapshot_steps=range(3000))
            r["buddy", rule] = sim(reqs, "contiguous", budget, reserve=rule, allocator="buddy")
        r["paged"] = sim(reqs, "paged", budget, block_size=16)
        for d in (pw.SHAREGPT, pw.ALPACA):
            rq = pw.paper_shaped(d, 200)
            for rule in ("max", "pow2", "oracle"):
                r[d.name, rule] = sim(rq, "contiguous", pw.PAPER_KV_SLOTS_OPT13B, reserve=rule, allocator="buddy")
            r[d.name, "paged"] = sim(rq, "paged", pw.PAPER_KV_SLOTS_OPT13B, block_size=16)
        for draw in range(8):
            rq = pw.paper_shaped(pw.SHAREGPT, 200, seed=draw)
            for rule in ("max", "pow2", "oracle"):
                r[draw, rule] = sim(rq, "contiguous", pw.PAPER_KV_SLOTS_OPT13B, reserve=rule, allocator="buddy")
            r[draw, "paged"] = sim(rq, "paged", pw.PAPER_KV_SLOTS_OPT13B, block_size=16)
        return r
    def nb02():
        r = {p: sim(reqs, p, kv_budget_tokens=budget, block_size=16) for p in ("contiguous", "paged")}
        for L in (2048, 4096, 8192):
            r[L] = sim(reqs, "contiguous", kv_budget_tokens=budget, max_seq_len=L)
        return r
    def nb06():
        cons = wl.copilot50(seed=0)
        cost = dc.StepCost.for_gpu(specs.get_spec("llama-3.2-1b"), dc.H200)
        r = {m: serve(cons, m, kv_budget_tokens=40960, max_num_seqs=16, cost=cost) for m in ("static", "continuous")}
        lp = [wl.Request(100 + i, 8000, 50, arrival_step=40 + 60 * i) for i in range(3)]
        for cap in (None, 2048, 512):
            r["chunk", cap] = serve(wl.copilot50(seed=0, num_requests=16) + lp, "continuous", kv_budget_tokens=65536,
                                    max_num_seqs=32, max_num_batched_tokens=cap, cost=cost)
        for share in (0.0, 0.01, 0.05):
            r["wm", share] = sim(cons, "paged", 20480, block_size=16, watermark_blocks=math.ceil(share * 1280))
        return r
    def nb08():
        r = {}
        variants = {"sys": (reqs, 2048), "5shot": (sh.few_shot_variant(reqs), sh.few_shot_max_seq_len())}
        for name, (rq, ctx) in variants.items():
            for on in (False, True):
                r[name, on] = sim(rq, "paged", 10 * ctx, max_seq_len=ctx, enable_prefix_caching=on)
        tiny = wl.copilot50(seed=0, length_scale=1 / 16)
        r[256] = sim(reqs, "paged", budget, block_size=256, enable_prefix_caching=True)
        r["t16"] = sim(tiny, "paged", 10 * 128, block_size=16, enable_prefix_caching=True)
        r["t2"] = sim(tiny, "paged", 10 * 128, block_size=2, enable_prefix_caching=True)
        r["chunked"] = sim(reqs, "paged", budget, block_size=16, max_num_batched_tokens=512, enable_prefix_caching=True)
        r["swap"] = sim(reqs, "paged", budget // 2, block_size=16, preemption_mode="swap")
        return r
    return {"nb01": nb01, "nb02": nb02, "nb06": nb06, "nb08": nb08}

def fingerprint(res):
    if hasattr(res, "summary"):
        d = res.to_dict()
        d["snaps"] = {k: [tuple(vars(s).values()) for s in v] for k, v in res.arena_snapshots.items()}
        d["swapped"] = res.swapped_blocks
        return d
    return {"steps": [tuple(vars(s).values()) for s in res.steps],
            "reqs": [(r.request_id, r.prompt_len, r.arrival, tuple(r.token_times), r.first_token_step) for r in res.requests]}

before, after = workloads("pagedkv_base"), workloads("pagedkv_edu")
timing = "--no-time" not in sys.argv
for name in [n for n in before if len(sys.argv) < 2 or n in sys.argv[1:] or sys.argv[1].startswith("--")]:
    t0 = time.perf_counter(); b = before[name](); t1 = time.perf_counter(); a = after[name](); t2 = time.perf_counter()
    diff = [k for k in b if repr(fingerprint(b[k])) != repr(fingerprint(a[k]))]
    print(f"{name}: {len(b)} runs, {'all equal' if not diff else 'DIFFER: ' + str(diff)}"
          + (f"; before {t1 - t0:.1f} s, after {t2 - t1:.1f} s, ratio {(t2 - t1) / (t1 - t0):.2f}" if timing else ""))
    for k in diff[:3]:
        fb, fa = fingerprint(b[k]), fingerprint(a[k])
        print("  ", k, {kk: (fb[kk], fa[kk]) for kk in fb if fb[kk] != fa[kk] and kk not in ("steps", "requests", "reqs", "snaps")})
