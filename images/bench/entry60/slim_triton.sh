#!/usr/bin/env bash
# A Triton tree small enough to carry to a GPU machine whose image has an older Triton (PERF_NOTES 60):
# the wheel's package without the AMD backend, CUPTI, proton and the bundled CUDA tools, libtriton
# stripped of its debug info, as a .tar.xz (about 40 MB from a 286 MB wheel).
#   bash slim_triton.sh triton-3.9.0-cp312-abi3-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl triton_slim.tar.xz
# Where it runs, with the machine's own Triton installed beside it (its ptxas does the assembling):
#   mkdir -p T && tar xJf triton_slim.tar.xz -C T
#   TRITON_BACKENDS_IN_TREE=1 TRITON_PTXAS_PATH=<old triton>/backends/nvidia/bin/ptxas \
#   TRITON_PTXAS_BLACKWELL_PATH=<same> PYTHONPATH=T python multicast_gluon.py gpu out.json
# (in-tree backends: the installed older Triton's entry points would name the AMD backend removed here)
set -euo pipefail
wheel=$(realpath "$1"); out=$(realpath -m "$2")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work" && unzip -q "$wheel" 'triton/*'
rm -rf triton/backends/amd triton/backends/nvidia/lib/cupti* triton/backends/nvidia/bin \
       triton/_C/libproton.so triton/instrumentation triton/plugins
strip --strip-unneeded triton/_C/libtriton.so
tar cf - triton | xz -9 -T0 > "$out"
ls -l "$out"
