"""Nsight Compute counters of the cluster probe, with and without the multicast of B (GPU only).

    ncu --metrics <list> -k regex:_cluster_gemm --launch-skip 1 --launch-count 1 \\
        python tests/gpu_cluster_probe/ncu_probe.py MULTICAST M N K

runs ``proto.run`` twice on fp16 inputs (the first call compiles); the profiler takes the second.
What the course checks with it: how many bytes L2 sends to the SMs (``lts__t_sectors_srcunit_tex_op_read``,
sectors of 32 bytes) against ``models.l2model.cluster_l2_to_sm_bytes``.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proto  # noqa: E402

if __name__ == "__main__":
    multicast = sys.argv[1] == "1"
    M, N, K = (int(x) for x in sys.argv[2:5])
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    for _ in range(2):
        c = proto.run(a, b, multicast=multicast)
    torch.cuda.synchronize()
    err = float((c.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm())
    print(f"multicast={multicast} {M}x{N}x{K}: relative error {err:.2e}", flush=True)
