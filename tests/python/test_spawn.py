"""lazytpu.spawn: workers through lazytpu-run, collectives, failures.

Worker functions are module-level (spawn pickles them by reference). Each
spawn starts Python + torch per worker, so the tests use few processes.
"""
import os
import signal
import time

import pytest
import torch

import lazytpu
import lazytpu as lsp


# ------------------------------------------------------------ workers ----

def _host_collectives(index, n):
    assert lazytpu.get_ordinal() == index and lazytpu.world_size() == n
    assert lsp.rendezvous("hello", b"p%d" % index) == [b"p%d" % k for k in range(n)]
    assert lsp.mesh_reduce("sum", index + 1, sum) == n * (n + 1) // 2
    assert lsp.mesh_reduce("tensors", torch.full((2,), float(index)),
                           lambda xs: torch.stack(xs).sum(0)).tolist() == [n * (n - 1) / 2] * 2

    x = torch.arange(5, dtype=torch.float32) + index
    want = torch.arange(5, dtype=torch.float32) * n + n * (n - 1) / 2
    assert torch.allclose(lsp.all_reduce("sum", x, scale=0.5), want * 0.5)
    assert lsp.all_reduce("max", torch.tensor([index, -index])).tolist() == [n - 1, 0]
    a, b = torch.ones(3) * index, torch.ones(2, 2, dtype=torch.float32)
    lsp.all_reduce(lsp.REDUCE_SUM, [a, b], scale=1.0 / n)      # in place
    assert torch.allclose(a, torch.full((3,), (n - 1) / 2)) and torch.allclose(b, torch.ones(2, 2))

    g = lsp.all_gather(torch.tensor([[index, 10 * index]]), dim=1)
    assert g.tolist() == [[v for k in range(n) for v in (k, 10 * k)]]
    rs = lsp.reduce_scatter("sum", torch.arange(2 * n, dtype=torch.float64), 1.0, 0, n)
    assert rs.tolist() == [2.0 * index * n, (2.0 * index + 1) * n]
    assert lsp.broadcast(torch.tensor([index, 7]), root=n - 1).tolist() == [n - 1, 7]


def _device_collectives(index, n):
    dev = lazytpu.device()
    x = (torch.arange(6, dtype=torch.float32).reshape(2, 3) + index).to(dev)
    y = lsp.all_reduce("sum", x, scale=1.0 / n)
    assert y.device.type == dev.type
    want = torch.arange(6, dtype=torch.float32).reshape(2, 3) + (n - 1) / 2
    assert torch.allclose(y.cpu(), want)
    g = lsp.all_gather(torch.tensor([index]).to(dev))
    assert g.cpu().tolist() == list(range(n))
    p = torch.nn.Parameter((torch.ones(3) * index).to(dev))
    m = torch.nn.Module()
    m.p = p
    lsp.broadcast_master_param(m)
    assert m.p.cpu().tolist() == [0.0, 0.0, 0.0]


def _expected(kind, vals, dtype):
    """Reduction of per-ordinal CPU tensors computed with torch."""
    st = torch.stack([v.double() if dtype.is_floating_point else v.long() for v in vals])
    if kind == "sum":
        r = st.sum(0)
    elif kind == "mul":
        r = st.prod(0)
    elif kind == "min":
        r = st.min(0).values
    elif kind == "max":
        r = st.max(0).values
    elif dtype == torch.bool or dtype.is_floating_point:
        b = st != 0
        r = b.all(0) if kind == "and" else b.any(0)
    else:
        r = st[0]
        for v in st[1:]:
            r = (r & v) if kind == "and" else (r | v)
    return r


def _value(index, dtype):
    base = torch.tensor([1.0, -2.0, 3.0, 0.0, 5.0, 2.0]) + index
    if dtype == torch.bool:
        return (base.long() % 2) == 1
    return base.to(dtype)


