"""Checks for notebook 10 (FP8 GEMM): block-wise scales (:func:`check_block_scales`), the
block-scaled K loop of a kernel (:func:`check_block_scaled_loop`, launched by
:func:`run_block_scaled`), and a promotion interval chosen from the committed H100 errors
(:func:`check_promotion_interval`).

1. ``block_scales(x, block)`` is compared with ``kernels.fp8.quantize_fp8``'s scales on ragged
   shapes, an all-zero block, huge values and a bf16 input; an inverted scale (448 / amax), a
   signed maximum, a zero block's scale and a floor instead of a ceiling are named.
2. The learner's kernel runs checked, in the interpreter (fp8 dots exactly in fp32, see the
   notebook), on ragged shapes with scales that change a lot from one K block to the next, against
   ``scaled_mm_ref``; the common mistakes (no scales, one K block's scales for all, scales
   multiplied into the running sum, one scale_b column per tile) are recognised from float64
   replays of them.  Then it is compiled for sm_90, where its PTX must multiply fp8 on the tensor
   cores: a ``wgmma`` with e4m3 operands (scaling the operands before ``tl.dot`` makes them fp32,
   and the tensor cores then run tf32).  On an fp8 GPU it also runs there, compiled.
3. ``promotion_interval(errors, kind, K, budget)`` (``"fast"``, 128, 64 or 32) is asked for budgets placed between the
   committed errors (``bench.fp8_numerics.load()``) and on a table of the same form with other
   numbers; the right answer is computed here from the table it was given, never typed in.
"""

from __future__ import annotations

import ast
import inspect
import math
import random
import re
import textwrap

import torch

from ... import _triton_compat as compat, runtime
from ...kernels.fp8 import SCALE_BLOCK, quantize_fp8, scaled_mm_ref
from ...models.tiles import cdiv
from ...testing import rel_err
from . import _kernel_checks as kc
from ._core import AnswerShapeError, Hints, answer_array, call, compare_arrays, fmt, shown, unseen_cases

#: the largest finite e4m3 value: a block's amax maps there
E4M3_MAX = float(torch.finfo(torch.float8_e4m3fn).max)


# ----------------------------------------------------------------------------- exercise 1: block scales
@kc.reference
def block_scales_ref(x: torch.Tensor, block) -> torch.Tensor:
    """The float32 dequantization scales of ``x`` in ``(rows, cols)`` blocks: amax / 448, 1 for an all-zero block."""
    return quantize_fp8(x, tuple(block))[1]


def _block_cases():
    """(label, x, block): ragged 1x128 groups, ragged 128x128 blocks, an all-zero group, huge values of
    both signs, a bf16 input, a column-major view with one block per column of 128 rows."""
    gen = torch.Generator().manual_seed(10)
    cases = [("x [5, 300] in (1, 128) groups", torch.randn(5, 300, generator=gen) * 3, (1, 128)),
             ("x [200, 260] in (128, 128) blocks", torch.randn(200, 260, generator=gen), (128, 128))]
    zero = torch.randn(4, 256, generator=gen)
    zero[2, 128:] = 0.0
    cases.append(("x [4, 256] whose row 2, columns 128..255 are all zero, in (1, 128) groups", zero, (1, 128)))
    huge = torch.randn(3, 130, generator=gen)
    huge[1, 129], huge[2, 5] = 3.0e38, -2.5e38
    cases.append(("x [3, 130] holding 3e38 and -2.5e38, in (1, 64) groups", huge, (1, 64)))
    signed = -torch.rand(6, 96, generator=gen) * 5  # every value negative: the largest magnitude is the minimum
    signed[:, ::7] = 0.25
    cases.append(("x [6, 96] with mostly negative values, in (2, 32) blocks", signed, (2, 32)))
    cases.append(("x [64, 200] in bf16, in (32, 64) blocks",
                  (torch.randn(64, 200, generator=gen) * 7).to(torch.bfloat16), (32, 64)))
    cases.append(("x [130, 40] (a column-major view) in (128, 1) blocks",
                  torch.randn(40, 130, generator=gen).t(), (128, 1)))
    return cases


