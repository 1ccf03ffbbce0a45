"""ptxas_advice: Triton's own ptxas, run on a compile view's PTX on any machine, reports C7510
(a serialised wgmma pipeline) for a K loop with a device assert compiled in, and not without it."""

import pytest

from gemm_kernels.lab import ptxas_advice


@pytest.fixture(scope="module")
def lines():
    return {debug: ptxas_advice.advisories(ptxas_advice.dot_loop_view(debug)) for debug in (False, True)}


def test_the_assert_compiled_in_serialises_the_wgmma_pipeline(lines):
    (advisory,) = [line for line in lines[True] if "C7510" in line]
    assert "wgmma.mma_async instructions are serialized" in advisory and "function call" in advisory
    assert not any("C7510" in line for line in lines[False])


def test_the_report_keeps_the_register_line_and_drops_file_names(lines):
    for report in lines.values():
        assert any(line.startswith("info") and "registers" in line for line in report)
        assert not any(".ptx" in line and "kernel.ptx" not in line for line in report)


def test_ptxas_failure_is_a_clear_error():
    view = ptxas_advice.dot_loop_view(False)
    broken = type(view)(**{**view.__dict__, "asm": {**view.asm, "ptx": view.asm["ptx"] + "\nnot ptx at all;\n"}})
    with pytest.raises(RuntimeError, match="ptxas failed on dot_loop"):
        ptxas_advice.advisories(broken)
