"""torch.compile(backend="lazytpu"): a few training steps of an MLP, a small
CNN (batch norm) and a transformer block must give eager's losses, gradients
and parameters; after the first step nothing compiles and no op is traced
inside the compiled model (the FX graphs replay as recorded programs)."""
import copy
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazytpu
import lazytpu.metrics as met

DEV = torch.device("lazytpu")
STEPS = 4


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


class Block(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.ff(self.ln2(x))
        return self.head(x.mean(1))


def data(kind, seed):
    g = torch.Generator().manual_seed(seed)
    shape = {"mlp": (16, 32), "cnn": (8, 3, 16, 16), "block": (4, 12, 32)}[kind]
    return torch.randn(*shape, generator=g), torch.randint(0, 10, (shape[0],), generator=g)


def op_counters():
    return {n: met.counter_value(n) for n in met.counter_names() if n.startswith("lazytpu::")}


def traced_since(before):
    now = op_counters()
    return {n: v - before.get(n, 0) for n, v in now.items() if v != before.get(n, 0)}


@pytest.mark.parametrize("kind", ["mlp", "cnn", "block"])
def test_training_matches_eager_and_replays(kind):
    torch._dynamo.reset()
    torch.manual_seed(0)
    ref = {"mlp": MLP, "cnn": CNN, "block": Block}[kind]()
    model = copy.deepcopy(ref).to(DEV)
    cmodel = torch.compile(model, backend="lazytpu")
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS):
        x, y = data(kind, step)
        opt_ref.zero_grad()
        loss_ref = F.cross_entropy(ref(x), y)
        loss_ref.backward()
        opt.zero_grad()
        xd, yd = x.to(DEV), y.to(DEV)
        if step >= 2:
            compiles = met.counter_value("UncachedCompile")
            before = op_counters()
        loss = F.cross_entropy(cmodel(xd), yd)
        loss.backward()
        if step >= 2:
            # the loss is traced lazily (outside the compiled model), the
            # model's forward and backward graphs are replayed
            traced = traced_since(before)
            inside = {n: v for n, v in traced.items()
                      if "conv" in n or "matmul" in n or "norm" in n or "gelu" in n}
            assert inside == {}, traced
        grads = [p.grad.cpu() for p in model.parameters()]
        for g, p in zip(grads, ref.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=2e-4, atol=2e-5)
        torch.testing.assert_close(loss.cpu(), loss_ref.detach(), rtol=1e-4, atol=1e-5)
        opt_ref.step()
        opt.step()
        lazytpu.mark_step()
        if step >= 2:
            assert met.counter_value("UncachedCompile") == compiles
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q.detach(), rtol=2e-4, atol=2e-5)
    for b, c in zip(model.buffers(), ref.buffers()):
        torch.testing.assert_close(b.cpu(), c, rtol=2e-4, atol=2e-5)
    assert (met.counter_value("CompiledGraphRun") or 0) >= 2 * (STEPS - 1)


