"""The package's layers (see gemm_kernels/__init__.py): arrows point down only.

* every import inside the package (at any depth, in functions too) goes from a higher layer of
  :data:`LAYERS` to a lower one, or stays in its layer without a cycle; nothing imports the
  package's top (``gemm_kernels``'s own ``__init__``: the public API, which loads the layers);
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


#: the package's layers, bottom up: a module may import from its own layer (without a cycle) and
#: from the layers below it.  ``results`` reads committed data, below ``viz``, ``bench`` and ``lab``
#: that show it; ``bench`` measures, below ``lab`` (whose views print its records); ``book`` builds
#: the website from the lab's student copies.  The package's ``__init__`` (the public API) is above all.
#: ``_env`` and ``_files`` (reading what users hand us) import nothing of the package.
LAYERS = ("_env", "_files", "_triton_compat", "runtime", "models", "testing", "kernels", "results", "viz", "bench", "lab",
          "book")


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: pathlib.Path, modules) -> set[str]:
    """The package's modules ``path`` imports at any depth: ``from pkg import module`` is the module,
    ``from module import name`` the module, relative imports resolved."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:  # a name inside a module: the module
                name = name.rpartition(".")[0]
            if name.startswith("gemm_kernels") and name != module:
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: _imported_modules(path, paths) for name, path in paths.items()}


def layer_of(module: str) -> str:
    """``gemm_kernels.kernels.moe`` -> ``kernels``; the package itself -> ``gemm_kernels``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "gemm_kernels"


def upward_arrows(graph) -> list[str]:
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    rank["gemm_kernels"] = len(LAYERS)
    unknown = sorted({layer_of(m) for m in graph} - set(rank))
    assert not unknown, f"modules outside LAYERS: {unknown}: place them in tests/test_layers.py's LAYERS"
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if rank[layer_of(b)] > rank[layer_of(a)] or b == "gemm_kernels")


def import_cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycle_in_the_package():
    cycles = import_cycles(import_graph())
    assert not cycles, f"import cycles: {cycles}: one module of each must stop importing the other"


def test_imports_point_down_the_layers():
    up = upward_arrows(import_graph())
    assert not up, f"imports that point up the layers {LAYERS} (or at the package's own __init__): {up}"


def test_the_checks_see_what_they_check():
    """The graph finds a cycle, an upward arrow and an import of the top where one is made up."""
    made_up = {"gemm_kernels.kernels.a": {"gemm_kernels.kernels.b"}, "gemm_kernels.kernels.b": {"gemm_kernels.kernels.a"},
               "gemm_kernels.results": {"gemm_kernels.bench.l2"}, "gemm_kernels.bench.l2": {"gemm_kernels"}}
    assert import_cycles(made_up) == [["gemm_kernels.kernels.a", "gemm_kernels.kernels.b"]]
    assert upward_arrows(made_up) == ["gemm_kernels.bench.l2 -> gemm_kernels",
                                      "gemm_kernels.results -> gemm_kernels.bench.l2"]
    graph = import_graph()  # imports inside functions count, as the ones this issue removed were
    assert "gemm_kernels.kernels.moe_wgrad" in graph["gemm_kernels.kernels.moe"]
    assert "gemm_kernels.lab.compile_view" in graph["gemm_kernels.lab.compile_examples"]


def test_suite_names_match_the_harness():
    """results names the suites without importing the harness: the same names, in the same order."""
    from gemm_kernels.bench.suites import SUITES
    from gemm_kernels.results import SUITE_NAMES

    assert tuple(SUITES) == SUITE_NAMES


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
