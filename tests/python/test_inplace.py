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
