"""A kernel exercise's answer rebuilt, by the judge, from its source alone (:mod:`._grade_judge`).

The learner's process reports the source of the answer and of the functions it reads
(:func:`gemm_kernels.lab._grade_worker.answer_code`); :func:`rebuild` checks that source against
what a Triton kernel and its launcher need, and only then defines it, in a namespace of its own:

* names: no ``__dunder__`` and no escape hatch (``eval``, ``open``, ``getattr``, ``type``, ...);
  the builtins are a short list (``range``, ``min``, ``len``, ...);
* attributes: none that starts with ``_``, none that reaches files or raw memory (``numpy``,
  ``tofile``, ``storage``, ``handle``, ``fn``, ``format``, ...); a module is only read as
  ``module.name``, and only Triton's language, ``math``, ``triton.jit``/``cdiv``/``autotune``/...,
  torch's allocators and dtypes, and the package's ``@triton.jit`` helpers that the exercise hands
  the learner (its check's ``hands``: ``_kernel_checks.refused_package_code``, the notebook's rule)
  are reachable;
* statements: no import, ``class``, ``global``, ``with``, ``try``, attribute assignment;
* globals: modules (by name), literals, ``tl.constexpr`` literals, dtypes, other functions of the
  learner's (rebuilt the same way).

What it refuses comes back as :class:`NotRebuilt`, with a sentence for the learner.  The check
then runs in the judge on the rebuilt answer (interpreted on a CPU), as it would in a notebook.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import linecache
import types

from ._grade_worker import CELL_FILES

SAFE_BUILTINS = ("abs", "all", "any", "bool", "divmod", "enumerate", "float", "int", "isinstance", "len", "list",
                 "max", "min", "pow", "print", "range", "reversed", "round", "sorted", "str", "sum", "tuple", "zip",
                 "dict", "set", "slice", "True", "False", "None", "ValueError", "TypeError", "RuntimeError",
                 "AssertionError", "NotImplementedError", "Exception", "IndexError", "KeyError", "ZeroDivisionError")
DENIED_NAMES = frozenset({"eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "globals", "locals",
                          "vars", "breakpoint", "input", "help", "memoryview", "type", "object", "super", "dir",
                          "id", "classmethod", "staticmethod", "property", "exit", "quit", "copyright", "credits",
                          "license", "callable", "hasattr", "iter", "next"})
DENIED_ATTRIBUTES = frozenset({"numpy", "tofile", "dump", "dumps", "save", "load", "storage", "untyped_storage",
                               "share_memory_", "pin_memory", "apply_", "map_", "map2_", "register_hook",
                               "register_post_accumulate_grad_hook", "backward", "handle", "data", "fn", "src",
                               "cache", "run", "warmup", "format", "format_map", "from_file", "mro", "gi_frame",
                               "cr_frame", "tb_frame", "f_back", "f_globals", "f_locals", "f_builtins",
                               "set_", "resize_", "as_strided", "as_strided_", "grad_fn", "module", "modules", "type",
                               # Triton's shared machinery, reachable from a kernel object (a judge's review:
                               # a poisoned cache of rewritten functions zeroed the next student's kernel)
                               "rewritten_fn", "rewriter", "get_capture_scope", "pre_run_hooks", "jit_function",
                               # mutators of a shared list or dict (tl.float32.SINT_TYPES, a cache)
                               "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
                               "popitem", "sort", "reverse",
                               # ways out of the language (an adversary's search: tl.semantic.TritonSemantic.lang
                               # is triton.language.core, whose builtins hold exec)
                               "lang", "semantic", "builtins", "exec", "eval", "compile", "open", "system", "popen",
                               "os", "sys", "inspect", "importlib", "subprocess", "ctypes", "environ"})
#: what a launcher may take from torch and triton
TORCH_NAMES = frozenset({"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
                         "full_like", "float16", "float32", "float64", "bfloat16", "half", "float", "int8", "int16",
                         "int32", "int64", "uint8", "bool", "float8_e4m3fn", "float8_e5m2", "Size", "device",
                         "Tensor", "finfo", "iinfo", "dtype"})
TRITON_NAMES = frozenset({"jit", "cdiv", "next_power_of_2", "autotune", "Config", "heuristics", "language",
                          "constexpr"})
#: modules whose every public name a kernel may use
OPEN_MODULES = ("triton.language", "math", "triton.experimental.gluon")


class NotRebuilt(Exception):
    """The answer's source holds something the judge does not run (the message says what and where)."""


