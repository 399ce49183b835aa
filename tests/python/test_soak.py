"""The small soak (issue 14, point 4): bench/soak.py for a few hundred
steps on one core; the device-buffer, byte and live-tensor counts must not
change between two checkpoints, and RSS must stay within the slack. The
10,000-step soak on 1 and 8 cores is the benchmark itself (docs/errors.md)."""
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_small_soak_is_flat(tmp_path):
    out = tmp_path / "soak.json"
    env = dict(os.environ, LAZYTPU_NUM_CORES="1")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "soak.py"), "--steps", "300",
                        "--checkpoints", "100,300", "--cores", "1", "--json", str(out)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    r = json.loads(out.read_text())["1"]["ranks"]["0"]
    a, b = r["points"]
    assert r["grew"] == [], r
    assert a["buffers"] == b["buffers"] and a["tensors"] == b["tensors"], r
    assert a["buffers"] > 0 and a["tensors"] > 0, r
