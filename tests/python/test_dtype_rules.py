"""Ops that write values into a tensor follow eager's dtype rules on the
device: refused where eager refuses (index_put / advanced setitem,
scatter with a source, index_add: the dtypes must match), cast where eager
casts (select/slice/diagonal/as_strided_scatter keep self's dtype; a masked
fill with one value; a Python number), never silently promoted."""
import pytest
import torch

import lazytpu

D = lazytpu.device()


def _idx(d):
    return torch.tensor([0, 2], device=d)


def _mask(d):
    return torch.tensor([True, False, True, False], device=d)


def _setitem(x, index, value):
    x[index] = value
    return x


CASES = {
    "index_put float into long": lambda d: torch.arange(4, device=d).index_put(
        (_idx(d),), torch.ones(2, device=d)),
    "index_put_ same dtype": lambda d: torch.arange(4, device=d).index_put_(
        (_idx(d),), torch.tensor([7, 8], device=d)),
    "index_put_ accumulate mask": lambda d: torch.zeros(4, dtype=torch.half, device=d).index_put_(
        (_mask(d),), torch.tensor(2.5, device=d), accumulate=True),
    "setitem index, float tensor into long": lambda d: _setitem(
        torch.arange(4, device=d), _idx(d), torch.ones(2, device=d)),
    "setitem index, python float": lambda d: _setitem(torch.arange(4, device=d), _idx(d), 1.7),
    "setitem mask, 0-dim float into half": lambda d: _setitem(
        torch.zeros(4, dtype=torch.half, device=d), _mask(d), torch.tensor(2.5, device=d)),
    "setitem mask, 0-dim CPU float into half": lambda d: _setitem(
        torch.zeros(4, dtype=torch.half, device=d), _mask(d), torch.tensor(2.5)),
    "setitem mask, two floats into half": lambda d: _setitem(
        torch.zeros(4, dtype=torch.half, device=d), _mask(d), torch.tensor([2.5, 1.5], device=d)),
    "scatter float src into long": lambda d: torch.arange(4, device=d).scatter(
        0, _idx(d), torch.ones(2, device=d)),
    "scatter_ float src into long": lambda d: torch.arange(4, device=d).scatter_(
        0, _idx(d), torch.ones(2, device=d)),
    "scatter value": lambda d: torch.arange(4, device=d).scatter(0, _idx(d), 2.7),
    "index_add float into long": lambda d: torch.arange(4, device=d).index_add(
        0, _idx(d), torch.ones(2, device=d)),
    "index_add_ same dtype": lambda d: torch.arange(4, device=d).index_add_(
        0, _idx(d), torch.tensor([5, 6], device=d), alpha=2),
    "slice_scatter float into long": lambda d: torch.zeros(4, dtype=torch.long, device=d)
    .slice_scatter(torch.tensor([-1.7, 2.9], device=d), 0, 1, 3),
    "select_scatter float into long": lambda d: torch.zeros(2, 2, dtype=torch.long, device=d)
    .select_scatter(torch.tensor([1.9, -2.2], device=d), 0, 1),
    "diagonal_scatter float into long": lambda d: torch.zeros(2, 2, dtype=torch.long, device=d)
    .diagonal_scatter(torch.tensor([1.7, 3.2], device=d)),
    "as_strided_scatter float into long": lambda d: torch.zeros(4, dtype=torch.long, device=d)
    .as_strided_scatter(torch.tensor([2.9, 4.1], device=d), (2,), (2,)),
    "slice_scatter double into float": lambda d: torch.zeros(4, device=d).slice_scatter(
        torch.tensor([1.25, 2.5], dtype=torch.float64, device=d), 0, 0, 2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_eager(name):
    f = CASES[name]
    try:
        want = f("cpu")
    except RuntimeError as e:
        msg = str(e).split("\n")[0]
        with pytest.raises(RuntimeError) as got:
            f(D)
            lazytpu.mark_step()
        # the same error text (eager's message names the op and the dtypes)
        assert str(got.value).split("\n")[0].split(",")[0] == msg.split(",")[0]
        return
    got = f(D)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert torch.equal(got.cpu(), want), (got.cpu(), want)
