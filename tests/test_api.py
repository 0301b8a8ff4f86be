"""The names readers import, and the layout's promises: a pure-Python core, a simulator without kernels."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pagedkv_edu"
READERS_NAMES = ("BlockPool", "BlockTable", "BlockManager", "PrefixCache", "LLMEngine", "SamplingParams", "generate",
                 "simulate")


@pytest.mark.parametrize("name", READERS_NAMES)
def test_the_names_readers_import_come_from_the_package_top(name: str) -> None:
    import pagedkv_edu

    value = getattr(pagedkv_edu, name)
    assert callable(value) and value.__name__ == name
    assert name in pagedkv_edu.__all__


@pytest.mark.parametrize("old", ["block_pool", "block_table", "block_manager", "prefix_cache", "scheduler", "swap",
                                 "kv_cache", "simulate", "contiguous", "sharing", "routing", "generate.py"])
def test_no_module_is_left_behind_at_its_old_path(old: str) -> None:
    """The layout moved them (core/, sim/, engine/, attention/); no shim re-exports them at the old place."""
    assert not (PACKAGE / (old if old.endswith(".py") else f"{old}.py")).exists()


def test_the_core_imports_nothing_but_the_standard_library_and_the_packages_facts() -> None:
    """core/ is what a reader rewrites: pure Python, no torch, numpy or triton (tensors live in attention/ and model/)."""
    allowed_package = {"pagedkv_edu.checks", "pagedkv_edu.specs"}
    for path in sorted((PACKAGE / "core").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    continue                       # another core module
                names = [f"pagedkv_edu.{node.module}" if node.level == 2 else node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or name in allowed_package, f"{path.name} imports {name}"


def test_importing_the_simulator_loads_no_kernel() -> None:
    """``import pagedkv_edu.sim`` (and every experiment in it) must not import triton or the attention stack."""
    code = ("import sys, importlib, pkgutil, pagedkv_edu.sim as sim\n"
            "for m in pkgutil.iter_modules(sim.__path__): importlib.import_module('pagedkv_edu.sim.' + m.name)\n"
            "import pagedkv_edu.engine.engine, pagedkv_edu.core.protocols\n"
            "bad = [m for m in sys.modules if m == 'triton' or m.startswith(('pagedkv_edu.attention', 'pagedkv_edu.model'))]\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_every_module_imports() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        if parts[-1] != "__main__":
            importlib.import_module(".".join(parts))
