"""One call of each of three ``matmul_ws`` runs at 257 x 8192 x 28672 bf16, b = W.t() (GPU only), for
Nsight Compute (PERF_NOTES entry 38: the split units at base clock against the GPU's own):

    ncu --profile-from-start off -k regex:_matmul_ws_kernel --csv --metrics gpu__time_duration.sum,\\
    sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_active.max,\\
    sm__cycles_active.avg,lts__throughput.avg.pct_of_peak_sustained_elapsed,\\
    dram__throughput.avg.pct_of_peak_sustained_elapsed python tests/gpu_ws_wave_ncu.py
"""
import torch

from gemm_kernels.kernels import matmul_ws

RUNS = (("cooperative", 1), ("cooperative", 4), ("pingpong_64x256", 4))  # (tile, pieces)

M, N, K = 257, 8192, 28672
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
for name, s in RUNS:  # compile and plan outside the profiled range
    matmul_ws._launch(a, b, schedule=name, split_k=s)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for name, s in RUNS:
    matmul_ws._launch(a, b, schedule=name, split_k=s)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
