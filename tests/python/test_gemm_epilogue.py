"""GEMM epilogues (lazy/compile_pattern.c lt_cc_epilogues, lazy/kernels/
matmul.c lt_kernel_matmul_epi): the activation after a Linear (ReLU in an
MLP, GELU in a transformer's feed-forward, on 2-D and 3-D input) runs inside
the GEMM's kernel, also when autograd keeps the pre-activation, and in the
backward the activation's gradient runs inside the GEMM that produces its
incoming gradient. Values and gradients against eager PyTorch on the CPU,
f32 and bf16, and the kernel count against LAZYTPU_GEMM_EPILOGUE=0 (the
unfused program). Each case runs in a fresh process (LAZYTPU_PROFILE and
LAZYTPU_GEMM_EPILOGUE are read once)."""
import json
import os
import subprocess
import sys

import pytest

SCRIPT = r'''
import json, sys, torch, torch.nn as nn, torch.nn.functional as F, lazytpu
import lazytpu.metrics as met
kind, dt = sys.argv[1], getattr(torch, sys.argv[2])
torch.manual_seed(0)
if kind == "mlp":
    model = nn.Sequential(nn.Linear(96, 64), nn.ReLU(), nn.Linear(64, 10))
    x = torch.randn(48, 96)
elif kind == "mlp_tanh_sigmoid":
    model = nn.Sequential(nn.Linear(40, 72), nn.Tanh(), nn.Linear(72, 24), nn.Sigmoid(),
                          nn.Linear(24, 5))
    x = torch.randn(33, 40)
else:   # transformer feed-forward on [batch, seq, width]: Linear-GELU-Linear
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
    x = torch.randn(4, 16, 32)
model = model.to(dt)
x = x.to(dt)
def run(dev):
    m = nn.Sequential(*[l for l in __import__("copy").deepcopy(model)]).to(dev)
    xi = x.detach().clone().to(dev).requires_grad_()
    y = m(xi)
    g = torch.linspace(-1, 1, y.numel()).reshape(y.shape).to(dt).to(dev)
    (y * y * g).sum().backward()   # the gradient depends on the forward
    if dev != "cpu":
        lazytpu.mark_step()   # one program: forward and backward
    out = [y, xi.grad] + [p.grad for p in m.parameters()]
    return [t.detach().cpu().double() for t in out]
ref = run("cpu")
got = run(lazytpu.device())
lazytpu.wait_device_ops()
errs = [((a - b).abs().max() / (a.abs().max() + 1e-6)).item() for a, b in zip(ref, got)]
rep = met.metrics_report()
rows = {}
lines = rep[rep.index("== kernel profile ==\n"):].splitlines()[2:]
for line in lines:
    if line.startswith("all kernels"):
        break
    f = line.split()
    rows[f[0]] = int(f[1])
print("RESULT " + json.dumps({"errs": errs, "rows": rows}))
'''


def _run(kind, dt, epilogue):
    env = dict(os.environ, LAZYTPU_NUM_CORES="1", LAZYTPU_PROFILE="1",
               LAZYTPU_GEMM_EPILOGUE="1" if epilogue else "0")
    p = subprocess.run([sys.executable, "-c", SCRIPT, kind, dt], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


@pytest.mark.parametrize("kind,act,bwd", [
    # relu saves its output; its gradient is absorbed by the bias's
    # gradient (a column sum: compile_fuse.c), not an epilogue
    ("mlp", "relu", None),
    ("mlp_tanh_sigmoid", "tanh", None),
    ("transformer", "gelu", "gelu_backward"),  # gelu saves its input: h stored too
])
@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_linear_activation_epilogue(kind, act, bwd, dt):
    fused = _run(kind, dt, True)
    plain = _run(kind, dt, False)
    tol = 2e-5 if dt == "float32" else 2e-2
    for r in (fused, plain):
        assert max(r["errs"]) < tol, r["errs"]   # forward and every gradient
    rows = fused["rows"]
    # the activation runs inside the Linear's GEMM, not as a kernel of its own
    assert rows.get("addmm+fused(%s)" % act) == 1, rows
    assert "fused(%s)" % act not in rows, rows
    assert "fused(%s)" % act in plain["rows"], plain["rows"]
    if bwd:   # the activation's gradient inside the GEMM producing its input
        assert rows.get("mm+fused(%s)" % bwd) == 1, rows
        assert "fused(%s)" % bwd not in rows, rows
    assert sum(rows.values()) < sum(plain["rows"].values()), (rows, plain["rows"])


@pytest.mark.parametrize("act", ["silu", "gelu", "leaky_relu", "relu"])
def test_gated_mlp_backward_epilogues_do_not_wait_on_each_other(act):
    """act(x @ W) * (x @ V) with x requiring grad (a SwiGLU / GeGLU MLP, the
    recomputed MLP of a Llama under gradient checkpointing): the backward has
    two GEMMs whose candidate epilogues each read the other's result; both
    fused would be two steps waiting on each other ("compile: step graph has
    a cycle" before). One keeps the group, the values match eager."""
    import torch
    import torch.nn.functional as F
    import lazytpu

    fn = getattr(F, act)

    def gated(dev):
        g = torch.Generator().manual_seed(3)
        x, w, v = (torch.randn(*s, generator=g).to(dev) for s in ((6, 16), (16, 24), (16, 24)))
        x.requires_grad_()
        y = fn(x @ w) * (x @ v)
        (y * y).sum().backward()
        return [y.detach(), x.grad]

    def plain(dev):   # the same shape of graph without autograd
        g = torch.Generator().manual_seed(4)
        x, w, v = (torch.randn(*s, generator=g).to(dev) for s in ((4, 8), (8, 8), (8, 8)))
        a, b = x @ w, x @ v
        s = a + 1
        return [s * b, (a * b) @ w, s @ v]

    for case in (gated, plain):
        want = case("cpu")
        got = case(lazytpu.device())
        lazytpu.mark_step()
        for w_, g_ in zip(want, got):
            torch.testing.assert_close(g_.cpu(), w_, atol=2e-5, rtol=2e-5)
