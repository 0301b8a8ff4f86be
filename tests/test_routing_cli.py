"""``python -m pagedkv_edu route``: per-policy figures as JSON, bounded flags, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pagedkv_edu.cli import main
from pagedkv_edu.sim.routing import POLICIES

KEYS = {"policy", "replicas", "requests", "warmup", "measured", "hit_rate", "prefill_tokens", "ttft_p50_ms",
        "ttft_p99_ms", "load_imbalance", "requests_per_replica"}


def test_route_json_reports_every_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["route", "--workload", "tenants", "--replicas", "3", "--requests", "60", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [row["policy"] for row in out["policies"]] == list(POLICIES)
    assert out["warmup"] == 15 and 0.3 < out["offered_load"] < 0.7      # a quarter warms up; the chapter's load
    for row in out["policies"]:
        assert KEYS <= set(row) and row["replicas"] == 3 and row["requests"] == 60
        assert row["warmup"] == 15 and row["measured"] == sum(row["requests_per_replica"]) == 45
        assert 0 <= row["hit_rate"] <= 1 and row["ttft_p99_ms"] >= row["ttft_p50_ms"] >= 0
    by = {row["policy"]: row for row in out["policies"]}
    assert by["prefix-affinity"]["hit_rate"] > by["round-robin"]["hit_rate"]


def test_route_one_policy_and_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["route", "--workload", "consultants", "--policy", "prefix-affinity", "--replicas", "2",
                 "--requests", "30"]) == 0
    text = capsys.readouterr().out
    assert "prefix-affinity" in text and "round-robin" not in text and "TTFT p99 ms" in text


def test_route_takes_a_warmup_and_the_chats_pause(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["route", "--workload", "chats", "--policy", "hybrid", "--requests", "40", "--warmup", "0",
                 "--think-ms", "2000", "--json"]) == 0
    slow = json.loads(capsys.readouterr().out)
    assert main(["route", "--workload", "chats", "--policy", "hybrid", "--requests", "40", "--warmup", "0", "--json"]) == 0
    fast = json.loads(capsys.readouterr().out)
    assert slow["think_ms"] == 2000 and fast["think_ms"] == 200 and slow["warmup"] == 0
    assert slow["offered_load"] < fast["offered_load"]                 # a longer pause spreads the same turns out
    assert slow["policies"][0]["measured"] == 40


def test_a_warmup_that_leaves_nothing_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["route", "--requests", "20", "--warmup", "20"]) == 2
    err = capsys.readouterr().err
    assert "--warmup 20" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_route_runs_the_smallest_tree_fallback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["route", "--workload", "consultants", "--policy", "hybrid-smallest-tree", "--replicas", "2",
                 "--requests", "30", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["policies"]
    assert row["policy"] == "hybrid-smallest-tree" and sum(row["requests_per_replica"]) == 30 - 30 // 4


@pytest.mark.parametrize("flags, named", [
    (["--replicas", "0"], "--replicas"), (["--replicas", "65"], "--replicas"), (["--requests", "-3"], "--requests"),
    (["--rate", "1e9"], "--rate"), (["--policy", "random"], "--policy"), (["--workload", "x"], "--workload"),
    (["--blocks", "10"], "--blocks"), (["--warmup", "-1"], "--warmup"), (["--think-ms", "x"], "--think-ms"),
])
def test_bad_flags_are_refused_by_name(flags: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["route", *flags])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and named in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_the_module_runs_as_a_command() -> None:
    proc = subprocess.run([sys.executable, "-m", "pagedkv_edu", "route", "--replicas", "0"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "--replicas" in proc.stderr and "Traceback" not in proc.stderr


def test_a_request_larger_than_a_replica_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["route", "--workload", "chats", "--blocks", "64", "--requests", "20"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: request") and "does not fit a replica" in err and len(err.splitlines()) == 1