def _device_reduce_all_types(index, n):
    """torch.ops.lazytpu.all_reduce on device tensors: every reduce type and
    dtype, checked against torch on every ordinal's values."""
    dev = lazytpu.device()
    for dtype in (torch.float32, torch.bfloat16, torch.float64, torch.int64,
                  torch.int32, torch.bool):
        vals = [_value(k, dtype) for k in range(n)]
        for kind in ("sum", "mul", "min", "max", "and", "or"):
            if dtype == torch.bool and kind in ("sum", "mul"):
                continue
            got = lsp.all_reduce(kind, _value(index, dtype).to(dev))
            assert got.device == dev
            want = _expected(kind, vals, dtype)
            g = got.cpu()
            if dtype == torch.bool:
                assert g.tolist() == want.tolist(), (dtype, kind, g, want)
            elif dtype.is_floating_point:
                tol = 2e-2 if dtype == torch.bfloat16 else 1e-6
                assert torch.allclose(g.double(), want.double(), rtol=tol, atol=tol), \
                    (dtype, kind, g, want)
            else:
                assert g.tolist() == want.tolist(), (dtype, kind, g, want)
    # scale, gather along dim 1, scatter along dim 0, broadcast from the last
    x = (torch.arange(2 * n * 3, dtype=torch.float32).reshape(2 * n, 3) + index).to(dev)
    y = torch.ops.lazytpu.all_reduce(x, 0, 0.25).cpu()
    want = (torch.arange(2 * n * 3, dtype=torch.float32).reshape(2 * n, 3) * n
            + n * (n - 1) / 2) * 0.25
    assert torch.allclose(y, want)
    g = lsp.all_gather(torch.full((2, 1), float(index)).to(dev), dim=1).cpu()
    assert g.tolist() == [[float(k) for k in range(n)]] * 2
    rs = lsp.reduce_scatter("max", x, 1.0, 0, n).cpu()
    full = torch.arange(2 * n * 3, dtype=torch.float32).reshape(2 * n, 3) + (n - 1)
    assert torch.equal(rs, full[2 * index:2 * index + 2])
    b = lsp.broadcast(torch.tensor([index, 1]).to(dev), root=n - 1).cpu()
    assert b.tolist() == [n - 1, 1]
    # all of them were traced into graphs, none went through the host path
    assert lazytpu._C.counter_value("lazytpu::all_reduce") >= 30


def _dead_peer_in_graph(index):
    """Ordinal 1 dies while ordinal 0 runs an all_reduce inside a step's
    graph: ordinal 0's value read must fail, not hang."""
    dev = lazytpu.device()
    if index == 1:
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGKILL)
    y = torch.ops.lazytpu.all_reduce(torch.ones(4).to(dev), 0, 1.0)
    y.cpu()
    time.sleep(60)


def _hang(index):
    if index == 0:
        time.sleep(120)


def _raise_on_1(index):
    if index == 1:
        time.sleep(0.2)
        raise ValueError("boom from ordinal 1")
    time.sleep(60)


def _sigkill_on_2(index):
    if index == 2:
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def _sigkill_5_of_8(index, run):
    if index == 5:
        time.sleep(0.15 * (run % 4))
        os.kill(os.getpid(), signal.SIGKILL)
    lsp.rendezvous("ordinal 5 never comes")
    time.sleep(60)


def _record_done(index):
    pass


def _dies_before_rendezvous(index):
    if index == 1:
        os._exit(3)
    lsp.rendezvous("never-complete")   # must not hang
    time.sleep(60)


def _record(index, path):
    with open(path, "a") as f:
        f.write("%d\n" % index)


# -------------------------------------------------------------- tests ----

def test_host_collectives_four_workers():
    lsp.spawn(_host_collectives, args=(4,), nprocs=4)


def test_device_collectives_two_workers():
    lsp.spawn(_device_collectives, args=(2,), nprocs=2)


def test_device_collectives_every_reduce_type_and_dtype():
    lsp.spawn(_device_reduce_all_types, args=(3,), nprocs=3)


def _job(fn, nprocs, **kw):
    """Runs fn on nprocs workers; returns (the launcher's pid, the
    WorkerError raised or None). The job's shared-memory segment is
    /dev/shm/lazytpu-<launcher pid>-<hex>, and its workers are the processes
    whose LAZYTPU_SHM_NAME names it."""
    ctx = lsp.spawn(fn, nprocs=nprocs, join=False, **kw)
    try:
        ctx.join()
    except lsp.WorkerError as e:
        return ctx.proc.pid, e
    return ctx.proc.pid, None


