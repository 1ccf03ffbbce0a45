"""Host us per kept call of each single-GEMM launcher at 256^3 fp16, and of the parts this change
touches (GPU).  ``python tests/gpu_host_parts.py LABEL OUT.json ROUNDS`` (PYTHONPATH=<a package copy> to time
another version; PERF_NOTES 36 compares three runs of the package before and after, ``images/bench/entry36/host_opt``)."""
import json
import statistics
import sys

import torch

from gemm_kernels import runtime
from gemm_kernels.bench.core import host_ms
from gemm_kernels.kernels import launches, matmul
from gemm_kernels.kernels.autograd import grad_enabled_for
from gpu_host_profile import launcher_calls

label, path, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
a = torch.randn(256, 256, device="cuda", dtype=torch.float16)
b = torch.randn(256, 256, device="cuda", dtype=torch.float16)
ref = a.double() @ b.double()
calls = launcher_calls(a, b)  # entry 36's records predate its matmul_ws row
errors = {}
for name, fn in calls.items():
    fn()
    out = fn()  # a kept call
    errors[name] = float((out.double() - ref).norm() / ref.norm())
torch.cuda.synchronize()
index = torch.cuda.current_device()
key = launches.call_key((a, b, None), ("grouped", 8, None))
kept = matmul._KEPT.get(key)
parts = {
    "torch.empty(Size)": lambda: torch.empty(a.shape, device=a.device, dtype=a.dtype),
    "torch.empty(m, n)": lambda: torch.empty(256, 256, device=a.device, dtype=a.dtype),
    "call_key": lambda: launches.call_key((a, b, None), ("grouped", 8, None)),
    "grad_enabled_for": lambda: grad_enabled_for(a, b, None),
    "isCurrentStreamCapturing": torch._C._cuda_isCurrentStreamCapturing,
    "getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(index),
    "stream_buffer x2": lambda: (runtime.stream_buffer("t1", 64, torch.float32, index),
                                 runtime.stream_buffer("t2", 8, torch.int32, index, zeroed=True)),
    "KeptLaunch(matmul)": lambda: kept(a=a, b=b, bias=None),
}
if hasattr(runtime, "stream_buffers"):
    requests = (("t1", 64, torch.float32, False), ("t2", 8, torch.int32, True))
    parts["stream_buffers(2)"] = lambda: runtime.stream_buffers(index, requests)

    import copy

    kept_tensors = copy.copy(kept)  # the same bound launch, handed tensors
    kept_tensors.addresses = False
    parts["KeptLaunch(matmul) tensors"] = lambda: kept_tensors(a=a, b=b, bias=None)
    assert kept.addresses
res = {name: [] for name in [*calls, *parts]}
for r in range(rounds):
    for name, fn in [*calls.items(), *parts.items()]:
        res[name].append(host_ms(fn, 2000) * 1e3)
summary = {k: {"min": round(min(v), 2), "median": round(statistics.median(v), 2)} for k, v in res.items()}
with open(path, "w") as f:
    json.dump({"label": label, "gpu": torch.cuda.get_device_name(), "rel_err": errors, "host_us": summary,
               "samples": res}, f, indent=1)
print(label, json.dumps({k: v["median"] for k, v in summary.items()}))
print(label, "rel_err", json.dumps({k: f"{v:.1e}" for k, v in errors.items()}))
