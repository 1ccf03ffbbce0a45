"""configs.fit_to_device: every config of every kernel fits the GPU's shared memory for the
launch's dtype (fp32 doubles the bytes of the 2-byte-tuned lists), and GEMM_KERNELS_AUTOTUNE=0
leaves the first fitting one."""

import pytest
import torch
import triton.language as tl

from gemm_kernels import runtime
from gemm_kernels.kernels import configs

LISTS = {
    "persistent": lambda: configs.persistent_configs(gpu=True),
    "tma": lambda: configs.tma_configs(gpu=True),
    "grouped": lambda: configs.grouped_configs(gpu=True),
    "moe": lambda: configs.moe_configs(gpu=True),
}


def _fits(config, element_bytes):
    k = config.kwargs
    return (configs.pipeline_bytes(config, element_bytes) + k["BLOCK_M"] * k["BLOCK_N"] * element_bytes
            <= configs.shared_memory_limit())


@pytest.fixture
def autotune_on(monkeypatch):
    monkeypatch.setattr(runtime, "autotune_enabled", lambda: True)


@pytest.mark.parametrize("kind", LISTS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_every_surviving_config_fits_and_the_2_byte_lists_are_untouched(kind, dtype, autotune_on):
    original = LISTS[kind]()
    fitted = configs.fit_to_device(original, {"a_ptr": torch.empty(1, dtype=dtype)})
    element_bytes = torch.finfo(dtype).bits // 8
    assert fitted and all(_fits(c, element_bytes) for c in fitted)
    assert all(c.num_stages >= configs.MIN_STAGES for c in fitted)
    if element_bytes == 2:  # the lists are tuned for 2-byte inputs: nothing may change
        assert fitted == original


def test_fp32_lowers_stages_before_dropping(autotune_on):
    big = configs._cfg(128, 128, 64, 4, 4)  # 4 stages of fp32 blocks: 256 KiB, over Hopper's 227
    (fitted,) = configs.fit_to_device([big], {"a_ptr": torch.empty(1, dtype=torch.float32)})
    assert (fitted.kwargs, fitted.num_warps) == (big.kwargs, big.num_warps)
    assert fitted.num_stages == 2 and _fits(fitted, 4)


def test_dtype_from_the_grouped_kernels_constexpr(autotune_on):
    cfgs = configs.grouped_configs(gpu=True)
    assert configs.fit_to_device(cfgs, {}, DTYPE=tl.float16) == cfgs
    assert all(_fits(c, 4) for c in configs.fit_to_device(cfgs, {}, DTYPE=tl.float32))


def test_autotune_off_keeps_the_first_fitting_config(monkeypatch):
    monkeypatch.setattr(runtime, "autotune_enabled", lambda: False)
    cfgs = configs.tma_configs(gpu=True)
    assert configs.fit_to_device(cfgs, {"a_ptr": torch.empty(1, dtype=torch.float16)}) == cfgs[:1]
    (only,) = configs.fit_to_device(cfgs, {"a_ptr": torch.empty(1, dtype=torch.float32)})
    assert _fits(only, 4)


def _persistent_launch(dtype, activation, M=37, N=45, K=29):
    """Arguments of one small _matmul_persistent_kernel launch, C poisoned with NaN."""
    from gemm_kernels.kernels.persistent import _persistent_args, _persistent_grid

    a = torch.randn(M, K).to(runtime.DEVICE, dtype)
    b = torch.randn(K, N).to(runtime.DEVICE, dtype)
    c = torch.full((M, N), float("nan"), dtype=dtype, device=runtime.DEVICE)
    args = _persistent_args(a, b, c, None, None, order="grouped", group_size_m=4, num_programs=3,
                            activation=activation)
    return a, b, c, args, _persistent_grid(M, N, 3)


def test_tuned_kernel_remembers_the_choice_and_then_skips_the_autotuner(monkeypatch):
    from gemm_kernels.kernels.matmul import matmul_ref
    from gemm_kernels.kernels.persistent import _matmul_persistent_kernel, _persistent_tuned
    from gemm_kernels.testing import assert_close

    # Two candidates, so the autotuner computes and caches its key (with autotuning off, as on
    # this CPU, it keeps the first without timing anything).
    candidates = [triton_config(bk) for bk in (32, 16)]
    tuned = configs.TunedKernel(_matmul_persistent_kernel, candidates, key=_persistent_tuned.keys)
    autotuner_runs = []
    real_run = tuned.autotuner.run
    monkeypatch.setattr(tuned.autotuner, "run", lambda *a, **k: (autotuner_runs.append(1), real_run(*a, **k))[1])

    launches = [(torch.float16, None), (torch.float16, None), (torch.float16, "relu"), (torch.bfloat16, None),
                (torch.float16, "relu")]
    expected_runs = [1, 1, 2, 3, 3]  # a new key (activation, dtype) asks the autotuner, a known one does not
    for (dtype, activation), runs in zip(launches, expected_runs):
        a, b, c, args, grid = _persistent_launch(dtype, activation)
        tuned[grid](**args)
        assert len(autotuner_runs) == runs
        assert_close(c, matmul_ref(a, b, activation=activation, out_dtype=torch.float64), dtype)
    # Same keys as Triton's own cache, and the same choice for each.
    assert tuned.chosen == tuned.autotuner.cache
    assert len(tuned.chosen) == 3


def triton_config(block_k):
    import triton

    return triton.Config({**configs.INTERPRETER_BLOCKS, "BLOCK_K": block_k, **configs.PERSISTENT_LOOP_DEFAULTS},
                         num_warps=4, num_stages=1)