def _segments(launcher):
    return sorted(f for f in os.listdir("/dev/shm")
                  if f.startswith("lazytpu-%d-" % launcher))


def _running_with(mark):
    """Processes (not zombies) whose environment contains the bytes mark."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read()
            with open("/proc/%s/stat" % pid, "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if mark in env and state != b"Z":
            found.append(int(pid))
    return found


def _workers(launcher):
    """Processes still running with the job's segment in their environment
    (its workers and anything they started)."""
    return _running_with(b"LAZYTPU_SHM_NAME=/lazytpu-%d-" % launcher)


def _assert_nothing_left(launcher):
    """The launcher has exited: its segment must be gone already; its
    workers (killed with their process groups) within a few seconds."""
    assert not _segments(launcher), _segments(launcher)
    deadline = time.time() + 5
    while _workers(launcher) and time.time() < deadline:
        time.sleep(0.1)
    assert not _workers(launcher), _workers(launcher)


def test_dead_peer_inside_a_graph_collective_fails_fast():
    t0 = time.time()
    launcher, e = _job(_dead_peer_in_graph, 2)
    assert e is not None and e.ordinal == 1
    assert "killed by signal 9" in str(e)
    assert time.time() - t0 < 40
    _assert_nothing_left(launcher)


def test_hang_past_timeout_is_stopped():
    t0 = time.time()
    launcher, e = _job(_hang, 2, timeout=3)
    assert e is not None and e.exit_code == 124
    assert "timed out after 3 s" in str(e)
    assert time.time() - t0 < 40
    _assert_nothing_left(launcher)


def test_exception_names_ordinal_and_cause():
    t0 = time.time()
    with pytest.raises(lsp.WorkerError) as e:
        lsp.spawn(_raise_on_1, nprocs=3)
    assert e.value.ordinal == 1
    assert e.value.exit_code == 1
    assert "worker 1 exited with code 1: ValueError: boom from ordinal 1" in str(e.value)
    assert time.time() - t0 < 50       # the sleeping peers were stopped


def test_killed_worker_names_signal():
    with pytest.raises(lsp.WorkerError) as e:
        lsp.spawn(_sigkill_on_2, nprocs=3)
    assert e.value.ordinal == 2
    assert "worker 2 died: killed by signal 9 (SIGKILL)" in str(e.value)


def test_failures_leave_no_segment_or_process():
    for fn in (_raise_on_1, _sigkill_on_2, _record_done):
        launcher, e = _job(fn, 3)
        assert (e is None) == (fn is _record_done), e
        _assert_nothing_left(launcher)


def test_sigkilled_worker_of_eight_leaves_nothing():
    """One of 8 workers SIGKILLs itself at a varying moment (peers still
    starting, or blocked in a rendezvous): after every run the job's
    segment is gone and none of its processes is left. Runs
    LAZYTPU_TEST_SIGKILL_RUNS times (default 2; 20 for the full check)."""
    runs = int(os.environ.get("LAZYTPU_TEST_SIGKILL_RUNS", "2"))
    for r in range(runs):
        launcher, e = _job(_sigkill_5_of_8, 8, args=(r,))
        assert e is not None and e.ordinal == 5, (r, e)
        assert "worker 5 died: killed by signal 9 (SIGKILL)" in str(e), (r, e)
        _assert_nothing_left(launcher)


def test_dead_peer_does_not_hang_the_others():
    t0 = time.time()
    with pytest.raises(lsp.WorkerError) as e:
        lsp.spawn(_dies_before_rendezvous, nprocs=2)
    assert e.value.ordinal == 1 and e.value.exit_code == 3
    assert time.time() - t0 < 50


def test_nprocs_1_runs_in_process(tmp_path):
    path = str(tmp_path / "ran")
    lsp.spawn(_record, args=(path,), nprocs=1)
    assert open(path).read() == "0\n"


def test_join_false_returns_context(tmp_path):
    path = str(tmp_path / "ran")
    ctx = lsp.spawn(_record, args=(path,), nprocs=2, join=False)
    assert ctx.join() is True
    assert sorted(open(path).read().split()) == ["0", "1"]


def test_world_of_one_collectives_outside_spawn():
    x = torch.tensor([1.0, 2.0])
    assert lsp.all_reduce("sum", x, scale=3.0).tolist() == [3.0, 6.0]
    assert lsp.rendezvous("solo", b"x") == [b"x"]
    assert lsp.mesh_reduce("solo", 5, sum) == 5
    with pytest.raises(ValueError):
        lsp.all_reduce("avg", x)


def test_limit_inflight_reports_the_error_of_the_step_it_waits_for(dev):
    """The bound after a step (lazytpu.world.limit_inflight: loaders and the
    framework integrations call it after each asynchronous step) waits for
    the step before the newest and reports that step's unread execution
    error, once, like a step boundary (the C call's report flag is no
    longer left to chance)."""
    try:
        lazytpu.wait_device_ops()          # nothing unread from earlier tests
    except (IndexError, RuntimeError):
        pass
    step = lazytpu._C.SYNC_LOADER_STEP
    x = torch.arange(12.0).reshape(4, 3).to(dev)
    bad = torch.index_select(x, 0, torch.tensor([1, 7]).to(dev))
    lazytpu._C.sync(-1, step, 0)           # step 1: fails on the core
    lazytpu.world.limit_inflight()         # nothing older than step 1 to wait for
    good = x * 2
    lazytpu._C.sync(-1, step, 0)           # step 2
    with pytest.raises(IndexError) as e:
        lazytpu.world.limit_inflight()     # waits for step 1
    assert "index_select: index 7 is out of range for dimension 0 of size 4" in str(e.value)
    lazytpu.world.limit_inflight()         # reported once
    lazytpu.wait_device_ops()
    assert torch.equal(good.cpu(), torch.arange(12.0).reshape(4, 3) * 2)
    with pytest.raises(IndexError):        # the poisoned value itself still raises
        bad.cpu()


def test_workers_get_the_parents_script_and_manager_key():
    """A library fn whose arguments hold objects of the script's classes and a
    multiprocessing.Manager queue (what Lightning's XLA launcher passes to
    xmp.spawn): the workers load the script and reach the parent's manager."""
    import subprocess
    import sys
    script = os.path.join(os.path.dirname(__file__), "scripts", "spawn_context.py")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    p = subprocess.run([sys.executable, script], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and "OK" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]


