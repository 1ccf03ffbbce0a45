"""Checks (run_checked, exercise checks) next to other threads and forks.

A checked run and an exercise check put process-wide hooks in place (the interpreter builder's
memory operations, ``kernel[grid]``, ``torch.empty``); they must act only in the thread that runs
the check: another thread's kernels ran through the check's bounds monitor (OutOfBounds from their
own ``k_loop_pointers``), and two overlapping checks that restored their patches out of order left
``torch.empty`` NaN-filling and ``kernel[grid]`` checked for the rest of the process.  A fork while
another thread is inside an interpreted launch left the child with a held launch lock (its first
launch hung).  Each test runs in a fresh process under a time limit, so a hang fails the test and a
broken patch cannot leak into the rest of the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

TIMEOUT = 240

_PRELUDE = '''
import os, sys, threading, time
import torch, triton, triton.language as tl
import gemm_kernels as gk
from triton.runtime.jit import JITFunction, KernelInterface
from triton.runtime.interpreter import interpreter_builder
from gemm_kernels.lab.checked import checked_launches, run_checked
from gemm_kernels.lab.exercises import _core, start_here

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)

@triton.jit
def through_pointer_array(ptrs, out_ptr, n, BLOCK: tl.constexpr):
    p = tl.load(ptrs + tl.program_id(0)).to(tl.pointer_type(tl.float32))
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.program_id(0) * BLOCK + offsets, tl.load(p + offsets, mask=offsets < n, other=0.0))

def process_state():
    """Everything a check patches, as it is now."""
    return (torch.empty, torch.empty_like, vars(KernelInterface)["__getitem__"], vars(JITFunction)["__call__"],
            sorted(k for k in vars(interpreter_builder) if k.startswith("create_")), triton.knobs.runtime.interpret)

def blocking_answer(entered, release):
    """A launch_stats answer that waits inside the check until released (then answers right)."""
    def launch_stats(n, block):
        entered.set()
        assert release.wait(60), "never released"
        return (n + block - 1) // block, ((n + block - 1) // block) * block - n
    return launch_stats

def plain_launches_work():
    """What a thread that runs no check sees: torch.empty not poisoned, kernel[grid] not checked."""
    big = torch.empty(16 * 2**20)  # 64 MiB: fresh pages from the OS, zero unless a check NaN-fills them
    assert not torch.isnan(big[0]) and not torch.isnan(big[-1]), "torch.empty NaN-filled outside a check"
    a, b = torch.randn(5), torch.randn(5)
    ptrs = torch.tensor([a.data_ptr(), b.data_ptr()], dtype=torch.int64)
    out = torch.zeros(2, 8)
    through_pointer_array[(2,)](ptrs, out, 5, BLOCK=8)  # checked, this would be OutOfBounds (unknown origin)
    assert torch.equal(out[0, :5], a) and torch.equal(out[1, :5], b)
'''


def _run(script: str, timeout: int = TIMEOUT, env: dict | None = None) -> subprocess.CompletedProcess:
    code = _PRELUDE + textwrap.dedent(script)
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "GEMM_KERNELS_AUTOTUNE": "0", **(env or {})})
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not finish in {timeout} s (a hang)")


def _write_and_run(tmp_path, script: str, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    """@triton.jit needs the kernels' source: run from a file."""
    path = tmp_path / "script.py"
    path.write_text(_PRELUDE + textwrap.dedent(script))
    try:
        return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "GEMM_KERNELS_AUTOTUNE": "0"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not finish in {timeout} s (a hang)")


