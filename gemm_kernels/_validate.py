"""Input checks shared by every launcher: errors that say what was expected and what was given."""

from __future__ import annotations

import numpy as np
import torch

from . import runtime

#: dtypes the kernels accept.  fp32 runs tl.dot in TF32 on the GPU (Triton's default).
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def check_tensor(x, name: str, ndim: int, dtypes=SUPPORTED_DTYPES) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)} ({x.dim()}-D)")
    if x.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} has dtype {str(x.dtype).replace('torch.', '')}; supported: {names}")
    if x.device.type != runtime.DEVICE.type:
        where = "compiled on the GPU" if runtime.on_gpu() else "in the CPU interpreter"
        raise ValueError(
            f"{name} is on {x.device} but kernels run {where}: move it to {runtime.DEVICE} "
            f"(gemm_kernels.DEVICE)"
        )


def check_no_grad(tensors: dict) -> None:
    """The kernels compute forward products only (no backward): an input that requires grad,
    with autograd on, would get an output cut off from its graph, gradients silently missing."""
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if t is not None and t.requires_grad:
            raise ValueError(f"{name} requires grad, but these kernels compute the forward product only "
                             f"(no backward), so gradients would silently stop here: pass {name}.detach() "
                             "or call under torch.no_grad()")


def check_same(tensors: dict, what: str) -> None:
    """All tensors share dtype ('dtype') or device ('device')."""
    values = {name: getattr(t, what) for name, t in tensors.items()}
    if len(set(values.values())) > 1:
        desc = ", ".join(f"{n}: {v}" for n, v in values.items())
        err = TypeError if what == "dtype" else ValueError
        raise err(f"inputs must share one {what}, got {desc}")


def require_int(value, name: str) -> int:
    """``value`` as a Python int (numpy integers accepted, bools not); TypeError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return int(value)


def check_int(value, name: str, minimum: int = 1) -> int:
    """:func:`require_int`, and at least ``minimum`` (ValueError)."""
    value = require_int(value, name)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value