def test_whole_step_compiled_runs_without_tracing():
    """A compiled function with the loss inside: steady steps trace nothing
    at all before the optimizer."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    ref = MLP()
    model = copy.deepcopy(ref).to(DEV)

    def loss_fn(m, x, y):
        return F.cross_entropy(m(x), y)

    closs = torch.compile(loss_fn, backend="lazytpu")
    for step in range(3):
        x, y = data("mlp", step)
        xd, yd = x.to(DEV), y.to(DEV)
        before = op_counters()
        runs = met.counter_value("CompiledGraphRun")
        loss = closs(model, xd, yd)
        loss.backward()
        if step:
            # autograd's AccumulateGrad copies each gradient it cannot steal
            # (one identity reshape per parameter, outside the graphs)
            traced = traced_since(before)
            # the saved transposed weight of fc2 comes back as a view of
            # the weight (lazytpu.compile: no copy in the program): one
            # as_strided traced per call
            assert set(traced) <= {"lazytpu::reshape", "lazytpu::as_strided"}, traced
            assert traced.get("lazytpu::as_strided", 0) <= 1
            assert traced.get("lazytpu::reshape", 0) <= 4 + traced.get("lazytpu::as_strided", 0)
            assert met.counter_value("CompiledGraphRun") - runs == 2
        loss_ref = loss_fn(ref, x, y)
        loss_ref.backward()
        torch.testing.assert_close(loss.cpu(), loss_ref.detach(), rtol=1e-4, atol=1e-5)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=2e-4, atol=2e-5)
            p.grad = None
            q.grad = None
        lazytpu.mark_step()


def test_inference_and_recompile_are_reported():
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    md = copy.deepcopy(m).to(DEV)
    cm = torch.compile(md, backend="lazytpu", dynamic=False)
    rec = met.counter_value("DynamoRecompile") or 0
    with torch.no_grad():
        for n in (5, 5, 7, 7):
            x = torch.randn(n, 8)
            torch.testing.assert_close(cm(x.to(DEV)).cpu(), m(x), rtol=1e-5, atol=1e-6)
    assert met.counter_value("DynamoRecompile") == rec + 1
    report = met.metrics_report()
    assert "recompile of" in report and "guard failed" in report


def test_recorded_recompile_is_diagnosed_like_a_sync():
    """A graph recorded again for another input shape is a recompilation the
    report explains as for a step's graph (one submit path, lazy/submit.c):
    the input, both shapes, cause explicit and the user's frame."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 13), nn.Tanh(), nn.Linear(13, 3))
    md = copy.deepcopy(m).to(DEV)
    cm = torch.compile(md, backend="lazytpu", dynamic=False)
    before = met.counter_value("Recompilation::explicit") or 0
    with torch.no_grad():
        for n in (6, 6, 9):
            x = torch.randn(n, 8)
            torch.testing.assert_close(cm(x.to(DEV)).cpu(), m(x), rtol=1e-5, atol=1e-6)
    # (other graphs of this process may be explained too: parameter
    # transfers of the same structure and other shapes)
    assert (met.counter_value("Recompilation::explicit") or 0) >= before + 1
    report = met.metrics_report()
    notes = [ln for ln in report.splitlines()
             if re.match(r"recompiled: graph [0-9a-f]{16} input \d+ \(f32\) \[6, 8\] -> "
                         r"\[9, 8\]; cause explicit; at ", ln)]
    assert len(notes) == 1, report[report.find("== recompilation =="):]
    # the user's line, found by the shim's frame walk at the recording
    assert re.search(r"at test_compile_backend\.py:\d+ in "
                     r"test_recorded_recompile_is_diagnosed_like_a_sync$", notes[0]), notes[0]


def test_graph_break_falls_back_to_lazy_tracing():
    torch._dynamo.reset()

    def f(x):
        y = torch.sin(x) * 2
        torch._dynamo.graph_break()
        return torch.cos(y) + 1

    cf = torch.compile(f, backend="lazytpu")
    x = torch.randn(6)
    for _ in range(3):
        torch.testing.assert_close(cf(x.to(DEV)).cpu(), f(x), rtol=1e-5, atol=1e-6)
    assert (met.counter_value("DynamoGraphBreak") or 0) >= 1
    assert "graph break" in met.metrics_report()


def test_random_graph_stays_lazy():
    torch._dynamo.reset()
    torch.manual_seed(0)

    def f(x):
        return F.dropout(x, 0.5, training=True) + 1

    cf = torch.compile(f, backend="lazytpu")
    x = torch.ones(1000).to(DEV)
    a = cf(x).cpu()
    b = cf(x).cpu()
    assert not torch.equal(a, b)          # a fresh mask per call
    assert set(a.unique().tolist()) <= {1.0, 3.0}
    assert "runs lazily" in met.metrics_report()


def test_inference_graph_updates_running_stats():
    """Batch norm in training mode under no_grad: dynamo's inference graph
    writes the running stats into its inputs; replays must too."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    ref = CNN()
    m = copy.deepcopy(ref).to(DEV)
    cm = torch.compile(m, backend="lazytpu")
    runs = met.counter_value("CompiledGraphRun") or 0
    with torch.no_grad():
        for s in range(4):
            x, _ = data("cnn", s)
            torch.testing.assert_close(cm(x.to(DEV)).cpu(), ref(x), rtol=1e-4, atol=1e-5)
            lazytpu.mark_step()
    for b, c in zip(m.buffers(), ref.buffers()):
        torch.testing.assert_close(b.cpu(), c, rtol=1e-4, atol=1e-5)
    # every call runs the recorded program, the recording call too
    assert (met.counter_value("CompiledGraphRun") or 0) - runs == 4
