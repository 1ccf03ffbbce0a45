"""run_checked: every active lane of every load and store checked before the access; the report,
its picture, bad inputs, the learner's own errors, pointer arrays, launches redirected in checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from _core_helper import zeros_like_triton

import gemm_kernels as gk
from gemm_kernels.lab import checked
from gemm_kernels.lab.checked import checked_launches
from gemm_kernels.viz.drawings import png_bytes

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "checked"


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, MASK_STORE: tl.constexpr = True):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    if MASK_STORE:
        tl.store(out_ptr + offsets, x + y, mask=mask)
    else:
        tl.store(out_ptr + offsets, x + y)


def vectors(n=1000):
    x, y = torch.randn(n), torch.randn(n)
    return x, y, torch.full((n,), float("nan"))


def test_a_correct_kernel_runs_and_its_results_land():
    x, y, out = vectors()
    gk.run_checked(add_kernel, (4,), x, y, out, 1000, BLOCK=256)
    assert torch.equal(out, x + y)


def test_a_missing_store_mask_is_stopped_before_it_writes():
    x, y, out = vectors()
    with pytest.raises(gk.OutOfBounds) as info:
        gk.run_checked(add_kernel, (4,), x, y, out, 1000, BLOCK=256, MASK_STORE=False)
    err = info.value
    assert isinstance(err, IndexError)
    assert (err.kernel, err.kind, err.pointer, err.program, err.lanes, err.active_lanes) == (
        "add_kernel", "store", "out_ptr", (3,), 24, 256)
    assert err.first_lane == (232,) and err.first_offset == 1000
    text = str(err)
    for fragment in ("add_kernel: store through out_ptr at line", "tl.store(out_ptr + offsets, x + y)",
                     "program_id 3: 24 of 256 active lanes", "element 1000 (out_ptr has 1000 elements: 0..999)"):
        assert fragment in text, text
    # programs 0..2 stored; program 3 stopped before any lane of its store, in bounds or not
    assert torch.equal(out[:768], (x + y)[:768]) and torch.isnan(out[768:]).all()
    fig = err.picture()
    png = png_bytes(fig)
    assert png.startswith(b"\x89PNG")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "missing_store_mask.png").write_bytes(png)
    (ARTIFACTS / "missing_store_mask.txt").write_text(text + "\n")


@triton.jit
def copy_2d(x_ptr, out_ptr, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr, MASK_COLS: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rows[:, None] < M) & (cols[None, :] < N) if MASK_COLS else rows[:, None] < M
    block = tl.load(x_ptr + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask)
    tl.store(out_ptr + rows[:, None] * N + cols[None, :], block, mask=(rows[:, None] < M) & (cols[None, :] < N))


def test_a_strided_view_owns_only_its_elements():
    base = torch.randn(12, 20)
    x = base[:5, :7]  # its neighbours in the storage are not x's
    out = torch.empty(5, 7)
    gk.run_checked(copy_2d, (2, 2), x, out, 5, 7, x.stride(0), x.stride(1), BM=4, BN=4, MASK_COLS=True)
    assert torch.equal(out, x)
    with pytest.raises(gk.OutOfBounds) as info:
        gk.run_checked(copy_2d, (2, 2), x, out, 5, 7, x.stride(0), x.stride(1), BM=4, BN=4, MASK_COLS=False)
    text = str(info.value)
    assert "load through x_ptr" in text and "program_id 0, 1" in text and "4 of 16 active lanes" in text
    assert "element 7 = index (0, 7) (x_ptr is 5x7 with strides (20, 1))" in text
    lanes = info.value.access.bad
    assert lanes.shape == (4, 4) and lanes[:, 3].all() and not lanes[:, :3].any()


@triton.jit
def previous_row(offs_ptr, out_ptr, n):
    i = tl.program_id(0)
    start = tl.load(offs_ptr + i - 1, mask=i > 0, other=0)  # offs[-1] never read: masked off
    tl.store(out_ptr + i, start)


def test_masked_off_lanes_may_hold_any_address():
    offs = torch.tensor([3, 5, 9], dtype=torch.int32)
    out = torch.zeros(3, dtype=torch.int32)
    gk.run_checked(previous_row, (3,), offs, out, 3)
    assert out.tolist() == [0, 3, 5]


@triton.jit
def loads_without_other(x_ptr, offs_ptr, out_ptr, start_out_ptr, n, BLOCK: tl.constexpr, GIVE_OTHER: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    if GIVE_OTHER:
        x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
        start = tl.load(offs_ptr + tl.program_id(0) - 1, mask=tl.program_id(0) > 0, other=0)
    else:
        x = tl.load(x_ptr + offsets, mask=offsets < n)
        start = tl.load(offs_ptr + tl.program_id(0) - 1, mask=tl.program_id(0) > 0)
    tl.store(out_ptr + offsets, x)
    tl.store(start_out_ptr + tl.program_id(0), start)


def test_a_masked_load_without_other_reads_what_a_gpu_leaves_undefined():
    """Masked-off lanes of a load with no other= are undefined on a GPU: a checked run gives them
    NaN (floats) or 0x5A bytes (ints), the scalar load too, and logs the learner's line; other=0
    (a block or a scalar, which the interpreter's builder sees as no other at all) gives 0."""
    x, offs = torch.arange(6, dtype=torch.float32), torch.tensor([7, 9], dtype=torch.int32)
    for give_other in (True, False):
        out, starts, log = torch.zeros(8), torch.zeros(2, dtype=torch.int32), []
        gk.run_checked(loads_without_other, (2,), x, offs, out, starts, 6, BLOCK=8, GIVE_OTHER=give_other,
                       undefined_log=log)
        assert torch.equal(out[:6], x) and starts[1] == 7
        if give_other:
            assert out[6:].tolist() == [0.0, 0.0] and starts[0] == 0 and log == []
        else:
            assert out[6:].isnan().all() and starts[0] == 0x5A5A5A5A
            assert [site.split(" of ")[1] for site in log] == ["loads_without_other"] * 2


@triton.jit
def through_pointer_array(ptrs, out_ptr, n, BLOCK: tl.constexpr):
    p = tl.load(ptrs + tl.program_id(0)).to(tl.pointer_type(tl.float32))
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.program_id(0) * BLOCK + offsets, tl.load(p + offsets, mask=offsets < n, other=0.0))


