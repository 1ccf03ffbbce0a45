"""GEMM_KERNELS_ARCH: the runtime reports an older GPU's features, so the paths an Ampere, Ada or
Turing learner takes run here (in the interpreter) and on an H100.  Each case is a fresh process:
the switch is read once, at import."""

import os
import subprocess
import sys

import pytest

_SCRIPT = r"""
import sys, torch, gemm_kernels as gk
from gemm_kernels import runtime
from gemm_kernels.kernels import configs
from gemm_kernels.testing import assert_close, random_matrix
arch = sys.argv[1]
info = gk.describe()
assert info["arch_from_env"] and runtime.arch_name() == arch, info
assert not gk.supports_tma() and not runtime.supports_wgmma()
assert configs.shared_memory_limit() == runtime.ARCH_SHARED_MEMORY[runtime.RUNTIME.capability]
a, b = random_matrix(70, 45, torch.float16), random_matrix(45, 33, torch.float16)
ref = gk.matmul_ref(a, b, out_dtype=torch.float64)
for fn in (gk.matmul, gk.matmul_persistent):  # the pointer kernels run
    assert_close(fn(a, b), ref)
a64, b64 = random_matrix(64, 64, torch.float16), random_matrix(64, 64, torch.float16)  # TMA-aligned
for fn in (gk.matmul_tma, gk.matmul_streamk, gk.matmul_ws):  # the Hopper ones say why not
    try:
        fn(a64, b64)
    except RuntimeError as e:
        assert f"treated as {arch}" in str(e) and "GEMM_KERNELS_ARCH" in str(e), e
    else:
        raise AssertionError(f"{fn.__name__} ran on an emulated {arch}")
x = random_matrix(40, 45, torch.float16)
w = torch.randn(3, 45, 33).to(gk.DEVICE, torch.float16)
offs = torch.tensor([10, 10, 40], dtype=torch.int32, device=gk.DEVICE)
assert_close(gk.grouped_mm(x, w, offs), gk.grouped_mm_ref(x, w, offs, out_dtype=torch.float64))  # pointer path
a16 = random_matrix(20, 16, torch.bfloat16)
if runtime.RUNTIME.capability < (8, 0):
    try:
        gk.matmul(a16, a16.t())
    except TypeError as e:
        assert "bfloat16" in str(e) and "float16" in str(e) and arch in str(e), e
    else:
        raise AssertionError("bf16 ran on sm_75")
    from gemm_kernels.lab.compile_examples import registered_examples
    assert any("bf16" in e.name for e in registered_examples())  # compiled for sm_90 only: no bf16 gate
else:
    assert_close(gk.matmul(a16, a16.t().contiguous()), gk.matmul_ref(a16, a16.t(), out_dtype=torch.float64),
                 torch.bfloat16)
print("ok")
"""


def _run(arch, script=_SCRIPT, *args):
    env = {**os.environ, "GEMM_KERNELS_ARCH": arch}
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.mark.parametrize("arch", ["sm_75", "sm_86"])
def test_an_older_gpu_takes_the_pointer_paths(arch):
    out = _run(arch, _SCRIPT, arch)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


@pytest.mark.parametrize("value", ["sm_95", "ampere", "8"])
def test_an_unknown_arch_is_refused_at_import(value):
    out = _run(value, "import gemm_kernels")
    assert out.returncode != 0 and "GEMM_KERNELS_ARCH" in out.stderr and "use one of" in out.stderr


def test_spellings_of_an_arch():
    from gemm_kernels import runtime

    for value in ("sm_86", "86", "8.6", "SM_86"):
        assert runtime.parse_arch(value) == (8, 6)
    assert runtime.parse_arch("sm_90a") == (9, 0)


_MEMORY_SCRIPT = r"""
import torch, gemm_kernels as gk
free = gk.free_gpu_bytes()
assert 0 < free <= 8 * 2**30, free
x = torch.empty(int(free * 0.9) // 2, dtype=torch.float16, device="cuda")  # what the cap leaves fits...
try:
    torch.empty(9 * 2**30, dtype=torch.uint8, device="cuda")  # ...and past it torch refuses
except torch.OutOfMemoryError:
    print("ok")
"""


@pytest.mark.gpu
def test_gpu_memory_cap_of_a_learners_card():
    """GEMM_KERNELS_MEMORY_GB=8: torch's allocator is capped and free_gpu_bytes, which the large
    demos size themselves from, says so."""
    env = {**os.environ, "GEMM_KERNELS_MEMORY_GB": "8"}
    out = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
