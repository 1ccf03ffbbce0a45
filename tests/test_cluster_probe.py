"""The 2-CTA cluster + TMA multicast experiment (tests/gpu_cluster_probe, PERF_NOTES entry 32)
compiles for sm_90 on any machine with Triton 3.6, the GPU image's version, and its PTX holds
the cluster launch, the multicast copy, the remote arrive and the cluster barrier.  It relies on
3.6's internals, so other versions skip (3.9 has real APIs for all four)."""

import importlib.util
from pathlib import Path

import pytest
import triton

pytestmark = pytest.mark.skipif(not triton.__version__.startswith("3.6"), reason="an experiment written for Triton 3.6")


def _proto():
    spec = importlib.util.spec_from_file_location("cluster_proto", Path(__file__).parent / "gpu_cluster_probe" / "proto.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("multicast", [True, False])
def test_the_cluster_kernel_compiles_for_hopper(multicast):
    kernel, _ = _proto().compile_for_sm90(M=512, N=512, K=256, multicast=multicast)
    ptx = kernel.asm["ptx"]
    assert ".reqnctapercluster 2" in ptx  # a cluster launch either way
    # only the multicast kernel shares slots: the copy into both CTAs, the consumers freeing the
    # peer's slot, and the cluster barrier that keeps a CTA from exiting under its peer's writes
    for line in ("multicast::cluster", "mbarrier.arrive.release.cluster.shared::cluster", "barrier.cluster.wait"):
        assert (line in ptx) == multicast, line
