"""Errors a kernel found, reported to the host without a sync: a small int32 record in pinned
host memory that the kernel writes over the bus and the host reads at its next call.

A device-side assert would end the CUDA context, and a flag in device memory would need a copy
and a sync to read.  The record is ``[flag, field1, ..., field7]``: the kernel stores the fields,
then a system-scope fence, then the flag (:func:`publish`), so a host that sees the flag sees the
fields.  Plain stores, no atomics: compute-sanitizer's memcheck stops a kernel that runs atomics
on host memory.  Two failing launches in flight at once may both write: the fields then come
from either.  In the interpreter the record is an ordinary CPU tensor and no fence is needed.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import runtime

RECORD_WORDS = 8


@triton.jit
def publish(record_ptr, f1, f2, f3, f4, f5, SYSTEM_FENCE: tl.constexpr):
    """Write fields 1-5 of the record, then raise its flag (word 0) behind a fence."""
    tl.store(record_ptr + 1, f1)
    tl.store(record_ptr + 2, f2)
    tl.store(record_ptr + 3, f3)
    tl.store(record_ptr + 4, f4)
    tl.store(record_ptr + 5, f5)
    tl.debug_barrier()  # every thread's field stores before the fence
    if SYSTEM_FENCE:
        flag = tl.inline_asm_elementwise("fence.sc.sys;\n\tmov.u32 $0, 1;", "=r", [], dtype=tl.int32,
                                         is_pure=False, pack=1)
    else:
        flag = 1
    tl.store(record_ptr, flag)


class HostRecord:
    """One kernel family's record: ``tensor`` goes to the kernel, :meth:`take` reads and clears it."""

    def __init__(self):
        self._tensor = None
        self._view = None  # a numpy view: reading it costs ~0.1 us

    @property
    def tensor(self) -> torch.Tensor:
        if self._tensor is None:  # pinned memory is addressable from every GPU of the process
            self._tensor = torch.zeros(RECORD_WORDS, dtype=torch.int32, pin_memory=runtime.on_gpu())
            self._view = self._tensor.numpy()
        return self._tensor

    def raised(self) -> bool:
        """Whether a kernel raised the flag (no read of the fields, no clearing)."""
        return self._view is not None and bool(self._view[0])

    def take(self) -> tuple[int, ...] | None:
        """The fields 1-7 of a raised record (and lower it), or None when no kernel wrote it."""
        if self._view is None or not self._view[0]:
            return None
        fields = tuple(int(v) for v in self._view[1:])
        self._view[0] = 0
        return fields
