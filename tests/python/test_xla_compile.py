"""torch_xla.compile (and lazytpu.compile_step): a function traced lazily as
one step. In torch_xla compatibility mode (`python -m lazytpu`, a fresh
process): a small decoder-only training step (embedding, RMSNorm, grouped-
query attention, SiLU MLP, cross entropy, Adam) inside
torch_xla.compile(full_graph=True) against the same steps in eager PyTorch
on the CPU; full_graph refusing a value read, a CPU fallback and a step
boundary inside, with the line; max_different_graphs refusing a new shape;
the context-manager form; the name in the metrics report; 2.9's signature.
Then lazytpu's own name for it, in this process."""
import json
import os
import re
import subprocess
import sys

import pytest
import torch

import lazytpu
import lazytpu.compile  # noqa: F401  (registers the torch.compile backend)
import lazytpu.metrics as met

SCRIPT = r'''
import copy, inspect, json, math
import torch, torch.nn as nn, torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

R = {}
dev = torch_xla.device()
V, H, NH, NKV, I, L, B, S = 64, 32, 4, 2, 64, 2, 2, 8


class RMSNorm(nn.Module):
    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.hd = H // NH
        self.q = nn.Linear(H, NH * self.hd, bias=False)
        self.k = nn.Linear(H, NKV * self.hd, bias=False)
        self.v = nn.Linear(H, NKV * self.hd, bias=False)
        self.o = nn.Linear(NH * self.hd, H, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, NH, self.hd).transpose(1, 2)
        k = self.k(x).view(b, s, NKV, self.hd).transpose(1, 2)
        v = self.v(x).view(b, s, NKV, self.hd).transpose(1, 2)
        rep = NH // NKV        # grouped-query: each kv head serves `rep` query heads
        k = k[:, :, None].expand(b, NKV, rep, s, self.hd).reshape(b, NH, s, self.hd)
        v = v[:, :, None].expand(b, NKV, rep, s, self.hd).reshape(b, NH, s, self.hd)
        w = torch.einsum("bnsh,bnkh->bnsk", q, k) / math.sqrt(self.hd)
        w = F.softmax(w, dim=-1, dtype=torch.float32)
        out = torch.einsum("bnsk,bnkh->bnsh", w, v).transpose(1, 2).contiguous()
        return self.o(out.reshape(b, s, H))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.attn, self.n2 = RMSNorm(H), Attention(), RMSNorm(H)
        self.gate = nn.Linear(H, I, bias=False)
        self.up = nn.Linear(H, I, bias=False)
        self.down = nn.Linear(I, H, bias=False)

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, H)
        self.layers = nn.ModuleList([Layer() for _ in range(L)])
        self.norm = RMSNorm(H)
        self.out = nn.Linear(H, V, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x)
        return self.out(self.norm(x))


def make_step(model, opt):
    def decoder_step(data, target):
        opt.zero_grad()
        logits = model(data)
        loss = F.cross_entropy(logits.view(-1, V), target.view(-1))
        loss.backward()
        opt.step()
        return loss
    return decoder_step


def graphs_run():
    return (met.counter_value("CachedCompile") or 0) + (met.counter_value("UncachedCompile") or 0)


# ---- the training step vs eager CPU
torch.manual_seed(0)
cpu_model = Decoder()
xla_model = copy.deepcopy(cpu_model).to(dev)
cpu_step = make_step(cpu_model, torch.optim.Adam(cpu_model.parameters(), lr=1e-3))
xla_opt = torch.optim.Adam(xla_model.parameters(), lr=1e-3)
xla_step = torch_xla.compile(make_step(xla_model, xla_opt), full_graph=True, name="decoder_step")
g = torch.Generator().manual_seed(1)
data = torch.randint(0, V, (B, S), generator=g)
target = torch.randint(0, V, (B, S), generator=g)
xm.mark_step()                 # the model's copy to the device is not the step's
R["loss_cpu"], R["loss_xla"], R["graphs_per_call"], R["new_compiles"] = [], [], [], []
for i in range(4):
    R["loss_cpu"].append(cpu_step(data, target).item())
    d, t = data.to(dev), target.to(dev)
    g0, u0 = graphs_run(), met.counter_value("UncachedCompile") or 0
    loss = xla_step(d, t)
    R["graphs_per_call"].append(graphs_run() - g0)
    R["new_compiles"].append((met.counter_value("UncachedCompile") or 0) - u0)
    R["loss_xla"].append(loss.item())
sd = {k: v.cpu() for k, v in xla_model.state_dict().items()}
R["param_max_diff"] = max((sd[k] - v).abs().max().item() for k, v in cpu_model.state_dict().items())
R["param_max"] = max(v.abs().max().item() for v in cpu_model.state_dict().values())
R["report"] = met.metrics_report()

# ---- full_graph=True refuses executing while the function is traced
w = torch.arange(1.0, 4.0).to(dev)


def reads(a):
    b = a * 2
    if b.sum().item() > 0:  # LINE_ITEM
        b = b + 1
    return b


try:
    torch_xla.compile(reads, full_graph=True)(w)
    R["item_msg"] = None
except RuntimeError as e:
    R["item_msg"] = str(e)
R["after_error"] = (w * 3).sum().item()             # the guard is lifted
R["reads_lazy"] = torch_xla.compile(reads)(w).cpu().tolist()   # full_graph=False: allowed


def uniq(a):
    return torch.unique(a)  # LINE_UNIQUE


try:
    torch_xla.compile(uniq, full_graph=True)(w)
    R["fallback_msg"] = None
except RuntimeError as e:
    R["fallback_msg"] = str(e)


def marks(a):
    b = a + 1
    xm.mark_step()  # LINE_MARK
    return b


try:
    torch_xla.compile(marks, full_graph=True)(w)
    R["mark_msg"] = None
except RuntimeError as e:
    R["mark_msg"] = str(e)
R["reads_data_ok"] = torch_xla.compile(lambda a: a.cpu().tolist(), full_graph=True)(w)

# ---- max_different_graphs
def foo(x):
    return x + x


x10, x5, x3 = torch.ones(10).to(dev), torch.ones(5).to(dev), torch.ones(3).to(dev)
f1 = torch_xla.compile(foo, max_different_graphs=1)
R["same_shape"] = [f1(x10).sum().item(), f1(x10).sum().item()]
try:   # a new wrapper of the same function shares its count (torch_xla's session)
    torch_xla.compile(foo, max_different_graphs=1)(x5)
    R["limit_msg"] = None
except RuntimeError as e:
    R["limit_msg"] = str(e)


def foo2(x):
    return x * 3 - 1


f2 = torch_xla.compile(foo2, max_different_graphs=2)
foo2(x10)                      # traced outside: compiled by f2's opening step boundary
R["two_allowed"] = [f2(x10).sum().item(), f2(x5).sum().item(), f2(x10).sum().item()]
foo2(x3)
try:
    f2(x3)
    R["limit2_msg"] = None
except RuntimeError as e:
    R["limit2_msg"] = str(e)

# ---- the context-manager form
m0 = met.counter_value("MarkStep") or 0
with torch_xla.compile():
    y = w * 5
R["cm_marksteps"] = (met.counter_value("MarkStep") or 0) - m0
R["cm_value"] = y.cpu().tolist()
try:
    with torch_xla.compile(full_graph=True):
        (w * 2).sum().item()  # LINE_CM
    R["cm_msg"] = None
except RuntimeError as e:
    R["cm_msg"] = str(e)
with torch_xla.step():
    z = w - 1
R["step_value"] = z.cpu().tolist()

# ---- torch_xla 2.9's signature
R["params"] = list(inspect.signature(torch_xla.compile).parameters)
for kw in ("num_different_graphs_allowed", "custom_compile_options"):
    try:
        torch_xla.compile(foo, **{kw: 1})
        R[kw] = "accepted"
    except TypeError:
        R[kw] = "TypeError"
print("RESULT " + json.dumps(R))
'''