def test_pointer_arrays_need_the_tensors_they_reach():
    a, b = torch.randn(5), torch.randn(5)
    ptrs = torch.tensor([a.data_ptr(), b.data_ptr()], dtype=torch.int64)
    out = torch.zeros(2, 8)
    with pytest.raises(gk.OutOfBounds, match="unknown origin"):
        gk.run_checked(through_pointer_array, (2,), ptrs, out, 5, BLOCK=8)
    gk.run_checked(through_pointer_array, (2,), ptrs, out, 5, BLOCK=8, reachable={"a": a, "b": b})
    assert torch.equal(out[0, :5], a) and torch.equal(out[1, :5], b)
    with pytest.raises(gk.OutOfBounds, match=r"(?s)load through a .*element 5 \(a has 5 elements"):
        gk.run_checked(through_pointer_array, (2,), ptrs, out, 6, BLOCK=8, reachable={"a": a, "b": b})


@pytest.fixture
def as_on_a_gpu(monkeypatch):
    """Checked runs copy every tensor to a twin, as they copy a GPU's: a pointer array then holds
    addresses that are not the twins' (notebook 06's checks refused right answers on a GPU)."""
    monkeypatch.setattr(checked._HostCopies, "copy_cpu_tensors", True)


def test_pointer_arrays_reach_the_twins_of_device_tensors(as_on_a_gpu):
    a, b = torch.randn(5), torch.randn(9)
    ptrs = torch.tensor([a.data_ptr(), b[2:].data_ptr()], dtype=torch.int64)  # a view's address too
    out = torch.zeros(2, 8)
    gk.run_checked(through_pointer_array, (2,), ptrs, out, 5, BLOCK=8, reachable={"a": a, "b": b})
    assert torch.equal(out[0, :5], a) and torch.equal(out[1, :5], b[2:7])  # read from the twins, written back
    with pytest.raises(gk.OutOfBounds, match=r"(?s)load through a .*element 5 \(a has 5 elements"):
        gk.run_checked(through_pointer_array, (2,), ptrs, out, 6, BLOCK=8, reachable={"a": a, "b": b})
    with pytest.raises(gk.OutOfBounds, match="unknown origin"):  # a tensor the run was not given stays out of reach
        gk.run_checked(through_pointer_array, (2,), ptrs, out, 5, BLOCK=8, reachable={"a": a})


