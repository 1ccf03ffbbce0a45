"""PERF_NOTES 60: TMA multicast in Gluon, which Triton 3.7 added (issue 51, item 6).

A two-CTA cluster computes a (2 * BM) x BN tile of C = A @ B: each CTA loads its own BM rows of A,
and B's BK x BN tile is read once for both: CTA 0 loads it by multicast TMA loads into both CTAs'
shared memory (the compiler's choice of issuer; Triton 3.6 has neither the
``multicast=`` argument nor layouts across a cluster's CTAs: ``cga_layout``).  Simple on purpose:
one slot, and a cluster barrier after each K step, since the next multicast writes into the other
CTA's shared memory, which must be done reading it.  Not persistent, not warp-specialized.

    python multicast_gluon.py ptx       # any machine with Triton >= 3.7: the PTX's TMA loads and cluster lines
    python multicast_gluon.py gpu OUT   # Hopper and Triton >= 3.7: checked against float64, timed (not run yet)
"""
import sys

import torch
import triton

MULTICAST_TRITON = (3, 7)  # the first Triton whose Gluon has tma.async_load(..., multicast=True)


def available() -> bool:
    """Whether this Triton's Gluon can build the cluster kernel (the version gate)."""
    return tuple(int(p) for p in triton.__version__.split(".")[:2]) >= MULTICAST_TRITON


if available():
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    @gluon.jit
    def cluster_matmul_kernel(a_desc, b_desc, c_desc, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr):
        """One cluster of two CTAs per (2 * BM) x BN tile of C; B's tile multicast to both."""
        off_m = gl.program_id(0) * 2 * BM
        off_n = gl.program_id(1) * BN
        a_s = gl.allocate_shared_memory(a_desc.dtype, a_desc.block_type.shape, a_desc.layout)
        b_s = gl.allocate_shared_memory(b_desc.dtype, b_desc.block_type.shape, b_desc.layout)
        bar = mbarrier.allocate_mbarrier()
        mbarrier.init(bar, count=1)
        gl.barrier(cluster=True)  # both CTAs' barriers exist before a multicast signals them (a release
        # and acquire: an arrive.relaxed here would not make the init visible to the other CTA)
        # rows split between the CTAs (cga_layout [[1, 0]]): each CTA's accumulator is its BM rows
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, BN, 16], cga_layout=[[1, 0]])
        acc = gl.zeros([2 * BM, BN], gl.float32, acc_layout)
        phase = 0
        for k in range(0, K, BK):
            mbarrier.expect(bar, a_desc.nbytes_per_cta + b_desc.nbytes_per_cta)
            tma.async_load(a_desc, [off_m, k], bar, a_s)
            tma.async_load(b_desc, [k, off_n], bar, b_s, multicast=True)  # CTA 0 issues it, into both b_s
            mbarrier.wait(bar, phase)
            phase ^= 1
            acc = warpgroup_mma(a_s, b_s, acc)
            acc = warpgroup_mma_wait(0, deps=[acc])
            gl.barrier(cluster=True)  # both CTAs done with b_s before the next multicast overwrites it
        mbarrier.invalidate(bar)
        c_s = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
        c_s.store(acc.to(c_desc.dtype))
        tma.async_store(c_desc, [off_m, off_n], c_s)
        tma.store_wait(0)

    BM, BN, BK = 64, 128, 64

    def descriptors(a, b, c):
        """A split by rows between the two CTAs, B's tile the same in both (cga_layout [[0, 0]]), C as A."""
        dt = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}[a.dtype]
        rows, shared = [[1, 0]], [[0, 0]]
        la = gl.NVMMASharedLayout.get_default_for([2 * BM, BK], dt, cga_layout=rows)
        lb = gl.NVMMASharedLayout.get_default_for([BK, BN], dt, cga_layout=shared)
        lc = gl.NVMMASharedLayout.get_default_for([2 * BM, BN], dt, cga_layout=rows)
        return (TensorDescriptor.from_tensor(a, [2 * BM, BK], la), TensorDescriptor.from_tensor(b, [BK, BN], lb),
                TensorDescriptor.from_tensor(c, [2 * BM, BN], lc))


def compile_ptx(size=512) -> str:
    """The kernel's PTX for sm_90 with two CTAs per cluster, built without a GPU."""
    import os

    os.environ.setdefault("GEMM_KERNELS_COMPILE_ONLY", "1")
    from triton.backends.compiler import GPUTarget

    from gemm_kernels.lab._compile_worker import build_source

    a, b, c = (torch.zeros(size, size, dtype=torch.float16) for _ in range(3))
    ad, bd, cd = descriptors(a, b, c)
    fn = cluster_matmul_kernel
    while not isinstance(fn, triton.runtime.jit.JITFunction):
        fn = fn.fn
    source = build_source(fn, dict(a_desc=ad, b_desc=bd, c_desc=cd, K=size, BM=BM, BN=BN, BK=BK))
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_ctas": 2}).asm["ptx"]


def gpu(out_path, sizes=(2048, 4096)):  # needs Triton >= 3.7 on the GPU (PERF_NOTES 60: how it ran)
    import json

    from triton.testing import do_bench

    import gemm_kernels as gk  # the package's TMA kernel under the same Triton, for comparison

    rows = []
    for n in sizes:
        a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
        c = torch.full((n, n), float("nan"), device="cuda", dtype=torch.float16)
        ad, bd, cd = descriptors(a, b, c)
        grid = (n // (2 * BM), n // BN)  # clusters; each runs two CTAs

        def run():
            cluster_matmul_kernel[grid](ad, bd, cd, n, BM, BN, BK, num_warps=4, num_ctas=2)
        run()
        ref = a.double() @ b.double()
        err = ((c.double() - ref).norm() / ref.norm()).item()
        rows.append(dict(n=n, rel_err=err, cluster_us=do_bench(run) * 1e3,
                         matmul_tma_us=do_bench(lambda: gk.matmul_tma(a, b)) * 1e3,
                         torch_us=do_bench(lambda: torch.matmul(a, b)) * 1e3))
        print(rows[-1], flush=True)
    json.dump(dict(device=torch.cuda.get_device_name(), triton=triton.__version__, rows=rows), open(out_path, "w"),
              indent=1)


if __name__ == "__main__":
    if not available():
        sys.exit(f"Triton {triton.__version__}: Gluon's multicast load needs Triton >= 3.7")
    if sys.argv[1:2] == ["ptx"]:
        for line in compile_ptx().splitlines():
            if (("cp.async.bulk.tensor" in line or "barrier.cluster" in line or "%cluster_ctarank" in line)
                    and not line.lstrip().startswith(".")):
                print(line.strip())
    else:
        gpu(sys.argv[2])
