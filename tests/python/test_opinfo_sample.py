"""A bounded sample of the OpInfo sweep (tests/opinfo/sweep.py; `make opinfo`
runs all of it): every 40th float32 op of PyTorch's op_db against eager, in
a worker process. Fails on a failure that expected_failures.txt does not
list."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SWEEP = os.path.join(HERE, "..", "opinfo", "sweep.py")


def test_opinfo_sample():
    p = subprocess.run([sys.executable, SWEEP, "--sample", "40", "--jobs", "1", "--timeout",
                        "120", "--strict", "--quiet"], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert "passed:" in p.stdout, p.stdout[-2000:]
