"""Slow-step diagnosis seen from Python: each classic cause of a slow step is
provoked and the report / warning text is checked, including the user's
line (file:line in function) that caused it."""
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import lazytpu
import lazytpu.debug as dbg
import lazytpu.metrics as met

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(HERE, "..", "..", "python")
ME = os.path.basename(__file__)


def line_of(fn, marker):
    """Line number of the line of fn's source that contains marker."""
    src, first = inspect.getsourcelines(fn)
    for i, s in enumerate(src):
        if marker in s:
            return first + i
    raise AssertionError("marker %r not in %s" % (marker, fn.__name__))


@pytest.fixture
def quiet_debug():
    """Warnings collected quietly during the test, then back to the env's mode."""
    was = dbg.set_debug(2)
    dbg.take_warnings()
    yield
    dbg.set_debug(1 if was else 0)
    dbg.take_warnings()


def run_script(code, tmp_path, env_extra, timeout=60):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(code))
    env = dict(os.environ)
    for k in ("LAZYTPU_DEBUG", "PT_XLA_DEBUG", "LAZYTPU_TRACE", "LAZYTPU_SAVE_GRAPHS",
              "LAZYTPU_GRAPH_LIMIT"):
        env.pop(k, None)
    env.update(env_extra)
    env["PYTHONPATH"] = os.path.abspath(PYDIR)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    p = subprocess.run([sys.executable, str(path)], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, "script failed:\n%s\n%s" % (p.stdout, p.stderr[-4000:])
    return p


# ------------------------------------------------- last batch of another size

def train_loop(model, opt, loader, dev, epochs):
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            lazytpu.mark_step()  # step boundary


def test_last_batch_recompile(dev):
    torch.manual_seed(0)
    # 3 full batches of 64 and a last one of 32 (drop_last=False)
    ds = torch.utils.data.TensorDataset(torch.randn(224, 784), torch.randint(0, 10, (224,)))
    loader = torch.utils.data.DataLoader(ds, batch_size=64, drop_last=False)
    # a hidden width no other test uses, so no graph of this test is cached
    model = torch.nn.Sequential(torch.nn.Linear(784, 29), torch.nn.ReLU(),
                                torch.nn.Linear(29, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    before = met.counter_value("UncachedCompile") or 0
    train_loop(model, opt, loader, dev, epochs=2)
    report = met.metrics_report()
    line = line_of(train_loop, "# step boundary")
    pat = (r"recompiled: graph [0-9a-f]{16} input \d+ \(f32\) \[64, 784\] -> \[32, 784\]; "
           r"cause mark_step; at %s:%d in train_loop" % (re.escape(ME), line))
    assert re.search(pat, report), report[report.find("== recompilation =="):]
    assert (met.counter_value("Recompilation::mark_step") or 0) >= 1
    # second epoch: both shapes come from the cache
    compiles = (met.counter_value("UncachedCompile") or 0) - before
    assert 2 <= compiles <= 4, compiles


# ------------------------------------------------------- .item() in the loop

def item_loop(model, opt, dev, steps):
    losses = []
    for _ in range(steps):
        x = torch.randn(16, 12).to(dev)
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        losses.append(loss.item())  # value read
        opt.step()
        lazytpu.mark_step()
    return losses


def test_item_in_loop_warns(dev, quiet_debug):
    torch.manual_seed(1)
    model = torch.nn.Linear(12, 7).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    reads = met.counter_value("SyncCause::value_read") or 0
    item_loop(model, opt, dev, steps=7)
    assert (met.counter_value("SyncCause::value_read") or 0) - reads >= 7
    warns = [w for w in dbg.take_warnings() if "host reads" in w]
    assert warns, "no value-read warning"
    w = warns[0]
    assert w.startswith("lazytpu: warning: ")
    assert "host reads in the last 4 steps" in w
    assert "last at %s:%d in item_loop" % (ME, line_of(item_loop, "# value read")) in w, w
    assert "lazytpu.add_step_closure" in w
    assert "docs/troubleshooting.md#value-reads" in w


# --------------------------------------------------------- CPU fallback op

def count_unique_calls(report):
    m = re.search(r"^aten::_unique2: (\d+) calls?", report, re.M)
    return int(m.group(1)) if m else 0


def uses_unique(x):
    return torch.unique(x)  # falls back


def test_fallback_section(dev, quiet_debug):
    before = count_unique_calls(dbg.fallback_report())
    x = torch.tensor([0.5, -1.0, 2.0, 0.0, 3.0]).to(dev)
    for _ in range(3):
        idx = uses_unique(x)
        lazytpu.mark_step()
    assert idx.device.type == "lazytpu"
    assert idx.cpu().flatten().tolist() == [-1.0, 0.0, 0.5, 2.0, 3.0]
    for _ in range(3):                      # step boundaries evaluate the warnings
        lazytpu.mark_step()
    fb = dbg.fallback_report()
    assert fb.startswith("== fallback ==\n"), fb
    assert count_unique_calls(fb) == before + 3, fb
    line = [ln for ln in fb.splitlines() if ln.startswith("aten::_unique2:")][0]
    frame = "%s:%d in uses_unique" % (ME, line_of(uses_unique, "# falls back"))
    assert frame in line, line
    assert re.search(r"calls, (\d+(m|s|ms))*\d+\.\d{3}us total", line), line   # e.g. 918.607us
    hint = fb.splitlines()[fb.splitlines().index(line) + 1]
    assert hint.startswith("  hint: output size depends on the data; compute it once")
    # the same section ends the full report, once
    rep = met.metrics_report()
    assert rep.count("== fallback ==") == 1 and line.split(",")[0] in rep
    assert "ran on the CPU (no lazytpu kernel)" not in rep     # old note lines are gone
    assert (met.counter_value("aten::_unique2") or 0) >= 3
    if before == 0:   # first unique of this process: a warning names it
        ws = [w for w in dbg.take_warnings() if "new CPU fallback ops" in w]
        assert ws and "aten::_unique2 (at %s" % frame in ws[0], ws


# --------------------------------------------------------------- graph dumps

def test_graph_text_and_dot(dev):
    x = torch.randn(8, 5).to(dev)
    w = torch.randn(5, 3).to(dev)
    lazytpu.mark_step()
    # programs of earlier steps record ExecuteTime when they finish: none
    # may finish inside the window checked below
    lazytpu.wait_device_ops()
    y = (x @ w).relu().sum()
    compiles = met.counter_value("UncachedCompile") or 0
    execs = (met.metric_data("ExecuteTime") or (0, 0))[0]
    txt = dbg.graph_text(y)
    lines = txt.strip().splitlines()
    assert re.match(r"graph [0-9a-f]{16}: \d+ nodes, 2 params, 1 output", lines[0]), txt
    assert any(re.search(r"= mm\(%\d+, %\d+\) f32\[8, 3\]", ln) for ln in lines), txt
    assert any("relu(" in ln for ln in lines)
    assert lines[-1].endswith("# output 0") and "sum(" in lines[-1]
    assert sum("# param" in ln for ln in lines) == 2
    dot = dbg.graph_dot([y])
    assert dot.startswith("digraph") and dot.rstrip().endswith("}") and "mm" in dot
    # nothing ran
    assert (met.counter_value("UncachedCompile") or 0) == compiles
    assert (met.metric_data("ExecuteTime") or (0, 0))[0] == execs
    assert dbg.tensor_info(y)["pending"] == "1"
    torch.testing.assert_close(y.cpu(), (x.cpu() @ w.cpu()).relu().sum(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="not a lazytpu device tensor"):
        dbg.graph_text(torch.ones(2))
    with pytest.raises(ValueError, match="at least one"):
        dbg.graph_dot()


# ------------------------------------ graph growing without a step boundary

SIZE_LIMIT_SCRIPT = """
import torch, lazytpu
dev = lazytpu.device()
torch.manual_seed(0)
w = (torch.randn(16, 16) * 0.1).to(dev)
x = torch.randn(4, 16).to(dev)
def grow(x, n):
    for _ in range(n):
        x = torch.tanh(x @ w) + 0.5      # 3 traced ops, never a mark_step
    return x
x = grow(x, 60)
print("VALUE", float(x.sum().item()))
for _ in range(8):                        # then steps with a value read each
    y = (x * 2).sum()
    print(y.item())
    lazytpu.mark_step()
print(lazytpu.metrics.metrics_report())
"""


def test_size_limit_subprocess(tmp_path):
    p = run_script(SIZE_LIMIT_SCRIPT, tmp_path,
                   {"LAZYTPU_GRAPH_LIMIT": "40", "PT_XLA_DEBUG": "1"})
    out = p.stdout
    assert re.search(r"Counter: GraphSizeLimitSync\n  Value: [1-9]", out), out[-3000:]
    assert re.search(r"Counter: SyncCause::size_limit\n  Value: [1-9]", out)
    notes = [ln for ln in out.splitlines() if ln.startswith("recompiled:")]
    assert any("cause size_limit" in ln and "structure changed" in ln for ln in notes), notes
    # the cut happens inside an op, yet the note names the user's line
    assert any("cause size_limit" in ln and re.search(r"at script\.py:\d+ in grow", ln)
               for ln in notes), notes
    # the value matches eager
    torch.manual_seed(0)
    w = torch.randn(16, 16) * 0.1
    x = torch.randn(4, 16)
    for _ in range(60):
        x = torch.tanh(x @ w) + 0.5
    got = float(re.search(r"VALUE (\S+)", out).group(1))
    assert abs(got - float(x.sum())) < 1e-3 * max(1.0, abs(float(x.sum())))
    # PT_XLA_DEBUG=1 set before import: warnings on stderr
    assert "lazytpu: warning: " in p.stderr, p.stderr[-2000:]
    assert re.search(r"host reads in the last 4 steps .*last at script\.py:\d+ in <module>",
                     p.stderr), p.stderr[-2000:]


# ------------------------------------------------ trace file, graphs, plot

TRACE_SCRIPT = """
import torch, lazytpu
from lazytpu.loader import MpDeviceLoader
dev = lazytpu.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(20, 8), torch.nn.ReLU(),
                            torch.nn.Linear(8, 3)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ds = torch.utils.data.TensorDataset(torch.randn(40, 20), torch.randint(0, 3, (40,)))
def train(loader, epochs):
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            lazytpu.mark_step()  # STEP
train(torch.utils.data.DataLoader(ds, batch_size=16), 2)   # 16, 16, 8
idx = torch.unique(torch.randn(6).to(dev))                  # a CPU fallback
print("LOSS", model(torch.randn(2, 20).to(dev)).sum().item())
for x, y in MpDeviceLoader(torch.utils.data.DataLoader(ds, batch_size=10), dev):
    with lazytpu.debug.trace_span("my_span"):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    lazytpu.optimizer_step(opt)
"""


def test_trace_graphs_and_plot(tmp_path):
    trace = tmp_path / "trace.json"
    graphs = tmp_path / "graphs.txt"
    p = run_script(TRACE_SCRIPT, tmp_path, {"LAZYTPU_TRACE": str(trace),
                                             "LAZYTPU_SAVE_GRAPHS": str(graphs),
                                             "LAZYTPU_DEBUG": "1"})
    with open(trace) as f:
        data = json.load(f)
    evs = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    names = {e["name"] for e in evs}
    for want in ("compile", "execute", "sync", "trace", "transfer_to_device",
                 "transfer_from_device", "aten::_unique2", "loader_wait", "my_span"):
        assert want in names, (want, sorted(names))
    assert all(e["tid"] == 0 for e in evs if e["name"] == "execute")
    assert {e["cat"] for e in evs if e["name"] == "aten::_unique2"} == {"fallback"}
    causes = {(e.get("args") or {}).get("cause") for e in evs if e["name"] == "sync"}
    assert {"mark_step", "value_read", "loader_step"} <= causes, causes
    assert all(e["dur"] >= 0 and e["ts"] > 0 for e in evs)
    # LAZYTPU_DEBUG=1 set before import: the next step boundaries name the fallback
    nz_line = [i + 1 for i, ln in enumerate(TRACE_SCRIPT.splitlines()) if "torch.unique" in ln][0]
    assert ("lazytpu: warning: new CPU fallback ops: aten::_unique2 (at script.py:%d in <module>"
            % nz_line) in p.stderr, p.stderr[-2000:]
    # graph dumps name the sync cause and the user's line
    g = graphs.read_text()
    line = TRACE_SCRIPT.splitlines().index(
        [ln for ln in TRACE_SCRIPT.splitlines() if "# STEP" in ln][0]) + 1
    assert re.search(r"# sync \d+: cause mark_step, at script\.py:%d in train" % line, g), g[:2000]
    assert re.search(r"graph [0-9a-f]{16}: \d+ nodes", g)
    # per-step data and the plot
    steps = dbg.step_timeline(str(trace))
    assert len(steps) >= 6 + 3, [s["cause"] for s in steps]    # 6 mark_steps, loader steps
    assert sum(s["compiles"] for s in steps) >= 3
    assert steps[0]["compiles"] >= 1 and all(s["wall_ms"] >= 0 for s in steps)
    assert any("aten::_unique2" in s["fallbacks"] for s in steps)
    assert any(s["value_reads"] for s in steps)
    png = tmp_path / "steps.png"
    out = dbg.plot_steps(str(trace), str(png))
    assert len(out) == len(steps)
    raw = png.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) > 10000, len(raw)
    with pytest.raises(ValueError, match="LAZYTPU_TRACE"):
        dbg.plot_steps(met.metrics_json(), str(tmp_path / "x.png"))


def test_host_reads_of_computed_values_are_reported(dev, quiet_debug):
    """.item() on a value the step already computed (after mark_step) does
    not cut the graph, but the host still waits for the device: it is
    counted per line, per step, with a warning (torch_xla counts
    aten::_local_scalar_dense the same way)."""
    met.clear_all()
    w = torch.ones(64, 64, device=dev)
    reads0 = met.counter_value("HostReads") or 0
    cut0 = met.counter_value("SyncCause::value_read") or 0
    for _ in range(6):
        w = torch.tanh(w @ w * 0.01)
        total = w.sum()
        lazytpu.mark_step()
        _ = total.item()   # host read per step
    assert (met.counter_value("HostReads") or 0) - reads0 == 6
    assert (met.counter_value("aten::_local_scalar_dense") or 0) >= 6
    assert "aten::_local_scalar_dense" not in met.executed_fallback_ops()
    rep = met.metrics_report()
    line = line_of(test_host_reads_of_computed_values_are_reported, "# host read per step")
    assert "== host reads ==" in rep
    assert ("test_diagnose.py:%d in test_host_reads_of_computed_values_are_reported: 6 reads "
            "(1.00 per step over 6 steps), 0 ran the pending graph" % line) in rep, rep[-1500:]
    assert (met.counter_value("SyncCause::value_read") or 0) == cut0   # no graph was cut
    assert "hint: a read every step" in rep
    warns = [x for x in dbg.take_warnings() if "host reads" in x]
    assert any("last at test_diagnose.py:%d" % line in x for x in warns), warns
