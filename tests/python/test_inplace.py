"""Every public in-place Tensor method runs on the device and matches eager.

In-place ops reach the device through functionalization: PyTorch's generated
kernels, or lazytpu's own Functionalize kernels (backend/functionalize.cpp)
that map an in-place overload to its functional one. A wrong mapping (e.g.
pow_.Scalar -> pow.Scalar, whose first argument is the Scalar) or an
in-place op without a functional twin of the same signature (polygamma_)
fails only when that method is called, so the sweep calls them all.
"""
import pytest
import torch

import lazytpu

DEV = lazytpu.device()

# not value ops, or covered elsewhere with their own semantics
SKIP = {"requires_grad_", "share_memory_", "resize_", "resize_as_", "set_", "detach_",
        "copy_", "put_", "map_", "map2_", "apply_", "sparse_resize_",
        "sparse_resize_and_clear_", "retain_grad", "record_stream"}
RANDOM = {"bernoulli_", "cauchy_", "exponential_", "geometric_", "log_normal_", "normal_",
          "random_", "uniform_"}


def _methods():
    return sorted(n for n in dir(torch.Tensor)
                  if n.endswith("_") and not n.startswith("_") and n not in SKIP
                  and callable(getattr(torch.Tensor, n)))


def _eager_call(name):
    """The first argument pattern eager accepts on a [4, 4] float tensor:
    (), a float scalar, a tensor, an int scalar; None if none does."""
    f = getattr(torch.Tensor, name)
    for args in ((), (0.5,), ("T",), (1,)):
        torch.manual_seed(0)
        x = torch.rand(4, 4) + 0.1
        a = [torch.rand(4, 4) + 0.1 if v == "T" else v for v in args]
        try:
            f(x.clone(), *a)
        except Exception:
            continue
        return x, a
    return None


def test_sweep_covers_the_common_in_place_methods():
    names = _methods()
    for n in ("add_", "mul_", "pow_", "square_", "polygamma_", "clamp_", "sigmoid_",
              "masked_fill_", "index_add_", "lerp_", "addcmul_"):
        assert n in names


@pytest.mark.parametrize("name", _methods())
def test_in_place_method_matches_eager(name):
    call = _eager_call(name)
    if call is None:
        pytest.skip("needs arguments of another kind")
    x, args = call
    f = getattr(torch.Tensor, name)
    want = f(x.clone(), *args)
    d = x.to(DEV)
    out = f(d, *[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args])
    assert out is d, "in-place method must return self"
    got = d.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    if name in RANDOM:
        return
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("exp", [2, 0.5, -1, 3.0])
def test_pow_square_float_power_in_place(exp):
    x = torch.rand(3, 5) + 0.5
    d = x.to(DEV)
    d.pow_(exp)
    torch.testing.assert_close(d.cpu(), x.clone().pow_(exp))
    d = x.to(DEV)
    d.square_()
    torch.testing.assert_close(d.cpu(), x.clone().square_())
    xd = x.double()
    d = xd.to(DEV)
    d.float_power_(exp)
    torch.testing.assert_close(d.cpu(), xd.clone().float_power_(exp))


def test_in_place_through_a_view_and_autograd():
    x = torch.rand(4, 6) + 0.5
    w = torch.rand(4, 6, requires_grad=True)
    wd = w.detach().to(DEV).requires_grad_()
    for t, ww in ((x.clone(), w), (x.to(DEV), wd)):
        v = t[:, 1:4]
        v.pow_(2).polygamma_(1)
        (t * ww).sum().backward()
    torch.testing.assert_close(wd.grad.cpu(), w.grad)


def _detach_aliases(dev):
    """detach() is an alias, also of a tensor already updated in place (a
    Parameter after an optimizer step) and of a view: writing through it
    changes the original, as in eager (EMA updates, `p.detach().zero_()`,
    safetensors / accelerate telling tied weights apart by storage)."""
    p = torch.nn.Parameter(torch.ones(4, device=dev))
    with torch.no_grad():
        p.add_(1)
    d = p.detach()
    d.mul_(3)
    base = torch.ones(4, 4, device=dev)
    v = base[1]
    v.add_(1)
    v.detach().zero_()
    same = d.untyped_storage().data_ptr() == p.untyped_storage().data_ptr()
    return p.detach().cpu(), base.cpu(), same


def test_detach_of_an_updated_tensor_is_an_alias():
    pe, be, same_e = _detach_aliases("cpu")
    pd, bd, same_d = _detach_aliases(DEV)
    torch.testing.assert_close(pd, pe)
    torch.testing.assert_close(bd, be)
    assert same_e and same_d


def _dev(x):
    return x.to(DEV)


@pytest.mark.parametrize("op", ["add_", "mul_", "copy_", "zero_", "clamp_"])
def test_mutating_an_alias_keeps_every_live_alias_in_step(op):
    """A whole-base alias (detach) whose storage no other tensor shares is
    made its own base on its first mutation (backend/functionalize_util.h:
    a Parameter, a momentum buffer); while any alias lives (the base, a
    detach, a .data copy) mutations reach all of them, as in eager."""
    torch.manual_seed(0)
    x = torch.randn(4, 3)
    other = torch.randn(4, 3)

    def mutate(t, o):
        if op == "add_":
            t.add_(o, alpha=0.5)
        elif op == "mul_":
            t.mul_(o)
        elif op == "copy_":
            t.copy_(o)
        elif op == "zero_":
            t.zero_()
        else:
            t.clamp_(-0.2, 0.3)

    def run(dev):
        out = []
        base = x.clone().to(dev)
        p = base.detach()                 # alias of a live base
        mutate(p, other.to(dev))
        out.append(base.clone())
        del base                          # now p's storage is p's alone
        mutate(p, other.to(dev))
        out.append(p.clone())
        d1 = p.data                       # a .data copy and a detach: aliases again
        d2 = p.detach()
        mutate(p, (other * 2).to(dev))
        out += [d1.clone(), d2.clone()]
        mutate(d2, other.to(dev))         # through an alias, back to p
        out.append(p.clone())
        del d1, d2
        mutate(p, other.to(dev))
        out.append(p.clone())
        # views that do not cover their (dropped) base stay views
        s = x.clone().to(dev)[1:3]
        mutate(s, other[1:3].to(dev))
        tr = x.clone().to(dev).t()
        mutate(tr, other.t().to(dev))
        out += [s.clone(), tr.clone()]
        return [o.cpu() for o in out]

    for got, want in zip(run(DEV), run("cpu")):
        torch.testing.assert_close(got, want)


def test_parameters_and_momentum_buffers_match_eager_over_steps():
    """nn.Parameter and SGD's momentum buffers are detach aliases: after the
    first update each is its own base; a state_dict taken before the step
    (an alias) still sees the update, as in eager."""
    def train(dev):
        torch.manual_seed(0)
        m = torch.nn.Linear(5, 3).to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(8, 5).to(dev)
        sd = m.state_dict()                     # aliases of the parameters
        for _ in range(3):
            opt.zero_grad()
            m(x).pow(2).sum().backward()
            opt.step()
            if dev == DEV:
                lazytpu.mark_step()
        bufs = [opt.state[p]["momentum_buffer"].cpu() for p in m.parameters()]
        return [m.weight.detach().cpu(), sd["weight"].cpu()] + bufs

    for got, want in zip(train(DEV), train("cpu")):
        torch.testing.assert_close(got, want)