def _why_scales(got: torch.Tensor, x: torch.Tensor, block, expected: torch.Tensor) -> str:
    """The common mistake behind wrong scales, when it is one."""
    br, bc = block
    exp64, got64 = expected.double(), got.double()

    def same(other) -> bool:
        return other.shape == got64.shape and bool(torch.allclose(got64, other.double(), rtol=1e-5, atol=0))

    if same(1 / exp64):
        return (" (that is 448 / amax, the factor that quantizes; the scale dequantizes, x ~ q * scale, so "
                "scale = amax / 448)")
    zero = expected == 1
    if zero.any() and not bool(torch.isfinite(got64[zero]).all() and (got64[zero] != 0).all()):
        return " (an all-zero block has amax = 0: its scale must be 1, not 0, inf or nan, or q = x / scale is nan)"
    xf = x.float()
    padded = torch.nn.functional.pad(xf, (0, (-xf.shape[1]) % bc, 0, (-xf.shape[0]) % br), value=-math.inf)
    blocks = padded.reshape(padded.shape[0] // br, br, padded.shape[1] // bc, bc)
    signed = blocks.amax(dim=(1, 3)) / E4M3_MAX
    if same(torch.where(signed > 0, signed, torch.ones_like(signed))) or same(signed):
        return " (the largest value is not the largest magnitude: take the maximum of x.abs())"
    if x.dtype != torch.float32 and same(quantize_fp8(x.float(), block)[1].to(x.dtype).float()):
        return f" (your scales are rounded to {str(x.dtype).replace('torch.', '')}: compute in float32, x.float())"
    return ""


@kc.plain_exercise("block_scales", hints=Hints(
    nudge="one scale per block: which value of the block must land exactly on e4m3's largest number, 448?",
    approach="pad x (as float32) to whole blocks, reshape it to [row blocks, rows, column blocks, cols], take the "
             "largest magnitude of each block (amax over dims 1 and 3), divide by 448, and give blocks whose amax "
             "is 0 the scale 1",
    solution="br, bc = block; xf = x.float(); p = torch.nn.functional.pad(xf, (0, -xf.shape[1] % bc, 0, "
             "-xf.shape[0] % br)); amax = p.reshape(p.shape[0] // br, br, p.shape[1] // bc, bc).abs().amax(dim=(1, "
             "3)); return torch.where(amax > 0, amax / 448, torch.ones_like(amax))"))
def check_block_scales(block_scales):
    problems = _block_scales_problems(block_scales, _block_cases())
    return problems or _block_scales_problems(block_scales, unseen_cases(_draw_block_case))


def _draw_block_case(rng) -> tuple:
    """(label, x, block) as _block_cases gives them: a ragged float32 or bf16 x of up to 160 x 300, one
    row block in six all zero, in blocks of 1 to 128 rows and 1 to 128 columns."""
    gen = torch.Generator().manual_seed(rng.getrandbits(62))
    rows, cols = rng.randint(1, 160), rng.randint(1, 300)
    block = (rng.choice([1, 2, 32, 128]), rng.choice([1, 32, 64, 128]))
    x = torch.randn(rows, cols, generator=gen) * 10.0 ** rng.uniform(-3, 3)
    if rng.random() < 1 / 6:
        x[:block[0]] = 0.0
    dtype = rng.choice([torch.float32, torch.bfloat16])
    name = str(dtype).replace("torch.", "")
    return f"x [{rows}, {cols}] in {name}, in {block} blocks", x.to(dtype), block


def _block_scales_problems(block_scales, cases) -> list[str]:
    problems = []
    for case, x, block in cases:
        expected = block_scales_ref(x, block)
        got = call(block_scales, x.clone(), block)
        shape = list(expected.shape)
        if not isinstance(got, torch.Tensor):
            try:
                got = torch.as_tensor(answer_array(got, shape))
            except (AnswerShapeError, TypeError, ValueError) as exc:
                problems.append(f"{case}: expected a float32 tensor of shape {shape}, got {shown(got)} ({exc})")
                break
        if list(got.shape) != shape:
            rows, cols = x.shape
            why = ""
            if list(got.shape) == [rows // block[0], cols // block[1]]:
                why = " (a last, partial block still gets a scale: round the number of blocks up)"
            elif list(got.shape) == shape[::-1]:
                why = " (one row of scales per block of rows: [ceil(rows / block[0]), ceil(cols / block[1])])"
            problems.append(f"{case}: expected shape {shape}, got {list(got.shape)}{why}")
            break
        if got.dtype != torch.float32:
            problems.append(f"{case}: expected float32 scales (what scaled_mm takes), got {got.dtype}")
            break
        wrong = compare_arrays(expected, got.detach().cpu(), case, what="scale", rtol=1e-6, atol=0,
                               index_names=("row block", "column block"))
        if wrong:
            problems.append(wrong[0] + _why_scales(got.detach().cpu(), x, block, expected))
            break
    return problems


# ----------------------------------------------------------------------------- exercise 2: the block-scaled K loop
def run_block_scaled(kernel, a, b, scale_a, scale_b, blocks: dict) -> torch.Tensor:
    """Launch ``kernel`` (the notebook's ``my_block_scaled_kernel`` signature) on a 2-D grid of
    tiles; returns C in float32 (NaN where nothing was stored, during a check).  ``a`` [M, K]
    row-major, ``b`` [K, N] column-major, ``scale_a`` [M, K/128], ``scale_b`` [K/128, ceil(N/128)]."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float32, device=a.device)
    grid = (cdiv(M, blocks["BLOCK_M"]), cdiv(N, blocks["BLOCK_N"]))
    kernel[grid](a, b, c, scale_a, scale_b, M, N, K, a.stride(0), b.stride(1), c.stride(0),
                 scale_a.stride(0), scale_a.stride(1), scale_b.stride(0), scale_b.stride(1), **blocks)
    return c


#: (M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, scale_a M-major): ragged M and N; a 256-wide tile that spans
#: two scale columns of b, 64-wide K blocks sharing one scale and scale_a M-major (torch's recipe);
#: one K block; one row
LOOP_CASES = [(70, 200, 256, 64, 64, 128, False), (33, 300, 384, 64, 256, 64, True),
              (128, 128, 128, 64, 128, 128, False), (1, 20, 512, 64, 64, 128, False)]
#: the largest relative error a right answer gets (the interpreter's fp32 sums are ~1e-7; a GPU's
#: narrow accumulator inside each 128-wide block ~1e-4); the mistakes give 1e-2 and more
LOOP_TOLERANCE = 1e-3


def block_scaled_operands(M: int, N: int, K: int, seed: int, *, m_major: bool = False):
    """e4m3 ``a`` [M, K] (row-major), ``b`` [K, N] (column-major) and their block scales, from
    values whose magnitude changes by up to 2^12 from one 128-block to the next (so a scale read
    for the wrong block shows)."""
    gen = torch.Generator().manual_seed(seed)
    kb, nb = cdiv(K, SCALE_BLOCK), cdiv(N, SCALE_BLOCK)
    x = torch.randn(M, K, generator=gen) * (2.0 ** torch.randint(-6, 7, (M, kb), generator=gen)).repeat_interleave(
        SCALE_BLOCK, 1)[:, :K]
    w = torch.randn(N, K, generator=gen) * (2.0 ** torch.randint(-6, 7, (nb, kb), generator=gen)).repeat_interleave(
        SCALE_BLOCK, 0).repeat_interleave(SCALE_BLOCK, 1)[:N, :K]
    a, sa = quantize_fp8(x, (1, SCALE_BLOCK))
    b, sb = quantize_fp8(w.t(), (SCALE_BLOCK, SCALE_BLOCK))
    if m_major:
        sa = sa.t().contiguous().t()
    dev = runtime.DEVICE
    return a.to(dev), b.to(dev), sa.to(dev), sb.to(dev)


def _mistakes(a, b, sa, sb, block_n: int, block_k: int) -> dict:
    """What common wrong K loops compute, in float64: mistake -> C."""
    A, B = a.double().cpu(), b.double().cpu()
    SA, SB = sa.double().cpu(), sb.double().cpu()
    M, K = A.shape
    N = B.shape[1]
    cols = torch.arange(N)
    sb_col = SB[:, cols // SCALE_BLOCK]  # [K blocks, N]: the scale of each column
    tile_first = SB[:, ((cols // block_n) * block_n) // SCALE_BLOCK]  # the scale of the tile's first column

    def blocks(scale_a, scale_b, into_sum=False):
        acc = torch.zeros(M, N, dtype=torch.float64)
        for k0 in range(0, K, block_k):
            kb = k0 // SCALE_BLOCK
            part = A[:, k0:k0 + block_k] @ B[k0:k0 + block_k]
            s = scale_a(kb)[:, None] * scale_b(kb)[None, :]
            acc = (acc + part) * s if into_sum else acc + part * s
        return acc

    def rounded_operands(dtype):
        """Each K block's operands scaled, then rounded to ``dtype`` before the product."""
        acc = torch.zeros(M, N, dtype=torch.float64)
        for k0 in range(0, K, block_k):
            kb = k0 // SCALE_BLOCK
            a_scaled = (A[:, k0:k0 + block_k] * SA[:, kb, None]).to(dtype).double()
            b_scaled = (B[k0:k0 + block_k] * sb_col[kb][None, :]).to(dtype).double()
            acc += a_scaled @ b_scaled
        return acc

    ones_m, ones_n = torch.ones(M, dtype=torch.float64), torch.ones(N, dtype=torch.float64)
    return {
        "the operands were scaled and rounded to bf16 before tl.dot (8 bits of mantissa each): scale the block's "
        "product, not its operands, acc += tl.dot(a, b) * scales, so the tensor cores multiply fp8 and the scales "
        "are applied in fp32": rounded_operands(torch.bfloat16),
        "the operands were scaled and rounded to fp16 before tl.dot: scale the block's product, not its operands, "
        "acc += tl.dot(a, b) * scales, so the tensor cores multiply fp8 and the scales are applied in fp32":
            rounded_operands(torch.float16),
        "no scales at all: each K block's product needs scale_a[rows, kb] * scale_b[kb, cols // 128]":
            blocks(lambda kb: ones_m, lambda kb: ones_n),
        "scale_b left out: each column's scale is scale_b[kb, column // 128]":
            blocks(lambda kb: SA[:, kb], lambda kb: ones_n),
        "scale_a left out: each row's scale is scale_a[row, kb]":
            blocks(lambda kb: ones_m, lambda kb: sb_col[kb]),
        "the first K block's scales for every K block: the scale changes every 128 values of K, kb = (K offset) // 128":
            blocks(lambda kb: SA[:, 0], lambda kb: sb_col[0]),
        "the scales multiply the running sum: tl.dot(a, b, acc) * scales rescales every earlier block again; "
        "scale this block's product alone, acc += tl.dot(a, b) * scales":
            blocks(lambda kb: SA[:, kb], lambda kb: sb_col[kb], into_sum=True),
        "one scale_b per tile (its first column's): a BLOCK_N wider than 128 spans several scale columns, so "
        "load one per column, scale_b[kb, cols // 128]":
            blocks(lambda kb: SA[:, kb], lambda kb: tile_first[kb]),
    }


def _loop_case(kernel, n: int) -> list[str]:
    M, N, K, bm, bn, bk, m_major = LOOP_CASES[n]
    a, b, sa, sb = block_scaled_operands(M, N, K, seed=100 + n, m_major=m_major)
    blocks = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}
    case = (f"M={M}, N={N}, K={K} in {bm}x{bn}x{bk} blocks"
            + (", scale_a M-major (strides (1, M))" if m_major else ""))
    c = call(run_block_scaled, kernel, a, b, sa, sb, blocks, what=f"your kernel ({case})")
    ref = scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64).cpu()
    err = rel_err(c, ref)
    if err <= LOOP_TOLERANCE:
        return []
    got = c.double().cpu()
    if torch.isinf(got).any():
        return [f"{case}: {int(torch.isinf(got).sum())} elements of C are inf: a sum overflowed (an fp16 tl.dot, "
                "out_dtype=tl.float16, tops out at 65504, and a block's sum of fp8 products, each up to 448 x 448, "
                "goes far past it: keep tl.dot's result in fp32)"]
    if torch.isnan(got).any():
        return compare_arrays(ref, got, case, rtol=LOOP_TOLERANCE, atol=1e-6, index_names=("row", "col"))
    for mistake, wrong in _mistakes(a, b, sa, sb, bn, bk).items():
        if rel_err(got, wrong) <= LOOP_TOLERANCE and rel_err(wrong, ref) > LOOP_TOLERANCE:
            return [f"{case}: relative error {err:.2g}: this is what {mistake}"]
    return [f"{case}: relative error {err:.2g} (at most {LOOP_TOLERANCE:g})"] + compare_arrays(
        ref, got, case, rtol=1e-2, atol=1e-6, index_names=("row", "col"))


