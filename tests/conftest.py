"""Test setup: the package decides interpreter vs GPU on import (before triton kernels exist);
outputs are poisoned with NaN so an element a kernel never wrote fails its comparison."""

import math
import os
import re

import pytest
import torch

import gemm_kernels  # noqa: F401  (decides interpreter vs GPU before any kernel module loads)
from gemm_kernels import runtime
from gemm_kernels.kernels import tuning_cache

# A child process a test starts (a sanitizer run, a notebook, a worker) imports the package under
# test, also from a checkout that is not installed, as on the GPU machines.
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(gemm_kernels.__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_PACKAGE_PARENT, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != _PACKAGE_PARENT]])

_real_empty = torch.empty


def _nan_empty(*args, **kwargs):
    out = _real_empty(*args, **kwargs)
    if out.dtype.is_floating_point:
        out.fill_(math.nan)
    elif out.dtype in (torch.int32, torch.int64):
        out.fill_(-(2**30))
    return out


#: the autotune mode the test run started with (GEMM_KERNELS_AUTOTUNE, or unset)
_AUTOTUNE_AT_START = os.environ.get(runtime.AUTOTUNE_ENV)


@pytest.fixture(autouse=True)
def keep_autotune_mode():
    """A notebook cell run in-process (``gk.default_autotune("small")``, also from a module-scoped
    fixture) sets the mode through the environment: every test starts and ends with the mode the
    run started with."""
    def restore():
        if _AUTOTUNE_AT_START is None:
            os.environ.pop(runtime.AUTOTUNE_ENV, None)
        else:
            os.environ[runtime.AUTOTUNE_ENV] = _AUTOTUNE_AT_START

    restore()
    yield
    restore()


@pytest.fixture(autouse=True)
def tuning_cache_of_its_own(monkeypatch, tmp_path_factory):
    """Each test keeps tuned picks on disk in a directory of its own (``kernels.tuning_cache``):
    no test reads a pick another test, or an earlier run on this machine, kept for the same
    kernel and key (tests build TunedKernels with stand-in timers), and none lands in the user's cache."""
    monkeypatch.setenv(tuning_cache.ENV, str(tmp_path_factory.mktemp("tuning")))


@pytest.fixture(autouse=True)
def poison_outputs(monkeypatch):
    """torch.empty returns NaN-filled tensors during every test."""
    monkeypatch.setattr(torch, "empty", _nan_empty)
    yield


def pytest_addoption(parser):
    parser.addoption("--shard", default=None, metavar="I/N",
                     help="run the I-th of N equal parts of the collected tests (1 <= I <= N): make test-gpu SHARD=I/N")


def _shard(value: str) -> tuple[int, int]:
    if not re.fullmatch(r"\s*[0-9]+/[0-9]+\s*", value):
        raise pytest.UsageError(f"--shard {value!r}: give I/N, e.g. 2/4")
    try:
        i, n = (int(part) for part in value.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard {value!r}: give I/N, e.g. 2/4") from None
    if not 1 <= i <= n:
        raise pytest.UsageError(f"--shard {value!r}: I must be between 1 and N")
    return i, n


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected: equal parts of what runs
def pytest_collection_modifyitems(config, items):
    shard = config.getoption("--shard")
    if shard is not None:
        i, n = _shard(shard)
        # every N-th in collection order: each part gets a share of every file
        config.hook.pytest_deselected(items=[item for k, item in enumerate(items) if k % n != i - 1])
        items[:] = [item for k, item in enumerate(items) if k % n == i - 1]
    if runtime.on_gpu():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU ({runtime.RUNTIME.reason})")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def seed():
    torch.manual_seed(0)
