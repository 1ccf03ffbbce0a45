"""A corpus of learner answers to the checks of notebooks 05b, 06, 07, 09, 09b and 10 (the ones
least tried): plausible mistakes that must be refused, and right answers in another style (other
loops, ``tl.where`` for a mask, other names) that must be accepted.  Each is the notebook's own
solution cell with one edit (``tests/_mistakes.py``'s ``edited_answer``), checked on the CPU.

A check that misjudges one is a defect (mark it ``xfail(strict=True)`` with the reason until
it is fixed, so the corpus stays honest about what the checks do today)."""

from __future__ import annotations

import importlib
from pathlib import Path

import nbformat
import pytest

from gemm_kernels.lab.exercises import CORRECT, WRONG
from gemm_kernels.lab.student import exercise_results
from _mistakes import edited_answer

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

# (notebook, check title, old, new, why): each must be refused (old and new may be tuples: edits in turn)
MISTAKES = [
    # 02: blocks that are not square, and BLOCK_M for BLOCK_N (a newcomer's find: only N <= 48 was tried)
    ("02_naive_tiling", "my_matmul",
     ("cols = pid_n * BLOCK_N", "grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32),)", "BLOCK_M=32, BLOCK_N=32"),
     ("cols = pid_n * BLOCK_M", "grid = (triton.cdiv(M, 16) * triton.cdiv(N, 32),)", "BLOCK_M=16, BLOCK_N=32"),
     "BLOCK_M for BLOCK_N with 16 x 32 blocks"),
    # 05b: the Stream-K share and loop
    ("05b_stream_k", "streamk_share", "share = num_programs - 1 - pid", "share = num_programs - pid", "off by one program"),
    ("05b_stream_k", "streamk_share", "it, end = share * total // num_programs, (share + 1) * total // num_programs",
     "it, end = share * (total // num_programs), (share + 1) * (total // num_programs)", "the remainder dropped"),
    ("05b_stream_k", "streamk_share", "k_end = min(k_tiles, k_first + end - it)", "k_end = k_tiles",
     "a segment runs past the share's end"),
    ("05b_stream_k", "streamk_share", "segments.append((num_tiles - sk_tiles + t, k_first, k_end))",
     "segments.append((t, k_first, k_end))", "split tiles numbered from 0"),
    ("05b_stream_k", "streamk_share", "while it < end:", "while it <= end:", "a loop that never ends at the share's end"),
    ("05b_stream_k", "streamk_share", "total = sk_tiles * k_tiles", "total = num_tiles * k_tiles", "every tile split"),
    ("05b_stream_k", "streamk_loop", "k_end = tl.minimum(k_tiles, k_first + (end - it))",
     "k_end = tl.minimum(k_tiles, k_first + (end - it) - 1)", "a segment one short: the loop can stall"),
    ("05b_stream_k", "streamk_loop", "dp_tiles + t, k_first, k_end", "t, k_first, k_end", "the data-parallel tiles again"),
    ("05b_stream_k", "streamk_loop", "streamk_range(pid, sk_tiles * k_tiles, NUM_PROGRAMS)",
     "streamk_range(NUM_PROGRAMS - 1 - pid, sk_tiles * k_tiles, NUM_PROGRAMS)", "another program's share"),
    ("05b_stream_k", "streamk_loop", "it += k_end - k_first", "it += k_tiles", "moves on by a whole tile"),
    ("05b_stream_k", "rows_match", "torch.equal(first.view(as_int), second.view(as_int))",
     "torch.allclose(first, second)", "close values for the same bits"),
    ("05b_stream_k", "rows_match", "torch.equal(first.view(as_int), second.view(as_int))",
     "bool((first == second).all())", "equal values for the same bits"),
    ("05b_stream_k", "rows_match", "rows = min(m1, m2)", "rows = 1", "row 0 alone"),
    ("05b_stream_k", "rows_match", "rows = min(m1, m2)", "rows = m1", "m1 rows taken from both batches"),
    ("05b_stream_k", "rows_match", ("first = matmul(a[:m1], b)[:rows]", "second = matmul(a[:m2], b)[:rows]"),
     ("first = matmul(a, b)[:rows]", "second = matmul(a, b)[:rows]"), "the whole batch, twice"),
    # 06: masks, the walk, the lookup
    ("06_grouped_gemm", "bounds_masks", "a_mask = (rows[:, None] < M) & (ks[None, :] < K)",
     "a_mask = (rows[:, None] < M) & (ks[None, :] < K + 1)", "K's last index let through"),
    ("06_grouped_gemm", "bounds_masks", "b_mask = (ks[:, None] < K) & (cols[None, :] < N)",
     "b_mask = (ks[None, :] < K) & (cols[:, None] < N)", "B's mask transposed"),
    ("06_grouped_gemm", "bounds_masks", "c_mask = (rows[:, None] < M) & (cols[None, :] < N)",
     "c_mask = (rows[:, None] <= M) & (cols[None, :] <= N)", "off by one at M and N"),
    ("06_grouped_gemm", "bounds_masks", "return a_mask, b_mask, c_mask", "return b_mask, a_mask, c_mask",
     "masks in the wrong order"),
    ("06_grouped_gemm", "program_tiles", "return laid_out[pid::num_programs]",
     "return laid_out[pid * num_programs:(pid + 1) * num_programs]", "contiguous chunks, not every N-th tile"),
    ("06_grouped_gemm", "program_tiles", "laid_out.append((problem, local // num_pid_n, local % num_pid_n))",
     "laid_out.append((problem, local % num_pid_n, local // num_pid_n))", "pid_m and pid_n swapped"),
    ("06_grouped_gemm", "program_tiles", "num_pid_n = triton.cdiv(N, block_n)",
     "num_pid_n = triton.cdiv(N, block_m)", "BLOCK_M for BLOCK_N"),
    ("06_grouped_gemm", "program_tiles", "for problem, (M, N) in enumerate(shapes):",
     "for problem, (M, N) in enumerate(s for s in shapes if s[0] > 0):", "empty problems dropped, the rest renumbered"),
    ("06_grouped_gemm", "find_tile", "num_pid_n = tl.cdiv(tl.load(sizes_ptr + 3 * problem + 1), BLOCK_N)",
     "num_pid_n = tl.cdiv(tl.load(sizes_ptr + 3 * problem + 1), BLOCK_M)", "BLOCK_M for BLOCK_N"),
    ("06_grouped_gemm", "find_tile", "tl.load(sizes_ptr + 3 * problem + 1)", "tl.load(sizes_ptr + 3 * problem)",
     "M read for N"),
    ("06_grouped_gemm", "find_tile", "return problem, local // num_pid_n, local % num_pid_n",
     "return problem, local % num_pid_n, local // num_pid_n", "pid_m and pid_n swapped"),
    ("06_grouped_gemm", "find_tile", "for g in range(num_problems):", "for g in range(num_problems - 1):",
     "the last problem never found"),
    # 07: offs, tiles, padding, the expert kernel
    ("07_moe_grouped_mm", "offs_from_counts", "torch.cumsum(counts, 0)", "torch.cumsum(counts, 0)[:-1]",
     "one offset short"),
    ("07_moe_grouped_mm", "offs_from_counts", "torch.cumsum(counts, 0)", "torch.cumsum(counts.flip(0), 0)",
     "the experts in reverse"),
    ("07_moe_grouped_mm", "tiles_per_expert", "for c in counts]", "for c in counts if c > 0]",
     "empty experts dropped from the list"),
    ("07_moe_grouped_mm", "tiles_per_expert", "triton.cdiv(c, block_m) * triton.cdiv(N, block_n)",
     "triton.cdiv(c, block_m) * (N // block_n)", "N's partial tile left out"),
    ("07_moe_grouped_mm", "padded_rows", "triton.cdiv(c, block_m) * block_m - c",
     "max(triton.cdiv(c, block_m), 1) * block_m - c", "an empty expert padded to a block"),
    ("07_moe_grouped_mm", "expert_rows_kernel", "mask = (rows[:, None] < row_end) & (cols[None, :] < N)",
     "mask = rows[:, None] < row_end", "the store not masked at N"),
    ("07_moe_grouped_mm", "expert_rows_kernel", "row_end = tl.load(offs_ptr + expert)",
     "row_end = tl.load(offs_ptr + expert + 1)", "the next expert's end"),
    ("07_moe_grouped_mm", "expert_rows_kernel", "w_ptr + expert * stride_we + ", "w_ptr + ",
     "every expert multiplies expert 0's weights"),
    ("07_moe_grouped_mm", "expert_rows_kernel", "mask=expert > 0, other=0)", "mask=expert > 0)",
     "expert 0's start from a masked load with no other=: undefined on a GPU"),
    # 09: the weight gradient's work and lookup
    ("09_moe_training", "wgrad_work", "[tiles_per_expert] * len(counts)",
     "[tiles_per_expert if c else 0 for c in counts]", "no tiles for an empty expert (its gradient must be zeroed)"),
    ("09_moe_training", "wgrad_work", "[triton.cdiv(c, block_k) for c in counts]",
     "[triton.cdiv(c, block_k) or 1 for c in counts]", "one step for an empty expert"),
    ("09_moe_training", "wgrad_work", "triton.cdiv(K, block_m) * triton.cdiv(N, block_n)",
     "triton.cdiv(K, block_m) * (N // block_n)", "N's partial tile left out"),
    ("09_moe_training", "wgrad_tile", "first_row = tl.minimum(tl.maximum(first_row, 0), T)\n", "\n",
     "the rows' start not clamped into [0, T]"),
    ("09_moe_training", "wgrad_tile", "row_end = tl.minimum(tl.maximum(row_end, first_row), T)",
     "row_end = tl.minimum(row_end, T)", "a decreasing pair gives negative rows"),
    ("09_moe_training", "wgrad_tile", "expert = tile // tiles_per_expert", "expert = tile % tiles_per_expert",
     "the expert from the remainder"),
    ("09_moe_training", "wgrad_tile", "tile_coords(tile % tiles_per_expert,", "tile_coords(tile,",
     "the tile inside the expert not taken"),
    # 09b: reading do_bench, a verdict from timings
    ("09b_measuring", "do_bench_reading", "return events_us + kernel_us + max(0.0, host_us - hidden_us)",
     "return kernel_us + max(0.0, host_us - hidden_us)", "the events' own cost left out"),
    ("09b_measuring", "do_bench_reading", "return events_us + kernel_us + max(0.0, host_us - hidden_us)",
     "return events_us + max(kernel_us, host_us - hidden_us)", "the larger of the two, not their sum"),
    ("09b_measuring", "timing_verdict", "b / o for b, o in", "o / b for b, o in", "the ratio upside down"),
    ("09b_measuring", "timing_verdict", 'return "faster"', 'return "slower"', "faster called slower"),
    ("09b_measuring", "timing_verdict", 'return "noise"', 'return "faster"', "noise called faster"),
    # 10: block scales, the block-scaled loop, the promotion interval
    ("10_fp8", "block_scales", "return torch.where(amax > 0, amax / 448, torch.ones_like(amax))",
     "return amax / 448", "an all-zero block's scale 0"),
    ("10_fp8", "block_scales", ".abs().amax(dim=(1, 3))", ".amax(dim=(1, 3))", "the signed maximum"),
    ("10_fp8", "block_scales", "padded = torch.nn.functional.pad(xf, (0, -xf.shape[1] % bc, 0, -xf.shape[0] % br))",
     "padded = xf", "no padding for ragged blocks"),
    ("10_fp8", "block_scaled_loop", "kb = ki * BLOCK_K // 128", "kb = ki * BLOCK_K // 64",
     "the scale changes every 64 values of K"),
    ("10_fp8", "block_scaled_loop", "mask=offs_n < N, other=0.0)\n        acc", "other=0.0)\n        acc",
     "scale_b's load not masked"),
    ("10_fp8", "block_scaled_loop", "tl.dot(a, b) * (sa[:, None] * sb[None, :])", "tl.dot(a, b) * sb[None, :]",
     "scale_a left out"),
    ("10_fp8", "promotion_interval", "measured[p] <= budget", "measured[p] < budget", "the budget itself refused"),
    ("10_fp8", "promotion_interval", 'and r["K"] == K}', "}", "rows of every K mixed"),
    ("10_fp8", "promotion_interval", 'if r["provider"] == "scaled_mm" and ', "if ", "the vendor's rows mixed in"),
    ("10_fp8", "promotion_interval", 'and r["kind"] == kind ', "", "every kind of data mixed"),
]

