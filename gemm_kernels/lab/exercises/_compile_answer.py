"""The worker that compiles a learner's kernels for sm_90: ``python -m gemm_kernels.lab.exercises._compile_answer``.

Started once per process by :mod:`._kernel_checks` (with ``GEMM_KERNELS_COMPILE_ONLY=1``, so
the package's kernels stay ordinary ``@triton.jit`` functions), it reads one job per line on
stdin, ``{"requests": [...]}`` (requests as the compile view's worker takes them, plus ``path``:
the folder of the module that holds the learner's functions, and ``paths``: the learner's
process's ``sys.path``, for their own modules), and answers one line per job on
its own channel: per request ``{"ttir": ...}`` (and the other stages a request names in ``stages``,
e.g. ``["ptx"]``) or ``{"error": {...}}``, the error taken apart
(every ``CompilationError`` of the chain with its function, line and column) so that the check
can point at the learner's own line.  Anything else the compiler prints goes to stderr.
"""

from __future__ import annotations

import json
import os
import re
import sys


def _frames(err: BaseException) -> list[dict]:
    """The chain of errors, outermost first: type, message, and for a CompilationError the
    function (from its source), the line inside that function (1 = its ``def``) and the column."""
    out, seen = [], set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        frame = {"type": type(err).__name__, "message": str(err)}
        src, node = getattr(err, "src", None), getattr(err, "node", None)
        if src is not None and node is not None and hasattr(node, "lineno"):
            match = re.search(r"^\s*def\s+(\w+)", src, flags=re.MULTILINE)
            frame.update({"function": match.group(1) if match else None, "line": int(node.lineno),
                          "col": int(getattr(node, "col_offset", 0)),
                          "message": getattr(err, "error_message", None) or ""})
        out.append(frame)
        err = err.__cause__ or err.__context__
    return out


def compile_request(request: dict) -> dict:
    from gemm_kernels.lab._compile_worker import compile_one

    path = request.get("path")
    if path and path not in sys.path:
        sys.path.insert(0, path)
    for folder in request.get("paths", []):  # the learner's own modules, importable as in their process
        if folder not in sys.path:
            sys.path.append(folder)
    try:
        compiled = compile_one(request)
    except Exception as err:  # noqa: BLE001  (the learner's error, returned to the check)
        return {"error": {"frames": _frames(err)}}
    answer = {"ttir": compiled["asm"].get("ttir", "")}
    for stage in request.get("stages", ()):  # more stages for a check that reads them (notebook 10: the PTX's wgmma)
        if stage in compiled["asm"]:
            answer[stage] = compiled["asm"][stage]
    return answer


def serve() -> None:
    channel = os.fdopen(os.dup(1), "w")  # answers go here; fd 1 becomes stderr (ptxas, prints)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import gemm_kernels.runtime  # noqa: F401  (decides first: compile-only mode, kernels stay JITFunctions)

    channel.write(json.dumps({"ready": True}) + "\n")
    channel.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            job = json.loads(line)
            answers = [compile_request(r) for r in job["requests"]]
        except Exception as err:  # noqa: BLE001  (a bad job: say so, keep serving)
            answers = {"job_error": f"{type(err).__name__}: {err}"}
        channel.write(json.dumps(answers) + "\n")
        channel.flush()


if __name__ == "__main__":
    serve()