def _line(marker):
    for i, text in enumerate(SCRIPT.splitlines(), start=1):
        if marker in text:
            return i
    raise AssertionError(marker)


@pytest.fixture(scope="module")
def compat(tmp_path_factory):
    path = tmp_path_factory.mktemp("xla_compile") / "xla_compile_script.py"
    path.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XLA_", "PT_XLA", "PJRT_", "LAZYTPU_")) or k == "LAZYTPU_BIN_DIR"}
    env["PYTHONPATH"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                     "python")
    # compared with eager CPU in f32: a TPU-faithful default matmul level would differ
    env["LAZYTPU_MATMUL_PRECISION"] = "f32"
    p = subprocess.run([sys.executable, "-m", "lazytpu", str(path)], env=env,
                       capture_output=True, text=True, timeout=900)
    res = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and res, "exit %d\n%s\n%s" % (p.returncode, p.stdout[-4000:],
                                                           p.stderr[-6000:])
    return json.loads(res[0][len("RESULT "):])


def test_decoder_training_step_matches_eager_cpu(compat):
    r = compat
    for a, b in zip(r["loss_xla"], r["loss_cpu"]):
        assert abs(a - b) <= 1e-4 * abs(b), (r["loss_xla"], r["loss_cpu"])
    assert r["loss_cpu"][-1] < r["loss_cpu"][0]
    assert r["param_max_diff"] <= 2e-5 * max(1.0, r["param_max"]), r["param_max_diff"]
    # one program per call (forward, backward and Adam together); Adam's first
    # step (state created) and the later ones are two graphs, then cache hits
    assert r["graphs_per_call"] == [1, 1, 1, 1]
    assert r["new_compiles"] == [1, 1, 0, 0]


