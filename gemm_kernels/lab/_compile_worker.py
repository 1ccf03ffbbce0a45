"""The compile view's worker: ``python -m gemm_kernels.lab._compile_worker JOB.json RESULT.json``.

Started by ``compile_view.compile_many`` with ``GEMM_KERNELS_COMPILE_ONLY=1``, so importing the
package leaves every kernel an ordinary ``@triton.jit`` function (no interpreter) that
``triton.compile`` can build for a GPU target on a machine without one.  Gluon kernels
(``@gluon.jit``) never run in the interpreter and compile the same way, from a Gluon source.
"""

from __future__ import annotations

import importlib
import json
import sys
import warnings


def _jit_function(module: str, qualname: str):
    from triton.runtime.jit import JITFunction

    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    while not isinstance(obj, JITFunction):
        obj = obj.fn
    return obj


def _decode(value):
    import torch
    import triton.language as tl

    if isinstance(value, dict) and "tensor" in value:
        dtype = getattr(torch, value["tensor"])
        storage = torch.empty(64, dtype=dtype)  # torch's CPU allocations are 64-byte aligned
        return storage if value["aligned"] else storage[1:]
    if isinstance(value, dict) and "tl_dtype" in value:
        return tl.dtype(value["tl_dtype"])
    if isinstance(value, dict) and "jit_function" in value:  # a function argument (a constexpr)
        ref = value["jit_function"]
        if ref.get("path") and ref["path"] not in sys.path:
            sys.path.insert(0, ref["path"])
        obj = importlib.import_module(ref["module"])
        for part in ref["name"].split("."):
            obj = getattr(obj, part)
        return obj
    if isinstance(value, dict) and "gluon_descriptor" in value:
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        d = value["gluon_descriptor"]
        base = torch.empty(64, dtype=getattr(torch, d["dtype"]))  # only its dtype and alignment count
        return TensorDescriptor(base, d["shape"], d["strides"], d["block_shape"],
                                gl.NVMMASharedLayout(**d["layout"]), d["padding"])
    return value


def build_source(jit_fn, given: dict):
    """The ``ASTSource`` a launch with ``given`` arguments would compile (see compile_view)."""
    from gemm_kernels import _triton_compat

    params = jit_fn.params
    missing = [p.name for p in params if p.name not in given and not p.has_default]
    if missing:
        raise ValueError(f"{jit_fn.__name__} needs values for {missing}")
    signature, consts, attrs = {}, {}, {}
    for i, p in enumerate(params):
        value = given[p.name] if p.name in given else p.default
        if p.is_constexpr:
            signature[p.name], consts[p.name] = "constexpr", value
            continue
        if isinstance(value, str):  # a type string such as "*fp16": no hint
            signature[p.name] = value
            continue
        ty, attr = _triton_compat.specialize(value, not p.do_not_specialize, not p.do_not_specialize_on_alignment)
        signature[p.name] = ty
        if ty == "constexpr":
            consts[p.name] = attr
        elif attr:
            attrs[i] = attr
    return _triton_compat.ast_source(jit_fn, signature, consts, attrs)


def _resource_usage(cubin: bytes) -> dict:
    from gemm_kernels.lab.compile_view import _resource_usage

    return _resource_usage(cubin)


def compile_one(request: dict) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget

    jit_fn = _jit_function(request["module"], request["qualname"])
    given = {k: _decode(v) for k, v in request["args"].items()}
    src = build_source(jit_fn, given)
    options = {"num_warps": request["num_warps"], "num_stages": request["num_stages"], **request.get("options", {})}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
        compiled = triton.compile(src, target=GPUTarget("cuda", request["capability"], 32), options=options)
    asm = {k: v for k, v in compiled.asm.items() if isinstance(v, str)}
    cubin = compiled.asm.get("cubin", b"")
    asm["cubin_hex"] = cubin.hex()
    usage = _resource_usage(cubin) if cubin else {}
    meta = compiled.metadata
    return {"asm": asm, "view": {
        "name": request["name"], "target": f"sm_{request['capability']}", "shared": int(meta.shared),
        "num_warps": int(meta.num_warps), "num_stages": int(meta.num_stages), "num_regs": usage.get("reg"),
        # ptxas puts spilled registers in the stack frame (STACK; "bytes stack frame, ... spill stores"
        # in ptxas -v), sometimes in LOCAL: count both
        "spill_bytes": None if "reg" not in usage else usage.get("stack", 0) + usage.get("local", 0), "global_scratch": int(getattr(meta, "global_scratch_size", 0) or 0),
        "metadata": {"shared": int(meta.shared), "num_warps": int(meta.num_warps)},
        "gluon": bool(getattr(jit_fn, "is_gluon", lambda: False)()),
    }}


def _describe(err: BaseException) -> str:
    """The error and the chain of errors under it (a compile error wraps the user's own, e.g. the
    NotImplementedError of an exercise stub), innermost last."""
    parts, seen = [], set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        parts.append(f"{type(err).__name__}: {err}")
        err = err.__cause__ or err.__context__
    return "\ncaused by ".join(parts)


def main(job_path: str, result_path: str) -> None:
    import gemm_kernels.runtime  # noqa: F401  (decides first: compile-only mode, kernels stay JITFunctions)

    results = []
    for request in json.loads(open(job_path).read()):
        try:
            results.append(compile_one(request))
        except Exception as err:  # reported per request, by name, in the parent, with what caused it
            results.append({"error": _describe(err)})
    with open(result_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
