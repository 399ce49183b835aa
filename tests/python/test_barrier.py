"""lazytpu.barrier (torch_xla's xm.optimization_barrier_): values pass
unchanged, in place, for tensors of any shape and dtype in one call; the
functional form returns new tensors; non-device tensors are refused. The
fence itself (ordering, no CSE, no copy) is tested on the compiler in
tests/c/test_barrier.c and by its effect in test_xla_checkpoint_memory.py."""
import pytest
import torch

import lazytpu
from lazytpu import barrier

D = "lazytpu:0"


def test_in_place_values_unchanged_mixed_tensors():
    x = torch.randn(5, 3)
    i = torch.arange(7)
    b = torch.tensor([True, False, True])
    xd, id_, bd = x.to(D), i.to(D), b.to(D)
    yd = xd * 2                      # a pending value, not only device data
    ids = [id(t) for t in (xd, id_, bd, yd)]
    barrier.optimization_barrier_([xd, id_, bd, yd])
    assert [id(t) for t in (xd, id_, bd, yd)] == ids
    assert torch.equal(xd.cpu(), x) and torch.equal(id_.cpu(), i)
    assert torch.equal(bd.cpu(), b) and torch.equal(yd.cpu(), x * 2)
    assert xd.dtype == torch.float32 and id_.dtype == torch.int64 and bd.dtype == torch.bool
    # computation after the barrier sees the same values
    torch.testing.assert_close((xd.t() @ yd).cpu(), x.t() @ (x * 2))


def test_functional_form_and_gradients_around_it():
    w = torch.randn(4, 4, requires_grad=True)
    wd = w.detach().to(D).requires_grad_()
    h = torch.tanh(wd)
    (hb,) = barrier.optimization_barrier([h])
    assert hb is not h and not hb.requires_grad
    assert torch.equal(hb.cpu(), h.detach().cpu())
    # the barrier leaves h's autograd history alone
    (h * hb).sum().backward()
    torch.tanh(w).mul(torch.tanh(w).detach()).sum().backward()
    torch.testing.assert_close(wd.grad.cpu(), w.grad, rtol=1e-5, atol=1e-6)
    assert barrier.optimization_barrier([]) == []


def test_refuses_host_tensors():
    with pytest.raises(ValueError, match="not a device tensor"):
        barrier.optimization_barrier_([torch.ones(2, device=D), torch.ones(2)])
    with pytest.raises(ValueError, match="not a device tensor"):
        barrier.optimization_barrier([3.0])


def test_step_with_barrier_is_a_cache_hit():
    # the same step again and again: after the first two (x's value goes
    # from host copy to program output) no compile
    x = torch.randn(8, 8).to(D)

    def step():
        y = x + 1
        barrier.optimization_barrier_([y, x])
        z = y @ y
        lazytpu.mark_step()
        return z.cpu()

    first = step()
    step()
    before = lazytpu.metrics.counter_value("UncachedCompile") or 0
    for _ in range(3):
        assert torch.equal(step(), first)
    assert (lazytpu.metrics.counter_value("UncachedCompile") or 0) == before