# (notebook, check title, old, new, style): each must be accepted
RIGHT_ANSWERS = [
    ("05b_stream_k", "streamk_share", "    while it < end:\n", "    for _ in range(end - it):  # at most one per iteration\n"
     "        if it >= end:\n            break\n", "a bounded for loop with a break"),
    ("06_grouped_gemm", "bounds_masks", "a_mask = (rows[:, None] < M) & (ks[None, :] < K)",
     "a_mask = (rows < M)[:, None] & (ks < K)[None, :]", "compare first, then broadcast"),
    ("06_grouped_gemm", "find_tile", "        if tl.load(tile_starts_ptr + g) <= tile:  # the last problem starting at or "
     "before the tile owns it\n            problem = g",
     "        problem = tl.where(tl.load(tile_starts_ptr + g) <= tile, g, problem)", "tl.where instead of an if"),
    ("06_grouped_gemm", "program_tiles", "    return laid_out[pid::num_programs]",
     "    mine = []\n    for index, triple in enumerate(laid_out):\n        if index % num_programs == pid:\n"
     "            mine.append(triple)\n    return mine", "an explicit loop over the laid-out tiles"),
    ("07_moe_grouped_mm", "offs_from_counts", "return torch.cumsum(counts, 0).to(torch.int32)",
     "import itertools\n    return torch.tensor(list(itertools.accumulate(counts.tolist())), dtype=torch.int32)",
     "itertools.accumulate"),
    ("07_moe_grouped_mm", "tiles_per_expert", "[triton.cdiv(c, block_m) * triton.cdiv(N, block_n) for c in counts]",
     "[-(-c // block_m) * -(-N // block_n) for c in counts]", "ceiling division by negation"),
    ("07_moe_grouped_mm", "padded_rows", "sum(triton.cdiv(c, block_m) * block_m - c for c in counts)",
     "sum((-c) % block_m for c in counts)", "the padding as a remainder"),
    ("07_moe_grouped_mm", "expert_rows_kernel",
     "row_start = tl.load(offs_ptr + expert - 1, mask=expert > 0, other=0)  # masked off for expert 0",
     "row_start = tl.where(expert > 0, tl.load(offs_ptr + tl.maximum(expert - 1, 0)), 0)",
     "tl.where and a clamped index instead of a masked load"),
    ("05b_stream_k", "rows_match", "return torch.equal(first.view(as_int), second.view(as_int))",
     "return bool((first.view(torch.int16) == second.view(torch.int16)).all())",
     "int16 views of any width, compared element by element"),
    ("05b_stream_k", "rows_match", "return torch.equal(first.view(as_int), second.view(as_int))",
     "return first.cpu().numpy().tobytes() == second.cpu().numpy().tobytes()", "the rows' bytes"),
    ("09b_measuring", "do_bench_reading", "return events_us + kernel_us + max(0.0, host_us - hidden_us)",
     "exposed = host_us - hidden_us if host_us > hidden_us else 0.0\n    return events_us + kernel_us + exposed",
     "an if expression"),
    ("09b_measuring", "timing_verdict", "ratio = statistics.median(b / o for b, o in zip(baseline_us, ours_us))",
     "ratios = sorted(b / o for b, o in zip(baseline_us, ours_us))\n"
     "    mid = len(ratios) // 2\n    ratio = ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2",
     "the median by hand"),
    ("10_fp8", "promotion_interval", "    return next(p for p in (\"fast\", 128, 64, 32) if p in measured and "
     "measured[p] <= budget)",
     "    for p in (\"fast\", 128, 64, 32):\n        if measured.get(p, float(\"inf\")) <= budget:\n            return p",
     "a for loop with an early return"),
]


