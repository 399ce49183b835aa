"""The bf16 lab (python -m lazytpu.bf16) and lazytpu.amp.keep_f32.

keep_f32: a kept function or module type computes in f32 under autocast and
in the bf16 storage mode; its values are compared with the f32 op's.
The lab: tiny CNN and transformer scripts (tests/python/scripts/bf16_*.py)
run unchanged in every mode; the files, the tables and the verdict are
checked, a bf16-fragile module tops the ranking and keep_f32 removes its
error."""
import csv
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import lazytpu
from lazytpu import amp
from lazytpu.bf16 import report

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPTS = os.path.join(REPO, "tests", "python", "scripts")


class Centered(nn.Module):
    """x + 300 - mean(x + 300): exact in f32, bf16 rounds x + 300 to steps of 2."""

    def forward(self, x):
        y = x + 300.0
        return y - y.mean(dim=1, keepdim=True)


@pytest.fixture
def kept():
    yield amp.keep_f32
    amp.keep_f32([])


def _rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


# ---------------------------------------------------------------- keep_f32


def test_keep_f32_op_under_autocast(kept):
    """A kept function runs in f32 inside autocast: its value is the f32
    op's (same kernels), an unkept one is bf16."""
    dev = lazytpu.device()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 64, generator=g), torch.randn(64, 8, generator=g)
    ad, bd = a.to(dev), b.to(dev)
    want = (ad @ bd).cpu()
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        plain = ad @ bd
        assert kept(["matmul", "softmax"]) == []
        assert amp.kept_f32() == ["matmul", "softmax"]
        got_op, got_fn = ad @ bd, torch.matmul(ad, bd)
        lin = torch.nn.functional.linear(ad, bd.t())      # not kept: still bf16
    assert plain.dtype == torch.bfloat16 and lin.dtype == torch.bfloat16
    assert got_op.dtype == torch.float32 and got_fn.dtype == torch.float32
    assert torch.equal(got_op.cpu(), want) and torch.equal(got_fn.cpu(), want)
    assert _rel(plain.cpu().float(), want) > 1e-4
    assert kept([]) == ["matmul", "softmax"]
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        assert (ad @ bd).dtype == torch.bfloat16          # cleared


def test_keep_f32_module_under_autocast_with_gradients(kept):
    """A kept module type: its forward sees f32 inputs and runs without
    autocast; values and the gradient through it are the f32 ones."""
    dev = lazytpu.device()
    torch.manual_seed(0)
    lin = nn.Linear(32, 32).to(dev)
    x = torch.randn(8, 32).to(dev)

    def run(keep):
        kept(keep)
        lin.zero_grad()
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            h = lin(x)
            h.retain_grad()
            y = Centered()(h)
        (y.float() ** 2).sum().backward()
        lazytpu.mark_step()
        return h, y

    h, y = run(["Centered"])
    assert y.dtype == torch.float32
    hf = h.detach().float().cpu().requires_grad_()
    want = Centered()(hf)                                  # eager f32 on the CPU
    (want ** 2).sum().backward()
    assert torch.allclose(y.detach().cpu(), want.detach().cpu(), rtol=0, atol=1e-4)
    # h is bf16 (autocast's linear): its gradient is the f32 one rounded to bf16
    assert torch.allclose(h.grad.float().cpu(), hf.grad.bfloat16().float(), rtol=2 ** -7,
                          atol=1e-3)
    h2, y2 = run([])
    assert y2.dtype == torch.bfloat16
    assert _rel(y2.detach().cpu().float(), want.detach().cpu()) > 0.05   # bf16 loses it


def test_keep_f32_refuses_bad_names(kept):
    with pytest.raises(TypeError, match="keep_f32: expected names"):
        kept([3])