@triton.jit
def end_pointer_back(ends, out_ptr, back, BLOCK: tl.constexpr):
    p = tl.load(ends + tl.program_id(0)).to(tl.pointer_type(tl.float32)) - back  # one past the end, stepped back
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.program_id(0) * BLOCK + offsets, tl.load(p + offsets, mask=offsets < back, other=0.0))


@triton.jit
def write_addresses(x_ptr, stride, ptrs_out, G: tl.constexpr):
    g = tl.arange(0, G)
    tl.store(ptrs_out + g, (x_ptr + g * stride).to(tl.int64, bitcast=True))


def test_pointer_arrays_of_end_addresses_and_written_addresses(as_on_a_gpu):
    """One past a tensor's end is its twin's end; an address a kernel stores is the device's, so a
    pointer array built by one checked launch works in the next."""
    a = torch.arange(10, dtype=torch.float32)
    out = torch.full((16,), -1.0)
    gk.run_checked(end_pointer_back, (1,), torch.tensor([a.data_ptr() + a.nbytes]), out, 8, BLOCK=16, reachable=a)
    assert torch.equal(out[:8], a[-8:])
    x = torch.arange(64, dtype=torch.float32).reshape(4, 16)
    ptrs = torch.zeros(4, dtype=torch.int64)
    gk.run_checked(write_addresses, (1,), x, 16, ptrs, G=4)
    assert ptrs.tolist() == [x[i].data_ptr() for i in range(4)]
    out = torch.full((64,), -1.0)
    gk.run_checked(through_pointer_array, (4,), ptrs, out, 16, BLOCK=16, reachable=[x])
    assert torch.equal(out, x.reshape(-1))


@triton.jit
def atomic_count(counts_ptr, index_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    index = tl.load(index_ptr + offsets, mask=offsets < n, other=0)
    tl.atomic_add(counts_ptr + index, 1, mask=offsets < n)


def test_atomics_are_checked_too():
    counts = torch.zeros(4, dtype=torch.int32)
    gk.run_checked(atomic_count, (1,), counts, torch.tensor([0, 1, 1, 3], dtype=torch.int32), 4, BLOCK=8)
    assert counts.tolist() == [1, 2, 0, 1]
    with pytest.raises(gk.OutOfBounds, match="atomic through counts_ptr"):
        gk.run_checked(atomic_count, (1,), counts, torch.tensor([0, 4], dtype=torch.int32), 2, BLOCK=8)


@triton.jit
def raises_inside(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    values = tl.load(x_ptr + offsets, mask=offsets < n)
    return values.no_such_attribute


def test_an_error_in_the_kernel_comes_with_the_learners_line():
    with pytest.raises(AttributeError) as info:
        gk.run_checked(raises_inside, (1,), torch.randn(4), 4, BLOCK=4)
    assert "raised inside the kernel raises_inside, program_id (0, 0, 0), line" in "\n".join(info.value.__notes__)
    assert "values.no_such_attribute" in "\n".join(info.value.__notes__)
    innermost = info.traceback[-1]
    assert innermost.path == Path(__file__) and "no_such_attribute" in str(innermost.statement)
    assert not any("triton" in str(entry.path) for entry in info.traceback)


@pytest.mark.parametrize("call, error, message", [
    (lambda: gk.run_checked(print, (1,)), TypeError, "needs a @triton.jit kernel"),
    (lambda: gk.run_checked(add_kernel, (1,), torch.randn(4)), TypeError,
     r"add_kernel\(x_ptr, y_ptr, out_ptr, n, BLOCK, MASK_STORE\): missing a required argument: 'y_ptr'"),
    (lambda: gk.run_checked(add_kernel, (1,), *vectors(4), 4, 5, 6, 7), TypeError, "too many positional"),
    (lambda: gk.run_checked(add_kernel, (1,), *vectors(4), 4, BLOCK=4, bogus=1), TypeError, "unexpected keyword"),
    (lambda: gk.run_checked(add_kernel, (0,), *vectors(4), 4, BLOCK=4), ValueError, "at least 1"),
    (lambda: gk.run_checked(add_kernel, (-2,), *vectors(4), 4, BLOCK=4), ValueError, "at least 1"),
    (lambda: gk.run_checked(add_kernel, (1.0,), *vectors(4), 4, BLOCK=4), TypeError, "must be an int"),
    (lambda: gk.run_checked(add_kernel, (True,), *vectors(4), 4, BLOCK=4), TypeError, "must be an int"),
    (lambda: gk.run_checked(add_kernel, (1, 1, 1, 1), *vectors(4), 4, BLOCK=4), TypeError, "1 to 3"),
    (lambda: gk.run_checked(add_kernel, "1", *vectors(4), 4, BLOCK=4), TypeError, "1 to 3"),
    (lambda: gk.run_checked(add_kernel, (1,), *vectors(4), 4, BLOCK=4, reachable=[3]), TypeError, "hold tensors"),
])
def test_bad_inputs_get_clear_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_a_grid_function_and_launch_options_are_accepted():
    x, y, out = vectors(10)
    gk.run_checked(add_kernel, lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),), x, y, out, 10, BLOCK=4,
                   num_warps=4)
    assert torch.equal(out, x + y)