class _Book:
    def __init__(self, name: str):
        self.nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        self.namespace: dict = {}
        exercise_results(self.nb, name, self.namespace)


@pytest.fixture(scope="module")
def books():
    cache: dict = {}
    return lambda name: cache.setdefault(name, _Book(name))


#: (notebook, check title, old, new, what the feedback must say, what it must not): mistakes whose
#: feedback once pointed at another cause (issue 47)
FEEDBACK = [
    ("05b_stream_k", "streamk_loop", "dp_tiles + t, k_first", "t, k_first",
     "the t-th split tile is tile dp_tiles + t", None),
    ("05b_stream_k", "streamk_share", "segments.append((num_tiles - sk_tiles + t, k_first, k_end))",
     "segments.append((num_tiles - sk_tiles + t, k_first, k_end - 1))", "each k_end is one short", "runs 4 iterations"),
    ("05b_stream_k", "rows_match", "torch.equal(first.view(as_int), second.view(as_int))",
     "torch.allclose(first, second)", "differ in the last bit: a tolerance", None),
    ("05b_stream_k", "rows_match", "torch.equal(first.view(as_int), second.view(as_int))",
     "torch.equal(first, second)", "NaN != NaN as a value", "not row 0 alone"),
    ("05b_stream_k", "rows_match", "rows = min(m1, m2)", "rows = 1", "not row 0 alone", "NaN != NaN"),
    ("05b_stream_k", "rows_match", "rows = min(m1, m2)", "rows = m1",
     "only the first min(m1, m2) = 6 rows are in both batches", None),
    ("06_grouped_gemm", "program_tiles", "laid_out.append((problem, local // num_pid_n, local % num_pid_n))",
     "laid_out.append((problem, local % triton.cdiv(M, block_m), local // triton.cdiv(M, block_m)))",
     "numbered down the columns (column-major)", None),
    ("07_moe_grouped_mm", "tiles_per_expert", "triton.cdiv(c, block_m) * triton.cdiv(N, block_n)",
     "triton.cdiv(c, block_m)", "only the tile rows are counted", "rounded down"),
    ("07_moe_grouped_mm", "expert_rows_kernel", "mask = (rows[:, None] < row_end) & (cols[None, :] < N)",
     "mask = (cols[None, :] < N) & (rows[:, None] >= 0)", "row_end = offs[expert]", "rows[:, None] < 60"),
    ("07_moe_grouped_mm", "expert_rows_kernel", "mask=expert > 0, other=0)", "mask=expert > 0)",
     "right only if masked-off lanes read 0: line 8 of moe_tile_kernel", None),
    ("10_fp8", "block_scaled_loop", "kb = ki * BLOCK_K // 128", "kb = ki", "kb = ki * BLOCK_K // 128, not ki",
     "need the mask"),
    ("10_fp8", "block_scaled_loop", "(offs_n // 128) * stride_sbn, mask=offs_n < N, other=0.0)",
     "(offs_n // 128) * stride_sbn)", "need the mask (offs_n < N)", "not ki"),
    ("01_pointer_arithmetic", "transpose", "tl.store(out_ptr + cols[None, :] * stride_om + rows[:, None] * stride_on",
     "tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on", "x[i, j] goes to out[j, i]",
     "masked load with no other="),
    ("01_pointer_arithmetic", "transpose", "mask = (rows[:, None] < M) & (cols[None, :] < N)",
     "mask = (rows[:, None] < M)", "past x's last column: 1 column)", "1 columns"),
    # the newcomer's second read
    ("01_pointer_arithmetic", "transpose", "rows[:, None] * stride_on, block, mask=mask)",
     "rows[:, None] * stride_on, block, mask=(rows[:, None] < N) & (cols[None, :] < M))",
     "addresses are mirrored, as they should be", "strides are swapped"),
    ("10_fp8", "block_scaled_loop", "(offs_n // 128) * stride_sbn, mask=offs_n < N",
     "offs_n * stride_sbn, mask=offs_n < N", "the load's column index is offs_n // 128", "not ki"),
    ("10_fp8", "promotion_interval", "measured[p] <= budget", "measured[p] < budget",
     "compare with <=, not <", "look for the longest interval"),
    ("07_moe_grouped_mm", "tiles_per_expert", "triton.cdiv(c, block_m) * triton.cdiv(N, block_n)",
     "(int(c) // block_m) * triton.cdiv(N, block_n)", "cdiv, not //", "counted with BLOCK_N"),
]


