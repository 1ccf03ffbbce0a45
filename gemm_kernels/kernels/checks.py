"""Input checks shared by every launcher: errors that say what was expected and what was given."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .. import runtime
from ..models.tiles import ORDERS
from .epilogue import check_activation
from ..models._ints import check_int, require_int  # noqa: F401  (re-exported for the launchers)

#: dtypes the kernels accept.  fp32 runs tl.dot in TF32 on the GPU (Triton's default).
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

# Offsets are 32-bit in the single-GEMM kernels (as in Triton's tutorials): refuse tensors they cannot address.
MAX_INDEX = 2**31 - 1


def check_tensor(x, name: str, ndim: int, dtypes=SUPPORTED_DTYPES, *, runs_here: bool = True,
                 any_device: bool = False) -> None:
    """``runs_here=False``: the kernel is only compiled (for another GPU, the compile view), so what
    this GPU cannot run (bf16 on an sm_75) is no error.  ``any_device``: no device rule (for a
    reference that torch computes wherever ``x`` is; the launcher adds :func:`check_kernel_device`)."""
    check_strided(x, name)
    if x.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)} ({x.dim()}-D)")
    if x.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} has dtype {str(x.dtype).replace('torch.', '')}; supported: {names}")
    if runs_here and x.dtype == torch.bfloat16 and not runtime.supports_bf16():
        raise TypeError(runtime.missing_feature(f"{name} (bfloat16)", "bf16 tensor cores (sm_80 or newer)",
                                                "Or use float16.", interpreter_has_it=True))
    if not any_device:
        check_kernel_device(x, name)


def check_kernel_device(x, name: str) -> None:
    """ValueError unless ``x`` is where the kernels run (the GPU, or the CPU in the interpreter)."""
    if x.device.type != runtime.DEVICE.type:
        where = "compiled on the GPU" if runtime.on_gpu() else "in the CPU interpreter"
        raise ValueError(
            f"{name} is on {x.device} but kernels run {where}: move it to {runtime.DEVICE} "
            f"(gemm_kernels.DEVICE)"
        )


def check_strided(x, name: str) -> None:
    """TypeError unless ``x`` is a tensor of plain strided memory (a pointer and strides, which is
    what a kernel reads): a sparse (COO/CSR/CSC/BSR) or mkldnn tensor is named with the way out."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.layout != torch.strided:
        layout = str(x.layout).replace("torch.", "").lstrip("_")
        raise TypeError(f"{name} is a {layout} tensor, but the kernels read dense (strided) memory: "
                        f"pass {name}.to_dense()")


def check_span(t: torch.Tensor, name: str) -> None:
    """ValueError when the elements ``t`` reaches lie further apart than 32-bit kernel offsets
    address (a row-sliced view of a huge tensor: ``index * stride`` would wrap)."""
    if t.numel() == 0:
        return
    span = sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))
    if span > MAX_INDEX:
        raise ValueError(f"{name} spans {span + 1} elements (shape {list(t.shape)}, strides {list(t.stride())}): "
                         f"more than 32-bit kernel offsets address (at most {MAX_INDEX + 1}); pass "
                         f"{name}.contiguous() or split the product")


def resolve_lazy_views(*tensors):
    """The tensors with torch's lazy negation and conjugation applied (others, and non-tensors,
    unchanged, with no copy).  ``z.conj().imag`` is a view whose values are the negated memory
    (``is_neg()``); a kernel reads the memory, so it would get the sign wrong.  Every launcher
    (single GEMMs, ``grouped_matmul``, ``grouped_mm`` and its weight gradient) passes its inputs
    through this first.  The copy keeps the view's layout (:func:`resolved_copy`)."""
    return tuple(resolved_copy(t) if isinstance(t, torch.Tensor) and (t.is_neg() or t.is_conj()) else t
                 for t in tensors)


