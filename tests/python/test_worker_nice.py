"""LAZYTPU_WORKER_NICE (lazy/kernels/par.c lt_par_thread_start): the cores'
worker threads (lt-coreN) and their helpers (lt-helper) run that many nice
levels below the process's main thread, capped at 19 and never above the
level they started at; 0 leaves them at the host's level. Each case runs in
a fresh process (the option is read once per process) and reads the levels
of its own threads from /proc."""
import inspect
import json
import os
import subprocess
import sys

import pytest

import lazytpu

if not sys.platform.startswith("linux"):
    pytest.skip("per-thread nice levels are Linux's", allow_module_level=True)


def _thread_levels():
    """Thread name ("main" for the main thread) -> the nice levels of the
    process's threads of that name."""
    got = {}
    for t in os.listdir("/proc/self/task"):
        st = open("/proc/self/task/%s/stat" % t).read()
        name = st[st.index("(") + 1:st.rindex(")")]
        nice = int(st[st.rindex(")") + 2:].split()[16])
        got.setdefault("main" if int(t) == os.getpid() else name, []).append(nice)
    return got


# the child defines _thread_levels from this file's source
_CHILD = "import os\n" + inspect.getsource(_thread_levels) + r"""
import json, torch, lazytpu
d = lazytpu.device()
x = torch.randn(256, 256).to(d)
lazytpu.mark_step(); lazytpu.wait_device_ops()
for _ in range(3):
    y = (x @ x).relu()
    lazytpu.mark_step()          # left to the worker (no wait): it runs it
lazytpu.wait_device_ops()
print(json.dumps({"levels": _thread_levels(), "sum": float(y.sum().item()),
                  "want": float((x.cpu() @ x.cpu()).relu().sum())}))
"""


def _levels(env_extra, start_nice=0):
    env = dict(os.environ)
    env.pop("LAZYTPU_WORKER_NICE", None)
    env["LAZYTPU_NUM_CORES"] = "2"
    env.update(env_extra)
    pre = (lambda: os.nice(start_nice)) if start_nice else None
    p = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                       text=True, timeout=300, preexec_fn=pre)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert abs(out["sum"] - out["want"]) <= 1e-3 * abs(out["want"]), out
    return out["levels"]


def _workers(levels):
    cores = [v for k, vs in levels.items() if k.startswith("lt-core") for v in vs]
    helpers = levels.get("lt-helper", [])
    assert cores, levels
    # a helper starts with the first kernel split over two threads: none on
    # a one-CPU machine
    assert helpers or (os.cpu_count() or 1) < 2, "no helper thread started: %s" % levels
    return cores, helpers


@pytest.mark.parametrize("env, start, want_main, want_workers", [
    ({}, 0, 0, 5),                                 # the default: 5 below the host
    ({"LAZYTPU_WORKER_NICE": "0"}, 0, 0, 0),       # off: the host's level
    ({}, 3, 3, 8),                                 # relative to a niced host
    ({"LAZYTPU_WORKER_NICE": "9"}, 15, 15, 19),    # capped at 19
])
def test_worker_threads_run_below_the_host(env, start, want_main, want_workers):
    levels = _levels(env, start)
    assert levels["main"] == [want_main], levels
    cores, helpers = _workers(levels)
    assert set(cores) == {want_workers}, levels
    assert set(helpers) <= {want_workers}, levels


def test_out_of_range_value_is_refused():
    env = dict(os.environ, LAZYTPU_WORKER_NICE="20")
    p = subprocess.run([sys.executable, "-c", "import torch, lazytpu; "
                        "torch.ones(2).to(lazytpu.device()).sum().item()"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert "LAZYTPU_WORKER_NICE" in p.stderr, p.stderr[-2000:]


def _spawned(index, out_dir):
    import torch
    dev = lazytpu.device()
    x = torch.randn(256, 256).to(dev)
    y = (x @ x).relu().sum()
    lazytpu.mark_step(wait=True)
    want = float((x.cpu() @ x.cpu()).relu().sum())
    assert abs(float(y.cpu()) - want) <= 1e-3 * abs(want)
    with open(os.path.join(out_dir, "levels.%d" % index), "w") as f:
        json.dump(_thread_levels(), f)


def test_world_of_processes_keeps_the_host_level(tmp_path):
    lazytpu.spawn(_spawned, args=(str(tmp_path),), nprocs=2, timeout=240)
    for index in range(2):
        with open(tmp_path / ("levels.%d" % index)) as f:
            levels = json.load(f)
        main = levels["main"][0]
        cores = [v for k, vs in levels.items() if k.startswith("lt-core") for v in vs]
        assert cores and set(cores) == {main}, levels
        assert set(levels.get("lt-helper", [])) <= {main}, levels
