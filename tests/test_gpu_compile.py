"""The GPU path of the kernels compiles for an H100/H200 (sm_90), even on a machine without a GPU.

The interpreter accepts code a GPU compiler rejects (tl.dot below 16 rows, layouts that spill),
so CPU-only CI would never see such a bug. ``scripts/compile_for_gpu.py --quick`` compiles one
configuration of each kernel ahead of time with Triton's bundled ptxas; it must succeed
without register spills.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compile_for_gpu.py"
# Found without importing triton: this process must import it only after pagedkv_edu has
# chosen between the GPU and the interpreter.
PTXAS = Path(importlib.util.find_spec("triton").origin).parent / "backends" / "nvidia" / "bin" / "ptxas"


@pytest.mark.skipif(not PTXAS.exists(), reason="this triton build has no bundled NVIDIA toolchain")
def test_kernels_compile_for_sm90_without_spills() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "compiled 10 kernels for sm_90; no register spills" in result.stdout, result.stdout