#: a wgmma with fp8 operands in PTX: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3
_WGMMA = re.compile(r"\bwgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.(\w+)\.(\w+)\.(\w+)")
_FP8 = ("e4m3", "e5m2")


def fp8_wgmma(outcomes: list[dict]) -> list[str]:
    """The rule of the exercise's compiled code: every compiled launch multiplies its fp8 tiles on
    the tensor cores (a wgmma with fp8 operands in its PTX); problems otherwise."""
    for outcome in outcomes:
        found = _WGMMA.findall(outcome.get("ptx", ""))
        if not found and "ptx" in outcome:
            return ["its PTX has no wgmma: the K loop's product must be one tl.dot of the two fp8 tiles as loaded "
                    "(BLOCK_M of 64 with 4 warps gives Hopper's warpgroup MMA)"]
        operands = {f"{shape}.{acc}.{x}.{y}" for shape, acc, x, y in found if x not in _FP8 or y not in _FP8}
        if operands:
            return [f"its tl.dot multiplies {sorted(operands)[0].split('.', 2)[2].replace('.', ' x ')} on the tensor "
                    "cores, not fp8 (wgmma." + sorted(operands)[0] + ")",
                    "scale the block's product, not its operands: a * scale is fp32, which the tensor cores multiply "
                    "as tf32 at a quarter of fp8's rate, with fp8's values anyway: acc += tl.dot(a, b) * "
                    "(sa[:, None] * sb[None, :])"]
    return []