def _module_allows(module: str, chain: list[str]) -> bool:
    if module == "torch":
        return len(chain) == 1 and chain[0] in TORCH_NAMES
    if module == "triton":
        if not chain or chain[0] not in TRITON_NAMES:
            return False
        return chain[0] != "language" or (len(chain) > 1 and _module_allows("triton.language", chain[1:]))
    if not _open_module(module):
        return False
    obj = importlib.import_module(module)
    for part in chain:  # every object on the way is the open modules' own (no tl.core.os, no tl.extra.modules)
        obj = getattr(obj, part, None)
        if obj is None:
            return False  # no such name (or one the module binds to None): nothing to check it against
        if not _open_object(obj):
            return False
    return True


def _ends_in_module(module: str, chain: list[str]) -> bool:
    try:
        obj = importlib.import_module(module)
        for part in chain:
            obj = getattr(obj, part)
    except Exception:  # noqa: BLE001  (no such name: Triton says so when it runs)
        return False
    return isinstance(obj, types.ModuleType)


def _free_names(text: str, filename: str) -> set[str]:
    """The global names ``text``'s functions read (``symtable``: what is not a parameter or a local)."""
    import symtable

    names, stack = set(), [symtable.symtable(text, filename, "exec")]
    while stack:
        table = stack.pop()
        if table.get_type() == "function":
            names |= {n for n in table.get_globals()}
        stack.extend(table.get_children())
    return names


def _open_object(obj) -> bool:
    """An open module, a plain value, or a function, class or value that an open module defines
    (``sys.modules``, re-exported as ``tl.extra.modules``, is none of them)."""
    if isinstance(obj, types.ModuleType):
        return _open_module(obj.__name__)
    if obj is None or type(obj) in (int, float, bool, str):
        return True
    if isinstance(obj, type) and obj.__module__.startswith("triton._C.") or type(obj).__module__.startswith("triton._C."):
        return type(obj).__name__ != "module"  # Triton's enumerations (tl.PropagateNan.ALL), defined in its C++
    if _jit_like(obj):  # a @triton.jit helper of the language (tl.cdiv), compiled or interpreted
        obj = getattr(obj, "fn", obj)
    owner = getattr(obj, "__module__", None) if isinstance(obj, (type, types.FunctionType)) or callable(obj) \
        else type(obj).__module__
    return isinstance(owner, str) and _open_module(owner)


def _open_module(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in OPEN_MODULES)


def _library_object(module: str, chain: list[str]):
    """A package ``@triton.jit`` helper (``tiles.tile_grouped``) reached as ``module.name``, or None."""
    if not module.startswith("gemm_kernels.") or module.startswith("gemm_kernels.lab"):
        return None
    try:
        obj = importlib.import_module(module)
        for part in chain:
            obj = getattr(obj, part)
    except Exception:  # noqa: BLE001
        return None
    return obj if _jit_like(obj) else None


def _jit_like(obj) -> bool:
    """Triton code (a jit function, an interpreted one, a constexpr function), not plain Python."""
    return any(kind.__name__ in ("JITFunction", "InterpretedFunction", "ConstexprFunction", "JITCallable")
               for kind in type(obj).__mro__)


