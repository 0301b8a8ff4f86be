"""The chapter 12 grader (the engine's step) passes right steps, names what a wrong one gets wrong, and the chapter's
committed stub is not solved and gives nothing away.

Each wrong variant is the shipped step with one slip, saved as a reader's file: the grader must fail it, print the
difference it finds (which step, what yours left, what the shipped step left) and not mark it passed.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from pagedkv_edu.core.request import SamplingParams
from pagedkv_edu.core.scheduler import schedule
from pagedkv_edu.engine import sampling
from pagedkv_edu.engine import step as shipped
from pagedkv_edu.engine.engine import LLMEngine
from pagedkv_edu.exercises import ch12, messages, my_engine
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

SHIPPED = Path(shipped.__file__).read_text()
NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "12_your_engine.ipynb"


def _grade(path: Path) -> tuple[bool, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        verdict = ch12.check_step(path)
    return verdict, out.getvalue()


def _slip(old: str, new: str) -> str:
    """The shipped step with ``old`` (found exactly once) replaced by ``new``."""
    assert SHIPPED.count(old) == 1, old
    return SHIPPED.replace(old, new)


APPEND = "        engine.append_token(request, token, None if logprobs is None else logprobs[row])\n"
STOP = "        reason = stop_reason(request, engine.config.stop_token_ids, engine.tokenizer)\n"
FORWARD = ("    scheduled, out = engine.forward_step()               # the scheduler decides, the runner runs the model "
           "once\n")
READY = "    finished = engine.take_ready()                       # asked for no tokens: done without memory\n"

# name: (the reader's file, what the grader's message must say)
WRONG = {
    "gives a failed request's memory back, which it never held": (
        _slip("        finished += engine.finish_sequence(request, FAILED, release=False)\n",
              "        finished += engine.finish_sequence(request, FAILED)\n"),
        ["your step raised ValueError", "end it with engine.finish_sequence(request, FAILED, release=False)"]),
    "indexes the log-probs by the pair's place, not its row": (
        _slip("    for (row, request), token in zip(rows, tokens):\n",
              "    for place, ((_, request), token) in enumerate(zip(rows, tokens)):\n        row = place\n"),
        ["your step raised IndexError", "index the log-probs by the row of the output"]),
    "forgets to append the token": (
        _slip(APPEND + STOP, "        reason = stop_reason(request, engine.config.stop_token_ids, engine.tokenizer) "
                             "if request.output_token_ids else None\n"),
        ["record r0: yours running, tokens []; the shipped step's running, tokens [1007]",
         "give every sequence that samples its token with engine.append_token"]),
    "checks the stop before appending": (
        _slip(APPEND + STOP, STOP + APPEND),
        ["your step raised IndexError", "your line"]),
    "never finishes a stopped sequence": (
        _slip("        if reason is not None:\n            finished += engine.finish_sequence(request, reason)\n", ""),
        ["returned: yours nothing; the shipped step's r0: sample 0", "record r0: yours running",
         "the shipped step's finished (length)", "after each token ask stop_reason"]),
    "finishes without freeing the blocks": (
        _slip("finished += engine.finish_sequence(request, reason)",
              "finished += engine.finish_sequence(request, reason, release=False)"),
        ["block tables: r0 yours [0, 1, 6], the shipped step's none", "it gives the sequence's blocks back"]),
    "samples for a preempted sequence": (
        _slip(FORWARD, "    running = list(engine.scheduler.running)\n" + FORWARD
              + "    for seq in scheduled.preempted:   # it ran last step: give it a token too\n"
                "        if seq in running and seq.output_token_ids:\n"
                "            engine.append_token(seq, seq.output_token_ids[-1])\n"),
        ["record r2: yours preempted, tokens [1209, 1200, 1200]; the shipped step's preempted, tokens [1209, 1200]",
         "has no row in the model's output"]),
    "returns the outputs in reverse order": (
        _slip("    return finished\n", "    return finished[::-1]\n"),
        ["returned the same outputs in another order: yours r1, r0, the shipped step's r0, r1"]),
    "returns the no-token requests last": (
        _slip(READY, "    finished = []\n").replace("    return finished\n", "    return finished + engine.take_ready()\n"),
        ["returned the same outputs in another order: yours r0, r2, the shipped step's r2, r0"]),
    "forgets the no-token requests": (
        _slip(READY, "    finished = []\n"),
        ["returned: yours nothing; the shipped step's r1: sample 0 [] (length)", "engine.take_ready()"]),
    "forgets the failed request": (
        _slip("    for request in scheduled.failed:\n        finished += engine.finish_sequence(request, FAILED, "
              "release=False)\n", ""),
        ["a request that can never be held", "the shipped step's finished (error: needs more KV memory",
         "end it with engine.finish_sequence(request, FAILED, release=False)"]),
    "samples a chunk of a prompt": (
        _slip("        if s.samples:                                    # a chunk of a prompt has no token yet\n",
              "        if True:\n"),
        ["record r1: yours running, tokens [1105]; the shipped step's running, tokens []", "s.samples true"]),
    "never forks the siblings": (
        _slip("rows += [(row, seq) for seq in engine.samplers(s.seq)]", "rows += [(row, s.seq)]"),
        ["record r0.1: yours does not exist; the shipped step's running, tokens [1006]", "engine.samplers(s.seq)"]),
    "decides twice in an empty step": (
        _slip(FORWARD, FORWARD + "    if scheduled.is_empty:\n        scheduled, out = engine.forward_step()\n"),
        ["the scheduler decided 2 times in your step, 1 in the shipped one's", "call engine.forward_step() once"]),
    "never records": (
        _slip("    engine.record(scheduled)\n", ""),
        ["recorded: after your step the engine's history and trace hold 0 entries, after the shipped step's 2",
         "end the step with engine.record(scheduled)"]),
    "records before sampling": (
        _slip("    rows = []  ", "    engine.record(scheduled)\n    rows = []  ").replace(
            "    engine.record(scheduled)\n    return", "    return"),
        ["the step's trace frame (what engine.record saw) differs in num_output"]),
    "drops the log-probs": (
        _slip("engine.append_token(request, token, None if logprobs is None else logprobs[row])",
              "engine.append_token(request, token)"),
        ["the shipped step's running, tokens [41676], log-probs kept", "give engine.append_token the row's log-probs"]),
    "returns the records, not their outputs": (
        _slip("            finished += engine.finish_sequence(request, reason)\n",
              "            engine.finish_sequence(request, reason)\n"
              "            finished.append(engine.requests[request.request_id])\n"),
        ["returned: yours a list holding Request(", "a step returns the RequestOutputs engine.finish_sequence gives"]),
}

ROW_BY_ROW = '''"""A right step in another style: each sampler sampled on its own, outputs gathered as they end."""
from pagedkv_edu.engine.sampling import sample_tokens, stop_reason
from pagedkv_edu.engine.step import FAILED


def step(engine):
    done = list(engine.take_ready())
    decision, out = engine.forward_step()
    for request in decision.failed:
        done.extend(engine.finish_sequence(request, FAILED, release=False))
    keep = engine.config.keep_logprobs
    for row, entry in enumerate(decision.scheduled):
        if not entry.samples:
            continue
        for seq in engine.samplers(entry.seq):
            (token,), logprobs = sample_tokens(out, [(row, seq)], keep)
            engine.append_token(seq, token, None if logprobs is None else logprobs[row])
            why = stop_reason(seq, engine.config.stop_token_ids, engine.tokenizer)
            if why:
                done.extend(engine.finish_sequence(seq, why))
    engine.record(decision)
    return done
'''


def _save(tmp_path: Path, source: str, name: str = "step.py") -> Path:
    path = tmp_path / "my_engine" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    return path


def test_the_shipped_step_passes_and_is_marked_passed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _save(tmp_path, SHIPPED)
    monkeypatch.chdir(tmp_path)            # check_step() reads my_engine/step.py, as in notebooks/
    verdict, out = _grade(ch12.STEP_FILE)
    assert verdict is True and out.startswith("✓ step（引擎的一步）: passed (9 cases from the text and 40 hidden")
    assert my_engine.why_not_passed(ch12.STEP_FILE, "12") is None
    choice = my_engine.load_parts(quiet=True).card["step"]
    assert choice.yours and choice.value is not shipped.step and choice.value.__module__.startswith("reader_step")


def test_a_step_in_another_style_passes(tmp_path: Path) -> None:
    verdict, out = _grade(_save(tmp_path, ROW_BY_ROW))
    assert verdict is True, out


@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_step_fails_naming_the_difference(name: str, tmp_path: Path) -> None:
    source, said = WRONG[name]
    path = _save(tmp_path, source)
    verdict, out = _grade(path)
    assert verdict is False and out.startswith("✗ step（引擎的一步）: failed"), out
    missing = [s for s in said if s not in out]
    assert not missing, f"{missing} not in:\n{out}"
    assert "step " in out and "(before it: running" in out, out        # which step, and what it saw
    assert not path.with_name("step.py.passed").exists()
    assert "step" not in my_engine.load_parts(tmp_path / "my_engine", quiet=True).card.yours


def test_the_grader_says_what_is_wrong_with_the_file_itself(tmp_path: Path) -> None:
    assert "does not exist: run the %%writefile cell" in _grade(tmp_path / "my_engine" / "step.py")[1]
    assert "importing" in _grade(_save(tmp_path, "def step(engine:\n"))[1]
    assert "defines no function step(engine)" in _grade(_save(tmp_path, "steps = 1\n"))[1]
    out = _grade(_save(tmp_path, "from pagedkv_edu.engine.step import step\n"))[1]
    assert "imports the shipped step instead of defining its own" in out


def test_hidden_cases_cover_the_rules() -> None:
    cases = ch12.HIDDEN_STEP_CASES
    runs = [ch12._reference_run(c) for c in cases]
    assert {3, 5, 6, 12} <= {c.block_size for c in cases}
    assert sum(any(v.preempted for v in run) for run in runs) >= 5               # memory runs short
    assert sum(any(v.failed for v in run) for run in runs) >= 1                  # a request that can never be held
    assert sum(any("." in name for name in run[-1].records) for run in runs) >= 10     # forked samples
    assert sum(c.prefix_caching for c in cases) >= 10 and sum(c.token_budget is not None for c in cases) >= 10
    assert sum(any(r.max_tokens == 0 for r in c.requests) for c in cases) >= 5
    stops = [any(r.finish_reason == "stop" for r in run[-1].records.values()) for run in runs]
    assert sum(stops) >= 5
    assert sum(any(not isinstance(v.returned, str) and len(v.returned) > 1 for v in run) for run in runs) >= 5


def test_try_step_shows_each_step_until_the_first_difference() -> None:
    rows = ch12.try_step(shipped.step, 0)
    assert len(rows) == len(ch12._reference_run(ch12.STEP_CASES[0])) and all(not r["problem"] for r in rows)
    assert rows[0]["before"].startswith("running (computed/tokens) [none]; waiting [r0 (7 tokens)")
    ns: dict = {}
    exec(compile(WRONG["returns the outputs in reverse order"][0], "reversed.py", "exec"), ns)
    rows = ch12.try_step(ns["step"], 0)
    assert rows[-1]["yours"].returned == tuple(reversed(rows[-1]["expected"].returned)) != rows[-1]["expected"].returned
    with pytest.raises(KeyError, match="no shown case"):
        ch12.try_step(shipped.step, "no such case")


def _two_requests() -> LLMEngine:
    engine = LLMEngine(ch12.CountingRunner(), max_seq_len=32, kv_budget_tokens=32, block_size=4)
    engine.add_request(list(range(10, 16)), SamplingParams(max_tokens=1))
    engine.add_request(list(range(20, 25)), SamplingParams(max_tokens=2, n=2))
    return engine


def _run(engine: LLMEngine) -> list[tuple[int, list[list[int]]]]:
    outputs = []
    while engine.has_unfinished:
        outputs += [(o.request_id, [c.token_ids for c in o.completions]) for o in engine.step()]
    return outputs


def test_watch_step_logs_the_calls_and_leaves_the_engine_as_it_was() -> None:
    engine = _two_requests()
    log = str(ch12.watch_step(engine))
    for line in ("engine.step()\n  engine.take_ready() → []\n  engine.forward_step()\n    scheduler.schedule()\n"
                 "      policy(state)\n        memory.lookup(r0) → hit of 0 tokens\n",
                 "        memory.admit(r0, 6, hit of 0 tokens) → [0, 1]\n",
                 "    engine.fork_sequence(r1, 1)\n      memory.fork(r1, r1.1)\n    → r1.1\n",
                 "  sample_tokens([1006, 1105], rows 0→r0, 1→r1, 1→r1.1)",
                 "  stop_reason(r0) → 'length'\n  engine.finish_sequence(r0, 'length')\n"
                 "    scheduler.finish(r0, release=True)\n      memory.release(r0) → [1, 0]\n  → [output of r0]\n",
                 "  engine.record(ScheduledStep(2 sequences, 11 tokens))\n→ [output of r0]"):
        assert line in log, f"{line!r} not in\n{log}"
    wrapped = {"take_ready", "forward_step", "samplers", "fork_sequence", "append_token", "finish_sequence", "record"}
    assert not wrapped & set(vars(engine)) and not {"grow", "admit", "lookup", "fork", "release"} & set(vars(engine.memory))
    assert engine.scheduler.policy is schedule and "schedule" not in vars(engine.scheduler)
    assert shipped.sample_tokens is sampling.sample_tokens and shipped.stop_reason is sampling.stop_reason
    unwatched = _two_requests()
    first = [(o.request_id, [c.token_ids for c in o.completions]) for o in unwatched.step()]
    assert first + _run(unwatched) == [(0, [[1006]])] + _run(engine)    # the watched step changed nothing


def _notebook_sources() -> dict[str, str]:
    return {cell["id"]: "".join(cell["source"]) for cell in json.loads(NOTEBOOK.read_text())["cells"]}


def test_the_committed_stub_is_not_solved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The notebook's %%writefile cell and its check cell, run as committed: one neutral line, no case, nothing passed."""
    cells = _notebook_sources()
    magic, _, body = cells["ch12-06"].partition("\n")
    assert magic == "%%writefile my_engine/step.py"
    _save(tmp_path, body)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(cells["ch12-07"], "12_your_engine.ipynb:ch12-07", "exec"), {})
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("○ step（引擎的一步）: not solved yet (it raises NotImplementedError)")
    assert not (tmp_path / "my_engine" / "step.py.passed").exists()
    assert not my_engine.load_parts(quiet=True).card["step"].yours