def _loads_of(log, pointer: str) -> list:
    """The ``tl.load`` calls of ``pointer`` in the learner's kernel source (ast nodes)."""
    loads = []
    for launch in log.learner_launches() if log is not None else []:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(compat.jit_source_function(launch.kernel))))
        except (OSError, TypeError, SyntaxError):
            continue
        loads += [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "load" and node.args and pointer in ast.unparse(node.args[0])]
    return loads


def _loop_diagnosis(log, failure) -> list[str]:
    """For a scale load out of bounds, read from the learner's load of that scale: a mask missing,
    scale_b's column not divided by 128, else the K block's scale index (kb)."""
    pointer = getattr(failure, "pointer", None)
    if pointer not in ("sa_ptr", "sb_ptr"):
        return []
    loads = _loads_of(log, pointer)
    if loads and not all(any(k.arg == "mask" for k in node.keywords) or len(node.args) > 1 for node in loads):
        return ["sa_ptr: the rows of a ragged last tile past M need the mask (offs_m < M) on this load too"
                if pointer == "sa_ptr" else
                "sb_ptr: scale_b has one column per 128 columns of C, so the columns of a ragged last tile past "
                "N need the mask (offs_n < N) on this load too"]
    if pointer == "sb_ptr" and loads and not all("128" in ast.unparse(node.args[0]) for node in loads):
        return ["sb_ptr: scale_b has one column per 128 columns of C: column n of C takes scale_b[kb, n // 128], so "
                "the load's column index is offs_n // 128"]
    return [f"{pointer}: with BLOCK_K = 64 two K blocks share one scale (one per 128 values of K): "
            "kb = ki * BLOCK_K // 128, not ki"]


