"""Shared helpers for the lazytpu Python tests: everything is compared with
eager PyTorch on the CPU (forward values and gradients)."""
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep

import pytest  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import lazytpu  # noqa: E402
import lazytpu.metrics as met  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def dev():
    return lazytpu.device()


@pytest.fixture
def spmd_partitioned(monkeypatch):
    """SPMD mode on, steps partitioned over the mesh (LAZYTPU_SPMD_PARTITION=1);
    afterwards SPMD mode as before and no global mesh."""
    import lazytpu.spmd as xs
    monkeypatch.setenv("XLA_USE_SPMD", "1")          # restored afterwards
    xs.use_spmd()
    monkeypatch.setenv("LAZYTPU_SPMD_PARTITION", "1")
    yield
    xs.set_global_mesh(None)


def fallback_counts():
    """{aten::op: count} of every CPU fallback so far."""
    return {n: met.counter_value(n) for n in met.executed_fallback_ops()}


def to_dev(x, dev):
    if isinstance(x, torch.Tensor):
        return x.detach().to(dev)
    return x


def _flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        res = []
        for o in out:
            res.extend(_flat(o))
        return res
    return []


def assert_close(a, b, atol, rtol, what=""):
    a = a.detach().cpu() if isinstance(a, torch.Tensor) else a
    b = b.detach().cpu() if isinstance(b, torch.Tensor) else b
    assert a.shape == b.shape, "%s: shape %s vs %s" % (what, tuple(a.shape), tuple(b.shape))
    assert a.dtype == b.dtype, "%s: dtype %s vs %s" % (what, a.dtype, b.dtype)
    if a.dtype.is_floating_point:
        torch.testing.assert_close(a.float(), b.float(), atol=atol, rtol=rtol,
                                   equal_nan=True, msg=lambda m: what + ": " + m)
    else:
        assert torch.equal(a, b), "%s: %s vs %s" % (what, a, b)


def check_op(fn, *inputs, dev=None, grad=True, atol=1e-5, rtol=1e-5, allow_fallback=(),
             dtype=None):
    """Runs fn on CPU copies and device copies of inputs; compares outputs and
    (if grad) the gradients of every floating input, with a random upstream
    gradient. Fails if an aten:: fallback ran (unless allowed)."""
    dev = dev or lazytpu.device()
    if dtype is not None:
        inputs = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point()
                  else x for x in inputs]
    before = fallback_counts()
    cpu_in = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    dev_in = [to_dev(x, dev) for x in inputs]
    if grad:
        for c, d in zip(cpu_in, dev_in):
            if isinstance(c, torch.Tensor) and c.is_floating_point():
                c.requires_grad_(True)
                d.requires_grad_(True)
    out_c = _flat(fn(*cpu_in))
    out_d = _flat(fn(*dev_in))
    assert len(out_c) == len(out_d)
    for i, (oc, od) in enumerate(zip(out_c, out_d)):
        assert od.device.type == "lazytpu", "output %d left the device" % i
        assert_close(od, oc, atol, rtol, "output %d" % i)
    if grad:
        gen = torch.Generator().manual_seed(1)
        diff = [(oc, od) for oc, od in zip(out_c, out_d) if oc.requires_grad]
        if diff:
            gs = [torch.randn(oc.shape, generator=gen).to(oc.dtype) for oc, _ in diff]
            torch.autograd.backward([oc for oc, _ in diff], gs)
            torch.autograd.backward([od for _, od in diff], [g.to(dev) for g in gs])
            for i, (c, d) in enumerate(zip(cpu_in, dev_in)):
                if isinstance(c, torch.Tensor) and c.requires_grad:
                    if c.grad is None:
                        assert d.grad is None, "input %d: grad only on device" % i
                        continue
                    assert d.grad is not None, "input %d: no gradient on the device" % i
                    assert_close(d.grad, c.grad, atol * 10, rtol * 10, "grad of input %d" % i)
    lazytpu.mark_step()
    after = fallback_counts()
    new = {k: v - before.get(k, 0) for k, v in after.items()
           if v - before.get(k, 0) > 0 and k not in allow_fallback}
    assert not new, "CPU fallbacks ran: %s" % new
    return out_d
