#!/usr/bin/env bash
# GPU check for chapters 3-4 (and later benchmarks): correctness on CUDA, then the benchmarks.
#
# How to run, on a machine with a CUDA GPU, from anywhere inside the repository:
#
#     bash scripts/gpu_check.sh                 # uses $PYTHON, else .venv/bin/python, else python3
#     PYTHON=/path/to/python bash scripts/gpu_check.sh
#
# It needs torch with CUDA, triton, numpy and pytest (the H200 machine has torch 2.11 and
# triton 3.6); the package is used from the checkout (PYTHONPATH), no install needed.
# It takes about 5-7 minutes and never more than 10 (steps time out after 30 + 150 + 120 + 150 + 90 + 60 s):
#
#   1. pytest of the kernel tests on CUDA: every kernel against the float64 reference, the
#      unified kernel on mixed batches first (tests/test_unified_attention.py: prompts, chunks,
#      prefix hits ending mid-block, decodes, query lengths 0; blocks 3-16; GQA 1, 3, 4), then
#      tests/test_attention.py, tests/test_kv_cache.py, tests/test_exercises_ch3_4.py, and the
#      benchmarks' GPU code paths on tiny shapes (tests/test_bench_attention.py);
#   1b. chapter 4's graders compiled, on the shipped solutions (puzzles, pieces, the whole kernel, which
#      also prints its bandwidth against the copy bandwidth), and the bf16 bounds compiled: the cast
#      rounds to nearest (within 2^-8), the kernels on a bf16 cache stay under 2^-7;
#   2. python -m pagedkv_edu bench attention --out results/attention-<YYYY-MM-DD>.json: the
#      decode kernel against copy bandwidth and contiguous SDPA;
#   3. python -m pagedkv_edu bench attention --mode prefill --out results/attention-prefill-<date>.json:
#      the unified kernel on a 4k prompt (target: within 1.5x of contiguous causal SDPA), a prefix
#      hit, a mixed step, and a decode batch against the decode kernel;
#   4. python -m pagedkv_edu bench decode --out results/decode-<YYYY-MM-DD>.json, once that
#      benchmark is listed in pagedkv_edu/bench/__init__.py BENCHMARKS; skipped until then.
#
# It writes only under results/ (the JSON records and gpu-check-<date>.log) and, when $OUT is
# set, copies them to $OUT. Triton's compile cache and Python's bytecode go to a scratch
# directory that is deleted on exit. Commit the JSON records (see results/README.md); a failed
# step leaves a non-zero exit status and says which step failed.

set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
DATE="$(date -u +%F)"
mkdir -p results
LOG="results/gpu-check-$DATE.log"
SCRATCH="$(mktemp -d "$ROOT/results/.gpu-check-scratch.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT

export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
export TRITON_CACHE_DIR="$SCRATCH/triton"
export MPLCONFIGDIR="$SCRATCH/matplotlib"
unset TRITON_INTERPRET   # compile for the GPU

failed=()
step() {  # step NAME TIMEOUT_SECONDS COMMAND...
  local name="$1" limit="$2"
  shift 2
  echo "=== $name ($(date -u +%T) UTC, limit ${limit}s): $*" | tee -a "$LOG"
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  if [[ $rc -ne 0 ]]; then
    echo "=== $name FAILED (exit $rc)" | tee -a "$LOG"
    failed+=("$name")
  fi
}

: > "$LOG"
step "environment" 30 "$PYTHON" -c '
import torch, pagedkv_edu
from pagedkv_edu import runtime
assert torch.cuda.is_available(), "no CUDA device: this script is for a GPU machine"
assert runtime.BACKEND == "cuda", runtime.BACKEND
from pagedkv_edu.cli import COMMAND_MODULES
assert "pagedkv_edu.bench" in COMMAND_MODULES, "add pagedkv_edu.bench to COMMAND_MODULES in pagedkv_edu/cli.py"
report = pagedkv_edu.setup(seed=0)
'
if [[ ${#failed[@]} -eq 0 ]]; then
  step "kernel tests on CUDA" 150 "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_unified_attention.py \
    tests/test_attention.py tests/test_kv_cache.py tests/test_exercises_ch3_4.py tests/test_bench_attention.py
  step "chapter 4 graders compiled, bandwidth, bf16 bounds" 120 "$PYTHON" -c '
import pagedkv_edu, torch
from pagedkv_edu.exercises import ch4, ch4_triton, ch4_kernel
from pagedkv_edu.exercises.solutions import ch4 as p, ch4_triton as s, ch4_kernel as k
from pagedkv_edu.bench import bf16_check
ok = [ch4.check_pad_copy(p.pad_copy), ch4.check_gather_rows(p.gather_rows), ch4.check_row_stats(p.row_stats),
      ch4.check_scores(p.scores), ch4_triton.check_store_kv(s.store_kv_kernel), ch4_triton.check_tile_slots(s.tile_slots),
      ch4_triton.check_load_tile(s.load_tile), ch4_triton.check_softmax_tile_update(s.softmax_tile_update),
      ch4_triton.check_merge_splits(s.merge_splits),
      ch4_kernel.check_paged_decode_kernel(k.paged_decode_kernel, k.merge_splits_kernel)]   # prints GB/s
assert all(ok), ok
cast, err = bf16_check.cast_error(), bf16_check.attention_error()
print(f"bf16 cast compiled: {cast.differ} of {cast.n} differ from torch, max relative {cast.max_relative:.5f}; "
      f"kernels on a bf16 cache: {err.triton:.5f}")
assert cast.max_relative <= bf16_check.BF16_UNIT and err.triton < bf16_check.TRUNCATION_BOUND
'
  step "bench attention" 150 "$PYTHON" -m pagedkv_edu bench attention --out "results/attention-$DATE.json"
  step "bench attention prefill" 90 "$PYTHON" -m pagedkv_edu bench attention --mode prefill \
    --out "results/attention-prefill-$DATE.json"
  if "$PYTHON" -c 'import sys; from pagedkv_edu.bench import BENCHMARKS; sys.exit("pagedkv_edu.bench.decode" not in BENCHMARKS)'; then
    # The GPU machine has no offline asset packages: the random 1B model needs no downloaded weights.
    step "bench decode" 60 "$PYTHON" -m pagedkv_edu bench decode --model llama-3.2-1b-random --devices cuda --out "results/decode-$DATE.json"
  else
    echo "=== bench decode: not registered in pagedkv_edu/bench/__init__.py BENCHMARKS yet; skipped" | tee -a "$LOG"
  fi
fi

if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT"
  cp "$LOG" results/*-"$DATE".json "$OUT"/ 2>/dev/null || true
fi
if [[ ${#failed[@]} -ne 0 ]]; then
  echo "gpu_check: FAILED steps: ${failed[*]} (log: $LOG)"
  exit 1
fi
echo "gpu_check: all steps passed; records: $(ls results/*-"$DATE".json 2>/dev/null | tr '\n' ' ')(log: $LOG)"
