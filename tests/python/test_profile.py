"""LAZYTPU_PROFILE=1: per-op device time as KernelTime::<op> metrics and the
kernel profile table of the metrics report; nothing of it when unset.
Each case runs in a fresh process (the variable is read once)."""
import os
import subprocess
import sys

SCRIPT = r'''
import torch, torch.nn.functional as F, lazytpu
dev = lazytpu.device()
x = torch.randn(4, 3, 8, 8, device=dev, requires_grad=True)
w = torch.randn(5, 3, 3, 3, device=dev, requires_grad=True)
for _ in range(3):
    y = F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2)
    y.sum().backward()
    lazytpu.mark_step()
lazytpu.wait_device_ops()
print(lazytpu.metrics.metrics_report())
'''


def _report(flag):
    env = dict(os.environ, LAZYTPU_NUM_CORES="1")
    env.pop("LAZYTPU_PROFILE", None)
    if flag is not None:
        env["LAZYTPU_PROFILE"] = flag
    p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def _table(report):
    lines = report[report.index("== kernel profile ==\n"):].splitlines()[1:]
    rows = {}
    for line in lines[1:]:
        if line.startswith("all kernels"):
            break
        f = line.split()
        rows[f[0]] = (int(f[1]), float(f[2]), float(f[3]), float(f[4].rstrip("%")))
    return lines[0].split(), rows, lines


def test_profile_metrics_and_table():
    r = _report("1")
    assert "Metric: KernelTime::conv2d\n  TotalSamples: 3\n" in r, r
    assert "Metric: KernelTime::max_pool2d_backward\n" in r, r
    head, rows, lines = _table(r)
    assert head == ["op", "calls", "total", "ms", "ms", "per", "run", "share"], head
    # one conv2d forward, one backward (input and weight), one pool each way per step
    for op in ("conv2d", "conv2d_backward_input", "conv2d_backward_weight", "max_pool2d",
               "max_pool2d_backward"):
        assert rows[op][0] == 3, (op, rows)
    assert any(k.startswith("fused(") or k.startswith("reduce(") for k in rows), rows
    totals = [v[1] for v in rows.values()]
    assert totals == sorted(totals, reverse=True), lines   # largest first
    assert abs(sum(v[3] for v in rows.values()) - 100.0) < 0.5, rows
    assert any(l.startswith("all kernels") and "runs)" in l for l in lines), lines


def test_profile_off_records_nothing():
    for flag in (None, "0"):
        r = _report(flag)
        assert "KernelTime::" not in r, r
        assert "== kernel profile ==" not in r, r
        assert "Metric: ExecuteTime" in r, r