def test_the_stub_imports_what_it_needs_and_gives_nothing_away() -> None:
    """The saved stub imports the sampling functions and FAILED and defines ``step``; its code holds none of the moves."""
    stub = _notebook_sources()["ch12-06"].partition("\n")[2]
    namespace: dict = {}
    exec(compile(stub, "stub.py", "exec"), namespace)   # it imports on its own
    assert {"sample_tokens", "stop_reason", "FAILED", "RequestOutput", "step"} <= set(namespace)
    code = [line for line in stub.splitlines() if line.strip() and not line.lstrip().startswith(("#", "from ", "import "))]
    assert code[0].startswith("def step(engine") and code[-1].strip() == 'raise NotImplementedError("your turn")'
    moves = ("take_ready", "forward_step", "samplers", "append_token", "finish_sequence", "record", "failed", "samples",
             "release", "for ", "if ", "return ", "+=", "[::-1]")
    assert not [m for m in moves if any(m in line for line in code)], code
    comments = " ".join(line for line in stub.splitlines() if line.lstrip().startswith("#"))
    assert not [m for m in ("engine.", "release=", "s.seq", "samplers") if m in comments], comments   # words, not code


# --- in zh-TW -------------------------------------------------------------------------------------
RAISES = "def step(engine):\n    return engine.no_such_method()\n"   # raises AttributeError at its first step

