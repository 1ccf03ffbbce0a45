"""The default dispatch: ``matmul_auto(a, b)`` calls the launcher the rules pick for the call.

Each launcher of the course wins somewhere: the warp-specialized Gluon kernel on problems that
fill the GPU, split-K on few tiles with a long K, the persistent TMA kernel where wgmma cannot run
the inputs, the tiled pointer kernel where TMA cannot read them, the decode kernel for a few rows against a
large weight (``decode_launcher``: ``decode.py``).  ``tiles.default_launcher`` is
the rule (shape, SM count, what the GPU and the layouts allow; no per-shape table);
``pick_launcher`` applies it to tensors and says why.  A call that needs gradients goes to a
differentiable launcher (``matmul_tma``, else ``matmul``); under ``torch.compile`` it is
``matmul``, the custom op the compiler traces.

A repeated call is kept by its call key (``launches.call_key``): the first call listens for the
kept launch its launcher runs or keeps (``launches.kept_during``), and the next calls with that key
run it straight, so they pay one key and one look-up, not the launcher's own as well.

The pick depends on M (the tile, the split of K, the tuned config), so a row of C can change its
bits when other rows join the batch.  ``batch_invariant=True`` runs every M through one kernel in
one config (``configs.batch_invariant_configs``: fixed tiles and BLOCK_K, K never split), so a
row's reduction order, and its bits, do not depend on M (``tests/test_batch_invariance.py``).
"""

from __future__ import annotations

import torch

from .. import runtime
from ..models.tiles import default_launcher
from . import checks, launches
from .autograd import grad_enabled_for
from .decode import DECODE_MAX_ROWS, matmul_decode
from .matmul import _matmul_forward, matmul
from .persistent import matmul_tma
from .splitk import matmul_splitk
from .tma import tma_layout

#: the launchers the rule names (``tiles.DISPATCH_LAUNCHERS``); matmul_ws is imported on first use
LAUNCHERS = {"matmul_splitk": matmul_splitk, "matmul_tma": matmul_tma, "matmul": matmul,
             "matmul_decode": matmul_decode}

#: the fewest weight elements (N x K) the decode kernel is picked for: 2 MB of fp16, under a
#: microsecond of HBM time, below which a call costs its launch whatever kernel runs
DECODE_MIN_WEIGHT = 1 << 20


def decode_launcher(M: int, N: int, K: int, *, num_sms: int) -> tuple[str, str] | None:
    """``("matmul_decode", why)`` when an ``M x N x K`` product is a decode (at most
    ``DECODE_MAX_ROWS`` rows against a weight of at least ``DECODE_MIN_WEIGHT`` elements: its
    time is the weight's bytes, and a GEMM tile would multiply mostly padding rows); else None
    (``tiles.default_launcher`` decides).  ``num_sms`` sets the decode kernel's split of K."""
    if M > DECODE_MAX_ROWS or N * K < DECODE_MIN_WEIGHT:
        return None
    return "matmul_decode", (f"{M} row{'s' * (M != 1)} against a {K}x{N} weight: a decode, bound by reading the "
                             f"weight once; each program reads a block of columns for every row, K split when the "
                             f"column blocks alone leave some of {num_sms} SMs idle")


def _launcher(name: str):
    if name == "matmul_ws" and name not in LAUNCHERS:  # Gluon: loaded only where it can run
        from .matmul_ws import matmul_ws
        LAUNCHERS[name] = matmul_ws
    return LAUNCHERS[name]


def _tma_readable(x) -> bool:
    try:
        tma_layout(x, "x")
    except ValueError:
        return False
    return True


def pick_launcher(a, b, bias=None, *, batch_invariant=False) -> tuple[str, str]:
    """``(launcher name, reason)`` for ``matmul_auto(a, b, bias=bias, batch_invariant=...)``.
    Inputs that are not 2-D tensors go to ``matmul``, whose checks name what is wrong."""
    checks.require_flag(batch_invariant, "batch_invariant")  # as matmul_auto: 1 is not taken for True
    if not all(isinstance(x, torch.Tensor) and x.dim() == 2 and x.layout == torch.strided for x in (a, b)):
        return "matmul", "not two dense matrices: matmul's checks say what is wrong"
    if batch_invariant:
        return "matmul", ("batch-invariant: one config for every M (BLOCK_K fixed, no split of K), so a row's "
                          "bits do not depend on the batch")
    needs_grad = grad_enabled_for(a, b, bias)
    tma = runtime.supports_tma() and _tma_readable(a) and _tma_readable(b)
    if needs_grad:
        return ("matmul_tma", "gradients needed: differentiable, twice") if tma else \
               ("matmul", "gradients needed: differentiable, any layout")
    wgmma = tma and runtime.supports_wgmma() and a.dtype in (torch.float16, torch.bfloat16) and b.dtype == a.dtype
    M, K = a.shape
    decode = decode_launcher(M, b.shape[1], K, num_sms=runtime.num_sms())
    if decode is not None:
        return decode
    return default_launcher(M, b.shape[1], K, num_sms=runtime.num_sms(), tma=tma, wgmma=wgmma)


_PICKS = launches.LaunchCache()  # call key -> what a repeated call runs (``_direct``): a bounded dict


def _direct(launch, launcher, activation):
    """What a repeated call of a key runs: the kept launch its first call ran or kept (a
    ``KeptLaunch`` or a ``matmul_ws`` plan, which the same checks and key made), or the
    launcher itself when that call kept none."""
    if isinstance(launch, launches.KeptLaunch):
        return lambda a, b, bias: launch(a=a, b=b, bias=bias)
    if launch is not None:  # matmul_ws's plan: (a, b, bias, trace)
        return lambda a, b, bias: launch(a, b, bias, None)
    return lambda a, b, bias: launcher(a, b, activation=activation, bias=bias)


def matmul_auto(a, b, *, activation=None, bias=None, batch_invariant=False):
    """``activation(a @ b + bias)`` by the launcher ``pick_launcher`` names: the course's answer
    to "which kernel should I call?".  Same contract as :func:`gemm_kernels.matmul` (any
    strides, fp16/bf16/fp32, differentiable); the picked launcher's checks and errors apply.

    ``batch_invariant=True``: each row of the result has the same bits whatever M (the rows of
    ``a`` beside it), at a cost in speed: ``matmul``'s kernel in one config for every M.  Forward
    only (inference, where a batch mixes requests): a call that needs gradients is a ValueError."""
    if checks.require_flag(batch_invariant, "batch_invariant"):
        if torch.compiler.is_compiling():
            raise NotImplementedError("batch_invariant=True calls its launcher directly: torch.compile cannot "
                                      "trace it (call it outside the compiled region)")
        if grad_enabled_for(a, b, bias):
            raise ValueError("batch_invariant=True runs the forward pass only: call it under torch.no_grad() "
                             "(or on tensors that do not require grad)")
        return _matmul_forward(a, b, "grouped", 8, activation, bias, batch_invariant=True)
    if torch.compiler.is_compiling():  # matmul is the custom op torch.compile traces without a break
        return matmul(a, b, activation=activation, bias=bias)
    key = launches.call_key((a, b, bias), (activation,)) if launches.keeping() else None
    kept = _PICKS.get(key)
    if kept is not None:
        return kept(a, b, bias)
    launcher = _launcher(pick_launcher(a, b, bias)[0])
    if key is None:
        return launcher(a, b, activation=activation, bias=bias)
    out, launch = launches.kept_during(lambda: launcher(a, b, activation=activation, bias=bias))
    _PICKS.keep(key, _direct(launch, launcher, activation))
    return out
