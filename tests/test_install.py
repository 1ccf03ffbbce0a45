"""What `pip install gemm-kernels` brings, Triton 3.6 with numpy >= 2.4 (fixed at import),
and the files a teacher needs to reuse the course."""

import pathlib
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]



def test_triton_36_scalars_index_with_numpy_24():
    """Triton 3.6/3.7's interpreter converted a scalar's 1-element array with int(), which numpy >= 2.4
    refuses (``range(0, K, BLOCK)`` in a kernel failed): the package installs an ``__index__`` that
    reads the element, in interpreting processes and for checked runs on a GPU.  `make
    test-triton-oldest` runs this file and the others Triton's version can change on 3.6 with numpy >= 2.4."""
    import numpy as np
    import triton.language as tl

    from gemm_kernels import _triton_compat

    _triton_compat.index_scalars_for_new_numpy()
    _triton_compat.index_scalars_for_new_numpy()  # idempotent
    from triton.runtime import interpreter

    if not hasattr(interpreter, "_patch_lang_tensor"):
        pytest.skip("this Triton's interpreter installs no __index__ of its own")
    assert interpreter._patch_lang_tensor._gemm_kernels_index
    scope = interpreter._LangPatchScope()
    interpreter._patch_lang_tensor(tl.core.tensor, scope)
    try:
        scalar = tl.core.tensor(interpreter.TensorHandle(np.array([7], dtype=np.int32), tl.int32), tl.int32)
        assert list(range(0, scalar, 3)) == [0, 3, 6]
    finally:
        scope.restore()


def test_a_plain_install_brings_no_jupyterlab_and_the_tools_are_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [req.split(">")[0].split("=")[0].split("<")[0].strip().lower() for req in project["dependencies"]]
    assert "jupyterlab" not in names and not {"pytest", "nbmake", "playwright"} & set(names)
    assert {"torch", "triton", "numpy", "matplotlib", "ipywidgets", "tqdm", "nbformat"} <= set(names)
    assert not any("<2.4" in req for req in project["dependencies"] if req.startswith("numpy"))
    extras = project["optional-dependencies"]
    assert any(r.startswith("jupyterlab") for r in extras["lab"])
    assert '".[lab,test]"' in (ROOT / "Makefile").read_text()


def test_licence_notice_and_citation():
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "the gemm-kernels contributors" in licence
    notice = (ROOT / "NOTICE").read_text()
    for source in ("Triton", "Stream-K", "arXiv:2301.03598", "Group GEMM"):
        assert source in notice
    citation = (ROOT / "CITATION.cff").read_text()
    assert "cff-version:" in citation and "license: MIT" in citation
