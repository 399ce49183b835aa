"""torch.compile(backend="lazytpu"): graph outputs that are strided views of
a graph input or of an intermediate (the tensors AOTAutograd saves for
backward: transposed weights, attention's per-head q/k/v) come back as views
of the base the program returns, not as copies (python/lazytpu/compile.py).
Values, gradients and aliasing against eager."""
import pytest
import torch
import torch.nn.functional as F

import lazytpu
import lazytpu.compile as lc

DEV = torch.device("lazytpu")


def _mha(x, wqkv, wo, heads):
    b, s, d = x.shape
    q, k, v = F.linear(x, wqkv).split(d, dim=2)
    q, k, v = (t.reshape(b, s, heads, d // heads).transpose(1, 2) for t in (q, k, v))
    att = torch.softmax(q @ k.transpose(-2, -1) * (d // heads) ** -0.5, dim=-1)
    o = (att @ v).transpose(1, 2).reshape(b, s, d)
    return F.linear(o, wo)


def _records():
    """The recordings made so far (forward and backward graphs)."""
    import gc
    return [r for o in gc.get_objects() if type(o) is lc._LazytpuGraph
            for r in o.recs.values() if isinstance(r, lc._Recording)]


def test_attention_steps_match_eager_and_saved_views_are_not_copied():
    torch._dynamo.reset()
    torch.manual_seed(0)
    b, s, h, d = 2, 8, 2, 16
    wqkv = torch.randn(3 * d, d) / d ** 0.5
    wo = torch.randn(d, d) / d ** 0.5
    ref = [wqkv.clone().requires_grad_(), wo.clone().requires_grad_()]
    dev = [wqkv.to(DEV).requires_grad_(), wo.to(DEV).requires_grad_()]
    f = torch.compile(lambda x, a, c: _mha(x, a, c, h), backend="lazytpu")
    for step in range(4):
        x = torch.randn(b, s, d)
        out_r = _mha(x, *ref, h)
        out_d = f(x.to(DEV), *dev)
        g = torch.randn(b, s, d)
        out_r.backward(g)
        out_d.backward(g.to(DEV))
        torch.testing.assert_close(out_d.cpu(), out_r.detach(), rtol=2e-3, atol=1e-3)
        with torch.no_grad():
            for pr, pd in zip(ref, dev):
                torch.testing.assert_close(pd.grad.cpu(), pr.grad, rtol=2e-3, atol=1e-3)
                # an in-place update between steps: the next step's saved
                # views of the weights must see the new values
                pr -= 0.1 * pr.grad
                pd -= 0.1 * pd.grad
                pr.grad = pd.grad = None
        lazytpu.mark_step()
    views = [t for r in _records() for t in r.template
             if t.__class__ is tuple and t[0] in ("a", "v")]
    # the transposed output projection weight: a view of an input
    assert any(t[0] == "a" for t in views), views


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
def test_sliced_and_transposed_intermediates(dt):
    """Saved slices at an offset and transposes of one intermediate (split
    into three, as attention's qkv) across replays with new inputs."""
    torch._dynamo.reset()

    def fn(x, w):
        y = x @ w
        a, bb, c = y.split(4, dim=1)
        return (a.t() @ bb * c.t().sum()).sum(0)

    f = torch.compile(fn, backend="lazytpu")
    torch.manual_seed(1)
    for _ in range(3):
        x = torch.randn(5, 6, dtype=dt)
        w = torch.randn(6, 12, dtype=dt)
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        xd, wd = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
        fn(xr, wr).sum().backward()
        f(xd, wd).sum().backward()
        torch.testing.assert_close(xd.grad.cpu(), xr.grad, rtol=2e-3, atol=1e-3)
        torch.testing.assert_close(wd.grad.cpu(), wr.grad, rtol=2e-3, atol=1e-3)
    # the saved transposed slices are views of the program's y (one at an
    # offset), not copies
    views = [t for r in _records() for t in r.template
             if t.__class__ is tuple and t[0] == "v"]
    assert views and any(t[4] > 0 for t in views), views