def test_full_graph_refuses_a_value_read_with_its_line(compat):
    m = compat["item_msg"]
    assert m and "torch_xla.compile(reads, full_graph=True)" in m, m
    assert "a value read" in m and "nothing may execute" in m
    assert "xla_compile_script.py:%d in reads" % _line("LINE_ITEM") in m, m
    assert compat["after_error"] == 18.0
    assert compat["reads_lazy"] == [3.0, 5.0, 7.0]
    assert compat["reads_data_ok"] == [1.0, 2.0, 3.0]     # reading data executes nothing


def test_full_graph_refuses_a_cpu_fallback_and_a_step_boundary(compat):
    m = compat["fallback_msg"]
    assert m and "aten::_unique2 has no lazytpu kernel" in m, m
    assert "xla_compile_script.py:%d in uniq" % _line("LINE_UNIQUE") in m, m
    m = compat["mark_msg"]
    assert m and "a step boundary" in m, m
    assert "xla_compile_script.py:%d in marks" % _line("LINE_MARK") in m, m


def test_max_different_graphs_refuses_a_new_shape(compat):
    assert compat["same_shape"] == [20.0, 20.0]
    m = compat["limit_msg"]
    assert m and m.startswith("Maximum number of different graphs allowed per function "
                              "exceeded: 1"), m
    assert "torch_xla.compile(foo) made a new graph 2" in m and "f32[5]" in m, m
    assert "its first was graph 1" in m and "f32[10]" in m, m
    assert compat["two_allowed"] == [20.0, 10.0, 20.0]
    m = compat["limit2_msg"]
    assert m and "exceeded: 2" in m and "graph 3" in m and "f32[3]" in m, m


def test_context_manager_form(compat):
    assert compat["cm_marksteps"] == 2
    assert compat["cm_value"] == [5.0, 10.0, 15.0]
    m = compat["cm_msg"]
    assert m and "torch_xla.compile(step, full_graph=True): a value read" in m, m
    assert "xla_compile_script.py:%d" % _line("LINE_CM") in m, m
    assert compat["step_value"] == [0.0, 1.0, 2.0]