@kc.kernel_exercise("block_scaled_loop", kind="kernel", fp32_dot=True, compiled=fp8_wgmma,
                    diagnose=_loop_diagnosis,
                    gpu_case=(lambda kernel: _loop_case(kernel, 1)) if runtime.on_gpu() and runtime.supports_fp8()
                    else None, hints=Hints(
    nudge="each K block has its own scales: which scale_a column and which scale_b entries belong to K offset "
          "ki * BLOCK_K, and when may they multiply the block's product?",
    approach="load the A tile [BLOCK_M, BLOCK_K] and the B tile [BLOCK_K, BLOCK_N] (b is column-major: element (k, n) "
             "at b_ptr + k + n * stride_bn), masked at M and N; kb = ki * BLOCK_K // 128; load scale_a[rows, kb] and "
             "scale_b[kb, cols // 128] (masked too); multiply the tile product, which starts from zero, by both, "
             "broadcast, and add it to the fp32 accumulator",
    solution="k = ki * BLOCK_K + offs_k; a = tl.load(a_ptr + offs_m[:, None] * stride_am + k[None, :], "
             "mask=offs_m[:, None] < M, other=0.0); b = tl.load(b_ptr + k[:, None] + offs_n[None, :] * stride_bn, "
             "mask=offs_n[None, :] < N, other=0.0); kb = ki * BLOCK_K // 128; sa = tl.load(sa_ptr + offs_m * "
             "stride_sam + kb * stride_sak, mask=offs_m < M, other=0.0); sb = tl.load(sb_ptr + kb * stride_sbk + "
             "(offs_n // 128) * stride_sbn, mask=offs_n < N, other=0.0); acc += tl.dot(a, b) * (sa[:, None] * "
             "sb[None, :])"),
    praise="correct: each K block's fp8 product is scaled and promoted to the fp32 accumulator.")
