"""lazytpu.step_guard: a loop that never ends its steps is told so."""
import warnings

import torch

import lazytpu
import lazytpu.metrics as met
from lazytpu import step_guard


def train(dev, steps, boundary):
    # a real sync first: the core's pending-op count restarts (ops an earlier
    # test traced after its last sync, on tensors since freed, still count)
    (torch.zeros(1, device=dev) + 1).cpu()
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 4).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        m(torch.randn(2, 8).to(dev)).sum().backward()
        opt.step()
        if boundary:
            lazytpu.mark_step()
    lazytpu.mark_step()


def test_missing_boundary_warns_once(dev, monkeypatch):
    monkeypatch.setattr(step_guard, "_warned", [])
    before = met.counter_value("StepBoundaryMissing") or 0
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        train(dev, 6, boundary=False)
    msgs = [str(x.message) for x in w if "optimizer steps in a row" in str(x.message)]
    assert len(msgs) == 1, msgs
    assert "lazytpu.mark_step()" in msgs[0] and "lazytpu:0" in msgs[0]
    assert (met.counter_value("StepBoundaryMissing") or 0) - before == 4   # steps 3..6


def test_loop_with_boundaries_is_quiet(dev, monkeypatch):
    monkeypatch.setattr(step_guard, "_warned", [])
    before = met.counter_value("StepBoundaryMissing") or 0
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        train(dev, 6, boundary=True)
    assert not [x for x in w if "optimizer steps in a row" in str(x.message)]
    assert (met.counter_value("StepBoundaryMissing") or 0) == before


def test_cpu_optimizer_untouched():
    m = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    before = met.counter_value("StepBoundaryMissing") or 0
    for _ in range(4):
        m(torch.randn(2, 8)).sum().backward()
        opt.step()
    assert (met.counter_value("StepBoundaryMissing") or 0) == before
