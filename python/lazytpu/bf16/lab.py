"""lazytpu.bf16.lab: runs a script once per mode and writes the comparison.

Each mode is a child process (``python -m lazytpu.bf16.driver``), one after
another, with the same seed; the environment sets the mode:

    f32          LAZYTPU_MATMUL_PRECISION=f32, no bf16 storage (the reference)
    bf16         LAZYTPU_USE_BF16=1: f32 tensors stored as bf16 (XLA_USE_BF16)
    autocast     torch.autocast(<device>, dtype=torch.bfloat16) around the
                 script (off in backward), f32 storage
    mxu-default  f32 storage, f32 products at the TPU's DEFAULT precision
                 (one bf16 pass: LAZYTPU_MATMUL_PRECISION=default)
"""
import os
import subprocess
import sys
import time

import torch

from . import report

MODES = ("f32", "bf16", "autocast", "mxu-default")

_CLEARED = ("LAZYTPU_USE_BF16", "XLA_USE_BF16", "XLA_DOWNCAST_BF16", "LAZYTPU_MATMUL_PRECISION")


def mode_env(mode, base=None):
    """The environment of a mode's process."""
    env = dict(os.environ if base is None else base)
    for k in _CLEARED:
        env.pop(k, None)
    env["LAZYTPU_USE_BF16"] = "1" if mode == "bf16" else "0"
    env["LAZYTPU_MATMUL_PRECISION"] = "default" if mode == "mxu-default" else "f32"
    pkg = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = pkg + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_mode(mode, script, args, out_dir, steps, k, seed, keep=(), timeout=None):
    """One run of the script in `mode`: its record (dict; see driver.py) plus
    "wall_s" (the child's wall time) and "log" (its stdout+stderr file)."""
    out = os.path.join(out_dir, "run_%s.pt" % mode)
    log = os.path.join(out_dir, "run_%s.log" % mode)
    cmd = [sys.executable, "-m", "lazytpu.bf16.driver", mode, str(steps), str(k), str(seed),
           ",".join(keep) or "-", out, script] + list(args)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        p = subprocess.run(cmd, env=mode_env(mode), stdout=f, stderr=subprocess.STDOUT,
                           timeout=timeout)
    wall = time.perf_counter() - t0
    if p.returncode != 0 or not os.path.exists(out):
        with open(log) as f:
            tail = f.read()[-3000:]
        raise RuntimeError("lazytpu.bf16: the %s run of %s failed (exit %d); its output ends:\n%s"
                           % (mode, script, p.returncode, tail))
    rec = torch.load(out, weights_only=False)
    rec["wall_s"], rec["log"] = wall, log
    return rec


def run(script, args=(), modes=MODES, steps=20, k=1, out_dir="bf16_lab", seed=0,
        max_gap=None, keep=(), echo=print):
    """Runs the lab; returns the summary text (also in out_dir/summary.txt)
    and the verdict's worst gap (percent) as (text, worst). keep: names
    passed to lazytpu.amp.keep_f32 in every run (to try a suggestion)."""
    modes = list(modes)
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError("lazytpu.bf16: unknown mode(s) %s: expected %s"
                         % (", ".join(bad), ", ".join(MODES)))
    if "f32" not in modes:
        modes.insert(0, "f32")            # the reference
    if not 1 <= k <= steps:
        raise ValueError("lazytpu.bf16: --step %d is outside 1..%d" % (k, steps))
    if not os.path.exists(script):
        raise FileNotFoundError("lazytpu.bf16: %s not found" % script)
    os.makedirs(out_dir, exist_ok=True)
    runs = {}
    for m in modes:
        echo("lazytpu.bf16: %s run of %s (%d steps)" % (m, script, steps))
        runs[m] = run_mode(m, script, args, out_dir, steps, k, seed, keep)
        echo("  %d steps, %.1fs" % (len(runs[m]["losses"]), runs[m]["wall_s"]))
    return report.write(runs, out_dir, script=script, steps=steps, k=k, max_gap=max_gap,
                        keep=keep)
