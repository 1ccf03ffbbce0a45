"""Where a repeated call's host time goes (GPU only): ``python tests/gpu_host_profile.py OUT.json``.

For each public single-GEMM launcher at 256^3 fp16 (the GPU finishes faster than the host
launches): host us per call of the whole call, of its parts rebuilt one at a time (the key, the
output allocation, the kept launch alone), and a cProfile of 1000 calls by own time.
"""

import json
import sys

import torch

import gemm_kernels as gk
from gemm_kernels.bench.core import host_ms, host_profile
from gemm_kernels.kernels import launches, matmul
from gemm_kernels.kernels.autograd import grad_enabled_for


def launcher_calls(a, b) -> dict:
    """torch.matmul and every public single-GEMM launcher on ``a @ b``, by name (``gpu_host_parts`` times them too)."""
    return {
        "torch.matmul": lambda: torch.matmul(a, b),
        "matmul": lambda: gk.matmul(a, b),
        "matmul_persistent": lambda: gk.matmul_persistent(a, b),
        "matmul_tma": lambda: gk.matmul_tma(a, b),
        "matmul_streamk": lambda: gk.matmul_streamk(a, b),
        "matmul_splitk": lambda: gk.matmul_splitk(a, b),
        "matmul_ws": lambda: gk.matmul_ws(a, b),
    }


def main(path):
    a = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    calls = launcher_calls(a, b)
    result = {"host_us": {}, "profile": {}, "parts_us": {}}
    for name, fn in calls.items():
        fn()
        result["host_us"][name] = [round(host_ms(fn) * 1e3, 2) for _ in range(3)]
        result["profile"][name] = host_profile(fn, 1000)
        print(name, result["host_us"][name], *result["profile"][name], sep="\n  ", flush=True)
    key = launches.call_key((a, b, None), ("grouped", 8, None))
    kept = matmul._KEPT.get(key)
    out = torch.empty(256, 256, device="cuda", dtype=torch.float16)
    parts = {
        "call_key": lambda: launches.call_key((a, b, None), ("grouped", 8, None)),
        "keeping()": launches.keeping,
        "torch.empty": lambda: torch.empty((256, 256), device=a.device, dtype=a.dtype),
        "KeptLaunch call": lambda: kept(a=a, b=b, bias=None),
        "BoundLaunch.launch_with": lambda: kept.bound.launch_with(a_ptr=a, b_ptr=b, c_ptr=out, bias_ptr=out,
                                                                  trace_ptr=out),
        "grad_enabled_for": lambda: grad_enabled_for(a, b, None),
    }
    for name, fn in parts.items():
        result["parts_us"][name] = round(min(host_ms(fn) for _ in range(3)) * 1e3, 2)
        print(name, result["parts_us"][name], flush=True)
    result["gpu"] = torch.cuda.get_device_name()
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
