"""runtime: the backend choice, seeding, the version report and the Triton known-answer self-test."""

from __future__ import annotations

import os
import random
import sys
import warnings

import numpy as np
import pytest
import torch

import pagedkv_edu
from pagedkv_edu import runtime

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU (interpreter) path")


@no_cuda
def test_without_cuda_the_interpreter_is_chosen_before_triton_is_imported() -> None:
    assert runtime.BACKEND == "interpreter"
    assert os.environ["TRITON_INTERPRET"] == "1"
    assert runtime.device() == torch.device("cpu")
    assert "interpreter" in runtime.device_name()


def test_backend_and_device_agree() -> None:
    assert runtime.BACKEND in ("cuda", "interpreter")
    assert runtime.device().type == ("cuda" if runtime.BACKEND == "cuda" else "cpu")
    assert pagedkv_edu.device() == runtime.device()


def test_choose_backend_sets_the_interpreter_without_cuda(monkeypatch) -> None:
    """Without CUDA the variable is set before anything imports triton, silently."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert runtime._choose_backend() == "interpreter"
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_choose_backend_warns_when_triton_was_imported_first(monkeypatch) -> None:
    import triton  # noqa: F401  (it is in sys.modules, as after a notebook's early `import triton`)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.warns(RuntimeWarning, match="import pagedkv_edu first"):
        assert runtime._choose_backend() == "interpreter"
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_choose_backend_uses_cuda_unless_the_reader_asked_for_the_interpreter(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert runtime._choose_backend() == "cuda"
    assert "TRITON_INTERPRET" not in os.environ
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert runtime._choose_backend() == "interpreter"


def test_versions_names_every_package_the_numbers_depend_on() -> None:
    v = runtime.versions()
    for name in ("python", "torch", "triton", "numpy", "transformers"):
        assert v[name] and v[name] != "not installed", name
    assert "platform" not in v  # the machine's kernel build stays out of committed notebook outputs
    assert v["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert v["numpy"] == np.__version__


def test_triton_self_test_passes() -> None:
    runtime.triton_self_test()  # raises TritonSelfTestError on a wrong answer


def _corrupting_jit(monkeypatch: pytest.MonkeyPatch, corrupt) -> None:
    """Make every ``@triton.jit`` kernel run, then ``corrupt(out)`` its output argument.

    This stands in for a broken triton/numpy pairing without touching runtime.py: the
    self-test builds its kernel with ``triton.jit`` at call time, so patching ``triton.jit``
    reaches it.
    """
    import triton

    real_jit = triton.jit

    class Launcher:
        def __init__(self, kernel) -> None:
            self.kernel = kernel

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                self.kernel[grid](*args, **kwargs)
                corrupt(args[1])
            return launch

    monkeypatch.setattr(triton, "jit", lambda fn=None, **kw: Launcher(real_jit(fn, **kw)))


@pytest.mark.parametrize("name, corrupt, wrong", [
    ("silent zeros", lambda out: out.zero_(), 37),
    ("kernel never ran", lambda out: out.fill_(float("nan")), 37),
    ("masked tail lost", lambda out: out[32:].fill_(0.0), 5),
    ("one value off", lambda out: out[3].add_(1.0), 1),
])
def test_triton_self_test_catches_a_wrong_kernel(monkeypatch, name, corrupt, wrong) -> None:
    _corrupting_jit(monkeypatch, corrupt)
    with pytest.raises(runtime.TritonSelfTestError, match=f"{wrong} of 37 outputs wrong") as info:
        runtime.triton_self_test()
    assert "Versions" in str(info.value) and "triton" in str(info.value)


def test_triton_self_test_reports_a_kernel_that_raises(monkeypatch) -> None:
    """A runtime-bounded loop that breaks under a bad triton/numpy pairing raises inside the launch."""
    import triton

    class Broken:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise TypeError("'numpy.int32' object cannot be interpreted as an integer")
            return launch

    monkeypatch.setattr(triton, "jit", lambda fn=None, **kw: Broken())
    with pytest.raises(runtime.TritonSelfTestError, match="raised TypeError.*numpy 2.4"):
        runtime.triton_self_test()


def test_setup_fails_loudly_when_the_self_test_fails(monkeypatch) -> None:
    _corrupting_jit(monkeypatch, lambda out: out.zero_())
    with pytest.raises(runtime.TritonSelfTestError):
        pagedkv_edu.setup(seed=0, quiet=True)
    pagedkv_edu.setup(seed=0, self_test=False, quiet=True)  # the escape hatch skips it


def test_setup_prints_backend_seed_versions_and_the_self_test(capsys) -> None:
    report = pagedkv_edu.setup(seed=5)
    printed = capsys.readouterr().out
    assert printed.strip() == str(report)
    assert report.seed == 5 and report.backend == runtime.BACKEND and report.device == runtime.device_name()
    assert report.versions == runtime.versions()
    for value in (runtime.BACKEND, *report.versions.values()):
        assert value in printed
    assert "triton self-test: passed" in printed


def test_setup_quiet_prints_nothing(capsys) -> None:
    pagedkv_edu.setup(seed=0, quiet=True)
    assert capsys.readouterr().out == ""


def _draws() -> tuple:
    return (random.random(), float(np.random.rand()), torch.rand(3).tolist(), torch.randn(2).tolist())


def test_setup_is_deterministic_under_seeding() -> None:
    pagedkv_edu.setup(seed=123, self_test=False, quiet=True)
    first = _draws()
    pagedkv_edu.setup(seed=123, self_test=False, quiet=True)
    assert _draws() == first
    pagedkv_edu.setup(seed=124, self_test=False, quiet=True)
    assert _draws() != first


def test_self_test_does_not_disturb_the_seeded_streams() -> None:
    """Seeding happens before the self-test; the self-test draws no random numbers."""
    pagedkv_edu.setup(seed=7, self_test=True, quiet=True)
    with_test = _draws()
    pagedkv_edu.setup(seed=7, self_test=False, quiet=True)
    assert _draws() == with_test


def test_setup_shows_pools_and_managers_as_pictures_in_ipython(monkeypatch) -> None:
    """pagedkv_edu.setup() registers the pictures (the runtime itself imports no views)."""
    import types

    import IPython

    import pagedkv_edu
    from pagedkv_edu.core.block_manager import BlockManager
    from pagedkv_edu.core.block_pool import BlockPool

    registered = []
    formatter = types.SimpleNamespace(for_type=lambda kind, fn: registered.append(kind))
    shell = types.SimpleNamespace(display_formatter=types.SimpleNamespace(mimebundle_formatter=formatter))
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    pagedkv_edu.setup(seed=0, self_test=False, quiet=True)
    assert registered == [BlockPool, BlockManager]