def _package_code(obj, used: str, hands, forbid):
    """``obj`` (the package's, reached as ``used``), or NotRebuilt when the exercise does not hand it."""
    from .exercises._kernel_checks import refused_package_code

    refused = refused_package_code(obj, hands, forbid)
    if refused is not None:
        raise NotRebuilt(f"{used}: {refused.message}")
    return obj


class _Validator(ast.NodeVisitor):
    FORBIDDEN = (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.ClassDef, ast.AsyncFunctionDef,
                 ast.Await, ast.Yield, ast.YieldFrom, ast.With, ast.AsyncWith, ast.Try, ast.Delete, ast.Match)

    def __init__(self, where: str, modules: dict[str, str], hands=(), forbid=()):
        self.where, self.modules, self.hands, self.forbid = where, modules, hands, forbid

    def refuse(self, node, what: str):
        raise NotRebuilt(f"{self.where}, line {getattr(node, 'lineno', '?')}: {what}")

    def generic_visit(self, node):
        if isinstance(node, self.FORBIDDEN):
            self.refuse(node, f"`{type(node).__name__.lower()}` is not allowed in a kernel or its launcher")
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Attribute):
                        self.refuse(node, "assigning to an attribute is not allowed")
                    if isinstance(sub, ast.Subscript):  # x[i] = ...: a launcher allocates, its kernel writes
                        self.refuse(node, "assigning to an element (x[...] = ...) is not allowed")
        super().generic_visit(node)

    def visit_Name(self, node):
        if node.id.startswith("__") or node.id in DENIED_NAMES:
            self.refuse(node, f"the name {node.id} is not allowed")
        if node.id in self.modules:
            self.refuse(node, f"the module {node.id} may only be used as {node.id}.name")

    def visit_Attribute(self, node):
        chain, base = [], node
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        chain.reverse()
        on_module = isinstance(base, ast.Name) and base.id in self.modules
        for attr in chain:
            if attr.startswith("_") or (attr in DENIED_ATTRIBUTES and not on_module):
                self.refuse(node, f"the attribute .{attr} is not allowed")
        if on_module:
            module = self.modules[base.id]
            if not _module_allows(module, chain):
                helper = _library_object(module, chain)
                if helper is None:
                    self.refuse(node, f"{base.id}.{'.'.join(chain)} is not available to a kernel or its launcher")
                try:
                    _package_code(helper, f"{base.id}.{'.'.join(chain)}", self.hands, self.forbid)
                except NotRebuilt as exc:
                    self.refuse(node, str(exc))
            if _ends_in_module(module, chain):  # c = tl.core; c.builtins: a module only as module.name
                self.refuse(node, f"{base.id}.{'.'.join(chain)} is a module: use it only as "
                                  f"{base.id}.{'.'.join(chain)}.name")
            return  # the chain is checked whole
        self.visit(base)


def _safe_builtins() -> dict:
    return {name: getattr(builtins, name) for name in SAFE_BUILTINS if hasattr(builtins, name)}


def _literal(text: str):
    value = ast.literal_eval(str(text))
    if type(value) not in (int, float, bool, str, type(None), tuple):
        raise NotRebuilt(f"the value {str(text)[:40]} is not a literal")
    return value