STORAGE = textwrap.dedent("""
    import torch, torch.nn as nn, lazytpu
    from lazytpu import amp
    class Centered(nn.Module):
        def forward(self, x):
            y = x + 300.0
            return y - y.mean(dim=1, keepdim=True)
    dev = lazytpu.device()
    g = torch.Generator().manual_seed(0)
    x = 300 + torch.randn(16, 256, generator=g)
    xd = x.to(dev)
    xs = xd.cpu()                      # the bf16-stored values, as f32
    def rnd(t):
        return t.bfloat16().float()
    def rel(a, b):
        return float((a.double() - b.double()).norm() / b.double().norm())
    def run(keep):
        amp.keep_f32(keep)
        v, c = torch.var(xd, dim=1), Centered()(xd - 300)
        lazytpu.mark_step()
        return v.cpu(), c.cpu()
    ref_v, ref_c = rnd(torch.var(xs.double(), dim=1).float()), rnd(Centered()(xs - 300))
    for keep in ([], ["var", "Centered"]):
        v, c = run(keep)
        print("KEEP", ",".join(keep) or "-", "VAR %.3g CENTER %.3g" % (rel(v, ref_v), rel(c, ref_c)),
              "ULP", int(((v - ref_v).abs() <= ref_v.abs() * 2 ** -7).all()),
              int(((c - ref_c).abs() <= ref_c.abs() * 2 ** -7 + 1e-6).all()))
    print("MODE", int(lazytpu._C.bf16_mode()))
""")


def test_keep_f32_in_bf16_storage_mode():
    """LAZYTPU_USE_BF16=1: a kept function (torch.var, composed of mean,
    sub, mul, sum on the device) and a kept module store their values in
    f32 and round the result once: within a bf16 step of the f32 value of
    the stored inputs; unkept, the bf16-rounded mean ruins both."""
    env = dict(os.environ, LAZYTPU_USE_BF16="1", PYTHONPATH=os.path.join(REPO, "python"))
    p = subprocess.run([sys.executable, "-c", STORAGE], env=env, capture_output=True, text=True,
                       timeout=600, cwd=REPO)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lines = {ln.split()[1]: ln.split() for ln in p.stdout.splitlines() if ln.startswith("KEEP")}
    assert "MODE 1" in p.stdout
    plain, keep = lines["-"], lines["var,Centered"]
    # unkept: more than one rounding off (one bf16 rounding is <= 2^-9)
    assert float(plain[3]) > 2 ** -8 and float(plain[5]) > 0.05, p.stdout
    assert plain[7:9] == ["0", "0"], p.stdout
    assert float(keep[3]) < 2 ** -7 and float(keep[5]) < 2 ** -7, p.stdout
    assert keep[7:9] == ["1", "1"], p.stdout


# --------------------------------------------------------------------- lab


def _lab(tmp_path, script, *args, modes="f32,bf16,autocast,mxu-default", steps=6, k=1,
         keep=None, name="lab"):
    out = str(tmp_path / name)
    cmd = [sys.executable, "-m", "lazytpu.bf16", "--steps", str(steps), "--step", str(k),
           "--modes", modes, "--out", out]
    if keep:
        cmd += ["--keep-f32", keep]
    cmd += [os.path.join(SCRIPTS, script)] + list(args)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200, cwd=REPO)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return out, p.stdout


def _table(out, mode):
    with open(os.path.join(out, "precision_%s.csv" % mode)) as f:
        return list(csv.DictReader(f))


