"""launch.BoundLaunch: the argument list it keeps is the one Triton's launcher gets, and a plan's
repeated runs go through it (GPU), skipping Triton's Python launch path entirely."""

import pytest
import torch
import triton
import triton.language as tl

from gemm_kernels import DEVICE, grouped_matmul_ref, runtime
from gemm_kernels.kernels import configs
from gemm_kernels.kernels import grouped
from gemm_kernels._triton_compat import BoundLaunch, ordered_arguments, resolve_grid
from gemm_kernels.testing import assert_close


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr, SHIFT: tl.constexpr = 0.0):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor + SHIFT, mask=mask)


def test_arguments_follow_the_signature_with_defaults():
    x, out = torch.randn(5), torch.empty(5)
    args = ordered_arguments(_scale_kernel, (x, out), {"BLOCK": 8, "factor": 2.0, "n": 5})
    assert args[:2] == [x, out] and args[2:] == [5, 2.0, 8, 0.0]  # signature order, SHIFT's default


def test_arguments_of_the_grouped_kernel_are_its_parameters_in_order():
    names = grouped._grouped_matmul_kernel.arg_names
    values = {name: i for i, name in enumerate(names)}
    shuffled = dict(reversed(list(values.items())))  # keyword order must not matter
    assert ordered_arguments(grouped._grouped_matmul_kernel, (), shuffled) == list(range(len(names)))


@pytest.mark.parametrize("kwargs, pattern", [
    ({"n": 5, "factor": 2.0}, r"_scale_kernel: missing a required argument: 'BLOCK'"),
    ({"n": 5, "factor": 2.0, "BLOCK": 8, "num_warps": 4}, r"_scale_kernel: .*'num_warps'"),
])
def test_a_missing_or_unknown_argument_is_named(kwargs, pattern):
    with pytest.raises(TypeError, match=pattern):
        ordered_arguments(_scale_kernel, (torch.zeros(1), torch.zeros(1)), kwargs)


def test_grid_resolution():
    assert resolve_grid((7,), {}) == (7, 1, 1)
    assert resolve_grid(lambda meta: (meta["n"] // meta["BLOCK"], 2), {"n": 64, "BLOCK": 16}) == (4, 2, 1)
    for bad in [(), (0,), (1, 2, 3, 4), (-3, 1)]:
        with pytest.raises(ValueError, match="a launch grid needs 1 to 3 positive sizes"):
            resolve_grid(bad, {})


def test_the_interpreter_binds_nothing():
    if runtime.on_gpu():
        pytest.skip("on a GPU bind() returns a BoundLaunch (test_gpu_* below)")
    tuned = configs.TunedKernel(_scale_kernel, [triton.Config({"BLOCK": 16})], key=["n"])
    x = torch.randn(20, device=DEVICE)
    assert tuned.bind((2,), x, torch.empty_like(x), 20, 3.0) is None


@pytest.mark.gpu
def test_gpu_bound_launch_equals_a_normal_launch_and_follows_the_inputs():
    x = torch.randn(1000, device=DEVICE)
    out = torch.empty_like(x)
    launch = BoundLaunch(_scale_kernel, lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),), (x, out),
                         {"n": 999, "factor": 3.0, "BLOCK": 128, "SHIFT": 1.0}, {"num_warps": 4})
    assert launch.grid == (8, 1, 1)
    for _ in range(2):  # new values in the same tensors: each call reads them
        x.copy_(torch.randn(1000, device=DEVICE))
        out.fill_(float("nan"))
        launch()
        torch.testing.assert_close(out[:999], x[:999] * 3.0 + 1.0)
        assert out[999:].isnan().all()  # n = 999: the last element is never written


@pytest.mark.gpu
def test_gpu_bound_launch_refuses_another_current_device(monkeypatch):
    x = torch.randn(64, device=DEVICE)
    launch = BoundLaunch(_scale_kernel, (1,), (x, torch.empty_like(x)), {"n": 64, "factor": 1.0, "BLOCK": 64})
    monkeypatch.setattr(launch, "_current_device", lambda: launch._device + 1)
    with pytest.raises(RuntimeError, match=r"bound on cuda:\d+ but cuda:\d+ is the current device"):
        launch()


@pytest.mark.gpu
def test_gpu_bound_launch_calls_the_profiler_hooks(monkeypatch):
    from triton import knobs

    seen = []
    # the hook gets Triton's LazyDict of the launch, as from a normal launch
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda metadata: seen.append(metadata.get()))
    x = torch.randn(64, device=DEVICE)
    BoundLaunch(_scale_kernel, (1,), (x, torch.empty_like(x)), {"n": 64, "factor": 1.0, "BLOCK": 64})()
    torch.cuda.synchronize()
    assert [m["name"] for m in seen] == ["_scale_kernel"]


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [False, True])
def test_gpu_plan_reruns_never_enter_tritons_launch_path(tma, monkeypatch):
    """After the first run a plan launches through its BoundLaunch: Triton's JIT launch and the
    autotuner are made to fail, and the second run is still right (fresh values, poisoned C)."""
    if tma and not runtime.supports_tma():
        pytest.skip("TMA needs sm_90+")
    gen = torch.Generator().manual_seed(5)
    shapes = [(129, 72, 40), (8, 264, 128), (200, 16, 8)]  # ragged, multiples of 8 (TMA-readable rows)
    group_a = [torch.randn(M, K, generator=gen).to(DEVICE, torch.float16) for M, _, K in shapes]
    group_b = [torch.randn(K, N, generator=gen).to(DEVICE, torch.float16) for _, N, K in shapes]
    plan = grouped.GroupedMatmulPlan(group_a, group_b, tma=tma)
    plan.run()
    assert isinstance(plan._bound, BoundLaunch)

    def refuse(*args, **kwargs):
        raise AssertionError("a bound plan must not go through Triton's Python launch path")

    monkeypatch.setattr(grouped._grouped_matmul_kernel, "run", refuse)
    monkeypatch.setattr(grouped._grouped_matmul_tuned.autotuner, "run", refuse)
    for a in group_a:
        a.copy_(torch.randn(a.shape, generator=gen).to(DEVICE, a.dtype))
    for c in plan.outputs:
        c.fill_(float("nan"))
    for c, ref in zip(plan.run(), grouped_matmul_ref(group_a, group_b, out_dtype=torch.float64)):
        assert_close(c, ref, torch.float16)
