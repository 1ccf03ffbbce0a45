"""The runtime decides once: interpreter on a CPU-only machine (never touching CUDA), forceable on a GPU."""

import os
import subprocess
import sys

import pytest

import gemm_kernels
from gemm_kernels import runtime


def _run(code, **env):
    full_env = {**os.environ, **env}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_describe_reports_every_fact():
    info = gemm_kernels.describe()
    for key in ("mode", "device", "gpu", "num_sms", "supports_tma", "torch", "triton"):
        assert key in info
    assert info["num_sms"] == gemm_kernels.num_sms() >= 1
    assert str(gemm_kernels.DEVICE) == info["device"]


def test_interpreter_matches_environment():
    assert os.environ.get("TRITON_INTERPRET") == ("1" if runtime.interpreted() else os.environ.get("TRITON_INTERPRET"))
    if runtime.interpreted():
        assert gemm_kernels.DEVICE.type == "cpu"
        assert gemm_kernels.num_sms() == runtime.INTERPRETER_NUM_SMS


def test_forcing_the_interpreter_switches_triton_before_kernels_exist():
    code = (
        "import gemm_kernels, torch\n"
        "from gemm_kernels.matmul import _matmul_kernel\n"
        "print(gemm_kernels.interpreted(), type(_matmul_kernel).__name__, gemm_kernels.DEVICE)\n"
        "a = torch.randn(5, 7, dtype=torch.float16); b = torch.randn(7, 3, dtype=torch.float16)\n"
        "print(float((gemm_kernels.matmul(a, b).float() - a.float() @ b.float()).abs().max()) < 1e-2)\n"
    )
    out = _run(code, GEMM_KERNELS_INTERPRET="1").splitlines()
    assert out[0] == "True InterpretedFunction cpu"
    assert out[1] == "True"


@pytest.mark.skipif(runtime.on_gpu(), reason="checks the CPU-only path")
def test_cpu_import_and_run_never_initialise_cuda():
    code = (
        "import torch, gemm_kernels\n"
        "a = torch.randn(20, 9, dtype=torch.bfloat16); b = torch.randn(9, 11, dtype=torch.bfloat16)\n"
        "gemm_kernels.matmul(a, b)\n"
        "print(torch.cuda.is_initialized())\n"
    )
    assert _run(code) == "False"


@pytest.mark.gpu
def test_gpu_runtime_facts():
    import torch

    assert runtime.on_gpu() and gemm_kernels.DEVICE.type == "cuda"
    props = torch.cuda.get_device_properties(0)
    assert gemm_kernels.num_sms() == props.multi_processor_count
    assert gemm_kernels.supports_tma() == (props.major >= 9)
    assert gemm_kernels.gpu_name() == props.name
