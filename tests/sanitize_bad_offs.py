"""grouped_mm and its weight gradient given bad ``offs``, for ``compute-sanitizer --tool memcheck``
(``make sanitize``; ``tests/test_moe.py`` runs it when compute-sanitizer is on the PATH).

    python tests/sanitize_bad_offs.py unchecked   # check_offs=False and the weight gradient: the kernels
                                                  # clamp every range into x, so nothing is touched outside
                                                  # x, w and out; exits 0 when the good experts' rows are right
    python tests/sanitize_bad_offs.py default     # the default call: its kernel records each bad offs in
                                                  # pinned host memory, reported after the synchronize
                                                  # (exits 3 when one is not)

Not a pytest module: the sanitizer wraps the whole process."""
import sys

import torch

import gemm_kernels as gk
from gemm_kernels.kernels import moe
from gemm_kernels.testing import rel_err, TOLERANCES

T, K, N, E = 96, 64, 48, 4
BAD = {  # name: offs
    "negative": [-5, 20, 40, 96],
    "decreasing": [50, 20, 60, 96],
    "far past T": [10, 20, 100000, 100000],
    "2**30": [10, 2**30, 2**30, 2**30],
    "int32 max": [2**31 - 1] * E,
}


def unchecked() -> int:
    dev, dtype = gk.DEVICE, torch.bfloat16
    torch.manual_seed(0)
    x = torch.randn(T, K, device=dev, dtype=dtype)
    w = torch.randn(E, K, N, device=dev, dtype=dtype)
    w_nk = torch.randn(E, N, K, device=dev, dtype=dtype).transpose(1, 2)
    dy = torch.randn(T, N, device=dev, dtype=dtype)
    wrong = 0
    for name, offs_list in BAD.items():
        offs = torch.tensor(offs_list, device=dev, dtype=torch.int32)
        for wname, ww in (("w", w), ("w_nk^T", w_nk)):
            for tma in (False, None):
                out = gk.grouped_mm(x, ww, offs, tma=tma, check_offs=False)
                # rows below every entry of offs belong to expert 0 alone: those must be right
                first = min(offs_list)
                if 0 <= first <= T and first:
                    ref = (x[:first].double() @ ww[0].double())
                    err = rel_err(out[:first], ref)
                    if not err <= TOLERANCES[dtype]:
                        wrong += 1
                        print(f"BAD {name} {wname} tma={tma}: expert 0 rel err {err}", flush=True)
        for tma in (False, None):
            moe.grouped_mm_wgrad(x, dy, offs, tma=tma)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    print(f"{len(BAD)} bad offs, unchecked path and weight gradient: {wrong} wrong", flush=True)
    return 1 if wrong else 0


def default() -> int:
    dev = gk.DEVICE
    x = torch.randn(T, K, device=dev, dtype=torch.bfloat16)
    w = torch.randn(E, K, N, device=dev, dtype=torch.bfloat16)
    reported = 0
    for name, offs_list in BAD.items():
        gk.grouped_mm(x, w, torch.tensor(offs_list, device=dev, dtype=torch.int32))
        print(f"{name}: launched without a sync", flush=True)
        torch.cuda.synchronize()
        try:
            gk.raise_pending_offs_error()
        except ValueError as err:
            reported += 1
            print(f"{name}: reported after the synchronize: {err}", flush=True)
    print(f"{reported} of {len(BAD)} reported", flush=True)
    return 0 if reported == len(BAD) else 3


if __name__ == "__main__":
    sys.exit({"unchecked": unchecked, "default": default}[sys.argv[1]]())
