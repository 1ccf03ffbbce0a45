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


def _counting(tuned, monkeypatch):
    runs = []
    real_run = tuned.autotuner.run
    monkeypatch.setattr(tuned.autotuner, "run", lambda *a, **k: (runs.append(1), real_run(*a, **k))[1])
    return runs


def test_tuned_kernel_remembers_the_choice_and_then_skips_the_autotuner(monkeypatch):
    from gemm_kernels.kernels.matmul import matmul_ref
    from gemm_kernels.kernels.persistent import _matmul_persistent_kernel, _persistent_tuned
    from gemm_kernels.testing import assert_close

    # Two candidates and autotuning on, so the autotuner times both (here by a stand-in timer
    # that prefers BLOCK_K=16, since nothing can be timed on a CPU) and caches its choice.
    timed = []

    def fake_timer(kernel_call, quantiles=None):
        kernel_call()
        timed.append(1)
        return [1.0 if len(timed) % 2 == 0 else 2.0] * 3

    monkeypatch.setattr(runtime, "autotune_enabled", lambda: True)
    candidates = [triton_config(bk) for bk in (32, 16)]
    tuned = configs.TunedKernel(_matmul_persistent_kernel, candidates, key=_persistent_tuned.keys,
                                do_bench=fake_timer)
    autotuner_runs = _counting(tuned, monkeypatch)

    launches = [(torch.float16, None), (torch.float16, None), (torch.float16, "relu"), (torch.bfloat16, None),
                (torch.float16, "relu")]
    expected_runs = [1, 1, 2, 3, 3]  # a new key (activation, dtype) asks the autotuner, a known one does not
    for (dtype, activation), runs in zip(launches, expected_runs):
        a, b, c, args, grid = _persistent_launch(dtype, activation)
        tuned[grid](**args)
        assert len(autotuner_runs) == runs
        assert_close(c, matmul_ref(a, b, activation=activation, out_dtype=torch.float64), dtype)
    # Triton's own cache's keys with M bucketed (configs.row_bucket), and the same choice for
    # each: the faster candidate.
    assert tuned.chosen == {(configs.row_bucket(key[0], tuned.row_granule), *key[1:]): config
                            for key, config in tuned.autotuner.cache.items()}
    assert len(tuned.chosen) == 3 and len(timed) == 6
    assert all(config.kwargs["BLOCK_K"] == 16 for config in tuned.chosen.values())


def test_a_single_fitting_config_is_launched_without_the_autotuner(monkeypatch):
    """GEMM_KERNELS_AUTOTUNE=0 (and the interpreter) leave one config: no timing run.  Triton 3.6
    and 3.7's autotuner timed even a list pruned to one config, so it must not be asked at all."""
    from gemm_kernels.kernels.matmul import matmul_ref
    from gemm_kernels.kernels.persistent import _matmul_persistent_kernel, _persistent_tuned
    from gemm_kernels.testing import assert_close

    monkeypatch.setattr(runtime, "autotune_enabled", lambda: False)
    timed = []
    tuned = configs.TunedKernel(_matmul_persistent_kernel, [triton_config(bk) for bk in (32, 16)],
                                key=_persistent_tuned.keys, do_bench=lambda *a, **k: timed.append(1))
    autotuner_runs = _counting(tuned, monkeypatch)
    for activation in (None, "relu", None):
        a, b, c, args, grid = _persistent_launch(torch.float16, activation)
        tuned[grid](**args)
        assert_close(c, matmul_ref(a, b, activation=activation, out_dtype=torch.float64), torch.float16)
    assert autotuner_runs == [] and timed == []
    assert [config.kwargs["BLOCK_K"] for config in tuned.chosen.values()] == [32, 32]


def triton_config(block_k):
    import triton

    return triton.Config({**configs.INTERPRETER_BLOCKS, "BLOCK_K": block_k, **configs.PERSISTENT_LOOP_DEFAULTS},
                         num_warps=4, num_stages=1)


@pytest.mark.parametrize("kind", LISTS)
@pytest.mark.parametrize("limit", sorted(set(runtime.ARCH_SHARED_MEMORY.values())))
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_every_list_fits_every_architectures_shared_memory(kind, limit, dtype, autotune_on, monkeypatch):
    """GEMM_KERNELS_ARCH=sm_86 (99 KB) with fp32 left no config of the moe list (notebook 09 on an
    H100 in that mode: a 240 KB config was launched): the smallest then gets smaller blocks."""
    monkeypatch.setattr(configs, "shared_memory_limit", lambda: limit)
    fitted = configs.fit_to_device(LISTS[kind](), {"a_ptr": torch.empty(1, dtype=dtype)})
    element_bytes = torch.finfo(dtype).bits // 8
    assert fitted and all(configs._bytes(c, c.num_stages, element_bytes) <= limit for c in fitted)
    assert all(min(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"]) >= 32 for c in fitted)


@pytest.mark.parametrize("kind", LISTS)
def test_the_small_search_tries_a_few_tile_shapes(kind, monkeypatch):
    """GEMM_KERNELS_AUTOTUNE=small (the notebooks): the first config of each of the first few tile
    shapes, so a small problem still gets a small tile, in the list's order."""
    monkeypatch.setenv(runtime.AUTOTUNE_ENV, "small")
    monkeypatch.setattr(runtime, "autotune_enabled", lambda: True)
    small = configs.fit_to_device(LISTS[kind](), {"a_ptr": torch.empty(1, dtype=torch.float16)})
    shapes = [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in small]
    assert small[0] == LISTS[kind]()[0] and len(set(shapes)) == len(shapes) <= configs.SMALL_SEARCH_SHAPES
    assert [c for c in LISTS[kind]() if c in small] == small and len(small) < len(LISTS[kind]())


@pytest.mark.parametrize("value,mode", [("", "full"), ("1", "full"), ("0", "off"), ("off", "off"), ("small", "small"),
                                        ("SMALL", "small")])
def test_autotune_modes(value, mode, monkeypatch):
    monkeypatch.setenv(runtime.AUTOTUNE_ENV, value)
    assert runtime.autotune_mode() == mode


def test_default_autotune_leaves_a_setting_the_user_made(monkeypatch):
    monkeypatch.setenv(runtime.AUTOTUNE_ENV, "0")
    runtime.default_autotune("small")
    assert runtime.autotune_mode() == "off"
    monkeypatch.delenv(runtime.AUTOTUNE_ENV)
    runtime.default_autotune("small")
    assert runtime.autotune_mode() == "small"
    with pytest.raises(ValueError, match="autotune mode must be one of"):
        runtime.set_autotune("fast")
