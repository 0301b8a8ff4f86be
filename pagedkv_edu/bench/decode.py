"""``bench decode``: our paged decoder against transformers ``generate``, same prompts, same model (chapter 5).

Both decode greedily with the same weights and count only useful tokens (up to each stop
token): transformers pads on the left and keeps decoding finished rows; our decoder drops them.
Reported: useful tokens/s, KV-cache bytes kept, and on CUDA peak memory above the weights.
``--backend triton`` on a CPU reports seconds per decode step through the interpreter.
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
from pathlib import Path
from typing import Any

import torch

from .. import runtime
from ..attention import BACKENDS
from . import RESULTS_DIR, add_out_flag, emit, heading, metadata

PROMPTS: tuple[str, ...] = (
    "Explain in a few sentences why the sky is blue.",
    "Write a short poem about a lighthouse.",
    "What is the difference between a list and a tuple in Python?",
    "Give three tips for learning a new language.",
    "Summarise the plot of Romeo and Juliet.",
    "How does a hash table work?",
    "What causes the seasons on Earth?",
    "Describe how to make a cup of tea.",
)


def returned_cache(output: Any) -> Any:
    """The cache a transformers ``generate`` returned: ``.cache`` from 5.2x on, ``.past_key_values`` before."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


def cache_keyword(hf_model: Any) -> str:
    """The name transformers' forward gives its cache argument: ``cache`` from 5.2x on, ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(hf_model.forward).parameters else "past_key_values"


def cache_bytes(cache: Any) -> int:
    """Bytes of every tensor a transformers cache holds (DynamicCache's per-layer keys and values)."""
    total = 0
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def static_cache_bytes(hf_model: Any, batch_size: int, max_cache_len: int) -> int:
    """Bytes of a transformers ``StaticCache`` for ``batch_size`` rows of ``max_cache_len`` positions:
    the up-front reservation of a server that cannot reallocate. It allocates its tensors at its
    first update, whose length does not matter, so one token per row is fed through the model."""
    from transformers import StaticCache

    cache = StaticCache(config=hf_model.config, max_cache_len=max_cache_len)
    with torch.no_grad():
        ids = torch.zeros(batch_size, 1, dtype=torch.long, device=hf_model.device)
        hf_model(input_ids=ids, **{cache_keyword(hf_model): cache})
    return cache_bytes(cache)


def bench_prompts(loaded: Any, n: int) -> list[list[int]]:
    """``n`` of :data:`PROMPTS`, tokenized (chat template for instruct models). A random model
    without its tokenizer package gets seeded random ids of the same lengths (20-40 tokens)."""
    if loaded.tokenizer is not None:
        return [loaded.encode(PROMPTS[i % len(PROMPTS)]) for i in range(n)]
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(20, 41, (n,), generator=g).tolist()
    return [torch.randint(1000, loaded.model.config.vocab_size, (k,), generator=g).tolist() for k in lengths]


def _peak_start(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def _peak_above(device: torch.device, base: int) -> int | None:
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def run_ours(loaded: Any, prompts: list[list[int]], max_new_tokens: int, backend: str,
             device: torch.device) -> dict[str, Any]:
    from ..engine.generate import generate

    generate(loaded.model, prompts[:1], 2, backend=backend)    # warm-up (kernel compilation on CUDA)
    base = _peak_start(device)
    result = generate(loaded.model, prompts, max_new_tokens, backend=backend, stop_token_ids=loaded.stop_token_ids)
    return {
        "system": f"pagedkv_edu paged ({backend})", "useful_tokens": result.num_new_tokens,
        "seconds": round(result.seconds, 4), "tokens_per_second": round(result.tokens_per_second, 2),
        "prefill_tokens": sum(len(p) for p in prompts), "prefill_seconds": round(result.prefill_seconds, 4),
        "decode_steps": result.decode_steps,
        "seconds_per_decode_step": round(result.decode_seconds / result.decode_steps, 4) if result.decode_steps
        else None,
        "attention": result.attention,
        "kv_cache_bytes": result.kv_bytes, "peak_bytes_above_weights": _peak_above(device, base),
        "tokens": result.tokens,
    }


def run_transformers(loaded: Any, prompts: list[list[int]], max_new_tokens: int,
                     device: torch.device) -> dict[str, Any]:
    hf, stop = loaded.hf_model, set(loaded.stop_token_ids)
    pad = hf.generation_config.pad_token_id
    pad = pad if pad is not None else min(stop)
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    kwargs = dict(max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad, return_dict_in_generate=True)
    hf.generate(input_ids=ids[:1], attention_mask=mask[:1], **(kwargs | {"max_new_tokens": 2}))   # warm-up
    base = _peak_start(device)
    start = time.perf_counter()
    out = hf.generate(input_ids=ids, attention_mask=mask, **kwargs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    tokens = []
    for row in out.sequences[:, width:].tolist():
        ends = [i for i, t in enumerate(row) if t in stop]
        tokens.append(row[:ends[0] + 1] if ends else row)
    useful = sum(len(t) for t in tokens)
    return {
        "system": "transformers generate (DynamicCache, left-padded batch)", "useful_tokens": useful,
        "seconds": round(seconds, 4), "tokens_per_second": round(useful / seconds, 2),
        "kv_cache_bytes": cache_bytes(returned_cache(out)), "peak_bytes_above_weights": _peak_above(device, base),
        "tokens": tokens,
    }


def bench_device(model_name: str, device: torch.device, num_prompts: int, max_new_tokens: int,
                 backends: tuple[str, ...]) -> list[dict[str, Any]]:
    from ..model.loading import load_model

    loaded = load_model(model_name, device=device)
    prompts = bench_prompts(loaded, num_prompts)
    rows = [run_ours(loaded, prompts, max_new_tokens, b, device) for b in backends]
    rows.append(run_transformers(loaded, prompts, max_new_tokens, device))
    reference = rows[-1]["tokens"]
    for row in rows:
        row["same_tokens_as_transformers"] = row.pop("tokens") == reference
        row.update(device=str(device), model=model_name, prompts=num_prompts, max_new_tokens=max_new_tokens)
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.max_new_tokens < 1 or args.prompts < 1:
        raise ValueError(f"--prompts and --max-new-tokens must be positive, got {args.prompts} and "
                         f"{args.max_new_tokens}")
    if args.devices == "cuda" and runtime.BACKEND != "cuda":
        raise ValueError("--devices cuda needs a CUDA device, and this machine has none")
    record = metadata("decode")
    rows = []
    devices = {"cpu": ["cpu"], "cuda": ["cuda"], "all": ["cpu"] + (["cuda"] if runtime.BACKEND == "cuda" else [])}
    for device in map(torch.device, devices[args.devices]):
        on_gpu = device.type == "cuda"
        if args.backend is not None:
            backends: tuple[str, ...] = (args.backend,)
        else:   # by default the CPU times only torch: the interpreter is far too slow to compare with transformers
            backends = ("torch", "triton") if on_gpu else ("torch",)
        rows += bench_device(args.model, device, args.prompts if not on_gpu else args.gpu_prompts,
                             args.max_new_tokens, backends)
    record.update(model=args.model, dtype="fp32", attention_backends=sorted({r["system"] for r in rows}), rows=rows)
    return emit(args, record, _print)


def latest_triton_records(directory: Path = RESULTS_DIR) -> dict[tuple[str, str], tuple[Path, dict[str, Any]]]:
    """The newest committed ``decode`` record per (model, backend) with a row that ran our decoder
    through Triton; ``backend`` is the record's: ``"interpreter"`` (a CPU) or ``"cuda"``.

    Chapter 5 reports seconds per token through Triton from these, with their device and date;
    a model without such a record has not been measured.
    """
    found: dict[tuple[str, str], tuple[str, Path, dict[str, Any]]] = {}
    for path in sorted(directory.glob("decode-*.json")):
        record = json.loads(path.read_text())
        if record.get("benchmark") != "decode" or triton_row(record) is None:
            continue
        key, date = (record.get("model", "?"), record.get("backend", "?")), record.get("date_utc", "")
        if key not in found or date > found[key][0]:
            found[key] = (date, path, record)
    return {key: (path, record) for key, (_, path, record) in sorted(found.items())}


def triton_row(record: dict[str, Any]) -> dict[str, Any] | None:
    """The row of a ``decode`` record in which our decoder ran through Triton and was timed per step, if any
    (records written before ``seconds_per_decode_step`` existed have none)."""
    return next((r for r in record.get("rows", []) if r.get("system") == "pagedkv_edu paged (triton)"
                 and r.get("seconds_per_decode_step") is not None), None)


def _print(record: dict[str, Any]) -> None:
    from ..specs import format_bytes

    print(heading(f"greedy decoding, {record['model']} fp32,", record))
    print(f"{'device':6s} {'system':55s} {'prompts':>7s} {'tokens':>6s} {'tok/s':>8s} {'s/step':>7s} "
          f"{'KV cache':>10s} {'peak':>10s} {'same tokens':>11s}")
    for r in record["rows"]:
        peak = format_bytes(r["peak_bytes_above_weights"]) if r["peak_bytes_above_weights"] is not None else "-"
        step = f"{r['seconds_per_decode_step']:.3f}" if r.get("seconds_per_decode_step") is not None else "-"
        print(f"{r['device']:6s} {r['system']:55s} {r['prompts']:>7d} {r['useful_tokens']:>6d} "
              f"{r['tokens_per_second']:>8.1f} {step:>7s} {format_bytes(r['kv_cache_bytes']):>10s} {peak:>10s} "
              f"{str(r['same_tokens_as_transformers']):>11s}")
        if r.get("attention"):
            print(f"{'':6s}   attention: " + ", ".join(f"{k} {v}" for k, v in r["attention"].items()))


def register(subparsers: argparse._SubParsersAction) -> None:
    from ..cli_args import add_json_flag, whole_number
    from ..model.loading import DEFAULT_MODEL

    p = subparsers.add_parser("decode", help="our paged decoder against transformers generate (chapter 5)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="a named model; llama-3.2-1b-random needs no asset package (random prompt ids without one)")
    p.add_argument("--prompts", type=whole_number(1, 4096), default=8, help="batch size on the CPU (default 8)")
    p.add_argument("--gpu-prompts", type=whole_number(1, 4096), default=64, help="batch size on CUDA (default 64)")
    p.add_argument("--max-new-tokens", type=whole_number(1, 2**16), default=32)
    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="our decoder's attention, prefill and decode (default: torch on the CPU, torch and triton "
                        "on CUDA); triton on a CPU is the interpreter, so use --prompts 1 and a few tokens")
    p.add_argument("--devices", choices=("all", "cpu", "cuda"), default="all",
                   help="where to run: the CPU, the GPU, or both when there is one (default)")
    add_json_flag(p)
    add_out_flag(p)
    p.set_defaults(func=run)