def _ok(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out.stdout


def test_a_checked_run_in_one_thread_leaves_another_threads_kernels_alone(tmp_path):
    """run_checked in a loop in one thread, the package's matmul in another: matmul's loads never
    go through the checked run's bounds monitor (they did: OutOfBounds in k_loop_pointers)."""
    out = _write_and_run(tmp_path, '''
        errors, stop = [], threading.Event()
        def checking():
            x, y, out = torch.randn(4096), torch.randn(4096), torch.zeros(4096)
            try:
                while not stop.is_set():
                    run_checked(add_kernel, (64,), x, y, out, 4096, BLOCK=64)
                    assert torch.equal(out, x + y)
            except Exception as e:
                errors.append(("checker", repr(e)[:400]))
        def plain():
            try:
                for i in range(6):
                    a, b = torch.randn(40, 48), torch.randn(48, 33)
                    torch.testing.assert_close(gk.matmul(a, b), a @ b, atol=1e-3, rtol=1e-3)
            except Exception as e:
                errors.append(("plain", repr(e)[:400]))
        before = process_state()
        threads = [threading.Thread(target=checking), threading.Thread(target=plain)]
        for t in threads: t.start()
        threads[1].join(); stop.set(); threads[0].join()
        assert not errors, errors
        assert process_state() == before
        print("ok")
    ''')
    assert _ok(out).strip() == "ok"


def test_an_exercise_check_in_one_thread_leaves_another_thread_unpatched(tmp_path):
    """While thread A is inside an exercise check, thread B's torch.empty is not NaN-filled and its
    kernel[grid] launches are plain ones (a pointer-array kernel would be stopped if checked)."""
    out = _write_and_run(tmp_path, '''
        before = process_state()
        entered, release, results = threading.Event(), threading.Event(), []
        a = threading.Thread(target=lambda: results.append(start_here.check_launch_stats(blocking_answer(entered, release))))
        a.start()
        assert entered.wait(60)
        failure = []
        def other():
            try:
                plain_launches_work()
            except BaseException as e:
                failure.append(repr(e)[:500])
        b = threading.Thread(target=other); b.start(); b.join()
        release.set(); a.join()
        assert not failure, failure
        assert results[0].status == "correct", str(results[0])
        assert process_state() == before
        plain_launches_work()
        print("ok")
    ''')
    assert _ok(out).strip() == "ok"


def test_overlapping_checks_in_two_threads_leave_the_process_as_it_was(tmp_path):
    """A enters, B enters, A leaves, B leaves: afterwards nothing is patched (the second check
    used to restore the first one's patches: torch.empty NaN-filled and kernel[grid] checked
    for the rest of the process)."""
    out = _write_and_run(tmp_path, '''
        before = process_state()
        events = [(threading.Event(), threading.Event()) for _ in range(2)]
        results = {}
        def run(i):
            results[i] = start_here.check_launch_stats(blocking_answer(*events[i]))
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        threads[0].start(); assert events[0][0].wait(60)
        threads[1].start(); assert events[1][0].wait(60)
        events[0][1].set(); threads[0].join()
        events[1][1].set(); threads[1].join()
        assert [results[i].status for i in range(2)] == ["correct", "correct"], results
        assert process_state() == before, (process_state(), before)
        plain_launches_work()
        print("ok")
    ''')
    assert _ok(out).strip() == "ok"


def test_any_order_of_entering_and_leaving_checks_restores_everything(tmp_path):
    """The patches' context managers entered and left out of order, in one thread and across
    threads: every interleaving leaves the process exactly as before."""
    out = _write_and_run(tmp_path, '''
        import itertools
        before = process_state()
        def managers():
            return [_core.poisoned_empty(), checked_launches(), _core.poisoned_empty(), checked_launches()]
        for order in itertools.permutations(range(4)):
            cms = managers()
            for cm in cms:
                cm.__enter__()
            for i in order:
                cms[i].__exit__(None, None, None)
            assert process_state() == before, order
        # across threads: A enters, B enters, A exits, B exits
        gates = [threading.Event() for _ in range(4)]
        def hold(i, cm):
            with cm:
                gates[i].set(); gates[i + 2].wait(60)
        ts = [threading.Thread(target=hold, args=(0, _core.poisoned_empty())),
              threading.Thread(target=hold, args=(1, _core.poisoned_empty()))]
        ts[0].start(); gates[0].wait(60); ts[1].start(); gates[1].wait(60)
        gates[2].set(); ts[0].join(); gates[3].set(); ts[1].join()
        assert process_state() == before
        plain_launches_work()
        print("ok")
    ''')
    assert _ok(out).strip() == "ok"


def test_a_check_still_checks_its_own_launches_while_another_thread_launches(tmp_path):
    """The thread-local hooks still act in the checking thread: a missing mask is stopped."""
    out = _write_and_run(tmp_path, '''
        @triton.jit
        def unmasked(x_ptr, out_ptr, BLOCK: tl.constexpr):
            offsets = tl.arange(0, BLOCK)
            tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))
        stop, errors = threading.Event(), []
        def plain():
            while not stop.is_set():
                try:
                    plain_launches_work()
                except Exception as e:
                    errors.append(repr(e)[:300]); return
        t = threading.Thread(target=plain); t.start()
        try:
            for _ in range(5):
                try:
                    with checked_launches():
                        unmasked[(1,)](torch.randn(5), torch.zeros(5), BLOCK=8)
                except gk.OutOfBounds as e:
                    assert "load through x_ptr" in str(e)
                else:
                    raise AssertionError("an unmasked load past the end was not stopped")
        finally:
            stop.set(); t.join()
        assert not errors, errors
        print("ok")
    ''')
    assert _ok(out).strip() == "ok"


def _fork_script(how: str) -> str:
    return f'''
        import multiprocessing
        entered, release = threading.Event(), threading.Event()
        def hold(*args, **kwargs):  # a pre-run hook: runs inside the launch, with the launch lock held
            entered.set(); release.wait(60)
        x, y, out = torch.randn(64), torch.randn(64), torch.zeros(64)
        slow = triton.jit(add_kernel.fn)  # a second kernel object, so the hook stays on this one
        slow.add_pre_run_hook(hold)
        t = threading.Thread(target=lambda: slow[(1,)](x, y, out, 64, BLOCK=64)); t.start()
        assert entered.wait(60)

        def child_work():
            a, b = torch.randn(20, 24), torch.randn(24, 9)
            torch.testing.assert_close(gk.matmul(a, b), a @ b, atol=1e-3, rtol=1e-3)
            c = torch.zeros(64)
            run_checked(add_kernel, (1,), x, y, c, 64, BLOCK=64)
            assert torch.equal(c, x + y)

        if {how!r} == "os.fork":
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    child_work(); code = 0
                finally:
                    os._exit(code)
            deadline = time.time() + 45
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if time.time() > deadline:
                    os.kill(pid, 9); os.waitpid(pid, 0)
                    release.set(); t.join()
                    raise SystemExit("the forked child hung on its first launch")
                time.sleep(0.05)
            exitcode = os.waitstatus_to_exitcode(status)
        else:
            p = multiprocessing.get_context("fork").Process(target=child_work)
            p.start(); p.join(45)
            if p.is_alive():
                p.kill(); p.join()
                release.set(); t.join()
                raise SystemExit("the forked child hung on its first launch")
            exitcode = p.exitcode
        release.set(); t.join()
        assert torch.equal(out, x + y)
        assert exitcode == 0, exitcode
        print("ok")
    '''


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("how", ["os.fork", "multiprocessing"])
def test_a_fork_during_another_threads_launch_gives_a_child_that_can_launch(tmp_path, how):
    import gemm_kernels

    if not gemm_kernels.interpreted():
        pytest.skip("the launch lock is the interpreter's")
    out = _write_and_run(tmp_path, _fork_script(how))
    assert _ok(out).strip().endswith("ok")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_during_another_threads_check_gives_a_child_without_its_patches(tmp_path):
    """A child forked while another thread is inside an exercise check: that thread is not in the
    child, so the child must not inherit its NaN-filling torch.empty or its checked kernel[grid]."""
    out = _write_and_run(tmp_path, '''
        before = process_state()
        entered, release, results = threading.Event(), threading.Event(), []
        a = threading.Thread(target=lambda: results.append(start_here.check_launch_stats(blocking_answer(entered, release))))
        a.start()
        assert entered.wait(60)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                assert process_state() == before, (process_state(), before)
                plain_launches_work()
                code = 0
            finally:
                os._exit(code)
        deadline = time.time() + 45
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.time() > deadline:
                os.kill(pid, 9); os.waitpid(pid, 0); status = -1
                break
            time.sleep(0.05)
        release.set(); a.join()
        assert status != -1, "the forked child hung"
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert results[0].status == "correct" and process_state() == before
        print("ok")
    ''')
    assert _ok(out).strip().endswith("ok")
