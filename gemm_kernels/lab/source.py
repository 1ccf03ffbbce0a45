"""Kernel source for the notebooks, by name: never cut at exact strings, so reformatting a kernel
cannot silently break a lesson."""

from __future__ import annotations

import ast
import inspect
import textwrap


def kernel_source(fn) -> str:
    """Source of a ``@triton.jit`` function (compiled or interpreted, autotuned or not)."""
    obj = fn
    while not inspect.isfunction(obj):
        if not hasattr(obj, "fn"):
            raise TypeError(f"expected a @triton.jit function, got {type(fn).__name__}")
        obj = obj.fn
    return inspect.getsource(obj)


def show_source(*fns, lines_with: tuple[str, ...] | None = None) -> str:
    """Print (and return) the source of each function; with ``lines_with``, only the lines that
    contain one of those strings, each prefixed with its function's name.  Raises LookupError
    when a filter finds nothing, so a lesson whose lines moved fails loudly (nbmake runs them)."""
    parts = []
    for fn in fns:
        source = kernel_source(fn)
        if lines_with is None:
            parts.append(source.rstrip())
            continue
        name = source.split("def ", 1)[1].split("(", 1)[0]
        parts += [f"{name:>22}:  {line.strip()}" for line in source.splitlines()
                  if any(s in line for s in lines_with)]
    if not parts:
        raise LookupError(f"no line of {[kernel_source(f).split('(')[0] for f in fns]} contains any of {lines_with}")
    text = ("\n\n" if lines_with is None else "\n").join(parts)
    print(text)
    return text


def show_signature(fn) -> str:
    """Print (and return) the ``def`` of a ``@triton.jit`` function, up to its body: its parameters,
    not how it computes (a lesson names a kernel whose body an exercise asks for)."""
    source = textwrap.dedent(kernel_source(fn))
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef))
    lines = source.splitlines()
    end = node.body[0].lineno - 1  # the body's first line (its docstring, if any)
    while end > node.lineno and not lines[end - 1].rstrip().endswith(":"):  # comments before the body
        end -= 1
    text = "\n".join(lines[node.lineno - 1:max(end, node.lineno)])
    print(text)
    return text
