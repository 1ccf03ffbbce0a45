"""configs.fit_to_device: every config of every kernel fits the GPU's shared memory for the
launch's dtype (fp32 doubles the bytes of the 2-byte-tuned lists), and GEMM_KERNELS_AUTOTUNE=0
leaves the first fitting one."""

import pytest
import torch
import triton.language as tl

from gemm_kernels import configs, runtime

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
