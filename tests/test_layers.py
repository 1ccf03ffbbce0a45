"""The package's layers (see gemm_kernels/__init__.py): arrows point down only.

* kernels/ never imports lab/, viz/ or bench/;
* models/ imports no Triton (nor anything that does): plain numpy, importable without Triton;
* every public name of ``gemm_kernels`` resolves.
"""

import ast
import pathlib
import subprocess
import sys

import pytest

import gemm_kernels

PACKAGE = pathlib.Path(gemm_kernels.__file__).resolve().parent


def _imports(path: pathlib.Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved), at any depth."""
    module = ".".join(("gemm_kernels", *path.relative_to(PACKAGE).with_suffix("").parts))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def _modules(folder: str):
    return sorted((PACKAGE / folder).rglob("*.py"))


@pytest.mark.parametrize("path", _modules("kernels"), ids=lambda p: p.name)
def test_kernels_never_import_the_layers_above(path):
    above = ("gemm_kernels.lab", "gemm_kernels.viz", "gemm_kernels.bench")
    bad = sorted(n for n in _imports(path) if n.startswith(above))
    assert not bad, f"{path.name} imports {bad}: kernels must not depend on lab/, viz/ or bench/"


@pytest.mark.parametrize("path", _modules("models"), ids=lambda p: p.name)
def test_models_import_no_triton(path):
    names = _imports(path)
    bad = sorted(n for n in names if n.split(".")[0] == "triton"
                 or (n.startswith("gemm_kernels.") and not n.startswith(("gemm_kernels.models", "gemm_kernels.runtime"))))
    assert not bad, f"{path.name} imports {bad}: models/ must stay plain numpy"


def test_models_import_with_triton_missing():
    """Not just by reading the imports: in a fresh process where Triton cannot be imported at all."""
    code = ("import sys; sys.modules['triton'] = None\n"
            "import gemm_kernels.models.tiles, gemm_kernels.models.schedule, gemm_kernels.models.l2model\n"
            "s = gemm_kernels.models.schedule.tile_schedule(256, 256, 64, 64, 'grouped', 2, programs_in_flight=4)\n"
            "print(s.num_tiles)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=PACKAGE.parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "16"


def test_every_public_name_resolves():
    for name in gemm_kernels.__all__:
        assert getattr(gemm_kernels, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        gemm_kernels.nonexistent  # noqa: B018
