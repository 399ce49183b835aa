"""torch.optim with fused=True (aten::_fused_adam_ / _fused_adamw_ /
_fused_sgd_ / _fused_adagrad_, traced on the device) and foreach=True on lazytpu, compared
with the same optimizer in eager PyTorch on the CPU after several steps."""
import contextlib
import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import lazytpu
import lazytpu.metrics as met
from conftest import assert_close, fallback_counts

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

CONFIGS = {
    "adamw_fused": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, fused=True)),
    "adamw_fused_amsgrad": (torch.optim.AdamW, dict(lr=1e-2, amsgrad=True, fused=True)),
    "adamw_fused_tensor_lr": (torch.optim.AdamW, dict(lr=torch.tensor(1e-2), fused=True)),
    "adam_fused": (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.05, fused=True)),
    "adam_fused_maximize": (torch.optim.Adam, dict(lr=1e-2, betas=(0.8, 0.9), maximize=True,
                                                   amsgrad=True, fused=True)),
    "sgd_fused": (torch.optim.SGD, dict(lr=0.1, fused=True)),
    "sgd_fused_momentum": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1,
                                                 weight_decay=0.01, fused=True)),
    "sgd_fused_nesterov": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True,
                                                 maximize=True, fused=True)),
    "sgd_fused_tensor_lr": (torch.optim.SGD, dict(lr=torch.tensor(0.1), momentum=0.5,
                                                  fused=True)),
    "adagrad_fused": (torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01, weight_decay=0.01,
                                                initial_accumulator_value=0.1, fused=True)),
    "adagrad_fused_maximize": (torch.optim.Adagrad, dict(lr=0.1, maximize=True, fused=True)),
    "adamw_foreach": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, foreach=True)),
    "adam_foreach_amsgrad": (torch.optim.Adam, dict(lr=1e-2, amsgrad=True, foreach=True)),
    "sgd_foreach": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, foreach=True)),
}


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.LayerNorm(16),
                         nn.Linear(16, 3))


def data(n=5):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(6, 8, generator=g), torch.randint(0, 3, (6,), generator=g))
            for _ in range(n)]


def train(model, opt, batches, dev):
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x.to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        losses.append(loss.detach().to("cpu"))
    return torch.stack(losses)


@contextlib.contextmanager
def no_cpu_fallback():
    before = fallback_counts()
    yield
    lazytpu.mark_step()
    new = {k: v - before.get(k, 0) for k, v in fallback_counts().items()
           if v - before.get(k, 0) > 0}
    assert not new, "CPU fallbacks ran: %s" % new


def optimizer(cls, kw, params):
    kw = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    return cls(params, **kw)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_matches_eager_after_steps(dev, name):
    cls, kw = CONFIGS[name]
    cpu = make_model()
    m = copy.deepcopy(cpu).to(dev)
    batches = data()
    opt_c, opt_d = optimizer(cls, kw, cpu.parameters()), optimizer(cls, kw, m.parameters())
    with no_cpu_fallback():
        got = train(m, opt_d, batches, dev)
    ref = train(cpu, opt_c, batches, "cpu")
    assert_close(got, ref, 1e-5, 1e-5, "losses")
    for (n, a), (_, b) in zip(m.named_parameters(), cpu.named_parameters()):
        assert_close(a, b, 1e-5, 1e-5, n)
        for k, v in opt_c.state[b].items():
            assert_close(opt_d.state[a][k], v, 1e-5, 1e-5, "%s state %s" % (n, k))


