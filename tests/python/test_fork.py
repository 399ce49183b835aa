"""A child of a process that used its cores gets working cores: os.fork(),
multiprocessing's fork context (Accelerate's notebook_launcher, DataLoader
workers), spawn and forkserver contexts, and a forked child that forks
again. Each case runs tests/python/scripts/fork_child.py in a fresh
interpreter (see there: GEMM, convolution and reductions in parent and
children, checked against the CPU; the parent's computed, queued and
pending tensors read in forked children). A hung child is killed by the
script after 120 s and a hung parent by the timeout here, so a regression
fails instead of hanging the suite.
"""
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(REPO, "tests", "python", "scripts", "fork_child.py")


def run(mode, extra_env=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python")
    for k in list(env):
        if k.startswith("LAZYTPU_") and k != "LAZYTPU_BIN_DIR":
            env.pop(k)
    env.update(extra_env or {})
    try:
        p = subprocess.run([sys.executable, SCRIPT, mode], env=env, capture_output=True,
                           text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        pytest.fail("fork_child.py %s hung (parent): %s" % (mode, (e.stderr or b"")[-3000:]))
    assert p.returncode == 0 and ("OK " + mode) in p.stdout, \
        "exit %d\n--- stdout\n%s\n--- stderr\n%s" % (p.returncode, p.stdout[-3000:],
                                                     p.stderr[-5000:])


@pytest.mark.parametrize("mode", ["os.fork", "fork", "spawn", "forkserver", "nested"])
def test_children_use_their_cores(mode):
    run(mode)


def test_forked_children_with_several_omp_threads():
    """The same with OpenMP and the core's helper pool at 2 threads per core
    (their threads exist in the parent, not in the child)."""
    run("fork", {"LAZYTPU_OMP_THREADS": "2", "OMP_NUM_THREADS": "2"})