def check_block_scaled_loop(kernel):
    problems = []
    for n in range(len(LOOP_CASES)):
        problems += _loop_case(kernel, n)
        if problems:
            break
    return problems


# ----------------------------------------------------------------------------- exercise 3: a promotion interval
#: the answers, fewest fp32 adds first: "fast" never promotes (``use_fast_accum=True``, a row's
#: ``promote`` None), the numbers are ``promote_every``
INTERVALS = ("fast", 128, 64, 32)


def _interval(row) -> str | int:
    return "fast" if row.get("promote") is None else row["promote"]


def _measured(errors, kind: str, K: int) -> dict:
    """interval -> rel_err of ``scaled_mm``'s rows of ``kind`` at ``K`` in a table like
    ``bench.fp8_numerics.load()["errors"]``."""
    return {_interval(r): r["rel_err"] for r in errors
            if r.get("provider") == "scaled_mm" and r.get("kind") == kind and r.get("K") == K}


@kc.reference
def promotion_interval_ref(errors, kind: str, K: int, budget: float):
    """The interval with the fewest fp32 adds whose measured error at ``K`` on ``kind`` data is
    within ``budget``: "fast" (never promote), 128, 64 or 32."""
    measured = _measured(errors, kind, K)
    return next(p for p in INTERVALS if p in measured and measured[p] <= budget)


def _interval_text(p) -> str:
    return "never promoting ('fast')" if p == "fast" else f"promoting every {p}"


