"""Claims the course makes about its tools, checked mechanically where a CPU can check them."""

import dataclasses
import inspect
import re

import triton

from gemm_kernels.kernels import configs


def test_warp_specialize_changes_nothing_on_sm_90():
    """``tl.range(..., warp_specialize=True)`` on Hopper: the PTX of matmul_tma's main config is
    byte-identical with the switch on or off (so notebook 05 does not list it, and no config asks for it)."""
    from gemm_kernels.lab.compile_examples import persistent_examples
    from gemm_kernels.lab.compile_view import compile_many

    example = next(e for e in persistent_examples() if e.name.startswith("matmul_tma[fp16"))
    requests = [dataclasses.replace(example, config=triton.Config(
        {**example.config.kwargs, "WARP_SPECIALIZE": ws, "EPILOGUE_SUBTILE": True}, num_warps=8, num_stages=3)).request(90)
        for ws in (False, True)]
    off, on = (re.sub(r"^\s*//.*$", "", view.ptx, flags=re.M) for view in compile_many(requests))
    assert off == on
    assert not any(c.kwargs.get("WARP_SPECIALIZE") for c in configs.tma_configs(gpu=True) + configs.persistent_configs(gpu=True))


def test_do_bench_times_with_events_after_an_l2_flush():
    """What the notebooks teach about ``triton.testing.do_bench``: CUDA events around each call,
    each call preceded by a cache-clearing write that the host does not wait for."""
    from triton.testing import do_bench

    source = inspect.getsource(do_bench)
    loop = source[source.rindex("for i in range(n_repeat):"):]  # the timed loop
    flush, start, call, end = (loop.index(s) for s in ("clear_cache(cache)", "start_event[i].record()", "fn()",
                                                         "end_event[i].record()"))
    assert flush < start < call < end and "synchronize" not in loop[:end]


def test_notebook_08_setmaxnreg_counts_and_target():
    """08 section 5: inside the partitions the consumers ask for 232 registers and the producer
    drops to 40 (matmul_ws's request); 256 and 120 come from the dispatch; the target is sm_90a."""
    import re

    from gemm_kernels.kernels import matmul_ws
    from gemm_kernels.lab.compile_examples import ws_example

    ptx = ws_example(b_col_major=True, activation="gelu", has_bias=True).compile("sm_90").asm["ptx"]
    counts = {int(n) for n in re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)}
    assert counts == {matmul_ws.CONSUMER_REGS, matmul_ws.PRODUCER_REGS, 256, 120} == {232, 40, 256, 120}
    assert re.search(r"^\.target\s+sm_90a\b", ptx, re.M)
    assert 2 * 128 * matmul_ws.CONSUMER_REGS + 128 * matmul_ws.PRODUCER_REGS <= 64 * 1024


def test_notebook_08_cooperative_moves_a_quarter_less_per_flop():
    """08 section 7: operand bytes per FLOP of a BM x BN tile go as 1/BM + 1/BN, so the cooperative
    128 x 256 tile moves 0.75x of ping-pong's 128 x 128 (a quarter less, not a third)."""
    from pathlib import Path

    import nbformat

    def per_flop(bm, bn):
        return 1 / bm + 1 / bn

    assert per_flop(128, 256) / per_flop(128, 128) == 0.75
    nb = nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" / "08_warp_specialization.ipynb", 4)
    text = re.sub(r"\s+", " ", "\n".join(c.source for c in nb.cells if c.cell_type == "markdown"))
    assert "moves a quarter less of it per FLOP" in text and "0.75×" in text and "a third less" not in text


def test_moe_docs_say_only_this_package_zeroes_the_tail():
    """Rows past offs[-1]: grouped_mm writes zeros; torch._grouped_mm allocates with empty and leaves
    them uninitialised. No docstring or notebook may say torch zeroes them."""
    from pathlib import Path

    from gemm_kernels.kernels import moe

    root = Path(__file__).resolve().parents[1]
    texts = [inspect.getsource(moe), (root / "notebooks" / "07_moe_grouped_mm.ipynb").read_text()]
    for text in texts:
        flat = re.sub(r"\s+", " ", text)
        assert "as in `torch._grouped_mm`" not in flat and "as in ``torch._grouped_mm``" not in flat
        assert not re.search(r"zeros[^.]{0,40}as in torch", flat)
    assert "uninitialised" in inspect.getdoc(moe.grouped_mm)
