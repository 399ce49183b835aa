"""A script whose last statement is a device backward exits cleanly.

The autograd engine's device thread drops the GraphTask (and the Python
object every backward() stashes in it) a moment after backward() returns;
if interpreter finalisation starts inside that moment the process aborted
with "terminate called without an active exception" (lazytpu/_exit.py).
Seen in about 1 of 40 runs on a quiet machine, 1 of 3 under load: the test
runs the script several times.

A script whose last statement launches an asynchronous step exits cleanly
too: the cores finish and stop before the library destructors run (OpenBLAS
freed its buffers under a running kernel: SIGSEGV at exit, every run).
"""
import os
import subprocess
import sys

SCRIPT = """
import torch, lazytpu
d = lazytpu.device()
w = torch.randn(64, 64, device=d, requires_grad=True)
for i in range(3):
    (torch.tanh(w @ w) * 2).sum().backward()
"""


def test_backward_as_the_last_statement_exits_cleanly():
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    for _ in range(6):
        p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0 and "terminate called" not in p.stderr, p.stderr[-2000:]


ASYNC_LAST = """
import torch, lazytpu
d = lazytpu.device()
x = torch.randn(64, 1024, 14, 14, device=d)
w = torch.randn(1024, 1024, 1, 1, device=d) * 0.03
for _ in range(2):
    y = x
    for _ in range(6):
        y = torch.nn.functional.conv2d(y, w)
    lazytpu.mark_step()      # asynchronous: still running when the script ends
"""


def test_asynchronous_step_as_the_last_statement_exits_cleanly():
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", ASYNC_LAST], capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
