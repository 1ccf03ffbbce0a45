"""The first call of a new shape (issue 51): the tuning key buckets M (``configs.row_bucket``),
tuned picks are kept on disk across processes (``kernels.tuning_cache``), and the kernels that
need not specialise on M do not.  On a CPU the autotuner is forced on with a stand-in timer (as
tests/test_configs.py does); the GPU tests run the real launchers with autotuning on and off."""

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
import triton

from gemm_kernels import runtime
from gemm_kernels.kernels import configs, tuning_cache
from gemm_kernels.kernels.matmul import matmul_ref
from gemm_kernels.testing import assert_close

#: the GPU config lists of the kernels whose key holds M (matmul's has persistent's tiles)
LISTS = {"splitk": configs.splitk_configs, "persistent": configs.persistent_configs, "tma": configs.tma_configs,
         "streamk": configs.streamk_configs, "fp8": configs.fp8_configs}


# ----------------------------------------------------------------------------- the bucket rule
@pytest.mark.parametrize("kind", LISTS)
def test_a_bucket_of_few_rows_keeps_every_configs_count_of_tile_rows(kind):
    """Up to 8 granules, every M of a bucket gives each config of the list the same
    ``cdiv(M, BLOCK_M)``: the timing differs only by the rows' own work."""
    blocks = sorted({c.kwargs["BLOCK_M"] for c in LISTS[kind](gpu=True)})
    granule = blocks[0]
    assert all(b % granule == 0 for b in blocks)
    buckets: dict = {}
    for M in range(1, 8 * granule + 1):
        counts = tuple(-(-M // b) for b in blocks)
        assert buckets.setdefault(configs.row_bucket(M, granule), counts) == counts, M


def test_buckets_above_eight_granules_span_at_most_a_quarter():
    granule, members = 64, {}
    for M in range(1, 70_000):
        top = configs.row_bucket(M, granule)
        assert top >= M and top % granule == 0
        members.setdefault(top, []).append(M)
    assert configs.row_bucket(8 * granule, granule) == 8 * granule
    for top, ms in members.items():
        assert ms == list(range(ms[0], ms[-1] + 1))  # a bucket is a range of M
        if ms[0] > 8 * granule:
            assert top - ms[0] + 1 <= ms[0] / configs.ROW_BUCKETS_PER_OCTAVE
    # a token count from 1 to 8192 meets few buckets: 8 of one granule, then 4 per doubling
    assert len({configs.row_bucket(M, granule) for M in range(1, 8193)}) == 8 + 4 * 4


def test_the_tuning_key_holds_the_bucket_not_m():
    from gemm_kernels.kernels.persistent import _tma_tuned

    granule = min(c.kwargs["BLOCK_M"] for c in _tma_tuned.configs)
    assert _tma_tuned.row_granule == granule
    key = lambda M: _tma_tuned.tuning_key(M=M, N=256, K=512, GROUPED=True, HAS_BIAS=False, ACTIVATION=None,  # noqa: E731
                                          A_COL_MAJOR=False, B_COL_MAJOR=True)
    assert key(5 * granule + 1) == key(6 * granule) != key(6 * granule + 1)
    assert key(5 * granule + 1)[0] == 6 * granule


# ----------------------------------------------------------------------------- tuning, in memory and on disk
def _launch(tuned, M, dtype=torch.float16, N=45, K=29):
    from gemm_kernels.kernels.persistent import _persistent_args, _persistent_grid

    a = torch.randn(M, K).to(runtime.DEVICE, dtype)
    b = torch.randn(K, N).to(runtime.DEVICE, dtype)
    c = torch.full((M, N), float("nan"), dtype=dtype, device=runtime.DEVICE)
    args = _persistent_args(a, b, c, None, None, order="grouped", group_size_m=4, num_programs=3, activation=None)
    tuned[_persistent_grid(M, N, 3)](**args)
    assert_close(c, matmul_ref(a, b, out_dtype=torch.float64), dtype)


def _config(block_k):
    return triton.Config({**configs.INTERPRETER_BLOCKS, "BLOCK_K": block_k, **configs.PERSISTENT_LOOP_DEFAULTS},
                         num_warps=4, num_stages=1)


def _tuned(timed, monkeypatch, candidates=(32, 16)):
    """A TunedKernel of the persistent pointer kernel over ``candidates`` (BLOCK_K), autotuning
    forced on, timed by a stand-in that prefers BLOCK_K=16; its autotuner's runs are counted."""
    from gemm_kernels.kernels.persistent import _matmul_persistent_kernel, _persistent_tuned

    def fake_timer(kernel_call, quantiles=None):
        kernel_call()
        timed.append(1)
        return [1.0 if len(timed) % 2 == 0 else 2.0] * 3

    monkeypatch.setattr(runtime, "autotune_enabled", lambda: True)
    tuned = configs.TunedKernel(_matmul_persistent_kernel, [_config(bk) for bk in candidates],
                                key=_persistent_tuned.keys, do_bench=fake_timer)
    runs = []
    real_run = tuned.autotuner.run
    monkeypatch.setattr(tuned.autotuner, "run", lambda *a, **k: (runs.append(1), real_run(*a, **k))[1])
    return tuned, runs


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(tuning_cache.ENV, str(tmp_path))
    return tmp_path


def test_a_new_m_in_a_known_bucket_is_not_tuned(cache_dir, monkeypatch):
    tuned, runs = _tuned([], monkeypatch)
    granule = tuned.row_granule  # 32 in the interpreter's list
    for M, expected_runs in ((granule + 3, 1), (2 * granule, 1), (granule + 1, 1), (2 * granule + 1, 2),
                             (3 * granule, 2)):
        _launch(tuned, M)
        assert len(runs) == expected_runs, M
    assert len(tuned.chosen) == 2


def test_a_new_process_launches_the_pick_kept_on_disk_without_tuning(cache_dir, monkeypatch):
    timed = []
    first, runs = _tuned(timed, monkeypatch)
    _launch(first, 40)
    assert runs == [1] and len(timed) == 2
    (path,) = cache_dir.glob("*.json")
    data = json.loads(path.read_text())
    assert data["triton"] == triton.__version__ and data["gpu"] == runtime.gpu_name() and len(data["picks"]) == 1
    assert list(data["picks"].values())[0]["BLOCK_K"] == 16  # the faster candidate
    second, runs2 = _tuned(timed, monkeypatch)  # a fresh TunedKernel: what a new process builds
    for M in (40, 64, 33):  # one bucket
        _launch(second, M)
    assert runs2 == [] and len(timed) == 2
    assert [c.kwargs["BLOCK_K"] for c in second.chosen.values()] == [16]


def test_a_pick_the_list_no_longer_offers_is_tuned_again(cache_dir, monkeypatch):
    first, _ = _tuned([], monkeypatch)
    _launch(first, 40)
    (path,) = cache_dir.glob("*.json")
    data = json.loads(path.read_text())
    data["picks"] = {k: {**v, "BLOCK_K": 64} for k, v in data["picks"].items()}  # no candidate has BLOCK_K=64
    path.write_text(json.dumps(data))
    second, runs = _tuned([], monkeypatch)
    _launch(second, 40)
    assert runs == [1]


def test_another_config_list_or_kernel_source_is_another_file(cache_dir, monkeypatch):
    first, _ = _tuned([], monkeypatch)
    other, runs = _tuned([], monkeypatch, candidates=(32, 16, 64))
    _launch(first, 40)
    _launch(other, 40)
    assert runs == [1] and len(list(cache_dir.glob("*.json"))) == 2
    assert first.disk.path() != other.disk.path()


@pytest.mark.parametrize("content", [b"{not json", b"", json.dumps({"picks": [1, 2]}).encode(), b"[1]",
                                     b"\xff\xfe\x00", json.dumps({"picks": {"k": 3}}).encode()])
def test_a_corrupt_file_is_named_ignored_and_rewritten(content, cache_dir, monkeypatch):
    first, _ = _tuned([], monkeypatch)
    path = first.disk.path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    # a bad entry in a good mapping is dropped alone (adversarial round 4, D8), a bad file whole
    with pytest.warns(RuntimeWarning, match=f"(ignoring the tuning cache file|tuning cache entry of) {path}"):
        _launch(first, 40)
    assert len(json.loads(path.read_text())["picks"]) == 1  # rewritten with the new pick alone
    second, runs = _tuned([], monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _launch(second, 40)
    assert runs == []


def test_threads_tuning_at_once_never_tear_the_file_nor_lose_a_pick(cache_dir):
    """Adversarial round 7: each thread's writes went through one temporary name per process, so
    two threads wrote into one file (a reader saw invalid JSON; picks were lost).  Each write now
    has its own temporary, and threads of a process merge and write one at a time."""
    import threading

    from gemm_kernels.kernels.persistent import _matmul_persistent_kernel

    candidates = [_config(32), _config(16)]
    path = tuning_cache.DiskPicks(_matmul_persistent_kernel, candidates).path()
    stop, torn, failures = threading.Event(), [], []

    def writer(i):
        disk = tuning_cache.DiskPicks(_matmul_persistent_kernel, candidates)  # one per thread, as processes
        try:
            for j in range(40):
                disk.put((i * 1000 + j,), candidates[j % 2])
        except Exception as err:  # noqa: BLE001  (reported below)
            failures.append(err)

    def reader():
        while not stop.is_set():
            try:
                json.loads(path.read_text())
            except FileNotFoundError:
                pass
            except ValueError as err:
                torn.append(err)

    watcher = threading.Thread(target=reader)
    watcher.start()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a write that failed would warn
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    stop.set()
    watcher.join()
    assert failures == [] and torn == []
    assert len(json.loads(path.read_text())["picks"]) == 4 * 40
    assert not list(cache_dir.glob("*.tmp"))  # no temporary left behind


def test_processes_tuning_at_once_lose_no_pick(cache_dir):
    """Adversarial round 7 (review of the fix): three processes writing at once lost about half
    their picks (each merged into the file as it had read it); writers now take turns on a lock."""
    if sys.platform == "win32":
        pytest.skip("no fcntl: processes may lose picks there (documented)")
    script = (
        "import sys, triton\n"
        "from gemm_kernels.kernels import configs, tuning_cache\n"
        "from gemm_kernels.kernels.persistent import _matmul_persistent_kernel\n"
        "cfgs = [triton.Config({**configs.INTERPRETER_BLOCKS, 'BLOCK_K': k, **configs.PERSISTENT_LOOP_DEFAULTS},"
        " num_warps=4, num_stages=1) for k in (32, 16)]\n"
        "disk = tuning_cache.DiskPicks(_matmul_persistent_kernel, cfgs)\n"
        "i = int(sys.argv[1])\n"
        "for j in range(30):\n"
        "    disk.put((i * 1000 + j,), cfgs[j % 2])\n")
    env = {**os.environ, tuning_cache.ENV: str(cache_dir)}
    workers = [subprocess.Popen([sys.executable, "-c", script, str(i)], env=env) for i in range(3)]
    assert [w.wait(timeout=300) for w in workers] == [0, 0, 0]
    (path,) = cache_dir.glob("*.json")
    assert len(json.loads(path.read_text())["picks"]) == 3 * 30


def test_a_pick_that_cannot_be_written_is_not_kept_and_later_picks_are(cache_dir):
    """Adversarial round 7 (review of the fix): a config holding a set was kept in memory, and every
    later write of the file failed on it (silently, after the first warning)."""
    from gemm_kernels.kernels.persistent import _matmul_persistent_kernel

    good = [_config(32), _config(16)]
    disk = tuning_cache.DiskPicks(_matmul_persistent_kernel, good)
    disk.put((1,), good[0])
    with pytest.warns(RuntimeWarning, match="not keeping a pick whose values are not plain"):
        disk.put((2,), triton.Config({"BLOCK_M": 16, "X": {1, 2}}))
    disk.put((3,), good[1])
    again = tuning_cache.DiskPicks(_matmul_persistent_kernel, good)  # what a new process reads
    assert again.get((3,), good) is good[1] and again.get((1,), good) is good[0] and again.get((2,), good) is None


def test_an_entry_nested_deep_is_dropped_on_reading_and_the_next_write_works(cache_dir, monkeypatch):
    """Adversarial round 7: an entry nested 940 deep was kept (a dict), and a later write from a
    deep stack raised RecursionError out of the launch.  An entry that is not names to plain values
    is no config: dropped with the others' warning."""
    import sys

    first, _ = _tuned([], monkeypatch)
    path = first.disk.path()
    path.parent.mkdir(parents=True, exist_ok=True)
    depth = 940
    path.write_text('{"picks": {"x": {"a": ' + "[" * depth + "]" * depth + "}}}")
    with pytest.warns(RuntimeWarning, match=f"tuning cache entry of {path}"):
        assert first.disk.get((1,), first.configs) is None

    def nested(k):
        return nested(k - 1) if k else _launch(first, 40)
    limit = sys.getrecursionlimit()
    nested(min(60, limit // 4))
    picks = json.loads(path.read_text())["picks"]
    assert "x" not in picks and len(picks) == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_in_place_of_the_file_is_named_not_waited_on(cache_dir, monkeypatch):
    """A reader that opened a FIFO there would wait for a writer forever: refused by what it is."""
    first, _ = _tuned([], monkeypatch)
    path = first.disk.path()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    with pytest.warns(RuntimeWarning, match=f"ignoring the tuning cache file {path} .*a FIFO"):
        _launch(first, 40)


def test_an_unwritable_directory_is_named_once_and_picks_stay_in_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv(tuning_cache.ENV, str(blocker / "tuning"))  # under a file: cannot be made
    tuned, runs = _tuned([], monkeypatch)
    with pytest.warns(RuntimeWarning, match=f"cannot write the tuning cache file {blocker / 'tuning'}"):
        _launch(tuned, 40)
        _launch(tuned, 70)
    _launch(tuned, 41)
    assert runs == [1, 1]


def test_the_directory_follows_the_environment(tmp_path, monkeypatch):
    """A kernel built before the setting changed (the launchers' are built at import) follows it."""
    monkeypatch.setenv(tuning_cache.ENV, str(tmp_path / "one"))
    tuned, runs = _tuned([], monkeypatch)
    _launch(tuned, 40)
    monkeypatch.setenv(tuning_cache.ENV, str(tmp_path / "two"))
    tuned.chosen.clear()
    _launch(tuned, 40)  # not in "two": tuned again, kept there
    assert runs == [1, 1]
    assert [len(list((tmp_path / d).glob("*.json"))) for d in ("one", "two")] == [1, 1]
    monkeypatch.setenv(tuning_cache.ENV, str(tmp_path / "one"))
    tuned.chosen.clear()
    _launch(tuned, 40)  # back in "one": its pick
    assert runs == [1, 1]


@pytest.mark.parametrize("value", ["off", "0", "OFF"])
def test_the_cache_can_be_turned_off(value, tmp_path, monkeypatch):
    monkeypatch.setenv(tuning_cache.ENV, value)
    assert tuning_cache.cache_directory() is None
    tuned, _ = _tuned([], monkeypatch)
    _launch(tuned, 40)
    assert tuned.disk.path() is None


def test_the_default_directory_is_the_users_cache_on_a_gpu_only(tmp_path, monkeypatch):
    monkeypatch.delenv(tuning_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(runtime, "on_gpu", lambda: True)
    assert tuning_cache.cache_directory() == tmp_path / "gemm_kernels" / "tuning"
    monkeypatch.setattr(runtime, "on_gpu", lambda: False)
    assert tuning_cache.cache_directory() is None


def test_picks_of_another_search_mode_are_kept_apart(cache_dir, monkeypatch):
    """A pick of the small search (GEMM_KERNELS_AUTOTUNE=small) is not the full search's."""
    first, _ = _tuned([], monkeypatch)
    _launch(first, 40)
    (key,) = first.chosen
    candidates = [_config(bk) for bk in (32, 16)]
    assert first.disk.get(key, candidates).kwargs["BLOCK_K"] == 16
    monkeypatch.setenv(runtime.AUTOTUNE_ENV, "small")
    assert first.disk.get(key, candidates) is None
    first.disk.put(key, candidates[0])
    assert first.disk.get(key, candidates) is candidates[0]
    monkeypatch.setenv(runtime.AUTOTUNE_ENV, "1")
    assert first.disk.get(key, candidates) is candidates[1]
    assert len(json.loads(first.disk.path().read_text())["picks"]) == 2


def test_two_processes_share_the_file(cache_dir):
    """Each process tunes one bucket; the file ends with both picks (each write merges)."""
    script = (
        "import sys, torch; sys.path.insert(0, 'tests'); import pytest\n"
        "import test_tuning_cache as t\n"
        "mp = pytest.MonkeyPatch()\n"
        "tuned, runs = t._tuned([], mp)\n"
        "t._launch(tuned, int(sys.argv[1]))\n"
        "print(len(runs))\n")
    for M, runs in ((40, "1"), (100, "1"), (41, "0")):
        out = subprocess.run([sys.executable, "-c", script, str(M)], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split()[-1] == runs, M
    (path,) = cache_dir.glob("*.json")
    assert len(json.loads(path.read_text())["picks"]) == 2


# ----------------------------------------------------------------------------- the same file in every process
#: a process that builds Hopper code on this CPU (``GEMM_KERNELS_COMPILE_ONLY``): its kernels are
#: JITFunctions with Triton's ``cache_key``, as on a GPU (the interpreter's stand-ins have none)
_HASHING_PROCESS = r"""
import collections, json, sys
import torch
from gemm_kernels import runtime
from gemm_kernels.kernels import configs, fp8, grouped, matmul, moe, moe_wgrad, persistent, splitk, streamk
order, M = sys.argv[1], int(sys.argv[2])
tuned = {f"{m.__name__}.{n}": v for m in (fp8, grouped, matmul, moe, moe_wgrad, persistent, splitk, streamk)
         for n, v in vars(m).items() if isinstance(v, configs.TunedKernel)}
TMA = "gemm_kernels.kernels.persistent._tma_tuned"
rest = sorted(n for n in tuned if n != TMA)
names = [*rest, TMA] if order == "tma_last" else [TMA, *rest[::-1]]  # the order Triton hashes them in
files = {n: tuned[n].disk.path().name for n in names}
twice = {n: [g for g, k in collections.Counter(g for g, _ in t.fn.used_global_vals).items() if k > 1]
         for n, t in tuned.items()}
# matmul_tma over its GPU list, the tuning step a stand-in that picks the last candidate
tma = configs.TunedKernel(persistent._matmul_tma_kernel, configs.tma_configs(gpu=True), key=persistent._tma_tuned.keys)
runtime.autotune_enabled = lambda: True
runs = []
def stand_in(*args, **kwargs):
    runs.append(1)
    tma.autotuner.best_config = tma.configs[-1]
tma.autotuner.run = stand_in
a, w, c = (torch.empty(rows, 4096, dtype=torch.float16) for rows in (M, 4096, M))
args = persistent._tma_args(a, w.t(), c, None, None, order="grouped", group_size_m=8, num_programs=132, activation=None)
pick = tma.config_for(persistent._persistent_grid(M, 4096, 132), **args)
print(json.dumps({"files": files, "constexpr_names_twice": {n: g for n, g in twice.items() if g},
                  "tma_file": tma.disk.path().name, "runs": len(runs), "pick": pick.all_kwargs()}))
"""


def _hashing_process(order, M, cache_dir, seed):
    import os

    env = {**os.environ, "GEMM_KERNELS_COMPILE_ONLY": "1", tuning_cache.ENV: str(cache_dir),
           "PYTHONHASHSEED": str(seed), "GEMM_KERNELS_TRITON_INTERNALS": "1"}
    env.pop("TRITON_INTERPRET", None)
    out = subprocess.run([sys.executable, "-c", _HASHING_PROCESS, order, str(M)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_pick_kept_by_one_process_is_read_by_another_whatever_it_hashed_first(cache_dir):
    """PERF_NOTES 40's miss: the parent launched other kernels before ``matmul_tma`` (tuned at
    M = 1000), the child launched it first (M = 951, same bucket) and tuned again.  Triton 3.6's
    ``cache_key`` of a kernel depended on which kernels the process had hashed before
    (``_triton_compat.hash_callees_first``), and with it the file's name.  Here every launcher's
    file is named alike in both processes (other hash seeds too), and the child reads the pick.
    Triton 3.6 also orders a kernel's constexpr globals by name, then by ``id()`` of their
    module's globals: no package kernel uses two of one name (Triton 3.9 orders by value too)."""
    parent = _hashing_process("tma_last", 1000, cache_dir, seed=1)
    child = _hashing_process("tma_first", 951, cache_dir, seed=2)
    assert parent["files"] == child["files"] and len(parent["files"]) == 14
    assert parent["tma_file"] == child["tma_file"]
    assert (parent["runs"], child["runs"]) == (1, 0)
    assert child["pick"] == parent["pick"] == configs.tma_configs(gpu=True)[-1].all_kwargs()
    assert len(list(cache_dir.glob("*.json"))) == 1
    assert parent["constexpr_names_twice"] == child["constexpr_names_twice"] == {}


# ----------------------------------------------------------------------------- specialisation on M
def specialises_m(kernel) -> bool:
    """Whether Triton specialises ``kernel`` on M (a JIT function's parameters, or the
    interpreter's stand-in's jit options)."""
    params = getattr(kernel, "params", None)
    if params is not None:
        return not next(p for p in params if p.name == "M").do_not_specialize
    return "M" not in (kernel.kwargs.get("do_not_specialize") or ())


def test_kernels_that_read_rows_through_tma_or_along_k_do_not_specialise_on_m():
    from gemm_kernels.kernels import matmul, persistent, splitk, streamk

    for kernel in (persistent._matmul_tma_kernel, streamk._matmul_streamk_kernel, matmul._matmul_kernel,
                   splitk._matmul_splitk_kernel):
        assert not specialises_m(kernel), kernel
    for tuned in (matmul._matmul_tuned_rows_specialised, splitk._splitk_tuned_rows_specialised):
        assert specialises_m(tuned.fn)
        assert tuned.disk._variant == "-rows"


def test_the_unsplit_ws_kernel_does_not_specialise_on_m():
    """Split units keep M specialised: with Triton 3.9 their code spills 8 bytes without it."""
    pytest.importorskip("triton.experimental.gluon")
    from gemm_kernels.kernels import matmul_ws

    assert not specialises_m(matmul_ws._matmul_ws_kernel_any_m)
    assert specialises_m(matmul_ws._matmul_ws_kernel)
    assert matmul_ws._matmul_ws_kernel_any_m.fn is matmul_ws._matmul_ws_kernel.fn


def test_column_major_a_takes_the_kernel_that_specialises_on_m():
    a = torch.empty(64, 32)
    assert not configs.column_major_rows(a)
    assert configs.column_major_rows(torch.empty(32, 64).t())
    assert not configs.column_major_rows(torch.empty(1, 64).t()[:1])  # one row: nothing runs along M


@pytest.mark.parametrize("a_layout", ["rows", "columns"])
@pytest.mark.parametrize("launcher", ["matmul", "matmul_splitk"])
def test_pointer_launchers_run_both_kernels_right(launcher, a_layout):
    import gemm_kernels as gk

    for M in (17, 32):
        a = torch.randn(M, 40) if a_layout == "rows" else torch.randn(40, M).t()
        a, b = a.to(runtime.DEVICE, torch.float16), torch.randn(40, 24).to(runtime.DEVICE, torch.float16)
        assert_close(getattr(gk, launcher)(a, b), matmul_ref(a, b, out_dtype=torch.float64), torch.float16)


# ----------------------------------------------------------------------------- on a GPU
def _compiled(kernel) -> int:
    """Compiled variants of ``kernel`` in this process (Triton's per-device kernel caches)."""
    return sum(len(cache[0]) for cache in kernel.device_caches.values())


@pytest.mark.gpu
@pytest.mark.parametrize("autotune", ["1", "0"])
@pytest.mark.parametrize("launcher", ["matmul_auto", "matmul", "matmul_splitk", "matmul_tma", "matmul_ws"])
def test_gpu_new_ms_of_one_bucket_and_of_new_buckets_are_right(launcher, autotune, tmp_path, monkeypatch):
    """Bucketed keys and unspecialised M on the real kernels, autotuning on and off: every M is
    right (NaN-poisoned C, float64 reference), A row- and column-major, checked and kept calls."""
    import gemm_kernels as gk

    if launcher in ("matmul_tma", "matmul_ws") and not runtime.supports_tma():
        pytest.skip("needs TMA")
    if launcher == "matmul_ws" and not runtime.supports_wgmma():
        pytest.skip("needs sm_90")
    monkeypatch.setenv(runtime.AUTOTUNE_ENV, autotune)
    monkeypatch.setenv(tuning_cache.ENV, str(tmp_path))
    call = getattr(gk, launcher)
    N, K = 200, 264
    w = torch.randn(N, K, device=runtime.DEVICE, dtype=torch.float16)
    for M in (130, 150, 191, 192, 129, 1, 7, 16, 640, 600, 577):  # buckets 192, 64 and 640, ragged and aligned
        rows = -(-M // 8) * 8  # column-major A with 16-byte aligned columns: TMA reads it too
        for a in (torch.randn(M, K, device=runtime.DEVICE, dtype=torch.float16),
                  torch.randn(K, rows, device=runtime.DEVICE, dtype=torch.float16)[:, :M].t()):
            for _ in range(2):  # the checked call, then the kept one
                out = call(a, w.t())
                assert_close(out, matmul_ref(a, w.t(), out_dtype=torch.float64), torch.float16)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["matmul", "matmul_tma", "matmul_splitk"])
def test_gpu_a_new_m_in_a_tuned_bucket_neither_tunes_nor_compiles(name, tmp_path, monkeypatch):
    """Autotuning on: the first M of a bucket tunes; other Ms of it (aligned to 16 or not, so a
    kernel specialised on M would compile again) ask no autotuner and compile nothing."""
    import gemm_kernels as gk
    from gemm_kernels.kernels import matmul, persistent, splitk

    if name == "matmul_tma" and not runtime.supports_tma():
        pytest.skip("needs TMA")
    monkeypatch.setenv(runtime.AUTOTUNE_ENV, "1")
    monkeypatch.setenv(tuning_cache.ENV, str(tmp_path))
    tuned = {"matmul": matmul._matmul_tuned, "matmul_tma": persistent._tma_tuned, "matmul_splitk": splitk._splitk_tuned}[name]
    N, K = 136, 2056
    w = torch.randn(N, K, device=runtime.DEVICE, dtype=torch.float16)
    call = lambda M: getattr(gk, name)(torch.randn(M, K, device=runtime.DEVICE, dtype=torch.float16), w.t())  # noqa: E731
    call(257)  # bucket 320 (granule 64): tuned and compiled here
    compiled = _compiled(tuned.fn)
    monkeypatch.setattr(tuned.autotuner, "run", lambda *a, **k: pytest.fail("a known bucket was tuned again"))
    for M in (300, 320, 288, 259):
        a = torch.randn(M, K, device=runtime.DEVICE, dtype=torch.float16)
        assert_close(getattr(gk, name)(a, w.t()), matmul_ref(a, w.t(), out_dtype=torch.float64), torch.float16)
    assert _compiled(tuned.fn) == compiled
