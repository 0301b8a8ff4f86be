"""bench chunked-prefill: every budget prefills the same prompts to the same first tokens, in more steps (no timings)."""

from __future__ import annotations

from pagedkv_edu.bench.chunked_prefill import compare
from pagedkv_edu.model.loading import load_model


def test_chunked_runs_take_more_steps_and_give_the_unchunked_first_tokens() -> None:
    tiny = load_model("tiny-random")
    prompts = [[(7 * i + j) % 100 + 1 for j in range(n)] for i, n in enumerate((37, 20, 51))]
    record = compare(tiny, prompts, [40, 16], repeats=1, block_size=4)
    runs = {r["max_num_batched_tokens"]: r for r in record["runs"]}
    assert record["prompt_tokens"] == 108 and runs[None]["steps"] == 1 and runs[None]["vs_unchunked"] == 1.0
    assert runs[40]["steps"] == 3 and runs[16]["steps"] == 7      # ceil(108 / budget) prefill steps
    assert all(r["same_first_tokens"] for r in record["runs"])
