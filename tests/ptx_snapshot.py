"""Snapshot the PTX of every compile-view example, normalised, to compare two versions of the package.

    python tests/ptx_snapshot.py DIR                 # writes DIR/<example>_sm<cap>.ptx
    python tests/ptx_snapshot.py --compare OLD NEW   # per example: identical / different

Run the first form from each checkout (e.g. `git worktree add /tmp/before <rev>` and run it there
with PYTHONPATH=/tmp/before).  Normalised: the debug sections, .loc/.file lines and $L__tmp labels
are dropped and register numbers erased, so a refactor that only moves code between helpers
compares equal while any changed instruction shows.  Works without a GPU.
"""

import collections
import pathlib
import re
import sys


def normalise(ptx: str) -> list[str]:
    out = []
    for line in re.split(r"\.section\s*\.debug", ptx)[0].splitlines():
        t = line.strip()
        if not t or t.startswith((".loc", ".file", "//")) or re.match(r"\$L__tmp\d+:", t):
            continue
        t = re.sub(r"%(r|rd|p|f|fd|h|hh|rs|b)\d+", r"%\1", t)
        out.append(re.sub(r"\$L__\w+", "$L", t))
    return out


def snapshot(directory: pathlib.Path) -> None:
    import gemm_kernels

    if (pathlib.Path(gemm_kernels.__file__).parent / "lab" / "compile_view.py").exists():
        from gemm_kernels.lab.compile_view import compile_many
        try:
            from gemm_kernels.lab.compile_examples import registered_examples
        except ImportError:  # commits where compile_view still imported the examples
            from gemm_kernels.lab.compile_view import registered_examples
        examples = [(ex, cap) for ex in registered_examples() for cap in ex.targets]
        views = compile_many([ex.request(cap) for ex, cap in examples])
    else:  # the flat layout before gemm_kernels/lab existed
        from gemm_kernels.compile_view import registered_examples
        examples = [(ex, cap) for ex in registered_examples() for cap in ex.targets]
        views = [ex.compile(cap) for ex, cap in examples]
    directory.mkdir(parents=True, exist_ok=True)
    for (ex, cap), view in zip(examples, views):
        name = re.sub(r"[^A-Za-z0-9_.,\[\]^-]", "", ex.name) + f"_sm{cap}.ptx"
        (directory / name).write_text("\n".join(normalise(view.ptx)) + "\n")
        print(name)


def compare(old: pathlib.Path, new: pathlib.Path) -> int:
    differ = 0
    for path in sorted(new.glob("*.ptx")):
        before = old / path.name
        if not before.exists():
            print(f"{path.name}: new example")
            continue
        a, b = before.read_text().splitlines(), path.read_text().splitlines()
        if a == b:
            verdict = f"identical ({len(b)} lines)"
        elif collections.Counter(a) == collections.Counter(b):
            verdict = "same instructions, in another order"
        else:
            differ += 1
            verdict = f"DIFFERENT ({len(a)} -> {len(b)} lines)"
        print(f"{path.name}: {verdict}")
    return differ


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(1 if compare(pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])) else 0)
    snapshot(pathlib.Path(sys.argv[1]))