def test_lab_cnn_fragile_module_and_keep_f32(tmp_path):
    """The CNN with a bf16-fragile module: curves, gap, tables, memory and
    time per mode, verdicts; the fragile module tops the ranking of the bf16
    modes and is suggested; with keep_f32 its error is gone."""
    out, text = _lab(tmp_path, "bf16_cnn.py", "--fragile", "--steps", "40")
    for f in ("losses.csv", "loss_curves.png", "summary.txt", "keep_f32.txt",
              "precision_bf16.csv", "precision_autocast.csv", "precision_mxu-default.csv"):
        assert os.path.getsize(os.path.join(out, f)) > 0, f
    with open(os.path.join(out, "losses.csv")) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 and float(rows[0]["gap_bf16"]) == pytest.approx(
        (float(rows[0]["bf16"]) - float(rows[0]["f32"])) / abs(float(rows[0]["f32"])), rel=1e-5)
    lines = text.strip().splitlines()
    assert re.fullmatch(r"VERDICT: all modes within [0-9.e+-]+% of f32 loss after 6 steps "
                        r"\(worst: [a-z0-9-]+\)", lines[-1]), lines[-1]
    for m in ("bf16", "autocast", "mxu-default"):
        assert any(re.fullmatch(r"VERDICT: %s within [0-9.e+-]+%% of f32 loss after 6 steps" % m, ln)
                   for ln in lines), m
    assert re.search(r"f32 +core 0: [0-9.]+ MiB +[0-9.]+ ms", text), text
    for m in ("bf16", "autocast"):
        t = _table(out, m)
        assert t[0]["module"] == "Net.center" and t[0]["type"] == "Centered", t[:3]
        assert float(t[0]["out_rel_err"]) > 0.05
        assert float(t[0]["grad_rel_err"]) >= 0
        names = {r["module"] for r in t}
        assert {"Net.conv1", "Net.fc1", "Net.fc2"} <= names
    # mxu-default: products lose bits, the centring adds none (f32 storage)
    assert _table(out, "mxu-default")[0]["type"] != "Centered"
    assert "lazytpu.amp.keep_f32(['Centered'])" in text
    # the suggestion applied: the module's error is its input's again
    out2, text2 = _lab(tmp_path, "bf16_cnn.py", "--fragile", "--steps", "40",
                       modes="bf16,autocast", keep="Centered", name="lab_keep")
    assert "every run with lazytpu.amp.keep_f32(['Centered'])" in text2
    for m in ("bf16", "autocast"):
        row = [r for r in _table(out2, m) if r["module"] == "Net.center"][0]
        assert float(row["out_rel_err"]) < 0.02 and float(row["gain"]) < 4, row


def test_lab_transformer(tmp_path):
    """A tiny transformer: every mode runs, the tables name its modules with
    output and gradient errors, at a later step K too."""
    out, text = _lab(tmp_path, "bf16_transformer.py", "--steps", "40", steps=5, k=3)
    t = {r["module"]: r for r in _table(out, "bf16")}
    for name in ("LM.blocks.0.attn.qkv", "LM.blocks.1.ln2", "LM.head", "LM.blocks.0.mlp.1"):
        assert name in t, sorted(t)
    assert float(t["LM.head"]["out_rel_err"]) > 0
    assert float(t["LM.blocks.0.attn.qkv"]["grad_rel_err"]) > 0
    ac = {r["module"]: r for r in _table(out, "autocast")}
    assert float(ac["LM.head"]["out_rel_err"]) > 0
    assert "precision at step 3, bf16 vs f32" in text
    assert text.strip().splitlines()[-1].startswith("VERDICT: all modes within")


def test_report_without_matplotlib(tmp_path, monkeypatch):
    """No matplotlib at run time: the CSV and the summary say so, no crash."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    t = torch.ones(4)

    def rec(losses, scale):
        return {"losses": losses, "step_times": [0.1] * len(losses), "peak_bytes": {0: 1 << 20},
                "k": 1, "wall_s": 1.0,
                "modules": [{"name": "M", "type": "M", "parent": None, "children": [],
                             "in": t, "out": t * scale, "grad": t}]}
    runs = {"f32": rec([2.0, 1.0], 1.0), "bf16": rec([2.0, 1.01], 1.5)}
    text, worst = report.write(runs, str(tmp_path), script="s.py", steps=2, k=1)
    assert "losses.csv (matplotlib is not installed: no PNG)" in text
    assert not os.path.exists(tmp_path / "loss_curves.png")
    assert worst == pytest.approx(1.0)
    assert text.strip().splitlines()[-1] == \
        "VERDICT: all modes within 1% of f32 loss after 2 steps (worst: bf16)"
    assert "suggested keep-in-f32 module types: ['M']" in text