OTHERS = ["Adadelta", "Adagrad", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop"]


@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("name", OTHERS)
def test_other_optimizers_foreach_and_loop(dev, name, foreach):
    cls = getattr(torch.optim, name)
    cpu = make_model()
    m = copy.deepcopy(cpu).to(dev)
    batches = data(4)
    with no_cpu_fallback():
        got = train(m, cls(m.parameters(), lr=1e-2, foreach=foreach), batches, dev)
    ref = train(cpu, cls(cpu.parameters(), lr=1e-2, foreach=foreach), batches, "cpu")
    assert_close(got, ref, 1e-5, 1e-5, "losses")
    for (n, a), (_, b) in zip(m.named_parameters(), cpu.named_parameters()):
        assert_close(a, b, 1e-5, 1e-5, n)


@pytest.mark.parametrize("name", ["adamw_fused", "sgd_fused_momentum"])
def test_fused_step_reads_no_value(dev, name):
    """The whole update is traced: opt.step() reads nothing back."""
    cls, kw = CONFIGS[name]
    m = make_model().to(dev)
    opt = optimizer(cls, kw, m.parameters())
    for x, y in data(3):
        opt.zero_grad()
        nn.functional.cross_entropy(m(x.to(dev)), y.to(dev)).backward()
        reads = met.counter_value("SyncCause::value_read") or 0
        opt.step()
        assert (met.counter_value("SyncCause::value_read") or 0) == reads
        lazytpu.mark_step()


@pytest.mark.parametrize("adamw", [False, True])
def test_bfloat16_parameters(dev, adamw):
    """bf16 parameters and state: computed in f32 and rounded once when
    stored, as the CPU kernel does (the same gradients on both sides)."""
    fn = torch._fused_adamw_ if adamw else torch._fused_adam_
    cpu, _ = _adam_tensors("cpu")
    cpu = [[t.to(torch.bfloat16) for t in lst] for lst in cpu[:5]] + [cpu[5]]
    d = [[t.to(dev) for t in lst] for lst in cpu]
    kw = dict(lr=1e-2, beta1=0.9, beta2=0.999, weight_decay=0.1, eps=1e-8, amsgrad=False,
              maximize=False)
    for _ in range(3):
        torch._foreach_add_(cpu[5], 1)
        torch._foreach_add_(d[5], 1)
        fn(*cpu[:4], [], cpu[5], **kw)
        fn(*d[:4], [], d[5], **kw)
    for name, a, b in zip(["param", "grad", "exp_avg", "exp_avg_sq"], d, cpu):
        for i, (x, y) in enumerate(zip(a, b)):
            # one bf16 ulp: a different rounding of an f32 value near a tie
            assert_close(x, y, 1e-6, 2 ** -7, "%s %d" % (name, i))


def _adam_tensors(dev, n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(4, 5), (7,), (2, 3, 2)][:n]
    ps = [torch.randn(s, generator=g) for s in shapes]
    gs = [torch.randn(s, generator=g) * 64 for s in shapes]
    ms = [torch.randn(s, generator=g) * 0.1 for s in shapes]
    vs = [torch.rand(s, generator=g) * 0.1 for s in shapes]
    xs = [v + 0.01 for v in vs]
    steps = [torch.tensor(float(3 + i)) for i in range(n)]
    cpu = [ps, gs, ms, vs, xs, steps]
    return cpu, [[t.to(dev) for t in lst] for lst in cpu]


@pytest.mark.parametrize("adamw", [False, True])
@pytest.mark.parametrize("found", [0.0, 1.0])
@pytest.mark.parametrize("lr_kind", ["float", "cpu_tensor", "device_tensor"])
def test_fused_adam_grad_scale_found_inf_and_lr_tensor(dev, adamw, found, lr_kind):
    """grad_scale divides the gradients (written back unscaled); found_inf
    == 1 leaves everything unchanged; lr as a float, a host tensor or a
    device tensor (the .tensor_lr overloads)."""
    fn = torch._fused_adamw_ if adamw else torch._fused_adam_
    cpu, d = _adam_tensors(dev)
    lr = {"float": 0.05, "cpu_tensor": torch.tensor(0.05)}.get(lr_kind)
    kw = dict(beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-8, amsgrad=True, maximize=False)
    fn(*cpu, lr=lr if lr is not None else torch.tensor(0.05), grad_scale=torch.tensor(64.0),
       found_inf=torch.tensor(found), **kw)
    lr_d = lr if lr is not None else torch.tensor(0.05, device=dev)
    with no_cpu_fallback():
        fn(*d, lr=lr_d, grad_scale=torch.tensor(64.0, device=dev),
           found_inf=torch.tensor(found, device=dev), **kw)
    for name, a, b in zip(["param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"],
                          d, cpu):
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, 1e-6, 1e-5, "%s %d" % (name, i))
    if found:
        _, fresh = _adam_tensors("cpu")
        for a, b in zip(cpu[0] + cpu[1], fresh[0] + fresh[1]):
            assert torch.equal(a, b)


@pytest.mark.parametrize("found", [0.0, 1.0])
@pytest.mark.parametrize("first", [False, True])
def test_fused_sgd_grad_scale_found_inf(dev, found, first):
    g = torch.Generator().manual_seed(5)
    shapes = [(3, 4), (6,)]
    cpu = [[torch.randn(s, generator=g) for s in shapes] for _ in range(3)]
    d = [[t.to(dev) for t in lst] for lst in cpu]
    kw = dict(weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.2, nesterov=False,
              maximize=False, is_first_step=first)
    torch._fused_sgd_(*cpu, grad_scale=torch.tensor(8.0), found_inf=torch.tensor(found), **kw)
    with no_cpu_fallback():
        torch._fused_sgd_(*d, grad_scale=torch.tensor(8.0, device=dev),
                          found_inf=torch.tensor(found, device=dev), **kw)
    for name, a, b in zip(["param", "grad", "momentum_buffer"], d, cpu):
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, 1e-6, 1e-5, "%s %d" % (name, i))


