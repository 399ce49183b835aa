"""Multi-host from Python: 2 simulated hosts x 4 cores over MPI (mpirun on
loopback, through `lazytpu-run --hosts 2`) train to the same parameters as
1 host x 8 cores with the same global batch; the world names are global."""
import os
import shutil
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER = os.path.join(os.path.dirname(sys.executable), "lazytpu-run")

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None,
                                reason="Open MPI (openmpi-bin) is not installed")


def run(args, out):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    p = subprocess.run([LAUNCHER, "--xla-compat=off"] + args +
                       ["python", os.path.join(HERE, "scripts", "mh_sgd.py"), out],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def test_two_hosts_match_one_host(tmp_path):
    one, two = str(tmp_path / "1x8.pt"), str(tmp_path / "2x4.pt")
    run(["-n", "8"], one)
    run(["--hosts", "2", "-n", "4"], two)
    places1 = [open("%s.rank%d" % (one, r)).read().strip() for r in range(8)]
    places2 = [open("%s.rank%d" % (two, r)).read().strip() for r in range(8)]
    assert places1 == ["host 0 of 1 rank %d of 8 local %d 8" % (r, r) for r in range(8)]
    assert places2 == ["host %d of 2 rank %d of 8 local %d 4" % (r // 4, r, r % 4)
                       for r in range(8)]
    a, b = torch.load(one), torch.load(two)
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-5, rtol=1e-5)