def test_name_in_the_metrics_report(compat):
    rep = compat["report"]
    assert re.search(r"Counter: CompiledStep::decoder_step\s+Value: 4\b", rep), rep[-3000:]
    assert re.search(r"Counter: CompiledStepGraphs::decoder_step\s+Value: 2\b", rep)
    sec = rep[rep.index("== compiled steps =="):]
    assert "decoder_step: graph 1 (" in sec and "on call 1 at xla_compile_script.py:" in sec
    assert "decoder_step: graph 2 (" in sec and "arguments i64[2, 8], i64[2, 8]" in sec
    assert "decoder_step: graph 3" not in sec


def test_signature_is_torch_xla_2_9s(compat):
    assert compat["params"] == ["f", "full_graph", "name", "max_different_graphs"]
    assert compat["num_different_graphs_allowed"] == "TypeError"
    assert compat["custom_compile_options"] == "TypeError"


# ---------------------------------------------------------------- lazytpu's own name

def test_compile_step_lazytpu_api(dev):
    w = torch.tensor([1.0, -2.0, 3.0]).to(dev)

    @lazytpu.compile_step
    def double(a):
        return a * 2

    assert double(w).cpu().tolist() == [2.0, -4.0, 6.0]

    @lazytpu.compile_step(full_graph=True, name="readit")
    def readit(a):
        return (a * 2).sum().item()

    with pytest.raises(RuntimeError, match=r"lazytpu.compile_step\(readit, full_graph=True\): "
                                           r"a value read .*test_xla_compile.py:\d+ in readit"):
        readit(w)
    assert (w + 1).sum().item() == 5.0          # lifted again

    def scale(x):
        return x * 0.5

    guarded = lazytpu.compile_step(scale, max_different_graphs=1)
    assert guarded(w).cpu().tolist() == [0.5, -1.0, 1.5]
    with pytest.raises(RuntimeError, match="Maximum number of different graphs allowed per "
                                           "function exceeded: 1"):
        guarded(torch.ones(2, 2).to(dev))
    assert guarded(w).cpu().tolist() == [0.5, -1.0, 1.5]   # the known graph still runs
    with pytest.raises(TypeError):
        lazytpu.compile_step(scale, max_different_graphs=-1)

    # a torch.compile(backend="lazytpu") graph replayed on data inputs executes: refused too
    cfn = torch.compile(lambda a: a * 4 + 1, backend="lazytpu")
    for _ in range(2):
        assert cfn(w).cpu().tolist() == [5.0, -7.0, 13.0]      # recorded, then replayed
    with pytest.raises(RuntimeError, match=r"\(replayed, full_graph=True\): a graph "
                                           r"recorded by torch.compile"):
        lazytpu.compile_step(lambda a: cfn(a), full_graph=True, name="replayed")(w)
    assert (met.counter_value("CompiledStep::readit") or 0) >= 1


_SPLICED_REPLAY = """
import torch, lazytpu, lazytpu.compile, lazytpu.metrics as met
dev = lazytpu.device()
w = torch.tensor([1.0, -2.0, 3.0]).to(dev)
cfn = torch.compile(lambda a: a * 4 + 1, backend="lazytpu")
for _ in range(2):
    assert cfn(w).cpu().tolist() == [5.0, -7.0, 13.0]
got = lazytpu.compile_step(lambda a: cfn(a) * 2, full_graph=True, name="replayed")(w)
print("GOT", got.cpu().tolist(), met.counter_value("CompiledGraphSplice"))
"""


def test_small_replay_spliced_into_full_graph_step():
    """LAZYTPU_REPLAY_QUEUE=0: a small torch.compile graph replayed on data
    inputs joins the step's graph (nothing executes at the call), so a
    full_graph compile_step around it runs as one graph, with eager's values."""
    env = dict(os.environ, LAZYTPU_REPLAY_QUEUE="0")
    env["PYTHONPATH"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                     "python")
    p = subprocess.run([sys.executable, "-c", _SPLICED_REPLAY], env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    m = re.search(r"GOT \[10.0, -14.0, 26.0\] (\d+)", p.stdout)
    assert m and int(m.group(1)) >= 2, p.stdout + p.stderr[-2000:]