# name: (a reader's file, or "stub" for the notebook's, and what the zh-TW output must say). Three of the slips
# (each grading runs the hidden cases too), chosen for the lines they show: a record that does not exist and a
# missing block table, an exception on the reader's own line, the history the step never recorded.
ZH_WRONG = {
    "never forks the siblings": (WRONG["never forks the siblings"][0],
                                 ["紀錄 r0.1：你的 step 之後不存在；隨附的 step 之後是執行中，token 為 [1006]",
                                  "r0.1 在你的 step 之後沒有區塊表", "分岔出它的其他樣本"]),
    "checks the stop before appending": (WRONG["checks the stop before appending"][0],
                                         ["你的 step 引發了 IndexError", "（你的第 ", "第 0 步（這一步之前：執行中"]),
    "never records": (WRONG["never records"][0], ["引擎的歷史紀錄與追蹤共有 0 筆", "engine.record(scheduled)"]),
    "raises": (RAISES, ["你的 step 引發了 AttributeError", "同樣錯誤的還有："]),
    "stub": ("stub", []),
}


@pytest.mark.usefixtures("zh_tw")
@pytest.mark.parametrize("name", ZH_WRONG)
def test_a_wrong_step_explains_in_zh_tw(name: str, tmp_path: Path) -> None:
    source, said = ZH_WRONG[name]
    if source == "stub":
        source = _notebook_sources()["ch12-06"].partition("\n")[2]
    verdict, out = _grade(_save(tmp_path, source))
    verdict_line = "○ step（引擎的一步）：尚未作答" if name == "stub" else "✗ step（引擎的一步）：未通過"
    assert verdict is False and out.startswith(verdict_line), out
    assert untranslated(out) == [], out
    missing = [s for s in said if s not in out]
    assert not missing, f"{missing} not in:\n{out}"


def _raising_step(engine: LLMEngine) -> list:
    return engine.no_such_method()      # type: ignore[attr-defined]


def test_the_answer_key_speaks_the_language_it_is_printed_in() -> None:
    """The shipped step's views are cached once per case, in whichever language made them; the rows a ``try_*``
    returns read in the language of the call (a notebook shows a dict by its repr, which reads a value as it is),
    and the views' own messages print in the language of the moment."""
    rows = ch12.try_step(shipped.step, 0)           # made in English
    messages.set_language("zh-TW")
    try:
        before = ch12.try_step(shipped.step, 0)[0]["before"]
        record = str(rows[-1]["expected"].records["r2"])
        problem = str(ch12.try_step(_raising_step, 0)[0]["problem"])
    finally:
        messages.set_language("en")
    assert before.startswith("執行中（已計算/token 數）[無]；等待中 [r0（7 個 token）、r1（8 個 token）、r2（9 個 token）]；")
    assert record.startswith("已完成（length），token 為 [") and problem.startswith("你的 step 引發了 AttributeError")
    assert str(rows[0]["before"]).startswith("running (computed/tokens) [none]; waiting [r0 (7 tokens), r1 (8 tokens)")