# A script that starts its workers at module level, with no
# `if __name__ == "__main__":` guard. Every process that loads it records
# its world's segment name (OUT.shm) when it is a worker; fn appends
# "fn <index>" to OUT; the parent prints "after spawn".
UNGUARDED = """
import os, sys
IMPORT

OUT = sys.argv[1]
if os.environ.get("LAZYTPU_SHM_NAME"):          # a worker loading this script
    with open(OUT + ".shm", "a") as f:
        f.write(os.environ["LAZYTPU_SHM_NAME"] + "\\n")


def fn(index, out):
    with open(out, "a") as f:
        f.write("fn %d\\n" % index)


CALL                                             # no `if __name__ == "__main__":`
print("after spawn", flush=True)
"""

_STARTS = {
    "lazytpu.spawn": ("import lazytpu", "lazytpu.spawn(fn, args=(OUT,), nprocs=2)"),
    "xmp.spawn": ("import torch_xla.distributed.xla_multiprocessing as xmp",
                  "xmp.spawn(fn, args=(OUT,))"),
    "torch_xla.launch": ("import torch_xla", "torch_xla.launch(fn, args=(OUT,))"),
}


def _script(tmp_path, start):
    imp, call = _STARTS[start]
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED.replace("IMPORT", imp).replace("CALL", call))
    return script