def _budgets(errors, kind: str, K: int) -> list[float]:
    """Budgets for one (kind, K): between each pair of neighbouring errors, and one exactly on an
    error (within budget means <=); none below the smallest (promoting every 32 always meets them)."""
    values = sorted(set(_measured(errors, kind, K).values()))
    between = [math.sqrt(lo * hi) for lo, hi in zip(values, values[1:])]
    return between + [values[-1] * 2, values[len(values) // 2]]


def _other_table(errors, rng=None) -> list[dict]:
    """The committed table's form with other numbers: every scaled_mm error scaled by a factor per
    (kind, K), the model's and torch's rows kept, the rows shuffled (``rng``: a random.Random; the
    listed cases' own by default, a fresh one for the unseen cases, whose factors are any in 0.02..3)."""
    listed = rng is None
    rng = random.Random(2026) if listed else rng
    factors = {}
    rows = []
    for r in errors:
        r = dict(r)
        if r.get("provider") == "scaled_mm":
            r["rel_err"] *= factors.setdefault((r["kind"], r["K"]), rng.choice((0.02, 0.3, 3.0)) if listed
                                               else rng.uniform(0.02, 3.0))
        rows.append(r)
    rng.shuffle(rows)
    return rows


def promotion_cases(errors) -> list[tuple]:
    """(label, table, kind, K, budget): the notebook's question, then budgets between the committed
    errors at three K, then the same on a table with other numbers."""
    cases = [("the committed table", errors, "positive", 16384, 2e-4)]
    for label, table in (("the committed table", errors), ("a table with other numbers", _other_table(errors))):
        for kind, K in (("positive", 1024), ("signed", 65536), ("positive", 65536), ("signed", 256)):
            cases += [(label, table, kind, K, budget) for budget in _budgets(table, kind, K)]
    return cases


def _why_interval(got, expected, table, kind, K, budget) -> str:
    measured = _measured(table, kind, K)
    mixed = {_interval(r): r["rel_err"] for r in table if r.get("kind") == kind and r.get("K") == K}
    if got == next((p for p in INTERVALS if p in mixed and mixed[p] <= budget), "none"):
        return (" (that reads the rows of every provider, the model's and torch's too: our kernel's measured rows "
                "are provider 'scaled_mm')")
    if got in measured and measured[got] > budget:
        return f" ({_interval_text(got)} gives {measured[got]:.3g} at K = {K}, over the budget)"
    if expected in measured and measured[expected] == budget:
        return (f" ({_interval_text(expected)} gives {measured[expected]:.4g}, exactly the budget: an error equal to "
                "the budget is within it, so compare with <=, not <)")
    if got in measured:
        return (f" ({_interval_text(got)} meets the budget, but {_interval_text(expected)} does too with fewer "
                "fp32 adds: look for the longest interval within the budget)")
    return ""


@kc.plain_exercise("promotion_interval", hints=Hints(
    nudge="keep the rows of our kernel (provider 'scaled_mm') for this kind and K: which of them are within the "
          "budget, and which of those adds to fp32 least often?",
    approach="collect rel_err by the row's 'promote' (None for never, 128, 64 or 32) for provider 'scaled_mm', the "
             "given kind and K; go through never ('fast'), 128, 64, 32 in that order (fewest fp32 adds first) and "
             "return the first whose error is <= budget",
    solution="measured = {r['promote'] or 'fast': r['rel_err'] for r in errors if r['provider'] == 'scaled_mm' and "
             "r['kind'] == kind and r['K'] == K}; return next(p for p in ('fast', 128, 64, 32) if p in measured and "
             "measured[p] <= budget)"))
def check_promotion_interval(promotion_interval):
    from ...bench.fp8_numerics import load

    errors = load()["errors"]
    problems = _promotion_problems(promotion_interval, promotion_cases(errors))
    return problems or _promotion_problems(promotion_interval, unseen_cases(
        lambda rng: _draw_promotion_case(errors, rng)))


def _draw_promotion_case(errors, rng) -> tuple:
    """(label, table, kind, K, budget) as promotion_cases gives them: a table with other numbers drawn
    afresh, any kind and K of it, a budget between (or on) its errors."""
    table = _other_table(errors, rng)
    kind, K = rng.choice(sorted({(r["kind"], r["K"]) for r in table if r.get("provider") == "scaled_mm"}))
    return "a table with other numbers", table, kind, K, rng.choice(_budgets(table, kind, K))


def _promotion_problems(promotion_interval, cases) -> list[str]:
    problems = []
    for label, table, kind, K, budget in cases:
        expected = promotion_interval_ref(table, kind, K, budget)
        rows = [dict(r) for r in table]
        got = call(promotion_interval, rows, kind, K, budget, none_ok=True)  # None is explained below
        if not isinstance(got, (str, int)) or isinstance(got, bool) or got not in INTERVALS:
            why = (" (never promoting is the string 'fast', as use_fast_accum=True: a row's 'promote' None)"
                   if got is None or got == "None" else "")
            problems.append(f"{label}, {kind} data, K = {K}, budget {fmt(budget)}: expected 'fast', 128, 64 or 32, "
                            f"got {shown(got)}{why}")
            break
        if got != expected:
            problems.append(f"{label}, {kind} data, K = {K}, budget {budget:.3g}: expected {expected!r} "
                            f"({_interval_text(expected)}), got {got!r}"
                            + _why_interval(got, expected, table, kind, K, budget))
            if len(problems) == 3:
                break
    return problems
