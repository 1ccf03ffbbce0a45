"""Checked runs: a ``@triton.jit`` kernel in Triton's interpreter, every load and store checked first.

``run_checked(kernel, grid, *args, **kwargs)`` does what ``kernel[grid](*args, **kwargs)`` does,
in the interpreter, except that before any load or store touches memory it checks every lane the
mask leaves active: its address must lie inside the tensor its pointer was derived from (one of
that tensor's own elements, for a strided view too).  A violation raises :class:`OutOfBounds`
*before* the access, naming the kernel, the pointer argument, load or store, the learner's line,
the program id and the first offending element; ``err.picture()`` draws the bad lanes.  Without
it a missing mask reads or writes whatever the process has there (a crash, a corrupted heap; on a
GPU, an illegal address), so learner code runs only through here (:func:`checked_launches`).

**Which tensor a pointer belongs to.**  A pointer is followed from the kernel argument it starts
as through every pointer operation of the interpreter.  A pointer made from an integer (a pointer
array loaded from memory) is matched by value against the first address of a known tensor (the
tensor arguments and ``reachable``), else it may address any known tensor.

**Tensors on a GPU** are copied to the CPU (one copy per storage, so views stay views), the kernel
runs on the copies, and what it wrote is copied back, also when a violation stops it part way.
An integer made a pointer is moved from the device's address to the copy's, and back
(:meth:`_HostCopies.translate`).  Not modelled: two storages over the same memory.

**Budgets.**  Operations are counted per program and per launch, the learner's lines sampled: a
loop that never ends is stopped with :class:`gemm_kernels.lab.watchdog.NeverEnded`, naming it.
**Undefined lanes.**  A masked load with no ``other=`` reads NaN (0x5A bytes for integers) in its
masked-off lanes, as a GPU leaves them undefined (:func:`undefined_as_zero` gives them 0).

Cost: 0.9x to 1.2x a plain interpreted launch on the exercises' sizes.  triton-viz's sanitizer was
considered instead: its 3.0 release does not import with Triton 3.9, and its symbolic checker
brings z3, pyarrow, flask and cairo, too heavy for a teaching install.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import linecache
import math
import numbers
import sys
import threading
import time
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .. import _triton_compat as compat
from . import watchdog

__all__ = ["OutOfBounds", "run_checked", "checked_launches"]

#: keyword arguments ``kernel[grid](...)`` accepts that are launch options, not kernel parameters
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                            "launch_cooperative_grid", "launch_pdl", "debug", "sanitize_overflow"})
#: strided views up to this many elements of span get an exact "is this one of my elements" map
MAX_MEMBERSHIP_MAP = 1 << 26
#: the handle attribute that carries a pointer's origin (indices into the launch's regions)
_ORIGIN = "gemm_kernels.origin"

_TRITON_DIR = str(Path(__import__("triton").__file__).parent)
_THIS_FILE = __file__


# ----------------------------------------------------------------------------- the tensors
@dataclass
class Region:
    """The memory of one tensor a kernel may touch."""

    name: str                 # the kernel parameter (``y_ptr``) or ``reachable[2]``
    tensor: torch.Tensor      # the CPU tensor the kernel runs on
    start: int = 0            # address of element 0
    span: int = 0             # bytes from start to the end of the last element
    itemsize: int = 1
    member: np.ndarray | None = None  # for strided views: True at the element offsets the view owns

    @classmethod
    def of(cls, name: str, tensor: torch.Tensor) -> Region:
        """The region of ``tensor``: sized by the storage its elements span, never by its number of
        elements (``torch.zeros(1).expand(2**30)`` spans one float, ``as_strided`` windows overlap)."""
        itemsize = tensor.element_size()
        if tensor.numel() == 0:
            return cls(name, tensor, tensor.data_ptr(), 0, itemsize)
        # the dimensions that move through memory (size 1 or stride 0: the same elements again)
        dims = sorted((abs(st), s) for s, st in zip(tensor.shape, tensor.stride()) if s > 1 and st != 0)
        span_elems = 1 + sum((s - 1) * st for st, s in dims)
        member = None
        if not _dense(dims) and span_elems <= MAX_MEMBERSHIP_MAP:
            member = _members(dims, span_elems)
        return cls(name, tensor, tensor.data_ptr(), span_elems * itemsize, itemsize, member)

    def contains(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        """Per address: does the ``nbytes``-wide access at it lie on one of this tensor's elements?"""
        off = addr.astype(np.int64) - self.start  # addresses are far below 2**63
        inside = (off >= 0) & (off + nbytes <= self.span)
        if self.member is not None and inside.any():
            on_element = off % self.itemsize == 0
            index = np.where(inside, off // self.itemsize, 0)
            inside &= on_element & self.member[index]
        return inside

    def distance(self, address: int) -> int:
        off = address - self.start
        return 0 if 0 <= off < self.span else (-off if off < 0 else off - self.span + 1)

    def describe_offset(self, address: int) -> str:
        """``element 1000 (y_ptr has 1000 elements, 0..999)``, with the index in the tensor's shape
        when the offset decodes into one."""
        t = self.tensor
        off = address - self.start
        if t.dim() <= 1:
            size = f"{self.name} has {t.numel()} element{'s' * (t.numel() != 1)}" + (f": 0..{t.numel() - 1}" if t.numel() else "")
        else:
            size = f"{self.name} is {'x'.join(map(str, t.shape))}" + ("" if t.is_contiguous() else
                                                                    f" with strides {tuple(t.stride())}")
        if off % self.itemsize:
            return f"byte {off} from its start, not on an element ({size})"
        element = off // self.itemsize
        text = f"element {element}"
        index = _decode(element, tuple(t.shape), tuple(t.stride()))
        if index is not None and t.dim() > 1:
            text += f" = index {index}"
        return f"{text} ({size})"


def _dense(dims) -> bool:
    """Whether (stride, size) dimensions, by increasing stride, own every offset of their span once."""
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def _members(dims, span: int) -> np.ndarray:
    """The offsets a view owns, as a bool map of its span: one dimension at a time, the offsets so
    far unioned with themselves shifted by k * stride for every k below the size, by doubling
    (memory: the span; time: the span times log2 of each size, never the number of elements)."""
    member = np.zeros(span, dtype=bool)
    member[0] = True
    reach = 1  # the largest offset so far, plus one
    for stride, size in dims:
        have = 1  # the offsets so far cover k = 0 .. have - 1 of this dimension
        while have < size:
            step = min(have, size - have)  # k = size - have .. size - 1 when fewer than have remain: a union
            shift = step * stride
            member[shift:reach + shift] |= member[:reach].copy()
            reach += shift
            have += step
    return member


def _decode(element: int, shape: tuple, stride: tuple):
    """The index whose offset is ``element``, decoded largest stride first; an index may run past
    the shape (column 7 of a 7-column view: the padding after a row, the point of the message)."""
    if element < 0 or any(s <= 0 for s in stride) or not shape:
        return None
    order = sorted(range(len(shape)), key=lambda d: -stride[d])
    index = [0] * len(shape)
    rest = element
    for n, d in enumerate(order):
        index[d], rest = divmod(rest, stride[d])
    return tuple(index) if rest == 0 else None


# ----------------------------------------------------------------------------- the error
@dataclass
class _Access:
    kernel: str
    kind: str                  # "load", "store", "atomic"
    pointer: str               # ``y_ptr``, or a description when the origin is unknown
    region: Region | None      # the tensor the lanes should stay in (None: no tensor known)
    program: tuple
    filename: str | None
    line: int | None
    code: str | None
    function: str | None
    offsets: np.ndarray        # element offset of every lane from the region's start (int64)
    active: np.ndarray         # the mask, broadcast to the block
    bad: np.ndarray            # active lanes outside
    extra: dict = field(default_factory=dict)


class OutOfBounds(IndexError):
    """An active lane of a load or store addressed memory outside its tensor (see
    :func:`run_checked`).  ``picture()`` draws the block: lanes in bounds, masked off, outside."""

    def __init__(self, access: _Access):
        self.access = access
        a = access
        self.kernel, self.kind, self.pointer, self.program = a.kernel, a.kind, a.pointer, a.program
        self.line, self.code = a.line, a.code
        self.lanes = int(a.bad.sum())
        self.active_lanes = int(a.active.sum())
        self.block_shape = tuple(a.bad.shape)
        first = tuple(int(i) for i in np.argwhere(a.bad)[0]) if a.bad.ndim else ()
        self.first_lane = first
        self.first_offset = int(a.offsets[first]) if a.region is not None else None
        super().__init__(self._message())

    def _message(self) -> str:
        a = self.access
        code = f": {a.code.strip()}" if a.code else ""
        if a.extra.get("learner", True):
            where = " at line " + str(a.line) + (f" of {a.function}" if a.function and a.function != a.kernel else "")
        else:  # a check's kernel, on what the learner's function gave it: no line of the check's is shown
            yours = a.extra.get("learner_functions")
            where = " in the check's kernel" + (f" (it calls your {yours})" if yours else "")
        for key in ("inside", "called_from"):
            if key in a.extra:
                code += f"\n  {a.extra[key]}"
        lane = f"lane {self.first_lane[0] if len(self.first_lane) == 1 else self.first_lane}"
        program = ", ".join(map(str, a.program))
        head = (f"{a.kernel}: {a.kind} through {a.pointer}{where}{code}\n"
                f"  program_id {program}: {self.lanes} of {self.active_lanes} active lanes "
                f"(block {'x'.join(map(str, self.block_shape)) or 'scalar'}) address memory outside "
                f"{a.pointer if a.region is None else a.region.name}")
        if a.region is None:
            return head + f"; {lane} addresses {a.extra.get('address', '?')}, inside no tensor argument"
        address = a.region.start + self.first_offset * a.region.itemsize
        detail = f"; first: {lane} -> {a.region.describe_offset(address)}"
        if not a.extra.get("learner", True) and a.extra.get("learner_functions"):
            hint = (f"\n  the check's kernel {a.kind}s where the values your {a.extra['learner_functions']} returned "
                    "point: check them")
        else:
            hint = (f"\n  check the offsets and loop bounds that lead here, and the mask of this {a.kind}: "
                    f"masked-off lanes are never {'read' if a.kind == 'load' else 'written'}")
        return head + detail + hint

    def picture(self, dpi: float = 100):
        """The block of lanes of the failing access: blue in bounds, grey masked off, red outside
        (labelled with their element offsets when the block is small enough): a Figure."""
        return draw_access(self.access, dpi=dpi)


# ----------------------------------------------------------------------------- running
def _check_grid(grid, named: dict) -> tuple[int, int, int]:
    if callable(grid):
        grid = grid(named)
    if isinstance(grid, numbers.Integral) and not isinstance(grid, bool):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3:
        raise TypeError(f"the launch grid must be a tuple of 1 to 3 positive ints (or a function of the "
                        f"arguments returning one), got {grid!r}")
    for g in grid:
        if isinstance(g, bool) or not isinstance(g, numbers.Integral):
            raise TypeError(f"every launch grid size must be an int, got {g!r} ({type(g).__name__}) in {tuple(grid)}")
        if g < 1:
            raise ValueError(f"every launch grid size must be at least 1, got {tuple(grid)} (a launch of no "
                             "programs does nothing: skip it instead)")
    grid = tuple(int(g) for g in grid)
    return grid + (1,) * (3 - len(grid))


def _kernel_name(kernel) -> str:
    fn = compat.jit_source_function(kernel)
    return fn.__name__ if fn is not None else repr(kernel)


def _tensors_in(value):
    """The tensors an argument holds: itself, a tuple's members, a host TensorDescriptor's base."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, tuple):
        for v in value:
            yield from _tensors_in(v)
    elif hasattr(value, "base") and isinstance(getattr(value, "base", None), torch.Tensor):
        yield value.base


class _HostCopies:
    """CPU twins of the tensors of a launch: one copy per storage, views rebuilt on it.

    A pointer array holds the device addresses of the tensors it points to, not their twins':
    :meth:`translate` maps an address inside a copied storage to the same byte of its twin, so a
    kernel that loads a pointer from memory (``tl.load(ptrs + g).to(tl.pointer_type(...))``)
    reaches the twin the checked run watches."""

    #: tests set this to copy CPU tensors too (the GPU path's copying and address translation, on a CPU)
    copy_cpu_tensors = False

    def __init__(self):
        self.storages: dict = {}  # storage data_ptr -> (device storage, cpu storage)

    def to_cpu(self, value):
        if isinstance(value, torch.Tensor):
            on_cpu = value.device.type == "cpu" and not self.copy_cpu_tensors
            if on_cpu and not value.requires_grad:
                return value
            with torch.no_grad():
                t = value.detach()
                if on_cpu:
                    return t
                key = t.untyped_storage().data_ptr()
                if key not in self.storages:
                    twin = torch.UntypedStorage(t.untyped_storage().nbytes())  # a copy of its own, also of a CPU storage
                    twin.copy_(t.untyped_storage())
                    self.storages[key] = (t.untyped_storage(), twin)
                cpu = torch.empty(0, dtype=t.dtype)
                cpu.set_(self.storages[key][1], t.storage_offset(), t.size(), t.stride())
                return cpu
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return tuple(self.to_cpu(v) for v in value)
        if type(value).__name__ == "TensorDescriptor" and isinstance(getattr(value, "base", None), torch.Tensor):
            import dataclasses

            return dataclasses.replace(value, base=self.to_cpu(value.base))
        return value

    def translate(self, addresses: np.ndarray, *, to_twin: bool = True) -> np.ndarray:
        """``addresses`` with every one inside a copied storage (or one past its end, a C idiom)
        moved to the same byte of its twin; ``to_twin=False``: back from twins to the device (a
        pointer a kernel turns into an integer, to store it, holds the device's address)."""
        if not self.storages:
            return addresses
        pairs = [(d.data_ptr(), c.data_ptr(), d.nbytes()) for d, c in self.storages.values()]
        if not to_twin:
            pairs = [(twin, device, size) for device, twin, size in pairs]
        src = addresses.astype(np.int64)  # addresses are far below 2**63
        out, moved = src.copy(), np.zeros(src.shape, dtype=bool)
        for inclusive_end in (False, True):  # inside a storage first: its end may be the next one's start
            for start, target, size in pairs:
                hit = ~moved & (src >= start) & ((src <= start + size) if inclusive_end else (src < start + size))
                if hit.any():
                    out = np.where(hit, src + (target - start), out)
                    moved |= hit
        return out.astype(addresses.dtype, copy=False)

    def copy_back(self):
        with torch.no_grad():
            for device_storage, cpu_storage in self.storages.values():
                device_storage.copy_(cpu_storage)


def _bind(kernel, args, kwargs) -> inspect.BoundArguments:
    fn = compat.jit_source_function(kernel)
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        params = ", ".join(inspect.signature(fn).parameters)
        raise TypeError(f"{fn.__name__}({params}): {exc}") from None
    bound.apply_defaults()
    return bound


def run_checked(kernel, grid, *args, reachable: Sequence[torch.Tensor] | dict = (), store_log: list | None = None,
                undefined_log: list | None = None, **kwargs) -> None:
    """``kernel[grid](*args, **kwargs)`` in the interpreter, every load and store checked first.

    ``kernel``: a ``@triton.jit`` function.  ``grid``: 1 to 3 positive ints, or a function of the
    arguments by name returning them (as in ``kernel[grid]``).  ``reachable``: tensors the kernel
    reaches through pointers it loads from memory (pointer arrays), as a sequence or a
    ``{name: tensor}`` dict.  Launch options (``num_warps=...``) are accepted and ignored.
    ``store_log``: a list that gets ``(program id, tensor name, element offset)`` of the first lane
    of every store (which program wrote where: a check reads the launch order from it).
    ``undefined_log``: a list that gets the learner's lines whose masked load has no ``other=``;
    such a load's masked-off lanes read NaN (floats) or 0x5A bytes here, as a GPU leaves them
    undefined.

    Raises :class:`OutOfBounds` before an access outside its tensor; TypeError/ValueError for a
    non-kernel, arguments that do not fit its parameters, or a bad grid; an exception raised by the
    kernel's own code comes out as itself, its traceback cut to the kernel's lines and a note
    naming the program.  Results land in the tensor arguments as with a normal launch."""
    if compat.jit_source_function(kernel) is None:
        raise TypeError(f"run_checked needs a @triton.jit kernel, got {type(kernel).__name__} {kernel!r}"
                        + (" (an autotuned kernel: pass the @triton.jit function inside it, kernel.fn, "
                           "with a config's meta-parameters)" if hasattr(kernel, "configs") else ""))
    kwargs = {k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS}
    bound = _bind(kernel, args, kwargs)
    named = dict(bound.arguments)
    grid3 = _check_grid(grid, named)
    builder, _, interpreter_error = compat.interpreter_internals()

    host = _HostCopies()
    cpu_named = {name: host.to_cpu(value) for name, value in named.items()}
    regions: list[Region] = []
    for name, value in cpu_named.items():
        for n, t in enumerate(_tensors_in(value)):
            regions.append(Region.of(name if n == 0 else f"{name}[{n}]", t))
    if isinstance(reachable, torch.Tensor):  # one tensor, not its rows
        reachable = [reachable]
    extra = reachable.items() if isinstance(reachable, dict) else ((f"reachable[{i}]", t) for i, t in enumerate(reachable))
    for name, t in extra:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"reachable must hold tensors, got {type(t).__name__} for {name}")
        regions.append(Region.of(name, host.to_cpu(t)))

    twin = compat.interpreted_twin(kernel)
    helpers = [fn.__name__ for fn in map(compat.jit_source_function, named.values())
               if fn is not None and watchdog.learner_file(fn.__code__.co_filename)]
    monitor = _Monitor(builder, regions, _kernel_name(kernel), grid3, sys._getframe(), helpers, host)
    monitor.store_log, monitor.undefined_log = store_log, undefined_log
    try:
        # one interpreted launch at a time (the builder holds the program id); the monitor acts in
        # this thread only, so other threads' launches (queued on the lock) run unchecked; the
        # watchdog's line tracing is off in here (it would double the time): the monitor meters
        # the kernel by its operations instead
        with compat.interpreting(), _MONITORS.active(monitor), _CALLS.active(monitor), _LOADS.active(monitor), \
                watchdog.suspended(), _kernel_deadline(monitor):
            twin.run(grid=grid3, warmup=False, **cpu_named)
    except interpreter_error as err:
        cause = err
        while isinstance(cause, interpreter_error) and cause.__cause__ is not None:  # one wrap per jit call level
            cause = cause.__cause__
        if isinstance(cause, OutOfBounds):
            raise cause.with_traceback(None) from None
        raise _learner_error(cause, monitor.kernel, builder) from None
    finally:
        host.copy_back()


@contextlib.contextmanager
def _kernel_deadline(monitor):
    """The watchdog's last resort (its backstop) knows when this launch has to end."""
    dog = monitor.dog
    if dog is None:
        yield
        return
    before, dog.kernel_deadline = dog.kernel_deadline, monitor.deadline
    try:
        yield
    finally:
        dog.kernel_deadline = before


def _learner_error(exc: BaseException, kernel: str, builder) -> BaseException:
    """The learner's exception with its traceback cut to the learner's own frames and a note."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        if not _internal(tb.tb_frame.f_code.co_filename):
            frames.append(tb)
        tb = tb.tb_next
    new_tb = None
    for tb in reversed(frames):
        new_tb = types.TracebackType(new_tb, tb.tb_frame, tb.tb_lasti, tb.tb_lineno)
    program = getattr(builder, "grid_idx", None)
    mine = [tb for tb in frames if watchdog.learner_file(tb.tb_frame.f_code.co_filename)]
    where = f", {watchdog.frame_where(mine[-1].tb_frame, mine[-1].tb_lineno)}" if mine else ""
    if hasattr(exc, "add_note"):
        exc.add_note(f"raised inside the kernel {kernel}, program_id {program}{where}")
    return exc.with_traceback(new_tb)


def _launch_line(frame) -> str | None:
    """Where the learner's code launched the kernel (the first of its frames outside ``frame``)."""
    f = frame.f_back if frame is not None else None
    while f is not None:
        if watchdog.learner_file(f.f_code.co_filename):
            return watchdog.frame_where(f)
        f = f.f_back
    return None


def _internal(filename: str) -> bool:
    return filename.startswith(_TRITON_DIR) or filename == _THIS_FILE


def _access_site(kernel: str, outer=None):
    """Where an access of a kernel happens, for its report: ``(filename, line, function)`` of the
    learner's innermost line on the way there, and ``extra`` lines: the package's helper that
    line called when the access is in there (``inside``), the learner's kernel line that called
    their helper (``called_from``).  Without a line of the learner's on the way (a check's kernel
    storing what their function returned), the check's line, and ``extra["learner"]`` False: the
    report then shows no line number of the check's.  ``outer``: the checked run's frame."""
    frame = sys._getframe(1)
    frames = []
    while frame is not None and frame is not outer:
        name = frame.f_code.co_filename
        if not watchdog.triton_file(name) and not watchdog.machinery_file(name):
            frames.append(frame)
        frame = frame.f_back
    if not frames:
        return (None, None, None), {}
    mine = [f for f in frames if watchdog.learner_file(f.f_code.co_filename)]
    if not mine:
        site = frames[0]
        return (site.f_code.co_filename, site.f_lineno, site.f_code.co_name), {"learner": False}
    inner = mine[0]
    extra: dict = {}
    if inner is not frames[0]:  # the access is in the package's code the learner's line called
        helper = frames[frames.index(inner) - 1].f_code.co_name
        extra["inside"] = (f"in {helper}, the package's helper called from line {inner.f_lineno} of "
                           f"{watchdog.function_name(inner.f_code)}")
    if inner.f_code.co_name != kernel:  # a helper of the learner's: which line of their kernel called it
        caller = next((f for f in mine[1:] if f.f_code.co_name == kernel), None)
        if caller is not None:
            extra["called_from"] = f"called from {watchdog.frame_where(caller)}"
        elif not any(f.f_code.co_name == kernel for f in mine):
            extra["called_from"] = f"called from the check's kernel {kernel}"
    return (inner.f_code.co_filename, inner.f_lineno, watchdog.function_name(inner.f_code)), extra


# ----------------------------------------------------------------------------- the monitor
class _Monitor:
    """Wraps the interpreter builder's operations for one launch: checks the pointer and memory
    ones, and meters all of them (the watchdog's budgets for a kernel, see :meth:`meter`)."""

    def __init__(self, builder, regions: list[Region], kernel: str, grid: tuple = (1, 1, 1), outer=None,
                 learner_functions: Sequence[str] = (), host: _HostCopies | None = None):
        self.builder, self.regions, self.kernel = builder, regions, kernel
        self.host = host  # the launch's CPU twins: device addresses loaded from memory are moved onto them
        self.store_log: list | None = None  # (program, tensor, element offset) of each store's first lane, if asked
        self.undefined_log: list | None = None  # the learner's lines whose masked load has no other=, if asked
        self.no_other = False  # inside a tl.load given a mask and no other= (the builder cannot tell: see _LOADS)
        self.learner_functions = list(learner_functions)  # the learner's @triton.jit helpers a check's kernel calls
        self.by_start: dict[int, tuple] = {}
        for i, r in enumerate(regions):
            self.by_start.setdefault(r.start, ())
            self.by_start[r.start] += (i,)
        self.all = tuple(range(len(regions)))
        self.hooks = self._hooks()
        # the meter: operations run, in this launch and since the current program began
        self.grid, self.outer = grid, outer  # outer: run_checked's frame (the kernel runs inside it)
        self.dog = watchdog.current()
        self.kernel_ops = self.dog.kernel_ops if self.dog else watchdog.KERNEL_OPS
        self.launch_ops = self.dog.launch_ops if self.dog else watchdog.LAUNCH_OPS
        self.time_budget = self.dog.time_budget if self.dog else watchdog.TIME_BUDGET
        self.ops = self.program_start = 0
        self.program_time = self.start = time.monotonic()
        # the learner's launcher's deadline, or this launch's own (a check's kernel calling theirs)
        self.deadline = min(self.dog.deadline if self.dog else math.inf, self.start + self.time_budget)
        self.next_meter = _METER_EVERY
        self.lines = watchdog.LineSampler()  # which lines of the learner's kernel run (at self.ops)
        self.depth: dict = {}  # @triton.jit function -> how deep it is calling itself now
        self.recursion = self.dog.recursion if self.dog else watchdog.RECURSION_LIMIT

    # -- the meter
    def new_program(self):
        self.program_start, self.program_time, self.lines = self.ops, time.monotonic(), watchdog.LineSampler()

    def meter(self):
        """Every few operations: note which lines of the learner's kernel run, and stop the kernel
        (:class:`watchdog.NeverEnded`) past a budget: operations of this program or of the launch,
        or the check's deadline."""
        self.next_meter = self.ops + _METER_EVERY
        stack = self._learner_stack()
        self.lines.sample(stack, self.ops)
        now = time.monotonic()
        if self.ops - self.program_start > self.kernel_ops:
            raise self._never_ended(stack, "the limit for one program of a kernel", program=True)
        if self.ops > self.launch_ops:
            raise self._never_ended(stack, "the limit for one launch", program=False)
        if now > self.deadline:
            long_program = now - self.program_time > self.time_budget / 4
            raise self._never_ended(stack, f"the limit of {self.time_budget:g} s for one call of your code",
                                    program=long_program)

    def _learner_stack(self) -> list:
        """The frames of the learner's code inside this launch, innermost first."""
        out = []
        f = sys._getframe(2)
        while f is not None and f is not self.outer:
            if watchdog.learner_file(f.f_code.co_filename):
                out.append(f)
            f = f.f_back
        return out

    def _program_text(self) -> str:
        dims = max((i + 1 for i, g in enumerate(self.grid) if g > 1), default=1)
        return ", ".join(map(str, tuple(getattr(self.builder, "grid_idx", (0, 0, 0)))[:dims]))

    def _never_ended(self, stack, reason: str, program: bool):
        seconds = time.monotonic() - self.start
        if program:
            ops = self.ops - self.program_start
            spent = (f"when the check stopped it, after {ops:,} operations of this program and {seconds:.1f} s "
                     f"({reason}: far more than a correct answer needs)")
            return watchdog.never_ended(self.lines.frames(stack), self.ops - max(ops // 4, 1), spent,
                                        f", program_id ({self._program_text()})")
        programs = self.grid[0] * self.grid[1] * self.grid[2]
        grid = tuple(g for g in self.grid if g > 1) or (1,)
        launch = _launch_line(self.outer)
        return watchdog.NeverEnded(
            f"your kernel {self.kernel} never finished: its launch of {programs:,} programs (grid "
            f"{grid if len(grid) > 1 else grid[0]}) was at program_id ({self._program_text()}) when the check "
            f"stopped it, after {self.ops:,} operations and {seconds:.1f} s ({reason}: far more than a correct "
            f"answer needs)", ([f"launched at {launch}"] if launch else []) +
            ["are the grid and the block sizes the ones the exercise asks for? (each program's loops end: it is "
             "the number of programs, or the work each one does)"])

    # -- origins
    def origin(self, handle) -> tuple | None:
        """Regions a pointer handle may address (None: unknown, any region)."""
        attr = getattr(handle, "attr", None)
        if attr is None:
            return None
        found = attr.get(_ORIGIN)
        if found is None and getattr(handle, "data", None) is not None and handle.data.size == 1 \
                and _is_pointer(handle):
            found = self.by_start.get(int(handle.data.reshape(-1)[0]))
            if found is not None:
                attr[_ORIGIN] = found
        return found

    def _to_pointer(self, propagate):
        """An integer made a pointer (a pointer array's entry): a device address becomes its twin's;
        a pointer made an integer (to be stored): a twin's address becomes the device's."""
        def wrapper(method, src, *args, **kwargs):
            result = propagate(method, src, *args, **kwargs)
            if self.host is not None and _is_pointer(src) != _is_pointer(result):
                result.data = self.host.translate(result.data, to_twin=_is_pointer(result))
            return result
        return wrapper

    def _propagating(self, pointer_args: tuple[int, ...]):
        def wrapper(method, *args, **kwargs):
            result = method(*args, **kwargs)
            origins = [self.origin(args[i]) for i in pointer_args if i < len(args) and _is_pointer(args[i])]
            if origins:
                known = None if any(o is None for o in origins) else tuple(sorted(set().union(*origins)))
                for r in (result if isinstance(result, tuple) else (result,)):
                    if known is not None and hasattr(r, "attr"):
                        r.attr[_ORIGIN] = known
            return result
        return wrapper

    # -- checks
    def check(self, kind: str, ptrs, mask_data, origin: tuple | None = None, from_handle=True):
        addr = ptrs.data
        active = np.broadcast_to(np.asarray(mask_data, dtype=bool), addr.shape) if mask_data is not None \
            else np.ones(addr.shape, dtype=bool)
        if not active.any():
            return
        if from_handle:
            origin = self.origin(ptrs)
        nbytes = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        candidates = origin if origin is not None else self.all
        inside = np.zeros(addr.shape, dtype=bool)
        for i in candidates:
            inside |= self.regions[i].contains(addr, nbytes)
        bad = active & ~inside
        if bad.any():
            raise OutOfBounds(self._access(kind, addr, active, bad, origin))
        if kind == "store" and self.store_log is not None:
            self._log_store(addr, active, candidates, nbytes)

    def undefined_lanes(self, ptrs):
        """What a masked load with no ``other=`` gives its masked-off lanes here: NaN for floats,
        the bytes 0x5A for integers.  A GPU leaves them undefined (Triton's docs); the
        interpreter's zeros would let an answer that relies on them pass.  The learner's line is
        kept in ``undefined_log`` for the check's diagnosis."""
        from triton.runtime.interpreter import TensorHandle, _get_np_dtype

        element = ptrs.get_element_ty()
        np_dtype = np.dtype(_get_np_dtype(element))
        shape = ptrs.data.shape
        if element.is_floating() and np_dtype.kind == "f":
            data = np.full(shape, np.nan, np_dtype)
        elif element.is_floating():  # bf16 and the fp8 formats, held as their bits: a NaN pattern
            data = np.full(shape, {1: 0x7F, 2: 0x7FC0}[np_dtype.itemsize], np_dtype)
        elif np_dtype.kind == "b":
            data = np.ones(shape, np_dtype)
        else:
            data = np.full(shape + (np_dtype.itemsize,), 0x5A, np.uint8).view(np_dtype).reshape(shape)
        if self.undefined_log is not None:
            (filename, line, function), extra = _access_site(self.kernel, self.outer)
            if filename is not None and extra.get("learner", True):
                site = f"line {line} of {function}"
                if site not in self.undefined_log:
                    self.undefined_log.append(site)
        return TensorHandle(data, element)

    def _log_store(self, addr, active, candidates, nbytes) -> None:
        """(program id, tensor name, element offset) of the first lane this store writes."""
        first = int(addr[tuple(np.argwhere(active)[0])]) if addr.ndim else int(addr)
        for i in candidates:
            region = self.regions[i]
            if region.contains(np.array([first]), nbytes)[0]:
                program = tuple(int(v) for v in getattr(self.builder, "grid_idx", (0, 0, 0)))
                self.store_log.append((program, region.name, (first - region.start) // region.itemsize))
                return

    def _access(self, kind, addr, active, bad, origin) -> _Access:
        (filename, line, function), extra = _access_site(self.kernel, self.outer)
        code = linecache.getline(filename, line) if filename else None
        if not extra.get("learner", True) and self.learner_functions:
            extra["learner_functions"] = " and ".join(self.learner_functions)
        first_address = int(addr[tuple(np.argwhere(bad)[0])]) if addr.ndim else int(addr)
        region = None
        if origin is not None:
            region = min((self.regions[i] for i in origin), key=lambda r: r.distance(first_address))
            pointer = region.name
        elif self.regions:
            nearest = min(self.regions, key=lambda r: r.distance(first_address))
            pointer = f"a pointer of unknown origin (nearest tensor: {nearest.name})"
            region = nearest
        else:
            pointer = "a pointer (the kernel has no tensor arguments)"
        offsets = ((addr.astype(np.int64) - region.start) // region.itemsize) if region is not None \
            else np.zeros(addr.shape, dtype=np.int64)
        grid = tuple(getattr(self.builder, "grid_dim", (1, 1, 1)))
        dims = max((i + 1 for i, g in enumerate(grid) if g > 1), default=1)
        program = tuple(getattr(self.builder, "grid_idx", (0, 0, 0)))[:dims]
        extra["address"] = hex(first_address)
        return _Access(self.kernel, kind, pointer, region, program, filename, line, code, function,
                       np.array(offsets), np.array(active), np.array(bad), extra)

    # -- the builder methods, as this launch runs them (each gets the builder's own method first)
    def _hooks(self) -> dict:
        monitor = self

        def masked_load(original, ptrs, mask, other, *rest, **kw):
            monitor.check("load", ptrs, mask.data)
            if monitor.no_other and not np.all(mask.data) and not getattr(_ZERO_FILL, "on", False):
                other = monitor.undefined_lanes(ptrs)
            return original(ptrs, mask, other, *rest, **kw)

        def masked_store(original, ptrs, value, mask, *rest, **kw):
            monitor.check("store", ptrs, mask.data)
            return original(ptrs, value, mask, *rest, **kw)

        def atomic_rmw(original, op, ptr, val, mask, *rest, **kw):
            monitor.check("atomic", ptr, None if mask is None else mask.data)
            return original(op, ptr, val, mask, *rest, **kw)

        def atomic_cas(original, ptr, cmp, val, *rest, **kw):
            monitor.check("atomic", ptr, None)
            return original(ptr, cmp, val, *rest, **kw)

        def make_descriptor(original, base, *rest, **kw):
            desc = original(base, *rest, **kw)
            desc.gemm_kernels_origin = monitor.origin(base)
            return desc

        def descriptor_access(kind):
            def wrapper(original, desc, *rest, **kw):
                indices = rest[1] if kind == "store" else rest[0]
                ptrs, mask = desc.materialize_pointers(indices)
                monitor.check(kind, ptrs, mask.data, getattr(desc, "gemm_kernels_origin", None), from_handle=False)
                return original(desc, *rest, **kw)
            return wrapper

        hooks = {
            "create_masked_load": masked_load,
            "create_masked_store": masked_store,
            "create_atomic_rmw": atomic_rmw,
            "create_atomic_cas": atomic_cas,
            "create_make_tensor_descriptor": make_descriptor,
            "create_descriptor_load": descriptor_access("load"),
            "create_descriptor_store": descriptor_access("store"),
        }
        for name, args in _PROPAGATE.items():
            hooks[name] = self._propagating(args)
        hooks["create_ptr_to_int"] = self._propagating(())
        for name in ("create_int_to_ptr", "create_ptr_to_int", "create_bitcast"):
            hooks[name] = self._to_pointer(hooks[name])
        return hooks


#: pointer operations whose result addresses what their pointer operands (these positions) address
_PROPAGATE = {"create_addptr": (0,), "create_splat": (1,), "create_broadcast": (0,), "create_expand_dims": (0,),
              "create_reshape": (0,), "create_trans": (0,), "create_select": (1, 2), "create_cat": (0, 1),
              "create_join": (0, 1), "create_bitcast": (0,), "create_int_to_ptr": (0,)}


def _builder_hook(name: str):
    def make(original):
        def hooked(*args, **kwargs):
            monitor = _MONITORS.current()
            if monitor is None:  # another thread's launch, or no checked run in this thread
                return original(*args, **kwargs)
            monitor.ops += 1
            if monitor.ops >= monitor.next_meter:
                monitor.meter()
            return monitor.hooks[name](original, *args, **kwargs)
        hooked.__name__ = name
        return hooked
    return make


def _metered_hook(name: str):
    def make(original):
        def hooked(*args, **kwargs):
            monitor = _MONITORS.current()
            if monitor is not None:
                monitor.ops += 1
                if monitor.ops >= monitor.next_meter:
                    monitor.meter()
            return original(*args, **kwargs)
        hooked.__name__ = name
        return hooked
    return make


def _program_hook(original):
    def set_grid_idx(*args, **kwargs):
        monitor = _MONITORS.current()
        if monitor is not None:
            monitor.new_program()
        return original(*args, **kwargs)
    return set_grid_idx


def _builder():
    return compat.interpreter_internals()[0]


#: how often (in operations) the meter looks at the kernel's lines and its budgets
_METER_EVERY = 32


class _BuilderFactories(Mapping):
    """The builder methods a checked run wraps, found when first installed (Triton is imported
    late): the checked ones, every other operation (metered), and the program switch."""

    def __init__(self):
        self._factories: dict | None = None

    def _all(self) -> dict:
        if self._factories is None:
            builder = _builder()
            factories = {name: _builder_hook(name) for name in compat.CHECKED_BUILDER_METHODS}
            for name in dir(type(builder)):
                operation = name.startswith("create_") or (name.startswith(("get_int", "get_fp"))
                                                           and not name.endswith("_ty"))  # a constant, not a type
                if operation and name not in factories and callable(getattr(builder, name, None)):
                    factories[name] = _metered_hook(name)
            if callable(getattr(builder, "set_grid_idx", None)):
                factories["set_grid_idx"] = _program_hook
            self._factories = factories
        return self._factories

    def __getitem__(self, name):
        return self._all()[name]

    def __iter__(self):
        return iter(self._all())

    def __len__(self):
        return len(self._all())


#: the interpreter builder's operations, checked (memory and pointers) and metered in the thread
#: of a checked run only: the builder is one object for the whole process, and other threads
#: launch kernels too
_MONITORS = compat.ThreadLocalPatch(_builder, _BuilderFactories())


def _guarded_call(original):
    def call(jit_fn, *args, **kwargs):
        monitor = _CALLS.current()
        if monitor is None:
            return original(jit_fn, *args, **kwargs)
        key = getattr(jit_fn, "fn", jit_fn)
        depth = monitor.depth.get(key, 0) + 1
        if depth > monitor.recursion:
            # stopped here: deeper, Python's RecursionError would come out of the interpreter
            # wrapped once per level, each wrap quoting the last (a message of 2**depth characters)
            caller = sys._getframe(1)
            raise watchdog.recursion_report(getattr(key, "__name__", "a function"), caller
                                            if watchdog.learner_file(caller.f_code.co_filename) else None,
                                            monitor.recursion)
        monitor.depth[key] = depth
        try:
            return original(jit_fn, *args, **kwargs)
        finally:
            monitor.depth[key] = depth - 1
    return call


#: ``InterpretedFunction.__call__`` (a ``@triton.jit`` helper called from an interpreted kernel),
#: counting how deep each helper calls itself, in the thread of a checked run only
_CALLS = compat.ThreadLocalPatch(lambda: compat.interpreter_internals()[1], {"__call__": _guarded_call})


_ZERO_FILL = threading.local()


@contextlib.contextmanager
def undefined_as_zero():
    """Checked runs in this thread give a masked load's masked-off lanes 0 when it has no
    ``other=`` (as Triton's interpreter does), not NaN: a check asks whether an answer is right
    only because of those lanes."""
    before, _ZERO_FILL.on = getattr(_ZERO_FILL, "on", False), True
    try:
        yield
    finally:
        _ZERO_FILL.on = before


def _semantic_load(original):
    def load(semantic, ptr, mask=None, other=None, *rest, **kwargs):
        monitor = _MONITORS.current()
        if monitor is None or mask is None or other is not None:
            return original(semantic, ptr, mask, other, *rest, **kwargs)
        monitor.no_other = True
        try:
            return original(semantic, ptr, mask, other, *rest, **kwargs)
        finally:
            monitor.no_other = False
    return load


#: ``tl.load``'s semantic step, in the thread of a checked run only: it says whether the load was
#: given ``other=`` (the interpreter's builder gets None for a scalar ``other=0`` as well)
_LOADS = compat.ThreadLocalPatch(lambda: importlib.import_module("triton.language.semantic").TritonSemantic,
                                 {"load": _semantic_load})


def _is_pointer(handle) -> bool:
    dtype = getattr(handle, "dtype", None)
    return dtype is not None and (getattr(dtype, "is_ptr", lambda: False)() or
                                  hasattr(dtype, "element_ty") and getattr(dtype.scalar, "is_ptr", lambda: False)())


# ----------------------------------------------------------------------------- launches in a check
class checked_launches:
    """While active, every ``kernel[grid](...)`` of a plain ``@triton.jit`` kernel launched in this
    thread is a :func:`run_checked` (with ``reachable``): learner launchers need no change to be
    checked.  Other threads' launches stay plain ones; several may be active at once and end in
    any order (``_triton_compat.ThreadLocalPatch``)."""

    def __init__(self, reachable: Sequence[torch.Tensor] | dict = ()):
        self.reachable = reachable
        self._redirect = compat.redirect_launches(self._launch)

    def _launch(self, kernel, grid, *args, **kwargs):
        return run_checked(kernel, grid, *args, reachable=self.reachable, **kwargs)

    def __enter__(self):
        self._redirect.__enter__()
        return self

    def __exit__(self, *exc):
        return self._redirect.__exit__(*exc)


# ----------------------------------------------------------------------------- the picture
def _as_grid(a: np.ndarray) -> np.ndarray:
    """A block of any rank as a 2-D grid of lanes (1-D blocks wrap at 32 or 64 lanes)."""
    if a.ndim == 0:
        return a.reshape(1, 1)
    if a.ndim == 1:
        width = 32 if a.size <= 512 else 64
        if a.size <= width:
            return a.reshape(1, -1)
        rows = -(-a.size // width)
        pad = np.zeros(rows * width - a.size, dtype=a.dtype)
        return np.concatenate([a, pad]).reshape(rows, width)
    return a.reshape(-1, a.shape[-1])


def draw_access(access: _Access, dpi: float = 100):
    """The lanes of one load or store: in bounds (blue), masked off (grey), outside (red); each lane
    labelled with its element offset from the tensor's start when the cells are big enough, and
    each row of a wrapped 1-D block with the offset of its first lane."""
    from matplotlib.figure import Figure

    from ..viz import drawings as d

    a = access
    shape = a.bad.shape
    active, bad = a.active.reshape(shape), a.bad
    colour = np.where(bad[..., None], d._STRAY, np.where(active[..., None], d._IN_BLOCK, d._MASKED))
    lane = np.arange(bad.size)
    cells = _as_grid(lane.reshape(shape) if bad.ndim else lane)
    used = _as_grid(np.ones(shape, dtype=bool) if bad.ndim else np.ones(1, dtype=bool))
    colours = colour.reshape(-1, 4)[cells.reshape(-1)].reshape(cells.shape + (4,))
    colours[~used] = (1, 1, 1, 1)
    rows, cols = cells.shape
    wrapped = bad.ndim <= 1 and rows > 1
    cell = int(np.clip(820 * dpi / 100 / max(cols, 1), 8, 40))
    label_w = int(6 * dpi / 10) if wrapped or bad.ndim == 2 else 0
    cell = min(cell, int(40 * dpi / 100), max(8, int(520 * dpi / 100 / rows)))
    fig = Figure(figsize=(9, (rows * cell + 3 * (10 * dpi / 72 + 8) + 70 * dpi / 100) / dpi), dpi=dpi)
    R = d.RasterFigure(fig)
    head = 3 * (R.pt(10) + 8) + 4
    y0, x0, ch, cw = R.fit(rows, cols, (label_w + 12, head, R.width - 2 * label_w - 24, rows * cell), max_cell=cell)
    px = d.cells_to_pixels(colours, ch, cw, lines=True)
    labelled = False
    if a.region is not None:
        offsets = a.offsets.reshape(-1)[cells.reshape(-1)].reshape(cells.shape)
        labelled = d.stamp_cell_labels(px, np.where(used, offsets.astype(str), ""), 0, 0, ch, cw)
    R.paste(px, y0, x0)
    if a.region is not None and not labelled and (wrapped or bad.ndim == 2):
        first = a.offsets.reshape(-1)[cells[:, 0]] if wrapped else a.offsets.reshape(-1, shape[-1])[:, 0]
        for r in range(rows):
            if ch >= R.pt(7):
                R.text(str(first[r]), x0 - 4, y0 + (r + 0.5) * ch, 7, color="#555555", ha="right")
    program = ", ".join(map(str, a.program))
    line = f", line {a.line}" if a.extra.get("learner", True) else ", the check's kernel"
    R.text(f"{a.kernel}: {a.kind} through {a.pointer}{line}, program_id {program}",
           R.width / 2, 4, 10, color="black", va="top")
    region = a.region
    size = ("no tensor argument" if region is None else f"{region.name} has {region.tensor.numel()} elements"
            if region.tensor.dim() <= 1 else f"{region.name} is {'x'.join(map(str, region.tensor.shape))}")
    lanes = f"block {'x'.join(map(str, shape)) or '1'}" + (f", {cols} lanes per row" if wrapped else "")
    R.text(f"{int(bad.sum())} of {int(active.sum())} active lanes outside {region.name if region else 'every tensor'}; "
           f"{size}; {lanes}", R.width / 2, 4 + R.pt(10) + 8, 9, color="black", va="top")
    if a.code:
        R.text(a.code.strip()[:110], R.width / 2, 4 + 2 * (R.pt(10) + 8), 9, color="#444444", va="top")
    legend_y = y0 + rows * ch + 10
    items = [("in bounds", d._IN_BLOCK), ("masked off (never touched)", d._MASKED), ("outside: the error", d._STRAY)]
    sw = R.pt(9)
    total = sum(sw + 6 + d.text_width(t, R.pt(9)) + 18 for t, _ in items)
    x = (R.width - total) / 2
    for text, c in items:
        R.px[legend_y:legend_y + sw, int(x):int(x) + sw] = c
        R.text(text, x + sw + 6, legend_y + sw / 2, 9, color="black", ha="left")
        x += sw + 6 + d.text_width(text, R.pt(9)) + 18
    note = ("numbers: each lane's element offset from the tensor's first element" if labelled else
            "numbers: element offset of each row's first lane" if a.region is not None and (wrapped or bad.ndim == 2)
            else "")
    if note:
        R.text(note, R.width / 2, legend_y + sw + 8, 8, color="#555555", va="top")
    R.show()
    return fig


def picture_png(err: OutOfBounds, dpi: float = 100) -> bytes:
    """``err.picture()`` as PNG bytes (what the exercise feedback embeds)."""
    from ..viz.drawings import png_bytes

    return png_bytes(err.picture(dpi=dpi))