def _global_value(name: str, spec: dict, modules: dict[str, str], hands=(), forbid=()):
    import triton.language as tl

    if "module" in spec:
        module = str(spec["module"])
        if module in ("torch", "triton") or any(module == m or module.startswith(m + ".") for m in OPEN_MODULES) \
                or (module.startswith("gemm_kernels.") and not module.startswith("gemm_kernels.lab")):
            modules[name] = module
            return importlib.import_module(module)
        raise NotRebuilt(f"it uses the module {module} (as {name}), which a kernel or its launcher may not use")
    if "literal" in spec:
        return _literal(spec["literal"])
    if "constexpr" in spec:
        return tl.constexpr(_literal(spec["constexpr"]))
    if "dtype" in spec:
        value = getattr(tl, str(spec["dtype"]), None)
        if not isinstance(value, tl.dtype):
            raise NotRebuilt(f"{name} is no Triton dtype")
        return value
    if "standin" in spec:  # a helper of a check module the notebook imports (never a *_ref reference)
        module, helper = (str(v) for v in spec["standin"][:2])
        obj = None
        if module.startswith("gemm_kernels.lab.exercises.") and not helper.endswith("_ref") \
                and not helper.startswith("_") and helper.isidentifier():
            obj = getattr(importlib.import_module(module), helper, None)
        if obj is None or not _jit_like(obj):
            raise NotRebuilt(f"it uses {name} ({module}.{helper}), which a kernel or its launcher may not use")
        return _package_code(obj, name, hands, forbid)
    if "object" in spec:
        module, _, qualname = str(spec["object"]).partition(":")
        obj = _library_object(module, qualname.split(".")) if "<" not in qualname else None
        if obj is not None:  # a package helper: only one the exercise hands (by any name: an alias too)
            return _package_code(obj, name, hands, forbid)
        if obj is None and qualname.isidentifier() and (module == "triton" or _open_module(module)) \
                and _module_allows(module, [qualname]):
            obj = getattr(importlib.import_module(module), qualname, None)
        if obj is None and module == "gemm_kernels.models.tiles" and qualname == "cdiv":
            from ..models.tiles import cdiv as obj
        if obj is None:
            raise NotRebuilt(f"it uses {name} ({module}.{qualname}), which a kernel or its launcher may not use")
        return obj
    raise NotRebuilt(f"it uses {name}, a {spec.get('other', 'value')} the grader cannot rebuild from source "
                     "(use a number, a tl.constexpr or a function of your own)")