@pytest.mark.parametrize("found", [0.0, 1.0])
@pytest.mark.parametrize("lr_kind", ["float", "device_tensor"])
def test_fused_adagrad_grad_scale_found_inf(dev, found, lr_kind):
    cpu, _ = _adam_tensors("cpu")
    cpu = [cpu[0], cpu[1], cpu[3], cpu[5]]          # params, grads, state_sums, steps
    d = [[t.to(dev) for t in lst] for lst in cpu]
    kw = dict(lr_decay=0.05, weight_decay=0.01, eps=1e-10, maximize=False)
    lr_c = 0.1 if lr_kind == "float" else torch.tensor(0.1)
    lr_d = 0.1 if lr_kind == "float" else torch.tensor(0.1, device=dev)
    torch._fused_adagrad_(*cpu, lr=lr_c, grad_scale=torch.tensor(64.0),
                          found_inf=torch.tensor(found), **kw)
    with no_cpu_fallback():
        torch._fused_adagrad_(*d, lr=lr_d, grad_scale=torch.tensor(64.0, device=dev),
                              found_inf=torch.tensor(found, device=dev), **kw)
    for name, a, b in zip(["param", "grad", "state_sum", "step"], d, cpu):
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, 1e-6, 1e-5, "%s %d" % (name, i))


@pytest.mark.parametrize("cls", [torch.optim.AdamW, torch.optim.SGD])
def test_grad_scaler_with_fused_optimizer(dev, cls):
    """torch.amp.GradScaler hands fused optimizers grad_scale and found_inf
    (no unscale pass of its own); an overflowing step is skipped and the
    scale backs off, as on the CPU."""
    cpu = make_model()
    m = copy.deepcopy(cpu).to(dev)

    def run(model, d):
        opt = cls(model.parameters(), lr=1e-2, fused=True)
        scaler = torch.amp.GradScaler(torch.device(d).type, init_scale=2.0 ** 10,
                                      growth_interval=2)
        for i, (x, y) in enumerate(data(6)):
            if i == 3:
                x = x.clone()
                x[0, 0] = float("inf")
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x.to(d)), y.to(d))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if d != "cpu":
                lazytpu.mark_step()
        return scaler.get_scale()

    with no_cpu_fallback():
        scale = run(m, dev)
    assert scale == run(cpu, "cpu")
    for (n, a), (_, b) in zip(m.named_parameters(), cpu.named_parameters()):
        assert_close(a, b, 1e-5, 1e-5, n)


def test_fused_with_grad_enabled_is_refused_clearly(dev):
    p = torch.zeros(3, device=dev, requires_grad=True)
    z = [torch.zeros(3, device=dev)]
    with pytest.raises(RuntimeError, match="no_grad"):
        torch._fused_sgd_([p], z, [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0,
                          nesterov=False, maximize=False, is_first_step=False)


def test_torch_xla_compat_mode_fused_refused_foreach_runs():
    """torch_xla compatibility mode: the device is "xla", which torch.optim
    does not list for fused kernels; AdamW(fused=True) is refused before the
    first update with torch's RuntimeError, as under torch_xla, and
    foreach=True runs and matches the CPU."""
    script = textwrap.dedent("""
        import copy, torch, torch.nn as nn
        import torch_xla.core.xla_model as xm
        dev = xm.xla_device()
        torch.manual_seed(0)
        cpu = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
        m = copy.deepcopy(cpu).to(dev)
        opt = torch.optim.AdamW(m.parameters(), fused=True)
        m(torch.randn(3, 8, device=dev)).sum().backward()
        try:
            opt.step()
            raise SystemExit("fused=True ran on xla")
        except RuntimeError as e:
            assert "fused=True" in str(e), e
        w0 = [p.detach().cpu() for p in m.parameters()]
        assert all(torch.equal(a, b) for a, b in zip(w0, cpu.parameters()))
        m.zero_grad()
        x = torch.randn(4, 8)
        oc = torch.optim.AdamW(cpu.parameters(), lr=1e-2, foreach=True)
        od = torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=True)
        for _ in range(3):
            oc.zero_grad(); od.zero_grad()
            cpu(x).square().sum().backward(); oc.step()
            m(x.to(dev)).square().sum().backward(); od.step(); xm.mark_step()
        for a, b in zip(m.parameters(), cpu.parameters()):
            torch.testing.assert_close(a.cpu(), b, atol=1e-5, rtol=1e-5)
        print("COMPAT-OK")
    """)
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("XLA_", "PT_XLA", "PJRT_", "LAZYTPU_")) and k != "LAZYTPU_BIN_DIR":
            env.pop(k)
    env["PYTHONPATH"] = os.path.join(REPO, "python")
    # compared with eager CPU in f32: a TPU-faithful default matmul level would differ
    env["LAZYTPU_MATMUL_PRECISION"] = "f32"
    p = subprocess.run([sys.executable, "-m", "lazytpu", "-c", script], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "COMPAT-OK" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
