"""Values between a graded notebook's process and its judge (:mod:`gemm_kernels.lab._grade_judge`).

One JSON object per line, nothing else: no pickle, no object the sender built.  :func:`encode`
turns what an answer returned (numbers, strings, lists, tuples, dicts, ranges, numpy arrays and
tensors, any other iterable read up to a limit) into plain JSON; :func:`decode`, on the judge's
side, builds only plain values from it: ints, floats, strings, tuples, lists, dicts, ranges,
numpy arrays, CPU tensors, and :class:`Opaque` for the rest.  An object that says it equals
everything, an int subclass with its own ``__eq__``, a tensor subclass: none of them crosses.
"""

from __future__ import annotations

import base64
import itertools
import json
import math

#: items read from an iterable answer (a generator, ``itertools.count()``): the checks read fewer
ITEMS_LIMIT = 1 << 16
#: bytes of one array or tensor, and characters of one string
BYTES_LIMIT = 64 << 20
#: nesting depth of lists in lists
DEPTH_LIMIT = 32


class WireError(ValueError):
    """A value that cannot cross (too big, too deep, or malformed on the judge's side)."""


def _array_payload(array) -> dict:
    import numpy as np

    array = np.ascontiguousarray(array)
    if array.dtype.kind not in "biuf":
        raise WireError(f"an array of {array.dtype}")
    if array.nbytes > BYTES_LIMIT:
        raise WireError(f"an array of {array.nbytes:,} bytes")
    return {"dtype": array.dtype.str, "shape": list(array.shape), "data": base64.b64encode(array.tobytes()).decode()}


def encode(value, depth: int = 0):
    """``value`` as plain JSON data (raises WireError for what cannot cross)."""
    if depth > DEPTH_LIMIT:
        raise WireError("a value nested too deep")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return {"int": str(int(value))} if abs(value) > 2 ** 53 else int(value)
    if isinstance(value, float):
        value = float(value)
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, str):
        if len(value) > BYTES_LIMIT:
            raise WireError("a string too long")
        return {"str": str(value)}
    if value is Ellipsis:
        return {"ellipsis": True}
    if isinstance(value, range):
        return {"range": [value.start, value.stop, value.step]}
    try:
        import numpy as np
        import torch
    except ImportError:  # pragma: no cover  (both ship with the package)
        np = torch = None
    if torch is not None and isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        if tensor.is_complex() or tensor.layout != torch.strided:
            raise WireError(f"a {tensor.layout} tensor of {tensor.dtype}")
        # its storage up to the last element it reaches, with its strides and offset: a view
        # (``b.t()``, a slice) crosses as a view, alignment included
        span = tensor.storage_offset() + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride())) + 1
        span = span if tensor.numel() else tensor.storage_offset()
        flat = torch.empty(0, dtype=tensor.dtype).set_(tensor.untyped_storage(), 0, (span,), (1,))
        if tensor.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
            flat = flat.view(torch.uint8 if tensor.element_size() == 1 else torch.int16)
        return {"tensor": str(tensor.dtype).replace("torch.", ""), "size": list(tensor.shape),
                "stride": list(tensor.stride()), "offset": tensor.storage_offset(), **_array_payload(flat.numpy())}
    if np is not None and isinstance(value, np.ndarray):
        return {"ndarray": True, **_array_payload(value)}
    if np is not None and isinstance(value, np.generic):
        return {"scalar": True, **_array_payload(np.asarray(value))}
    if isinstance(value, tuple):
        return {"tuple": [encode(v, depth + 1) for v in itertools.islice(value, ITEMS_LIMIT + 1)]}
    if isinstance(value, list):
        return {"list": [encode(v, depth + 1) for v in itertools.islice(value, ITEMS_LIMIT + 1)]}
    if isinstance(value, dict):
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)]
                         for k, v in itertools.islice(value.items(), ITEMS_LIMIT + 1)]}
    try:
        items = iter(value)
    except TypeError:
        return {"opaque": type(value).__name__, "repr": _repr(value)}
    return {"iterable": type(value).__name__,
            "items": [encode(v, depth + 1) for v in itertools.islice(items, ITEMS_LIMIT + 1)]}


def _repr(value) -> str:
    try:
        return repr(value)[:200]
    except Exception:  # noqa: BLE001
        return f"<{type(value).__name__}>"


class Opaque:
    """What an answer returned that is no plain value (its type's name and its repr, as text)."""

    def __init__(self, kind: str, text: str):
        self.kind, self.text = str(kind)[:80], str(text)[:200]

    def __repr__(self) -> str:
        return self.text


def _iterator(items):
    yield from items


_TENSOR_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
                  "float8_e4m3fn", "float8_e5m2")


def _array(data: dict):
    import numpy as np

    dtype = np.dtype(str(data["dtype"]))
    if dtype.kind not in "biuf":
        raise WireError(f"an array of {dtype}")
    shape = [int(n) for n in data["shape"]]
    raw = base64.b64decode(str(data["data"]), validate=True)
    if len(raw) != dtype.itemsize * math.prod(shape):
        raise WireError("an array whose bytes do not fit its shape")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def decode(data, depth: int = 0):
    """The plain value ``data`` (from :func:`encode`) stands for; WireError when it is malformed."""
    if depth > DEPTH_LIMIT + 1:
        raise WireError("a value nested too deep")
    if data is None or type(data) in (bool, int, float):
        return data
    if type(data) is not dict or len(data) == 0:
        raise WireError(f"unexpected {type(data).__name__}")
    if "int" in data:
        text = str(data["int"])
        if len(text) > 5000:
            raise WireError("an int too long")
        return int(text)
    if "float" in data:
        return float(str(data["float"]))
    if "str" in data:
        return str(data["str"])
    if "ellipsis" in data:
        return Ellipsis
    if "range" in data:
        return range(*(int(v) for v in data["range"][:3]))
    if "tensor" in data:
        import torch

        name = str(data["tensor"])
        if name not in _TENSOR_DTYPES:
            raise WireError(f"a tensor of {name}")
        flat = torch.from_numpy(_array(data))
        dtype = getattr(torch, name)
        flat = flat.view(dtype) if flat.dtype != dtype else flat
        size, stride = [int(n) for n in data["size"]], [int(n) for n in data["stride"]]
        offset = int(data["offset"])
        if len(size) != len(stride) or min([offset, *size, *stride], default=0) < 0 or (all(size) and (
                offset + sum((n - 1) * s for n, s in zip(size, stride)) >= flat.numel())):
            raise WireError("a tensor whose strides leave its storage")
        return flat.as_strided(size, stride, offset)
    if "ndarray" in data:
        return _array(data)
    if "scalar" in data:
        return _array(data)[()]
    if "tuple" in data:
        return tuple(decode(v, depth + 1) for v in data["tuple"])
    if "list" in data:
        return [decode(v, depth + 1) for v in data["list"]]
    if "dict" in data:
        out = {}
        for key, value in data["dict"]:
            key = decode(key, depth + 1)
            try:
                hash(key)
            except TypeError:
                raise WireError("a dict with an unhashable key") from None
            out[key] = decode(value, depth + 1)
        return out
    if "iterable" in data:
        return _iterator([decode(v, depth + 1) for v in data["items"]])
    if "opaque" in data:
        return Opaque(data["opaque"], data.get("repr", ""))
    raise WireError(f"unexpected keys {sorted(data)[:3]}")


def dumps(message: dict) -> bytes:
    return (json.dumps(message, allow_nan=False) + "\n").encode()


def loads(line: bytes) -> dict:
    message = json.loads(line)
    if type(message) is not dict:
        raise WireError("a message that is not an object")
    return message
