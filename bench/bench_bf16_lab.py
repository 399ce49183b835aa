"""What the bf16 lab costs against the plain runs it replaces: the wall time
of `python -m lazytpu.bf16` (every mode, with its hooks and analysis) over
the sum of one plain run of the script per mode (same environment, the
script stopped after the same steps by its own argument), one after the
other. The target is <= 1.10 (modes + 10%).

    .venv/bin/python bench/bench_bf16_lab.py [--steps 30] [--rounds 2]
        [--script tests/python/scripts/bf16_cnn.py] [-- script args]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

from lazytpu.bf16.lab import MODES, mode_env  # noqa: E402


def plain(script, args, mode):
    """One plain run of the script in a mode's environment (autocast: the
    same driver-less run in f32 storage, autocast being a code change)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, script] + args, env=mode_env(mode), check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def lab(script, args, steps, out):
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    subprocess.run([sys.executable, "-m", "lazytpu.bf16", "--steps", str(steps), "--out", out,
                    script] + args, env=env, check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--script", default=os.path.join(ROOT, "tests", "python", "scripts",
                                                     "bf16_cnn.py"))
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    sargs = [x for x in a.args if x != "--"] or ["--steps", str(a.steps)]
    plains, labs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            plains.append(sum(plain(a.script, sargs, m) for m in MODES))
            labs.append(lab(a.script, sargs, a.steps, os.path.join(tmp, "lab%d" % r)))
    p, l = statistics.median(plains), statistics.median(labs)
    print("bf16 lab cost: %s, %d steps, %d modes: plain runs %.2fs, lab %.2fs, ratio %.3f "
          "(target <= 1.10)" % (os.path.basename(a.script), a.steps, len(MODES), p, l, l / p))


if __name__ == "__main__":
    main()
