"""One learner's mistake per exercise check, made in the notebook's own solution cell.

``MISTAKES[title] = (old, new)``: the answer cell of the exercise (the one that defines what
``check_<title>(...)`` is given) with ``old`` replaced by ``new``.  Every mistake keeps every
access in bounds and every loop and wait finite, so a wrong answer is safe to run compiled on a
GPU (the GPU tests run each through the check's GPU-only part too).

A new check with no entry here fails ``tests/test_check_verdicts.py``: add its mistake.
"""

from __future__ import annotations

import ast
import copy
import linecache
import re

MISTAKES = {
    # 00
    "launch_stats": ("return programs, programs * block - n", "return programs, n % block"),
    "axpy": ("alpha * x + y", "x + y"),  # alpha ignored
    # 01
    "block_offsets": ("rows[:, None] * stride_m + cols[None, :] * stride_n",
                      "rows[:, None] * stride_n + cols[None, :] * stride_m"),  # strides swapped
    "block_mask": ("(rows[:, None] < M) & (cols[None, :] < N)", "(rows[:, None] < M) & (cols[None, :] < M)"),
    "transpose": ("mask = (rows[:, None] < M) & (cols[None, :] < N)",
                  "mask = (rows[:, None] < M) & (cols[None, :] < N) & (rows[:, None] > 0)"),  # row 0 never stored
    # 02
    "one_program": ("pid_m, pid_n = pid // num_pid_n, pid % num_pid_n",
                    "pid_m, pid_n = pid % num_pid_n, pid // num_pid_n"),
    "row_major_launch_order": (".reshape(num_pid_m, num_pid_n)", ".reshape(num_pid_n, num_pid_m).T"),
    "my_matmul": ("acc = tl.dot(a, b, acc)", "acc = tl.dot(a, b)"),  # only the last K block kept
    # 03
    "column_grouped_tile": ("min(num_pid_n - first_pid_n, GROUP_SIZE_N)", "GROUP_SIZE_N"),
    "wave_block_fetches": ("(len(np.unique(tiles[:, 0])) + len(np.unique(tiles[:, 1]))) * k_blocks",
                           "2 * len(tiles) * k_blocks"),  # every load counted
    "column_grouped_triton": ("return pid_in_group // group_size_n, first_pid_n + pid_in_group % group_size_n",
                              "return pid_in_group % num_pid_m, first_pid_n + pid_in_group // num_pid_m"),
    # 04
    "activation_pass_bytes": ("2 * M * N * bytes_per_element", "M * N * bytes_per_element"),
    "variant_reference": ("F.leaky_relu(x + 1, 0.01)", "F.leaky_relu(x, 0.01) + 1"),
    "gelu_tanh": ("tl.sigmoid(2.0 * inner)", "tl.sigmoid(inner)"),
    # 05
    "waves_and_tail": ("waves * num_sms - num_tiles", "num_tiles % num_sms"),
    "persistent_tiles": ('"grouped", GROUP_SIZE_M', '"row_major", GROUP_SIZE_M'),
    "tma_view": ("x.stride(0) * x.element_size() % 16 == 0 and aligned_base", "aligned_base"),
    "persistent_loop": ("range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS)",
                        "range(tl.program_id(0), num_pid_m * num_pid_n - 1, NUM_PROGRAMS)"),  # the last tile left out
    # 05b
    "streamk_share": ("share = num_programs - 1 - pid", "share = pid"),
    "streamk_loop": ("k_end = tl.minimum(k_tiles, k_first + (end - it))", "k_end = k_tiles"),  # past its share
    "rows_match": ("torch.equal(first.view(as_int), second.view(as_int))", "torch.equal(first, second)"),  # values
    # 06
    "bounds_masks": ("c_mask = (rows[:, None] < M) & (cols[None, :] < N)",
                     "c_mask = (rows[:, None] < M) & (cols[None, :] < M)"),
    "program_tiles": ("range(triton.cdiv(M, block_m) * num_pid_n)", "range((M // block_m) * num_pid_n)"),
    "find_tile": ("if tl.load(tile_starts_ptr + g) <= tile:", "if tl.load(tile_starts_ptr + g) < tile:"),
    # 07
    "offs_from_counts": ("torch.cumsum(counts, 0)", "(torch.cumsum(counts, 0) - counts)"),  # starts, not ends
    "tiles_per_expert": ("triton.cdiv(c, block_m)", "(c // block_m)"),
    "padded_rows": ("triton.cdiv(c, block_m) * block_m - c", "block_m - c % block_m"),
    "expert_rows_kernel": ("row_start = tl.load(offs_ptr + expert - 1, mask=expert > 0, other=0)", "row_start = 0"),
    # 08
    "ring_phases": ("return q % stages, lap & 1, (lap & 1) ^ 1", "return q % stages, (lap & 1) ^ 1, lap & 1"),
    "consumer_mainloop": ("a_bufs.index(s * A_PARTS + PART)", "a_bufs.index(s * A_PARTS)"),  # the other part's A
    # 09
    "wgrad_work": ("[triton.cdiv(c, block_k) for c in counts]", "[c // block_k for c in counts]"),
    "wgrad_tile": ("num_pid_m, num_pid_n, True, GROUP_SIZE_M)", "num_pid_m, num_pid_n, False, GROUP_SIZE_M)"),
    # 09b
    "do_bench_reading": ("max(0.0, host_us - hidden_us)", "host_us"),
    "timing_verdict": ("2 * noise_pct / 100", "noise_pct / 100"),
    # 10
    "block_scales": ("amax / 448", "amax / 57344"),  # e5m2's largest value, not e4m3's
    "block_scaled_loop": ("tl.dot(a, b) * (sa[:, None] * sb[None, :])", "tl.dot(a, b) * sa[:, None]"),
    "promotion_interval": ('("fast", 128, 64, 32)', '(32, 64, 128, "fast")'),
}