def _dense(t: torch.Tensor) -> bool:
    """No gaps and no overlap: the strides, sorted, are the running products of the sizes."""
    expected = 1
    for stride, size in sorted((t.stride(d), t.shape[d]) for d in range(t.dim()) if t.shape[d] != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def resolved_copy(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in fresh memory laid out like ``t``, so that a layout a kernel accepts stays
    accepted (``resolve_neg()`` alone makes a row-padded view contiguous, its rows then not
    16-byte aligned for TMA).  A dense ``t`` keeps its strides; any other is copied dense in
    its dimension order, the unit-stride dimension padded to 16 bytes (``tma.tma_aligned``)."""
    if t.is_neg() and t.dtype in _ONE_BYTE_FLOATS:  # torch has no neg kernel for fp8: flip the sign bits
        out = _empty_like_layout(t)
        out.view(torch.uint8).copy_(torch._neg_view(t).view(torch.uint8) ^ 0x80)  # _neg_view: the memory
        return out
    if t.dim() < 2 or t.numel() == 0 or _dense(t):
        return t.resolve_neg().resolve_conj()  # torch keeps a dense tensor's strides
    return _empty_like_layout(t).copy_(t)  # copy_ applies the negation (and conjugation)


_ONE_BYTE_FLOATS = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                                     "float8_e5m2fnuz") if hasattr(torch, n))


def _empty_like_layout(t: torch.Tensor) -> torch.Tensor:
    """Fresh memory for ``t``'s values in ``t``'s layout (:func:`resolved_copy`)."""
    if t.dim() < 2 or t.numel() == 0 or _dense(t):
        return torch.empty_like(t)  # a dense t's strides kept (torch.preserve_format)
    order = sorted(range(t.dim()), key=t.stride, reverse=True)  # outermost dimension first
    shape = [t.shape[d] for d in order]
    inner = shape[-1]
    shape[-1] = runtime.tma_row_length(inner, t.element_size())
    return torch.empty(shape, dtype=t.dtype, device=t.device)[..., :inner].permute(
        [order.index(d) for d in range(t.dim())])


def check_no_lazy_views(tensors: dict) -> None:
    """For inputs whose storage is kept and re-read (``GroupedMatmulPlan``): a lazily negated or
    conjugated view cannot be resolved once (a copy would not see later in-place updates)."""
    for name, t in tensors.items():
        if t.is_neg() or t.is_conj():
            bit = "negated" if t.is_neg() else "conjugated"
            raise ValueError(f"{name} is a lazily {bit} view (e.g. z.conj().imag): its memory holds the values "
                             f"before the {'negation' if t.is_neg() else 'conjugation'}, which the kernel would read. "
                             f"Pass {name}.resolve_neg().resolve_conj() (a copy; update that copy between runs)")


def check_no_grad(tensors: dict) -> None:
    """For the launchers without a backward (``matmul_persistent``, ``matmul_streamk``,
    ``grouped_matmul``): an input that requires grad, with autograd on, would get an output cut
    off from its graph, gradients silently missing.  (``matmul``, ``matmul_tma`` and
    ``grouped_mm`` have a backward: they route such calls through autograd before this check.)"""
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if t is not None and t.requires_grad:
            raise ValueError(f"{name} requires grad, but these kernels compute the forward product only "
                             f"(no backward), so gradients would silently stop here: pass {name}.detach() "
                             "or call under torch.no_grad()")


def require_flag(value, name: str) -> bool:
    """``value`` when it is True or False; TypeError naming ``name`` otherwise (1 and numpy's True
    compare equal to True, "no" is truthy: each launcher taking a flag refuses them alike)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def check_same(tensors: dict, what: str) -> None:
    """All tensors share dtype ('dtype') or device ('device')."""
    values = {name: getattr(t, what) for name, t in tensors.items()}
    if len(set(values.values())) > 1:
        desc = ", ".join(f"{n}: {v}" for n, v in values.items())
        err = TypeError if what == "dtype" else ValueError
        raise err(f"inputs must share one {what}, got {desc}")


def dtype_name(dtype: torch.dtype) -> str:
    """'float16' for torch.float16: how error messages name a dtype."""
    return str(dtype).replace("torch.", "")


def check_num_programs(num_programs) -> int:
    """A persistent kernel's program count: the SM count by default."""
    if num_programs is None:
        return runtime.num_sms()
    return check_int(num_programs, "num_programs")


def check_options(order, group_size_m, activation) -> int:
    """The single-GEMM options' checks; returns ``group_size_m`` as an int.  Run before a custom
    op too: its schema would turn ``group_size_m=True`` into 1 and name no argument for ``8.0``."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    group_size_m = check_int(group_size_m, "group_size_m")
    check_activation(activation)
    return group_size_m


def check_matmul_inputs(a, b, order, group_size_m, activation, bias):
    """Every single-GEMM launcher's checks; returns ``(bias, group_size_m)`` as the kernels take
    them: the bias contiguous (the kernels read ``bias_ptr + n``) and the group no taller than M
    (a group taller than C's rows of tiles is the same order, and keeps ``GROUP_SIZE_M *
    num_pid_n`` within 32 bits)."""
    check_tensor(a, "a", 2)
    check_tensor(b, "b", 2)
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"a is {a.shape[0]}x{a.shape[1]} but b is {b.shape[0]}x{b.shape[1]}: "
            f"the inner dimensions must match ({a.shape[1]} != {b.shape[0]})"
        )
    check_same({"a": a, "b": b}, "dtype")
    check_same({"a": a, "b": b}, "device")
    group_size_m = check_options(order, group_size_m, activation)
    if bias is not None:
        check_tensor(bias, "bias", 1)
        if bias.shape[0] != b.shape[1]:
            raise ValueError(f"bias must have shape [N] = [{b.shape[1]}], got {list(bias.shape)}")
        check_same({"a": a, "bias": bias}, "device")
    check_span(a, "a")
    check_span(b, "b")
    check_no_grad({"a": a, "b": b, "bias": bias})
    M, N = a.shape[0], b.shape[1]
    if M * N - 1 > MAX_INDEX:
        raise ValueError(f"C would be {M}x{N} = {M * N} elements: more than 32-bit kernel offsets address "
                         f"(at most {MAX_INDEX + 1}); split the product into row blocks")
    if bias is not None and bias.stride(0) != 1:
        bias = bias.contiguous()
    return bias, min(group_size_m, max(M, 1))


def check_group_inputs(group_a, group_b, *, runs_here: bool = True):
    """Validate the two lists; returns [(M, N, K), ...] (``runs_here``: as for :func:`check_tensor`)."""
    for name, group in (("group_a", group_a), ("group_b", group_b)):
        if isinstance(group, torch.Tensor) or not isinstance(group, Sequence):
            raise TypeError(f"{name} must be a list (or tuple) of 2-D tensors, got {type(group).__name__}")
    if len(group_a) != len(group_b):
        raise ValueError(
            f"group_a has {len(group_a)} matrices but group_b has {len(group_b)}: "
            "each A_i needs its B_i"
        )
    if len(group_a) == 0:
        raise ValueError("grouped_matmul needs at least one problem, got two empty lists")
    shapes = []
    for i, (a, b) in enumerate(zip(group_a, group_b)):
        check_tensor(a, f"group_a[{i}]", 2, runs_here=runs_here)
        check_tensor(b, f"group_b[{i}]", 2, runs_here=runs_here)
        check_no_grad({f"group_a[{i}]": a, f"group_b[{i}]": b})
        if a.shape[1] != b.shape[0]:
            raise ValueError(
                f"problem {i}: A is {a.shape[0]}x{a.shape[1]} but B is {b.shape[0]}x{b.shape[1]}: "
                f"the inner dimensions must match ({a.shape[1]} != {b.shape[0]})"
            )
        shapes.append((a.shape[0], b.shape[1], a.shape[1]))
    first = group_a[0]
    for i, (a, b) in enumerate(zip(group_a, group_b)):
        for name, t in ((f"group_a[{i}]", a), (f"group_b[{i}]", b)):
            if t.dtype != first.dtype:
                raise TypeError(
                    f"{name} has dtype {dtype_name(t.dtype)} but group_a[0] has {dtype_name(first.dtype)}: "
                    "all matrices of a group must share one dtype"
                )
            if t.device != first.device:
                raise ValueError(
                    f"{name} is on {t.device} but group_a[0] is on {first.device}: "
                    "all matrices of a group must be on one device"
                )
    return shapes
