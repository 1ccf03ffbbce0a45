"""The book's glossary: each term, a few lines on it, and how to spot its uses in the pages.

The book's extension (:mod:`.sphinxext`) links the first use of every term on a page to its
entry here.  ``patterns`` are regular expressions matched on prose (whole words; case-insensitive
unless ``case_sensitive``), ``code`` the exact texts of inline code (```offs```) that name it.
Where the hardware's behaviour is not documented, the entry says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Term:
    name: str
    definition: str  # MyST markdown, one paragraph
    patterns: tuple = ()
    code: tuple = ()
    case_sensitive: bool = False
    regex: re.Pattern | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.patterns:
            flags = 0 if self.case_sensitive else re.IGNORECASE
            # longest first (a regex takes the first alternative that matches); words may wrap a line
            longest = sorted(self.patterns, key=len, reverse=True)
            words = "|".join("(?:" + p.replace(" ", r"\s+") + ")" for p in longest)
            object.__setattr__(self, "regex", re.compile(rf"(?<![\w-])(?:{words})(?![\w-])", flags))


TERMS = (
    Term("accumulator",
         "The fp32 tile, held in registers, to which a program adds the product of each pair of blocks during "
         "its K loop; the epilogue works on it before the one store to `C` (notebooks 02 and 04).",
         patterns=(r"accumulators?",)),
    Term("autotuning",
         "Timing several configurations of a kernel (block sizes, `num_warps`, `num_stages`) the first time it "
         "meets a new value of its key, and keeping the fastest (`triton.autotune`). The package searches every "
         "configuration, a *small* set (what the notebooks ask for) or none: `gk.default_autotune(...)` or "
         "`GEMM_KERNELS_AUTOTUNE` (notebook 00).",
         patterns=(r"autotun(?:e|es|ed|ing|er)",)),
    Term("bank conflict",
         "Shared memory is served by 32 banks, each 4 bytes wide. When the threads of a warp touch different "
         "addresses in the same bank, the accesses are served one after another. Swizzled layouts avoid that "
         "for the accesses tensor-core code makes (notebook 08).",
         patterns=(r"bank conflicts?",)),
    Term("block",
         "The part of a matrix a program loads or computes at once: `BLOCK_M × BLOCK_K` of `A`, "
         "`BLOCK_K × BLOCK_N` of `B`. Block sizes are `tl.constexpr`: every new value compiles a new kernel "
         "(notebooks 01 and 02).",
         code=("BLOCK_M", "BLOCK_N", "BLOCK_K")),
    Term("compute capability",
         "NVIDIA's version number of a GPU architecture, which Triton targets as `sm_XY`: 7.5 Turing, 8.0 and "
         "8.6 Ampere, 8.9 Ada, 9.0 Hopper (`sm_90`). TMA and wgmma need 9.0 (notebook 00).",
         patterns=(r"compute capability",), code=("sm_90", "sm_86", "sm_80")),
    Term("constexpr",
         "A kernel argument annotated `tl.constexpr`: its value is known when the kernel is compiled (block "
         "sizes, the choice of activation), so branches on it cost nothing, and each new value compiles a new "
         "kernel (notebook 04).",
         patterns=(r"constexprs?",), code=("tl.constexpr",)),
    Term("CTA",
         "Cooperative thread array, CUDA's *thread block*: warps that run together on one SM and share its "
         "shared memory. On an NVIDIA GPU a Triton program runs as one CTA (unless launched with `num_ctas` > 1, "
         "a Hopper option for clusters of CTAs that this course does not use).",
         patterns=(r"CTAs?",), case_sensitive=True),
    Term("cuBLAS",
         "NVIDIA's dense linear-algebra library. `torch.matmul` on CUDA tensors calls it, which makes it the "
         "baseline of the course's measurements; `torch.profiler` names the kernel it picked (notebooks 02, 04, 05).",
         patterns=(r"cuBLAS",), case_sensitive=True),
    Term("CUDA graph",
         "A recorded sequence of GPU work, replayed with one call and none of the Python that launched it. The "
         "course times GPU work alone with `do_bench_cudagraph`, and `GroupedMatmulPlan(cuda_graph=True)` "
         "replays its launch (notebooks 02 and 06).",
         patterns=(r"CUDA graphs?",)),
    Term("DRAM",
         "The GPU's device memory (HBM3 on an H100, about 3.35 TB/s). Whatever the L2 cache does not hold is "
         "read from it (notebook 03).",
         patterns=(r"DRAM", r"HBM\d?"), case_sensitive=True),
    Term("epilogue",
         "What a GEMM program does after its K loop: add the bias, apply the activation, cast to the output type "
         "and store the tile. *Epilogue fusion* does this inside the GEMM, on the fp32 accumulator, instead of in "
         "a separate kernel that reads `C` back and writes it again (notebook 04).",
         patterns=(r"epilogues?", r"epilogue fusion", r"kernel fusion")),
    Term("Gluon",
         "`triton.experimental.gluon`, Triton's lower-level language: the kernel states its layouts, shared "
         "memory, barriers and the jobs of its warps. It has no interpreter: the course compiles Gluon kernels "
         "for sm_90 on any machine and runs them on a Hopper GPU (notebook 08).",
         patterns=(r"Gluon",), case_sensitive=True),
    Term("grouped GEMM",
         "Many independent matrix products in one launch: the tiles of every problem laid end to end and a fixed "
         "number of programs walking them (notebook 06, after Triton's tutorial 08, *the seed tutorial*).",
         patterns=(r"grouped GEMMs?",)),
    Term("grouped ordering",
         "The mapping from program id to tile that cuts the tile rows into groups of `GROUP_SIZE_M` and walks "
         "each group column by column, so that programs running at the same time read fewer distinct blocks of "
         "`A` and `B` (notebook 03, after Triton's matmul tutorial).",
         patterns=(r"grouped order(?:ing)?",), code=("GROUP_SIZE_M",)),
    Term("Hopper",
         "NVIDIA's GPU architecture of compute capability 9.0 (H100, H200). It brought TMA, wgmma and "
         "`setmaxnreg`. The notebooks run Hopper code only on such a GPU, and compile it for sm_90 anywhere.",
         patterns=(r"Hopper",), case_sensitive=True),
    Term("interpreter",
         "Triton's interpreter (`TRITON_INTERPRET=1`) runs `@triton.jit` functions on the CPU, one program after "
         "another, with numpy arrays in place of registers. The package switches it on when there is no CUDA GPU, "
         "or when `GEMM_KERNELS_INTERPRET=1` is set before it is imported (notebook 00).",
         patterns=(r"interpreter",)),
    Term("K loop",
         "The loop inside a GEMM program over blocks of the reduced dimension `K`: load a block of `A` and one of "
         "`B`, multiply them, add the product to the accumulator; the last block is masked (notebook 02).",
         patterns=(r"K loops?",), case_sensitive=True),
    Term("L2 cache",
         "The GPU's last-level cache, shared by all SMs (50 MiB on an H100). Programs that run at the same time "
         "and read the same block fetch it from DRAM once; the course's L2 model "
         "(`gemm_kernels.models.l2model`, a least-recently-used cache) counts those reads (notebook 03).",
         patterns=(r"L2(?: caches?)?",), case_sensitive=True),
    Term("L2 partition",
         "The notebooks treat the H100's 50 MiB L2 as two halves, each attached to half of the SMs and half of "
         "the memory controllers (NVIDIA's A100 whitepaper describes that GPU's L2 as two such partitions). A "
         "block read from both sides may then be held in both halves, so between 25 and 50 MiB hold distinct "
         "data: the L2 model is run with both. The halved model fits the counters measured at 4096³; that this "
         "duplication is the cause is a hypothesis (notebook 03).",
         patterns=(r"L2 partitions?", r"partitions? of the L2", r"two partitions"), case_sensitive=True),
    Term("launch grid",
         "The number of programs a kernel is launched with, `kernel[grid](...)`: a tuple of up to three sizes, or "
         "a function of the kernel's meta-parameters that returns one (notebook 00).",
         patterns=(r"launch grids?",)),
    Term("mask",
         "A block of booleans given to `tl.load` or `tl.store`: lanes where it is false are neither read nor "
         "written, and a masked load returns `other=` there. Without one, lanes past the edge of a matrix read or "
         "write the memory that follows it (notebook 01).",
         patterns=(r"masks?",), code=("mask=", "other=")),
    Term("mbarrier",
         "A 64-bit barrier object in shared memory that counts arrivals and, with TMA, the bytes it was told to "
         "expect. When the count is complete the barrier completes a *phase*; a wait names the parity (0 or 1) "
         "of the phase it waits for, the one bit the barrier remembers (notebooks 05 and 08).",
         patterns=(r"mbarriers?",), code=("mbarrier",)),
    Term("MoE",
         "Mixture of experts: a layer whose router sends each token to `top_k` of `E` experts; each expert "
         "multiplies its tokens by its own weights, one grouped GEMM whose sizes are decided at run time "
         "(notebooks 07 and 09).",
         patterns=(r"MoE", r"[Mm]ixture[- ]of[- ]experts"), case_sensitive=True),
    Term("offs",
         "The int32 row ends that `grouped_mm` takes, as `torch._grouped_mm` does: expert `e` owns rows "
         "`offs[e-1]:offs[e]` of `x` (expert 0 starts at row 0). Non-decreasing, `offs[-1] <= T`; an expert with "
         "no rows repeats the previous end; rows past `offs[-1]` belong to no expert (notebook 07).",
         code=("offs",)),
    Term("persistent kernel",
         "A kernel launched with at most one program per SM (`min(num_sms, tiles)`), each looping over tiles "
         "`pid, pid + NUM_PROGRAMS, ...` instead of computing one tile and exiting (notebook 05).",
         patterns=(r"persistent kernels?", r"persistent programs?")),
    Term("ping-pong and cooperative",
         "The two schedules of the warp-specialized kernel: in *ping-pong* each consumer warpgroup owns whole "
         "tiles, alternately, so one's epilogue runs under the other's main loop; in *cooperative* both work on "
         "every (twice as large) tile (notebook 08; the names come from CUTLASS).",
         patterns=(r"ping-pong",)),
    Term("pipelining",
         "Issuing the loads of later K blocks while the tensor cores work on the current one, through a ring of "
         "`num_stages` (in Gluon, `STAGES`) slots of shared memory (notebooks 05 and 08).",
         patterns=(r"software pipelining", r"pipelin(?:e|es|ed|ing)"), code=("num_stages",)),
    Term("program",
         "One instance of a Triton kernel in a launch, numbered by `tl.program_id` (its *pid*). All programs run "
         "the same code on different data; on a GPU each runs as one CTA (notebook 00).",
         patterns=(r"programs?",), code=("pid", "tl.program_id")),
    Term("PTX",
         "NVIDIA's virtual instruction set. Triton compiles a kernel to PTX, and `ptxas` turns PTX into SASS, the "
         "GPU's machine code; the compile view shows the PTX of kernels built for sm_90 on any machine "
         "(notebook 05).",
         patterns=(r"PTX", r"SASS"), case_sensitive=True),
    Term("row-major",
         "A storage order in which the elements of a row are neighbours (the column stride is 1), torch's default. "
         "In notebook 02 also the program order that fills a row of tiles before moving down.",
         patterns=(r"row-major",)),
    Term("setmaxnreg",
         "A Hopper PTX instruction with which a warpgroup gives registers back to the SM or claims more while the "
         "kernel runs: the producer of a warp-specialized kernel keeps few, the consumers many (notebook 08).",
         code=("setmaxnreg",)),
    Term("shared memory",
         "On-chip memory of an SM, shared by the warps of a CTA: 228 KiB per SM on an H100, at most 227 KiB for "
         "one CTA. Blocks wait there between their load and the tensor cores (notebooks 05 and 08).",
         patterns=(r"shared[- ]memory",)),
    Term("SM",
         "Streaming multiprocessor, one of the GPU's processors, with its own registers, shared memory and tensor "
         "cores; it runs one or more programs at a time. An H100 SXM has 132. The interpreter counts 4 "
         "(`gk.num_sms()`).",
         patterns=(r"SMs?",), case_sensitive=True),
    Term("Stream-K",
         "Splitting a GEMM's work by K iterations instead of whole tiles (Osama, Merrill, Cecka, Garland and Owens, "
         "PPoPP 2023). The course's `matmul_streamk` splits only the last tiles; programs hand partial sums over "
         "through a workspace and flags (notebook 05b).",
         patterns=(r"Stream-K",), case_sensitive=True),
    Term("stride",
         "How many elements to skip to move one step along a dimension: element `(i, j)` of a 2-D tensor is at "
         "`base + i * stride_0 + j * stride_1`. A transpose swaps the strides, no data moves (notebook 01).",
         patterns=(r"strides?",)),
    Term("swizzle",
         "A permutation of where data sits in shared memory. With the 128-byte swizzle, 16-byte chunk `c` of "
         "row `r` is stored at chunk position `c XOR (r mod 8)`, so that a column of chunks falls in 8 different "
         "places and the read has no bank conflict (notebooks 05 and 08).",
         patterns=(r"swizzl(?:e|es|ed|ing)",)),
    Term("tail",
         "The last wave of a launch when it is only partly full: SMs without a tile wait for the others "
         "(notebooks 05 and 05b).",
         patterns=(r"(?<!K\x20)tails?",)),  # not "the K tail" (the last, partial K block)
    Term("tensor core",
         "The units of an SM that multiply small matrix tiles in one instruction (`mma` before Hopper, `wgmma` on "
         "it). `tl.dot` compiles to them.",
         patterns=(r"tensor[- ]cores?",)),
    Term("tensor descriptor",
         "What a TMA copy reads: the base address, shape, strides and block shape of an array "
         "(`tl.make_tensor_descriptor`). The last stride must be 1, the base and the other strides multiples of "
         "16 bytes; lanes outside the shape are read as zeros and dropped on stores (notebook 05).",
         patterns=(r"tensor descriptors?",)),
    Term("tile",
         "The `BLOCK_M × BLOCK_N` part of `C` that one program computes at a time; `C` is a grid of tiles "
         "(notebook 02).",
         patterns=(r"tiles?",)),
    Term("TMA",
         "Tensor Memory Accelerator, Hopper's copy engine: one thread asks for a whole block described by a "
         "tensor descriptor, and the hardware moves it between global and shared memory and counts its bytes "
         "on an mbarrier as they land (notebook 05).",
         patterns=(r"TMA",), case_sensitive=True),
    Term("warp",
         "32 threads that an SM runs in lockstep, the unit of scheduling on an NVIDIA GPU.",
         patterns=(r"warps?",)),
    Term("warp specialization",
         "Giving the warps of one program different jobs: here a producer warp that only issues TMA loads and "
         "consumer warpgroups that only multiply and store, handing ring slots over through mbarriers "
         "(notebook 08).",
         patterns=(r"warp[- ]speciali[sz](?:ation|ed)",)),
    Term("warpgroup",
         "Four consecutive warps (128 threads): the unit that issues a wgmma on Hopper (notebooks 05 and 08).",
         patterns=(r"warpgroups?",)),
    Term("wave",
         "The programs that run at the same time. A launch with more programs than the GPU holds at once runs "
         "as a sequence of waves, `cdiv(programs, programs in flight)` of them; that count is a model, since the "
         "hardware starts the next program as soon as an SM has room (notebooks 03 and 05).",
         patterns=(r"waves?",)),
    Term("wgmma",
         "Hopper's warpgroup matrix multiply-accumulate (`wgmma.mma_async` in PTX): the four warps of a "
         "warpgroup multiply two tiles asynchronously, `B` always from shared memory, `A` from shared memory or "
         "registers; a later `wgmma.wait_group` waits for it (notebooks 05 and 08).",
         patterns=(r"wgmmas?",), code=("wgmma",)),
)


def glossary_markdown() -> str:
    """The glossary page (MyST markdown): one Sphinx ``glossary`` of every term, sorted."""
    lines = ["# Glossary", "",
             "The words the notebooks use, each in a few lines, with where the course explains it. The first use "
             "of each term on a page links here.", "",
             "```{glossary}", ":sorted:", ""]
    for term in TERMS:
        lines += [term.name, f"  {term.definition}", ""]
    lines += ["```", ""]
    return "\n".join(lines)