def rebuild(report: dict, name: str, hands=(), forbid=()):
    """The learner's function ``name`` defined afresh from ``report`` (see the module docstring);
    ``hands``, ``forbid``: the package code its check allows and calls its answer
    (``_kernel_checks.handed``, ``package_answers``)."""
    files = {str(k): str(v) for k, v in report["files"].items()}
    import triton.language as tl

    # Triton's interpreter wants triton.language among a kernel's globals: under a name the
    # learner's code may not use bare
    namespace: dict = {"__builtins__": _safe_builtins(), "__name__": "__main__", "_gk_tl": tl}
    modules: dict[str, str] = {"_gk_tl": "triton.language"}
    for global_name, spec in report["globals"].items():
        if not str(global_name).isidentifier() or str(global_name).startswith("__"):
            raise NotRebuilt(f"a global named {str(global_name)[:40]!r}")
        if "function" in spec:
            continue
        namespace[global_name] = _global_value(global_name, spec, modules, hands, forbid)
    for filename in files:
        if not filename.startswith(CELL_FILES):
            raise NotRebuilt(f"source from {filename[:60]}, not from a cell of the notebook")
    # Triton re-reads a kernel's source through linecache (its interpreter from the *last* line that
    # starts with `def `): so linecache holds the checked lines alone, every other line of the cell blank
    checked_lines = {filename: [""] * len(text.splitlines()) for filename, text in files.items()}
    checked = []
    if not all(isinstance(f, (list, tuple)) and len(f) == 4 and all(isinstance(v, str) for v in f[:2])
               and all(type(v) is int and v > 0 for v in f[2:]) for f in report["functions"]):
        raise NotRebuilt("the report's functions are not (name, cell, first line, last line)")
    names = [f[0] for f in report["functions"]]
    if len(set(names)) != len(names):
        raise NotRebuilt("a function is reported twice")
    for fn_name, filename, first, last in report["functions"]:
        spec = report["globals"].get(fn_name)
        if spec is not None and "function" not in spec:
            raise NotRebuilt(f"{str(fn_name)[:40]} is both a function and another global")
        lines = files[filename].splitlines(keepends=True)[int(first) - 1:int(last)]
        text = "".join(lines)
        where = f"{fn_name} ({filename[1:-1]})"
        if text[:1].isspace():
            raise NotRebuilt(f"{where}: define it at the top level of a cell, not inside another block")
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            raise NotRebuilt(f"{where}: its source does not parse on its own ({exc.msg})") from None
        if len(tree.body) != 1 or not (isinstance(tree.body[0], ast.FunctionDef) or (
                isinstance(tree.body[0], ast.Assign) and isinstance(tree.body[0].value, ast.Lambda))):
            raise NotRebuilt(f"{where}: expected one `def` (or `name = lambda ...`)")
        node = tree.body[0]
        defines = node.name if isinstance(node, ast.FunctionDef) else (
            node.targets[0].id if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) else None)
        if defines != fn_name:
            raise NotRebuilt(f"{where}: its source defines {defines}, not {fn_name}")
        own_def = node.lineno if isinstance(node, ast.FunctionDef) else None
        stray = [i + 1 for i, line in enumerate(lines) if line.strip().startswith("def ") and i + 1 != own_def]
        if stray:  # inside a string (a nested def is refused below): Triton would run the text from there
            raise NotRebuilt(f"{where}: line {int(first) + stray[0] - 1} of the cell starts with `def ` inside the "
                             "function (in a string?); Triton reads a kernel from its last such line, so the "
                             "grader cannot tell what would run")
        checked_lines[filename][int(first) - 1:int(first) - 1 + len(lines)] = [line.rstrip("\r\n") for line in lines]
        checked.append((fn_name, filename, first, text, tree))
    for filename, kept in checked_lines.items():
        lines = [line + "\n" for line in kept]
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
    for fn_name, filename, first, text, tree in checked:
        where = f"{fn_name} ({filename[1:-1]})"
        _Validator(where, modules, hands, forbid).visit(tree)
        # every global name it reads is one the report defines, a safe builtin or a function of the answer's:
        # Triton's interpreter copies its own globals (inspect, np, ...) into a kernel's, and those stay out
        known = set(namespace) | set(SAFE_BUILTINS) | set(names)  # each name one its own source defines
        unknown = sorted(_free_names(text, filename) - known)
        if unknown:
            raise NotRebuilt(f"{where}: it reads {', '.join(unknown[:3])}, which the notebook does not define "
                             "for it (a number, a tl.constexpr, a module or a function of yours)")
        expected = ast.dump(tree)
        ast.increment_lineno(tree, int(first) - 1)
        exec(compile(tree, filename, "exec"), namespace)  # noqa: S102  (validated above; restricted builtins)
        _same_source_as_triton_reads(namespace.get(fn_name), expected, where)
    for alias, module in modules.items():  # no function of the answer's took a module's name
        if namespace.get(alias) is not importlib.import_module(module):
            raise NotRebuilt(f"{alias} is no longer the module {module}")
    own = str(report["functions"][0][0]) if report["functions"] else name
    if own not in namespace:
        raise NotRebuilt(f"{name} was not rebuilt from its source")
    return namespace[own]


def _same_source_as_triton_reads(obj, expected: str, where: str) -> None:
    """Refuse a function whose source, as ``inspect`` reads it back (as Triton does, for its JIT and
    its interpreter), is not the text that was checked."""
    import inspect
    import textwrap

    fn = getattr(obj, "fn", obj)  # a JITFunction (or an Autotuner around one) wraps the Python function
    fn = getattr(fn, "fn", fn)
    if not isinstance(fn, types.FunctionType) or fn.__name__ == "<lambda>":
        return
    try:
        source = textwrap.dedent("".join(inspect.getsourcelines(fn)[0]))
        same = ast.dump(ast.parse(source)) == expected
    except (OSError, TypeError, SyntaxError, ValueError):
        same = False
    if not same:
        raise NotRebuilt(f"{where}: its source, read back as Triton reads it, is not the text that was checked")


def is_function(obj) -> bool:
    return isinstance(obj, types.FunctionType)