def helper_add_one(x):
    return x + 1


def test_a_compiled_kernel_runs_interpreted_with_compiled_helpers():
    """What happens on a GPU machine: the kernel and its helpers are JITFunctions, never run by the
    interpreter unless run_checked builds their interpreted twins."""
    helper = JITFunction(helper_add_one)

    def kernel_fn(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, helper(tl.load(x_ptr + offsets, mask=offsets < n)), mask=offsets < n)

    kernel_fn.__globals__["helper"] = helper
    kernel = JITFunction(kernel_fn)
    x, out = torch.arange(5, dtype=torch.float32), torch.zeros(5)
    gk.run_checked(kernel, (1,), x, out, 5, BLOCK=8)
    assert out.tolist() == [1, 2, 3, 4, 5]
    with pytest.raises(RuntimeError, match="outside of the scope of a kernel"):
        helper(1)  # the interpreted twin was only in place for the launch


def test_checked_launches_redirect_every_plain_launch():
    x, y, out = vectors()
    with checked_launches(), pytest.raises(gk.OutOfBounds):
        add_kernel[(4,)](x, y, out, 1000, BLOCK=256, MASK_STORE=False)
    add_kernel[(4,)](x, y, out, 1000, BLOCK=256)  # a plain launch again afterwards
    assert torch.equal(out, x + y)


def test_the_interpreter_is_left_as_it_was():
    from triton.runtime.interpreter import interpreter_builder

    x, y, out = vectors()
    with pytest.raises(gk.OutOfBounds):
        gk.run_checked(add_kernel, (4,), x, y, out, 1000, BLOCK=256, MASK_STORE=False)
    assert not any(name.startswith("create_") for name in vars(interpreter_builder))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_tensors_run_on_cpu_copies_and_get_the_results_back():
    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    out = torch.full((1000,), float("nan"), device="cuda")
    gk.run_checked(add_kernel, (4,), x, y, out, 1000, BLOCK=256)
    assert torch.equal(out, x + y)
    with pytest.raises(gk.OutOfBounds, match="store through out_ptr"):
        gk.run_checked(add_kernel, (4,), x, y, out, 1000, BLOCK=256, MASK_STORE=False)
    torch.cuda.synchronize()  # the CUDA context is fine: nothing unchecked reached the GPU
    views = torch.randn(8, 8, device="cuda")
    copy = torch.empty(5, 7, device="cuda")
    gk.run_checked(copy_2d, (2, 2), views[:5, :7], copy, 5, 7, 8, 1, BM=4, BN=4, MASK_COLS=True)
    assert torch.equal(copy, views[:5, :7])
    assert np.isfinite(copy.cpu().numpy()).all()


