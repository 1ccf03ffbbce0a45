"""gemm_kernels._triton_compat: every use of a Triton internal has a public fallback that works.

* BoundLaunch: the argument list it keeps is the one Triton's launcher gets; a plan's repeated
  runs go through it (GPU), skipping Triton's Python launch path; without the internals (forced
  by GEMM_KERNELS_TRITON_INTERNALS=0, or because they moved) it launches the public way.
* TunedKernel's remembered choice, the compile view's specialisation: same answers both ways.
"""

import os
import subprocess
import sys
import warnings

import pytest
import torch
import triton
import triton.language as tl

from gemm_kernels import DEVICE, grouped_matmul_ref, runtime
from gemm_kernels.kernels import configs
from gemm_kernels.kernels import grouped
from gemm_kernels import _triton_compat
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


def test_arguments_match_inspect_for_every_kernel_and_argument_mix():
    """The cached signature gives what ``inspect.signature(...).bind`` gives, positional and
    keyword arguments mixed, for the package's launch kernels (the Gluon kernel among them)."""
    import inspect

    from gemm_kernels._triton_compat import _bound_arguments
    from gemm_kernels.kernels import matmul_ws, persistent, streamk

    for kernel in (_scale_kernel, grouped._grouped_matmul_kernel, persistent._matmul_tma_kernel,
                   streamk._matmul_streamk_kernel, matmul_ws._matmul_ws_kernel):
        params = list(inspect.signature(kernel.fn).parameters.values())
        required = [p.name for p in params if p.default is p.empty]
        for cut in (0, 1, len(required) // 2, len(required)):
            values = {name: (name, i) for i, name in enumerate(required)}
            args, kwargs = [values[n] for n in required[:cut]], {n: values[n] for n in required[cut:]}
            assert ordered_arguments(kernel, args, kwargs) == _bound_arguments(kernel.fn, args, kwargs), (kernel, cut)


@pytest.mark.parametrize("args, kwargs, pattern", [
    ((1, 2), {"x_ptr": 1, "n": 5, "factor": 2.0, "BLOCK": 8}, r"_scale_kernel: multiple values for argument 'x_ptr'"),
    ((1, 2, 3, 4, 5, 6, 7), {}, r"_scale_kernel: too many positional arguments"),
    ((1, 2), {"n": 5, "factor": 2.0, "BLOCK": 8, "bogus": 1}, r"_scale_kernel: got an unexpected keyword argument 'bogus'"),
])
def test_a_repeated_or_extra_argument_is_named(args, kwargs, pattern):
    with pytest.raises(TypeError, match=pattern):
        ordered_arguments(_scale_kernel, args, kwargs)


def test_arguments_and_errors_are_inspects_for_every_call_shape():
    """Every mix of positional and keyword arguments (unknown, repeated, missing ones too) gives
    inspect's result or inspect's TypeError."""
    import itertools
    from types import SimpleNamespace

    from gemm_kernels._triton_compat import _bound_arguments

    def fn(a, b, c=3, d=None):
        pass

    kernel = SimpleNamespace(fn=fn)

    def outcome(call):
        try:
            return call()
        except TypeError as exc:
            return f"TypeError: {exc}"

    names = ("a", "b", "c", "d", "e")
    for n_args in range(6):
        for chosen in itertools.chain.from_iterable(itertools.combinations(names, k) for k in range(6)):
            args, kwargs = tuple(range(n_args)), {name: name for name in chosen}
            assert outcome(lambda: ordered_arguments(kernel, args, kwargs)) == \
                outcome(lambda: _bound_arguments(fn, args, kwargs)), (args, kwargs)


def test_keyword_only_parameters_bind_the_public_way():
    from types import SimpleNamespace

    def fn(a, *, b=2):
        pass

    assert ordered_arguments(SimpleNamespace(fn=fn), (1,), {}) == [1, 2]
    with pytest.raises(TypeError, match="fn: too many positional arguments"):
        ordered_arguments(SimpleNamespace(fn=fn), (1, 3), {})


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


# ---------------------------------------------------------------- the public fallbacks
@pytest.fixture
def fresh_compat(monkeypatch):
    """Forget which internals failed before (the set is per process), and restore it afterwards."""
    monkeypatch.setattr(_triton_compat, "_disabled", set())
    return _triton_compat


def _two_candidate_kernel(monkeypatch):
    """The persistent kernel tuned over two candidates with autotuning on and a stand-in timer
    (nothing can be timed on a CPU): the autotuner really runs and chooses."""
    from test_configs import _persistent_launch, triton_config

    from gemm_kernels.kernels.persistent import _matmul_persistent_kernel, _persistent_tuned

    monkeypatch.setattr(runtime, "autotune_enabled", lambda: True)
    timer = lambda kernel_call, quantiles=None: (kernel_call(), [1.0] * 3)[1]  # noqa: E731
    tuned = configs.TunedKernel(_matmul_persistent_kernel, [triton_config(bk) for bk in (32, 16)],
                                key=_persistent_tuned.keys, do_bench=timer)
    return tuned, _persistent_launch


@pytest.mark.parametrize("internals", ["1", "0"])
def test_tuned_kernel_is_right_with_and_without_the_remembered_choice(monkeypatch, fresh_compat, internals):
    from gemm_kernels.kernels.matmul import matmul_ref

    monkeypatch.setenv(_triton_compat.INTERNALS_ENV, internals)
    tuned, launch_args = _two_candidate_kernel(monkeypatch)
    for _ in range(2):
        a, b, c, args, grid = launch_args(torch.float16, None)
        tuned[grid](**args)
        assert_close(c, matmul_ref(a, b, out_dtype=torch.float64), torch.float16)
    assert bool(tuned.chosen) == (internals == "1")  # without the internal, every launch asks the autotuner


def test_a_moved_best_config_falls_back_with_one_warning(monkeypatch, fresh_compat):
    from gemm_kernels.kernels.matmul import matmul_ref

    tuned, launch_args = _two_candidate_kernel(monkeypatch)
    real_run = tuned.autotuner.run

    def run_and_rename(*args, **kwargs):  # a Triton whose autotuner keeps its choice elsewhere
        result = real_run(*args, **kwargs)
        tuned.autotuner.best_config = "renamed"
        return result

    monkeypatch.setattr(tuned.autotuner, "run", run_and_rename)
    a, b, c, args, grid = launch_args(torch.float16, None)
    with pytest.warns(RuntimeWarning, match="best_config"):
        tuned[grid](**args)
    assert_close(c, matmul_ref(a, b, out_dtype=torch.float64), torch.float16)
    assert not tuned.chosen and "best_config" in _triton_compat._disabled


def test_a_moved_specialisation_helper_falls_back(monkeypatch, fresh_compat):
    import triton._C.libtriton as libtriton

    expected = [_triton_compat.specialize(v) for v in (torch.zeros(8, dtype=torch.float16), 256, 255, 1)]
    monkeypatch.setattr(libtriton, "native_specialize_impl", None, raising=False)
    with pytest.warns(RuntimeWarning, match="specialize"):
        got = [_triton_compat.specialize(v) for v in (torch.zeros(8, dtype=torch.float16), 256, 255, 1)]
    assert got == expected


@pytest.mark.skipif(runtime.on_gpu(), reason="on a GPU the fast path binds (test_gpu_* below)")
def test_bound_launch_of_an_interpreted_kernel_uses_the_public_launch(fresh_compat):
    """The interpreter has no compiled kernel to keep: BoundLaunch says so once and launches the public way."""
    x = torch.randn(100, device=DEVICE)
    out = torch.empty_like(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launch = BoundLaunch(_scale_kernel, (2,), (x, out), {"n": 100, "factor": 2.0, "BLOCK": 64})
    assert not launch.fast and any("launcher" in str(w.message) for w in caught)
    launch()
    torch.testing.assert_close(out, x * 2.0)


def test_a_bound_launch_that_forgot_its_tensors_keeps_none_and_needs_new_ones(fresh_compat):
    """A cache of launches (grouped_mm's) keeps them without their tensors: the first call's
    memory is freed, launch_with gives new ones, and a plain call says what is missing."""
    import gc
    import weakref

    x = torch.randn(100, device=DEVICE)
    out = torch.empty_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the interpreter's "launcher" warning
        launch = BoundLaunch(_scale_kernel, (2,), (x, out), {"n": 100, "factor": 2.0, "BLOCK": 64})
    launch.forget("x_ptr", "out_ptr")
    dead_x, dead_out = weakref.ref(x), weakref.ref(out)
    del x, out
    gc.collect()
    assert dead_x() is None and dead_out() is None
    with pytest.raises(RuntimeError, match="x_ptr.*launch_with"):
        launch()
    y = torch.randn(100, device=DEVICE)
    out = torch.empty_like(y)
    launch.launch_with(x_ptr=y, out_ptr=out)
    torch.testing.assert_close(out, y * 2.0)


def test_everything_runs_with_every_internal_switched_off(tmp_path):
    """CI's run of the public fallbacks: a fresh process with GEMM_KERNELS_TRITON_INTERNALS=0 runs
    a tuned kernel twice, a grouped plan twice and a compile-view build, with no warning about
    internals (none is tried) and right answers."""
    code = """
import warnings
warnings.simplefilter("error", RuntimeWarning)
import torch
import gemm_kernels as gk
from gemm_kernels.lab.compile_examples import registered_examples
a, b = torch.randn(40, 24).to(gk.DEVICE), torch.randn(24, 56).to(gk.DEVICE)
for _ in range(2):
    torch.testing.assert_close(gk.matmul(a, b), a @ b, atol=1e-2, rtol=1e-2)
plan = gk.GroupedMatmulPlan([a, a[:7]], [b, b[:, :9]])
for _ in range(2):
    c0, c1 = plan.run()
torch.testing.assert_close(c1, a[:7] @ b[:, :9], atol=1e-2, rtol=1e-2)
example = registered_examples()[0]
assert example.compile(90).highlights()["wgmma"] > 0
print("ok")
"""
    env = {**os.environ, _triton_compat.INTERNALS_ENV: "0"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["switched_off", "launcher_moved"])
def test_gpu_plan_runs_without_the_fast_launch(monkeypatch, fresh_compat, how):
    """The fallback a Triton upgrade would leave: the plan still runs right, through kernel[grid]."""
    if how == "switched_off":
        monkeypatch.setenv(_triton_compat.INTERNALS_ENV, "0")
    else:  # a compiled kernel without the C launcher entry point the fast path calls
        real_warmup = grouped._grouped_matmul_kernel.warmup
        monkeypatch.setattr(grouped._grouped_matmul_kernel, "warmup",
                            lambda *a, **k: type("Moved", (), {"result": None})() and real_warmup(*a, **k) and object())
    gen = torch.Generator().manual_seed(7)
    shapes = [(129, 72, 40), (8, 264, 128)]
    group_a = [torch.randn(M, K, generator=gen).to(DEVICE, torch.float16) for M, _, K in shapes]
    group_b = [torch.randn(K, N, generator=gen).to(DEVICE, torch.float16) for _, N, K in shapes]
    plan = grouped.GroupedMatmulPlan(group_a, group_b)
    for _ in range(2):
        outs = plan.run()
    assert not plan._bound.fast
    for c, ref in zip(outs, grouped_matmul_ref(group_a, group_b, out_dtype=torch.float64)):
        assert_close(c, ref, torch.float16)


# ---------------------------------------------------------------- Gluon: descriptors, specialisation, compile source
def _gluon_descriptor(base, block=(64, 64)):
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    layout = gl.NVMMASharedLayout.get_default_for(list(block), gl.float16 if base.dtype == torch.float16 else gl.bfloat16)
    return TensorDescriptor(base, list(base.shape), list(base.stride()), list(block), layout)


@pytest.mark.parametrize("internals", ["1", "0"])
def test_a_descriptor_moved_to_another_tensor_keeps_everything_else(monkeypatch, fresh_compat, internals):
    """descriptor_on: the fast copy and the public constructor give equal descriptors, the
    template untouched (the launcher reads base, shape, strides, padding and the layout)."""
    import dataclasses

    monkeypatch.setenv(_triton_compat.INTERNALS_ENV, internals)
    x, y = torch.zeros(128, 64, dtype=torch.float16), torch.ones(128, 64, dtype=torch.float16)
    template = _gluon_descriptor(x)
    moved = _triton_compat.descriptor_on(template, y)
    assert moved.base is y and template.base is x
    assert type(moved) is type(template)
    assert {f.name: getattr(moved, f.name) for f in dataclasses.fields(moved) if f.name != "base"} == \
        {f.name: getattr(template, f.name) for f in dataclasses.fields(template) if f.name != "base"}


def test_a_descriptor_copy_that_fails_falls_back_with_one_warning(monkeypatch, fresh_compat):
    template = _gluon_descriptor(torch.zeros(64, 64, dtype=torch.float16))
    monkeypatch.setattr(_triton_compat, "object", type("NoNew", (), {"__new__": None}), raising=False)
    y = torch.ones(64, 64, dtype=torch.float16)
    with pytest.warns(RuntimeWarning, match="descriptor_copy"):
        moved = _triton_compat.descriptor_on(template, y)
    assert moved.base is y and moved.block_shape == template.block_shape


def test_gluon_descriptors_specialise_alike_both_ways(monkeypatch, fresh_compat):
    """The type string Triton's launcher gives a Gluon descriptor (its dtype, block and shared
    layout, not its shape) == the public fallback's."""
    import triton._C.libtriton as libtriton

    descs = [_gluon_descriptor(torch.zeros(256, 128, dtype=torch.float16)),
             _gluon_descriptor(torch.zeros(64, 256, dtype=torch.bfloat16), block=(64, 128))]
    native = [_triton_compat.specialize(d) for d in descs]
    assert native[0][0].startswith("tensordesc<fp16[64, 64],") and native[1][0].startswith("tensordesc<bf16[64, 128],")
    monkeypatch.setattr(libtriton, "native_specialize_impl", None, raising=False)
    with pytest.warns(RuntimeWarning, match="specialize"):
        assert [_triton_compat.specialize(d) for d in descs] == native


def test_the_compile_view_says_so_when_gluon_cannot_be_compiled(monkeypatch, fresh_compat):
    """A Triton without GluonASTSource: a RuntimeError naming what is missing, never a Triton
    source built from Gluon code."""
    import triton.experimental.gluon._runtime as gluon_runtime

    from gemm_kernels.kernels import matmul_ws

    assert _triton_compat.is_gluon(matmul_ws._matmul_ws_kernel) and not _triton_compat.is_gluon(_scale_kernel)
    monkeypatch.delattr(gluon_runtime, "GluonASTSource")
    with pytest.raises(RuntimeError, match="GluonASTSource is missing"):
        _triton_compat.ast_source(matmul_ws._matmul_ws_kernel, {}, {}, {})


@pytest.mark.skipif(runtime.on_gpu(), reason="on a GPU the fast path binds (test_gpu_* above)")
def test_a_specialized_launch_in_the_interpreter_takes_fresh_arguments(fresh_compat):
    """SpecializedLaunch keeps no argument: each launch() passes its own (public launch here)."""
    x = torch.randn(100, device=DEVICE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        launch = _triton_compat.SpecializedLaunch(_scale_kernel, (2,), (x, torch.empty_like(x)),
                                                  {"n": 100, "factor": 2.0, "BLOCK": 64})
    assert not launch.fast and not hasattr(launch, "arguments")
    for factor in (3.0, 5.0):
        y, out = torch.randn(100, device=DEVICE), torch.empty(100, device=DEVICE)
        launch.launch([y, out, 100, factor, 64, 0.0])
        torch.testing.assert_close(out, y * factor)


_ENV_CHANGED_SCRIPT = """
import os, sys, warnings
import torch
import gemm_kernels as gk
change = sys.argv[1]
if change.endswith("after the kernels loaded"):
    gk.matmul  # loads the kernel modules: their kernels are defined already
if change.startswith("unset"):
    os.environ.pop("TRITON_INTERPRET", None)
else:
    os.environ["TRITON_INTERPRET"] = "0"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    a, b = torch.randn(20, 24), torch.randn(24, 9)
    for _ in range(2):
        torch.testing.assert_close(gk.matmul(a, b), a @ b, atol=1e-3, rtol=1e-3)
    import triton, triton.language as tl

    @triton.jit
    def twice(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)

    x = torch.arange(5, dtype=torch.float32)
    twice[(1,)](x, 5, BLOCK=8)
    assert x.tolist() == [0, 2, 4, 6, 8], x
    gk.run_checked(twice, (1,), x, 5, BLOCK=8)
    assert x.tolist() == [0, 4, 8, 12, 16], x
said = [str(w.message) for w in caught if "TRITON_INTERPRET" in str(w.message)]
print(len(said))
print(said[0] if said else "")
print(type(twice).__name__, os.environ.get("TRITON_INTERPRET"))
"""


@pytest.mark.parametrize("change", ["unset", "set to 0", "unset after the kernels loaded",
                                    "set to 0 after the kernels loaded"])
def test_triton_interpret_changed_after_import_is_ignored_with_one_warning(tmp_path, change):
    """Unsetting TRITON_INTERPRET (or setting it to 0) after `import gemm_kernels` on a CPU made every
    kernel fail with "0 active drivers" (kernel modules that load later were decorated as compiled
    kernels) or an AssertionError at the first launch.  The decision made at import stands: the
    kernels run, a learner's kernel defined afterwards is interpreted too, and one warning says the
    change is ignored and how to switch."""
    script = tmp_path / "changed.py"
    script.write_text(_ENV_CHANGED_SCRIPT)
    env = {**os.environ, "GEMM_KERNELS_INTERPRET": "1"}
    out = subprocess.run([sys.executable, str(script), change], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    count, message, state = out.stdout.strip().splitlines()
    assert count == "1", out.stdout
    assert "TRITON_INTERPRET was" in message and "after `import gemm_kernels`" in message
    assert "ignored" in message and "before Python starts" in message
    assert state == "InterpretedFunction 1"


@triton.jit
def _bf16_arithmetic(a_ptr, b_ptr, c_ptr, d_ptr, e_ptr, f_ptr, N: tl.constexpr):
    rows = tl.arange(0, N)
    offsets = rows[:, None] * N + rows[None, :]
    a, b = tl.load(a_ptr + offsets), tl.load(b_ptr + offsets)
    tl.store(c_ptr + offsets, tl.maximum(a * b + a, b) - b * b)  # bf16 arithmetic, rounded as it goes
    tl.store(d_ptr + offsets, tl.dot(a, b))  # bf16 tensor-core product, fp32 accumulator
    tl.store(e_ptr + offsets, (a.to(tl.float32) * 1.1).to(tl.bfloat16))  # rounded to nearest even
    tl.store(f_ptr + offsets, a * 0.5 + 1.25)  # a bf16 block and Python floats (Triton 3.6 had no get_bf16)


@pytest.mark.skipif(runtime.on_gpu(), reason="the interpreter's arithmetic (a GPU computes bf16 itself)")
def test_bf16_arithmetic_in_the_interpreter_is_the_gpus():
    """triton#11584: the interpreter kept bf16 as raw bits and multiplied the integers (errors of
    1e10 and more); _triton_compat.bf16_arithmetic_in_interpreter widens bf16 exactly and rounds
    a bf16 result back to nearest even, as torch's bf16 operations on the CPU do."""
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(16, 16, generator=gen).to(torch.bfloat16) for _ in range(2))
    c, d, e = torch.empty(16, 16, dtype=torch.bfloat16), torch.empty(16, 16), torch.empty(16, 16, dtype=torch.bfloat16)
    f = torch.empty(16, 16, dtype=torch.bfloat16)
    _bf16_arithmetic[(1,)](a, b, c, d, e, f, N=16)
    assert torch.equal(f, a * 0.5 + 1.25)
    assert torch.equal(e, (a.float() * 1.1).to(torch.bfloat16))
    assert torch.equal(c, torch.maximum(a * b + a, b) - b * b)
    assert torch.allclose(d, a.float() @ b.float(), rtol=1e-5, atol=1e-5)


def test_bf16_rounding_is_to_nearest_even():
    values = torch.tensor([1.0, -2.5, 1 + 2**-8, 1 + 3 * 2**-9, 3.4e38, float("inf"), float("nan"), 1e-40])
    bits = _triton_compat._f32_to_bf16(values.numpy())
    assert torch.equal(torch.from_numpy(bits.view("int16")).view(torch.bfloat16)[:-2], values.to(torch.bfloat16)[:-2])
    assert torch.from_numpy(bits.view("int16")).view(torch.bfloat16)[-2].isnan()
    assert (_triton_compat._bf16_to_f32(bits[:3]) == values[:3].to(torch.bfloat16).float().numpy()).all()