def answer_name(nb, title: str) -> tuple[int, str]:
    """(index of the cell calling ``check_<title>(NAME)``, NAME)."""
    pattern = re.compile(rf"^check_{re.escape(title)}\((\w+)\)\s*$", re.MULTILINE)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            found = pattern.search(cell.source)
            if found:
                return i, found.group(1)
    raise LookupError(f"no cell calls check_{title}(...)")


def answer_cell(nb, title: str) -> tuple[int, str]:
    """(index, NAME) of the cell defining the answer check_<title> is given (the last before its call)."""
    call, name = answer_name(nb, title)
    for i in range(call - 1, -1, -1):
        cell = nb.cells[i]
        if cell.cell_type == "code" and re.search(rf"^def {re.escape(name)}\(", cell.source, re.MULTILINE):
            return i, name
    raise LookupError(f"no cell before the call of check_{title} defines {name}")


def wrong_answer(nb, namespace: dict, title: str):
    """The answer with :data:`MISTAKES`' mistake, defined in a copy of the notebook's namespace."""
    return edited_answer(nb, namespace, title, *MISTAKES[title])


def edited_answer(nb, namespace: dict, title: str, old: str, new: str, label: str = "mistake"):
    """The answer check_<title> is given, from its cell with ``old`` replaced by ``new`` (every
    occurrence; tuples of both: several edits in turn), defined in a copy of the notebook's namespace."""
    index, name = answer_cell(nb, title)
    mutated = nb.cells[index].source
    for before, after in zip(*((old, new) if isinstance(old, tuple) else ((old,), (new,)))):
        if before not in mutated:
            raise LookupError(f"the answer cell of {title} no longer holds {before!r}: update the test's edit")
        mutated = mutated.replace(before, after)
    filename = f"<{label} {title} {abs(hash((old, new))) % 10**8}>"
    linecache.cache[filename] = (len(mutated), None, mutated.splitlines(keepends=True), filename)
    scope = copy.copy(namespace)
    exec(compile(ast.parse(mutated, filename), filename, "exec"), scope)  # noqa: S102  (our notebooks' cells)
    return scope[name]