# ----------------------------------------------------------------------------- views far larger than their storage
_EXPANDED_SCRIPT = """
import resource, sys, torch, triton, triton.language as tl
import gemm_kernels as gk

@triton.jit
def read_some(x_ptr, out_ptr, sx, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets * sx))

x = torch.full((1,), 7.0).expand(2**30)  # 2**30 elements over one float
out = torch.zeros(16)
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
with open("/proc/self/statm") as f:
    used = int(f.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (used + 2**30, hard))  # a GiB more than now: 8 GiB is a failure
gk.run_checked(read_some, (1,), x, out, x.stride(0), BLOCK=16)
assert out.tolist() == [7.0] * 16, out
try:  # a kernel that ignores the stride reads past the one float: stopped, and cheaply too
    gk.run_checked(read_some, (1,), x, out, 1, BLOCK=16)
except gk.OutOfBounds as err:
    assert "x_ptr has 1073741824 elements" in str(err), err
else:
    raise AssertionError("reading 15 floats past a 1-float storage was not stopped")
w = torch.arange(10**6, dtype=torch.float32).as_strided((10**6 - 999, 1000), (1, 1))  # ~10**9 elements
gk.run_checked(read_some, (1,), w, out, w.stride(0), BLOCK=16)
assert out.tolist() == list(range(16)), out
print("ok")
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="measures memory through /proc")
def test_a_view_much_larger_than_its_storage_costs_only_its_storage(tmp_path):
    """run_checked sized its map of a view's elements by the view's logical size: a stride-0
    ``torch.zeros(1).expand(2**30)`` cost 8 GiB for a kernel reading 16 elements.  It is sized by
    the storage the view spans."""
    import subprocess
    import sys

    script = tmp_path / "expanded.py"
    script.write_text(_EXPANDED_SCRIPT)
    try:
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("run_checked on an expanded view took more than 120 s")
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


@pytest.mark.parametrize("make", [
    lambda: torch.zeros(1).expand(2**40),
    lambda: torch.zeros(3, 1).expand(3, 2**38),
    lambda: torch.zeros(10**7).as_strided((10**7 - 10**5, 10**5), (1, 1)),  # 10**12 elements
    lambda: torch.zeros(50).as_strided((4, 3, 5), (0, 7, 2)),
])
def test_the_element_map_of_a_view_is_sized_by_its_storage(make):
    from gemm_kernels.lab.checked import Region

    view = make()
    region = Region.of("x", view)
    span = 1 + sum((s - 1) * st for s, st in zip(view.shape, view.stride()))
    assert region.span == span * view.element_size()
    assert region.member is None or region.member.size <= span


def test_the_element_map_of_any_small_view_is_exact():
    """Membership (which offsets of the storage are elements of the view), against enumerating them."""
    import itertools

    from gemm_kernels.lab.checked import Region

    rng = np.random.default_rng(0)
    for _ in range(300):
        ndim = int(rng.integers(1, 4))
        shape = tuple(int(v) for v in rng.integers(1, 5, ndim))
        stride = tuple(int(v) for v in rng.integers(0, 9, ndim))
        view = torch.zeros(200).as_strided(shape, stride)
        region = Region.of("x", view)
        owned = {sum(i * st for i, st in zip(index, stride)) for index in itertools.product(*map(range, shape))}
        span = max(owned) + 1
        addresses = region.start + np.arange(-2, span + 2, dtype=np.int64) * 4
        inside = region.contains(addresses, 4)
        assert [o for o, ok in zip(range(-2, span + 2), inside) if ok] == sorted(owned), (shape, stride)


@triton.jit
def zeros_from_a_core_helper(out_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), zeros_like_triton((BLOCK,), tl.float32) + 1.0)


def test_a_triton_helper_that_calls_core_runs_as_in_a_compiled_process():
    """In a process that compiles (a GPU), ``tl.zeros`` is a JITFunction whose body calls
    ``core.full``: the checked run must patch ``core`` for it (it failed on an H100 with
    "_semantic argument must be provided" before).  The helper here is such a JITFunction."""
    assert isinstance(zeros_like_triton, JITFunction)
    before = tl.core.full  # (Triton's own interpreter may have left its version there: an earlier test in this process)
    out = torch.zeros(8)
    gk.run_checked(zeros_from_a_core_helper, (1,), out, BLOCK=8)
    assert (out == 1).all()
    assert tl.core.full is before, "the patch of core was not undone"
