"""What `pip install gemm-kernels` brings, the one numpy/Triton combination refused at import,
and the files a teacher needs to reuse the course."""

import os
import pathlib
import subprocess
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

_FAKE_VERSIONS = r"""
import importlib.metadata as md, sys
import numpy
real = md.version
md.version = lambda name: sys.argv[1] if name == "triton" else real(name)
numpy.__version__ = sys.argv[2]
try:
    import gemm_kernels
except ImportError as e:
    print("refused:", e)
else:
    print("imported")
"""


@pytest.mark.parametrize("triton_version,numpy_version,refused", [
    ("3.6.0", "2.4.1", True), ("3.7.1", "2.5.0", True), ("3.6.0", "2.3.5", False), ("3.8.0", "2.5.0", False),
    ("3.9.0+git1a2b", "2.4.0", False),
])
def test_the_interpreter_numpy_combination_that_breaks_is_refused_at_import(triton_version, numpy_version, refused):
    env = {k: v for k, v in os.environ.items() if k != "GEMM_KERNELS_ARCH"}
    env["GEMM_KERNELS_INTERPRET"] = "1"
    out = subprocess.run([sys.executable, "-c", _FAKE_VERSIONS, triton_version, numpy_version], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    if refused:
        assert "refused:" in out.stdout and "pip install 'numpy<2.4'" in out.stdout and "triton>=3.8" in out.stdout
    else:
        assert out.stdout.strip() == "imported"


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