def _check(notebook: str, title: str):
    module = importlib.import_module(f"gemm_kernels.lab.exercises.{notebook.split('_', 1)[1]}")
    return getattr(module, f"check_{title}")


def _ids(rows):
    out = []
    for row in rows:
        values = row.values if hasattr(row, "values") else row
        out.append(f"{values[0][:3].rstrip('_')}-{values[1]}-{values[4]}".replace(" ", "_")[:80])
    return out


def test_the_corpus_is_large_enough():
    assert len(MISTAKES) >= 50 and len(RIGHT_ANSWERS) >= 10


@pytest.mark.parametrize("notebook, title, old, new, why", MISTAKES, ids=_ids(MISTAKES))
def test_a_plausible_mistake_is_refused(books, notebook, title, old, new, why):
    book = books(notebook)
    result = _check(notebook, title)(edited_answer(book.nb, book.namespace, title, old, new))
    assert result.status == WRONG, f"{why}: {result}"


@pytest.mark.parametrize("notebook, title, old, new, style", RIGHT_ANSWERS, ids=_ids(RIGHT_ANSWERS))
def test_a_right_answer_in_another_style_is_accepted(books, notebook, title, old, new, style):
    book = books(notebook)
    result = _check(notebook, title)(edited_answer(book.nb, book.namespace, title, old, new, label="variant"))
    assert result.status == CORRECT, f"{style}: {result}"


@pytest.mark.parametrize("notebook, title, old, new, says, never", FEEDBACK,
                         ids=[f"{row[0][:3].rstrip('_')}-{row[1]}-{n}" for n, row in enumerate(FEEDBACK)])
def test_the_feedback_names_the_mistake(books, notebook, title, old, new, says, never):
    book = books(notebook)
    result = _check(notebook, title)(edited_answer(book.nb, book.namespace, title, old, new))
    assert result.status == WRONG and says in str(result), str(result)
    assert never is None or never not in str(result), str(result)
