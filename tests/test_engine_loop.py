"""One loop (issue 20): simulate, serve, generate and the explorer all run LLMEngine's step."""

from __future__ import annotations

import pytest

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.sim.batching import serve
from pagedkv_edu.engine.engine import LLMEngine
from pagedkv_edu.engine.model_runner import ModelRunner
from pagedkv_edu.engine.runner import Runner, StandInRunner
from pagedkv_edu.engine.sampling import SamplingParams
from pagedkv_edu.engine.generate import generate
from pagedkv_edu.attention.kv_cache import PagedKVCache
from pagedkv_edu.model.loading import load_model
from pagedkv_edu.sim.simulate import simulate
from pagedkv_edu.viz.explorer_state import ExplorerState
from pagedkv_edu.workload import Request, copilot50


@pytest.fixture()
def calls(monkeypatch) -> dict[str, int]:
    """Count LLMEngine.step and LLMEngine.forward_step calls."""
    counts = {"step": 0, "forward_step": 0}
    for name in counts:
        original = getattr(LLMEngine, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            counts[_name] += 1
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(LLMEngine, name, counted)
    return counts


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random")


def test_simulate_takes_one_engine_step_per_recorded_step(calls) -> None:
    result = simulate(copilot50(0, 8), "paged", 4096, block_size=16)
    assert calls["step"] == calls["forward_step"] == result.total_steps > 0


def test_serve_takes_one_engine_step_per_logged_step(calls) -> None:
    result = serve(copilot50(0, 8), "static", kv_budget_tokens=8192, max_num_seqs=4)
    assert calls["step"] == result.num_steps > 0


def test_generate_is_the_engines_step_over_an_exactly_sized_pool(calls, tiny) -> None:
    result = generate(tiny.model, [[5, 6, 7], [8] * 9], 4, block_size=4)
    assert calls["step"] == result.decode_steps + 1 == 4
    assert result.manager.pool.num_free == 0          # exactly sized: blocks for the prompts + 3 written tokens
    assert [len(t) for t in result.tokens] == [4, 4]


def test_generate_refuses_a_store_too_small_before_anything_runs(calls, tiny) -> None:
    store = PagedKVCache.for_model(tiny.model.config, 2, 4)
    with pytest.raises(ValueError, match="cannot wait or preempt"):
        generate(tiny.model, [[5] * 6, [6] * 6], 3, store=store)
    assert calls["step"] == 0


def test_the_explorer_steps_the_engine_and_never_preempts(calls) -> None:
    state = ExplorerState(4, 4)
    state.add_request(4)
    state.add_request(4)
    assert state.step_n(10) == 4                       # 8 tokens each fill all 4 blocks; the 5th step is refused
    assert calls["forward_step"] == 2 + 4 and state.scheduler.num_preemptions == 0


def test_the_stand_in_finishes_by_the_engines_rule() -> None:
    """A request of p prompt tokens asking k tokens finishes in the k-th step, holding p + k - 1 tokens."""
    assert isinstance(StandInRunner(), Runner) and issubclass(ModelRunner, Runner)
    held = []
    runner = StandInRunner(100, lambda step: held.append([s.seq_len for s in step.scheduled]))
    engine = LLMEngine(runner, memory=BlockManager(8, 4), max_seq_len=32)
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=3, ignore_eos=True))
    outputs = [engine.step() for _ in range(3)]
    assert [len(o) for o in outputs] == [0, 0, 1] and not engine.has_unfinished
    assert held == [[3], [4], [5]] and outputs[2][0].token_ids == [100, 100, 100]
    assert engine.block_manager.pool.num_free == 8    # released when it finished


def test_a_request_for_no_tokens_finishes_without_memory() -> None:
    engine = LLMEngine(StandInRunner(), memory=BlockManager(1, 4), max_seq_len=32)
    engine.add_request([1] * 20, SamplingParams(max_tokens=0))   # needs 5 blocks, would never fit
    assert engine.has_unfinished and not engine.scheduler.waiting
    (out,) = engine.step()
    assert out.finish_reason == "length" and out.token_ids == [] and not engine.has_unfinished


def test_simulate_with_zero_output_requests_finishes_them_on_arrival() -> None:
    reqs = [Request(0, 10, 0, arrival_step=2), Request(1, 10, 3)]
    result = simulate(reqs, "paged", 64, block_size=4)
    zero = next(r for r in result.requests if r.request_id == 0)
    assert zero.admit_step == zero.finish_step == 2
