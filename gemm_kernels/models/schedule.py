"""Which tiles of C run together, and which blocks of A and B they read.

A :class:`Schedule` is the launch order of a GEMM's output tiles plus the *waves* they
run in.  The tile order itself always comes from :mod:`gemm_kernels.models.tiles` (the same
pid -> tile mapping the kernels call); this module only groups it into waves and asks
what each wave touches.  The drawings, the widgets and the L2 model
(:mod:`gemm_kernels.models.l2model`) all read schedules from here.

Three kinds of launch are modelled:

``row_major`` / ``grouped``  one program per tile (``matmul``).  Programs start in pid
    order and at most ``programs_in_flight`` of them are resident at once (on a GPU:
    number of SMs x programs per SM).  Wave ``w`` is programs
    ``w * programs_in_flight ... (w + 1) * programs_in_flight - 1``.
``persistent``  ``programs_in_flight`` programs (NUM_SM in Triton's tutorial 09), each
    striding over tile indices ``p, p + programs_in_flight, ...``; tile indices map to
    tiles in grouped order (``group_size_m=1`` is row-major).  Wave ``w`` is step ``w`` of
    every program: the ``step`` column of :func:`tiles.persistent_schedule`.
``multi_problem``  the grouped GEMM of Triton's tutorial 08: the tiles of several
    problems laid end to end, a fixed number of programs walking them (the ``step``
    column of :func:`tiles.multi_problem_schedule`).

For a single GEMM the persistent waves hold the same tiles as one-program-per-tile
grouped waves with the same number of programs in flight; what differs is *which
program* computes each tile (see ``Schedule.program``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import tiles
from ._ints import check_int
from .tiles import SCHEDULE_FIELDS, cdiv

#: Launch kinds accepted by :func:`tile_schedule`.
SCHEDULE_ORDERS = ("row_major", "grouped", "persistent")

_TILE, _PROGRAM, _STEP, _PROBLEM, _PID_M, _PID_N = range(len(SCHEDULE_FIELDS))


@dataclass(frozen=True, eq=False)
class Schedule:
    """The tiles of one launch in launch order, grouped into waves.

    Attributes
    ----------
    kind : ``"row_major"``, ``"grouped"``, ``"persistent"`` or ``"multi_problem"``.
    tile_order : the per-problem pid -> tile mapping (``"row_major"`` or ``"grouped"``).
    group_size_m : GROUP_SIZE_M of the grouped mapping.
    block_m, block_n : the C tile size.
    programs_in_flight : programs resident at once (one wave).
    problem_shapes : ``((M, N, K), ...)``; ``K`` is ``None`` when not given.
    table : int64 ``[num_tiles, 6]``, columns :data:`tiles.SCHEDULE_FIELDS`
        (``tile, program, step, problem, pid_m, pid_n``), rows in launch order.  For one
        program per tile ``tile == program == pid``; ``step`` is always the wave.
    """

    kind: str
    tile_order: str
    group_size_m: int
    block_m: int
    block_n: int
    programs_in_flight: int
    problem_shapes: tuple
    table: np.ndarray

    # ------------------------------------------------------------------ columns
    @property
    def num_tiles(self) -> int:
        return len(self.table)

    @property
    def wave(self) -> np.ndarray:
        """Wave of each launched tile (in launch order)."""
        return self.table[:, _STEP]

    @property
    def program(self) -> np.ndarray:
        """Program that computes each launched tile (pid, or persistent program id)."""
        return self.table[:, _PROGRAM]

    @property
    def problem(self) -> np.ndarray:
        return self.table[:, _PROBLEM]

    @property
    def pid_m(self) -> np.ndarray:
        return self.table[:, _PID_M]

    @property
    def pid_n(self) -> np.ndarray:
        return self.table[:, _PID_N]

    @property
    def num_waves(self) -> int:
        return int(self.wave[-1]) + 1 if self.num_tiles else 0

    @property
    def num_problems(self) -> int:
        return len(self.problem_shapes)

    def _check_problem(self, problem) -> int:
        problem = check_int(problem, "problem", minimum=0)
        if problem >= self.num_problems:
            raise ValueError(f"problem must be in [0, {self.num_problems}): this schedule has "
                             f"{self.num_problems} problem{'s' if self.num_problems > 1 else ''}, got {problem}")
        return problem

    def tile_grid(self, problem: int = 0) -> tuple[int, int]:
        """``(num_pid_m, num_pid_n)`` of one problem (0 tiles along M for an empty problem)."""
        M, N = self.problem_shapes[self._check_problem(problem)][:2]
        return cdiv(M, self.block_m), cdiv(N, self.block_n)

    # ------------------------------------------------------------------ waves
    @cached_property
    def wave_starts(self) -> np.ndarray:
        """Row ``w`` of the table where wave ``w`` begins; ``wave_starts[-1] == num_tiles``."""
        return np.searchsorted(self.wave, np.arange(self.num_waves + 1), side="left")

    def wave_rows(self, wave: int) -> slice:
        """The rows of :attr:`table` (launch positions) that run in ``wave``."""
        check_int(wave, "wave", minimum=0)
        if not 0 <= wave < self.num_waves:
            raise ValueError(f"wave must be in [0, {self.num_waves}), got {wave}")
        return slice(int(self.wave_starts[wave]), int(self.wave_starts[wave + 1]))

    def footprint(self, rows=None, problem: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``(a_row_blocks, b_col_blocks)`` that the given launches read, in one problem.

        ``rows`` selects launches (a slice, index array or boolean mask over the table;
        ``None`` = all).  A program computing tile ``(pid_m, pid_n)`` reads A's row-block
        ``pid_m`` (``BLOCK_M`` rows, all of K) and B's column-block ``pid_n``.
        """
        problem = self._check_problem(problem)
        sel = self.table if rows is None else self.table[rows]
        sel = sel[sel[:, _PROBLEM] == problem]
        return np.unique(sel[:, _PID_M]), np.unique(sel[:, _PID_N])

    def wave_footprint(self, wave: int, problem: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`footprint` of one wave: the A row-blocks and B column-blocks it reads."""
        return self.footprint(self.wave_rows(wave), problem)

    # ------------------------------------------------------------------ grids for drawings
    def _grid(self, values: np.ndarray, problem: int) -> np.ndarray:
        grid = np.full(self.tile_grid(problem), -1, dtype=np.int64)
        sel = self.problem == problem
        grid[self.pid_m[sel], self.pid_n[sel]] = values[sel]
        return grid

    def launch_grid(self, problem: int = 0) -> np.ndarray:
        """``[num_pid_m, num_pid_n]``: launch position of each tile (its row in :attr:`table`).

        For one program per tile this is the pid (``tiles.launch_order_grid``)."""
        return self._grid(np.arange(self.num_tiles), problem)

    def wave_grid(self, problem: int = 0) -> np.ndarray:
        """``[num_pid_m, num_pid_n]``: the wave each tile runs in."""
        return self._grid(self.wave, problem)

    def program_grid(self, problem: int = 0) -> np.ndarray:
        """``[num_pid_m, num_pid_n]``: the program that computes each tile."""
        return self._grid(self.program, problem)

    def group_grid(self, problem: int = 0) -> np.ndarray:
        """``[num_pid_m, num_pid_n]``: the GROUP_SIZE_M group each tile belongs to
        (``pid_m // group_size_m``; every tile is its row's group in row-major order)."""
        num_pid_m, num_pid_n = self.tile_grid(problem)
        size = self.group_size_m if self.tile_order == "grouped" else 1
        return np.repeat((np.arange(num_pid_m) // size)[:, None], num_pid_n, axis=1)

    def describe(self) -> str:
        shapes = ", ".join(f"{M}x{N}" + ("" if K is None else f"x{K}") for M, N, K in self.problem_shapes)
        order = self.tile_order + (f" (GROUP_SIZE_M={self.group_size_m})" if self.tile_order == "grouped" else "")
        return (f"{self.kind} schedule of {shapes} in {self.block_m}x{self.block_n} tiles, {order}: "
                f"{self.num_tiles} tiles, {self.programs_in_flight} programs in flight, {self.num_waves} waves")


def _normalise_shapes(problem_shapes) -> tuple:
    shapes = []
    for g, shape in enumerate(problem_shapes):
        if len(shape) not in (2, 3):
            raise ValueError(f"problem {g}: expected (M, N) or (M, N, K), got {tuple(shape)}")
        M, N = (check_int(v, f"problem {g}: {d}", minimum=0) for v, d in zip(shape[:2], "MN"))
        K = check_int(shape[2], f"problem {g}: K", minimum=0) if len(shape) == 3 and shape[2] is not None else None
        shapes.append((M, N, K))
    if not shapes:
        raise ValueError("problem_shapes is empty: give at least one (M, N) or (M, N, K)")
    return tuple(shapes)


def tile_schedule(M: int, N: int, block_m: int, block_n: int, order: str = "grouped",
                  group_size_m: int = 8, programs_in_flight: int | None = None, K: int | None = None) -> Schedule:
    """Launch order and waves of one GEMM ``C[M, N]`` cut into ``block_m x block_n`` tiles.

    Parameters
    ----------
    order : ``"row_major"`` or ``"grouped"`` (one program per tile, pid order), or
        ``"persistent"`` (``programs_in_flight`` programs striding over grouped-order tile
        indices, as ``tiles.persistent_schedule``).
    group_size_m : GROUP_SIZE_M of the grouped mapping (ignored for ``row_major``).
    programs_in_flight : programs resident at once, i.e. the wave size.  For ``persistent``
        it is the number of programs launched (NUM_SM).  ``None``: ``runtime.num_sms()`` of
        this machine (a stand-in of 4 on the CPU; pass 132 to model an H100 SXM).
    K : optional, kept in :attr:`Schedule.problem_shapes` for the L2 model.

    Example: the seed notes' 9x9 tiles, 9 programs at a time, groups of 3 rows::

        s = tile_schedule(9, 9, 1, 1, "grouped", group_size_m=3, programs_in_flight=9)
        s.wave_footprint(0)   # (array([0, 1, 2]), array([0, 1, 2]))
    """
    if order not in SCHEDULE_ORDERS:
        raise ValueError(f"order must be one of {SCHEDULE_ORDERS}, got {order!r}")
    for value, name in ((M, "M"), (N, "N"), (block_m, "block_m"), (block_n, "block_n"),
                        (group_size_m, "group_size_m")):  # named as the caller named them
        check_int(value, name)
    if programs_in_flight is None:
        from ..runtime import num_sms
        programs_in_flight = num_sms()
    programs_in_flight = check_int(programs_in_flight, "programs_in_flight")
    shapes = _normalise_shapes([(M, N, K)])
    if order == "persistent":
        table = tiles.persistent_schedule(M, N, block_m, block_n, programs_in_flight, "grouped", group_size_m)
        tile_order = "grouped"
    else:
        pids = tiles.program_tiles(M, N, block_m, block_n, order, group_size_m)
        n = len(pids)
        table = np.empty((n, len(SCHEDULE_FIELDS)), dtype=np.int64)
        table[:, _TILE] = table[:, _PROGRAM] = np.arange(n)
        table[:, _STEP] = np.arange(n) // programs_in_flight
        table[:, _PROBLEM] = 0
        table[:, _PID_M:] = pids
        tile_order = order
    return Schedule(order, tile_order, int(group_size_m), int(block_m), int(block_n), programs_in_flight, shapes, table)


def grouped_gemm_schedule(problem_shapes, block_m: int, block_n: int, num_programs: int | None = None,
                          order: str = "grouped", group_size_m: int = 8) -> Schedule:
    """Schedule of a grouped (multi-problem) GEMM, as ``tiles.multi_problem_schedule``.

    ``problem_shapes`` is a list of ``(M, N)`` or ``(M, N, K)`` (``M`` may be 0: an empty
    problem owns no tiles).  The tiles of all problems are laid end to end (problem 0's
    tiles in ``order``, then problem 1's, ...) and ``num_programs`` programs stride over
    them; wave ``w`` is step ``w`` of every program.  ``None``: ``runtime.num_sms()``.
    Raises ``ValueError`` when no problem has a tile.
    """
    for value, name in ((block_m, "block_m"), (block_n, "block_n"), (group_size_m, "group_size_m")):  # as called
        check_int(value, name)
    if num_programs is None:
        from ..runtime import num_sms
        num_programs = num_sms()
    num_programs = check_int(num_programs, "num_programs")
    shapes = _normalise_shapes(problem_shapes)
    table = tiles.multi_problem_schedule([s[:2] for s in shapes], block_m, block_n, num_programs, order, group_size_m)
    if len(table) == 0:
        raise ValueError(f"the problems {[s[:2] for s in shapes]} have no output tiles (every M or N is 0)")
    return Schedule("multi_problem", order, int(group_size_m), int(block_m), int(block_n), num_programs, shapes, table)
