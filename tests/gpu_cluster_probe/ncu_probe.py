"""Nsight Compute counters of the cluster probe, with and without the multicast of B (GPU only).

    ncu --metrics <list> -k regex:_cluster_gemm --launch-skip 1 --launch-count 1 \\
        python tests/gpu_cluster_probe/ncu_probe.py MULTICAST M N K

runs ``proto.run`` twice on fp16 inputs (the first call compiles); the profiler takes the second.
Notebook 08 sets ``models.l2model.l2_to_sm_bytes`` beside two of its counters: the bytes delivered
to the SMs (``l1tex__m_xbar2l1tex_read_bytes``) and L2's read sectors requested by them
(``lts__t_sectors_srcunit_tex_op_read``, 32 bytes each); ``results.cluster_probe_counters`` reads
the committed output (``images/bench/entry33/ncu_probe_*.txt``).
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