def _run_script(cmd, tmp_path):
    """Runs cmd (in tmp_path, with this tree's lazytpu and two CPU devices for
    torch_xla) with a marker in its environment; returns the completed
    process and the pids still running with the marker a few seconds after
    it exited (the parent, the launcher, the workers and their children all
    inherit it)."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XLA_", "PT_XLA", "PJRT_", "LAZYTPU_")) or k == "LAZYTPU_BIN_DIR"}
    env["PYTHONPATH"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                     "python")
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2", LT_TEST_UNGUARDED=str(tmp_path))
    p = subprocess.run([sys.executable if c == "python" else c for c in cmd], env=env,
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    mark = ("LT_TEST_UNGUARDED=%s\0" % tmp_path).encode()
    deadline = time.time() + 5
    while True:
        left = _running_with(mark)
        if not left or time.time() > deadline:
            return p, left
        time.sleep(0.1)


@pytest.mark.parametrize("start", sorted(_STARTS))
def test_spawn_at_module_level_without_main_guard_is_refused(tmp_path, start):
    """A script that starts its workers at module level: every worker runs
    the script's module code again to import fn, and reaches the spawn
    there. lazytpu used to run fn inline there and then once more (twice
    per worker); Python's multiprocessing and torch_xla 2.9 refuse it with
    a RuntimeError naming the `if __name__ == "__main__":` idiom, so does
    lazytpu: the run exits non-zero with that message, fn never runs, and
    neither the job's segment nor any of its processes is left. lazytpu.spawn
    from `python script.py`; xmp.spawn and torch_xla.launch from
    `python -m lazytpu script.py`."""
    script = _script(tmp_path, start)
    out = tmp_path / "ran.txt"
    cmd = ["python"] + ([] if start == "lazytpu.spawn" else ["-m", "lazytpu"])
    p, left = _run_script(cmd + [str(script), str(out)], tmp_path)
    log = "exit %d\n--- stdout\n%s\n--- stderr\n%s" % (p.returncode, p.stdout[-3000:],
                                                       p.stderr[-5000:])
    assert p.returncode != 0, log
    assert "RuntimeError: lazytpu.spawn was called while a worker was importing the main " \
           "script" in p.stderr, log
    assert 'under `if __name__ == "__main__":`' in p.stderr, log
    assert "after spawn" not in p.stdout, log
    ran = out.read_text().splitlines() if out.exists() else []
    assert ran == [], ran                         # fn ran zero times
    segments = set((tmp_path / "ran.txt.shm").read_text().split())
    assert segments, log                          # a worker did load the script
    assert not [s for s in segments if os.path.exists("/dev/shm" + s)], segments
    assert not left, left


def test_spawn_from_a_function_called_under_the_guard_and_nested_in_a_worker(tmp_path):
    """The legitimate shapes next to the refused one: spawn in a function the
    guarded block calls, and a spawn inside fn in a worker (it runs there,
    once, as a worker of the launched world)."""
    script = tmp_path / "guarded.py"
    script.write_text(
        "import sys\n"
        "import lazytpu\n\n\n"
        "def inner(index, out):\n"
        "    with open(out, 'a') as f:\n"
        "        f.write('inner %d %d\\n' % (index, lazytpu.get_ordinal()))\n\n\n"
        "def fn(index, out):\n"
        "    with open(out, 'a') as f:\n"
        "        f.write('fn %d\\n' % index)\n"
        "    lazytpu.spawn(inner, args=(out,))\n\n\n"
        "def main():\n"
        "    lazytpu.spawn(fn, args=(sys.argv[1],), nprocs=2)\n"
        "    print('after spawn', flush=True)\n\n\n"
        "if __name__ == '__main__':\n"
        "    main()\n")
    out = tmp_path / "ran.txt"
    p, left = _run_script(["python", str(script), str(out)], tmp_path)
    assert p.returncode == 0 and "after spawn" in p.stdout, p.stdout + p.stderr[-3000:]
    assert sorted(out.read_text().splitlines()) == ["fn 0", "fn 1", "inner 0 0", "inner 1 1"]
    assert not left, left


def test_unguarded_script_run_by_lazytpu_run_n_runs_fn_once_per_worker(tmp_path):
    """lazytpu-run -n 2 python script.py: every process is a worker that runs
    the script as __main__ (nothing loads it again), so its module-level
    spawn runs fn right there, once per worker, and returns."""
    script = _script(tmp_path, "lazytpu.spawn")
    out = tmp_path / "ran.txt"
    launcher = os.path.join(os.path.dirname(__import__("sys").executable), "lazytpu-run")
    p, left = _run_script([launcher, "-n", "2", "python", str(script), str(out)], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert sorted(out.read_text().splitlines()) == ["fn 0", "fn 1"]
    assert p.stdout.count("after spawn") == 2, p.stdout
    assert not left, left
