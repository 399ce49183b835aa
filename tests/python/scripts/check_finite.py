"""Run by test_check_finite.py with LAZYTPU_CHECK_FINITE=1: prints one JSON
line per scenario (the exception type and message, or the values)."""
import json
import sys

import torch

import lazytpu


def attempt(name, fn):
    try:
        out = fn()
        res = {"ok": out}
    except Exception as e:  # noqa: BLE001 - the test checks type and text
        res = {"type": type(e).__name__, "msg": str(e)}
    sys.stdout.write(json.dumps({"name": name, **res}) + "\n")
    sys.stdout.flush()


dev = lazytpu.device()


def forward():
    x = torch.tensor([1.0, 0.0, 2.0]).to(dev)
    y = x * 2
    z = torch.log(y)           # FORWARD_LINE: log(0) = -inf, the first
    w = (z + 1) * 2            # still -inf: a later op of the step
    return w.cpu().tolist()


def fine_after():
    return (torch.ones(2).to(dev) * 4).cpu().tolist()


def backward():
    x = torch.tensor([0.0, 4.0]).to(dev).requires_grad_()
    y = torch.sqrt(x)          # its gradient 0.5 / sqrt(0) = inf
    y.sum().backward()
    return x.grad.cpu().tolist()   # BACKWARD_READ


def at_step():
    x = torch.tensor([1.0, -1.0]).to(dev)
    keep = torch.sqrt(x)       # STEP_LINE: NaN, nobody reads it
    lazytpu.mark_step(wait=True)
    return keep.shape[0]


def data_in():
    x = torch.tensor([float("nan"), 1.0]).to(dev)
    return (x + 1).cpu().tolist()


attempt("forward", forward)
attempt("fine_after", fine_after)
attempt("backward", backward)
attempt("at_step", at_step)
attempt("step_again", lambda: lazytpu.mark_step(wait=True))
attempt("data_in", data_in)
