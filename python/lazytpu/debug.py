"""lazytpu.debug: small introspection helpers.

    lazytpu.debug.live_tensors(core)   device tensors alive on a core
    lazytpu.debug.fallback_report()    CPU fallbacks with their counts
    lazytpu.debug.step_report()        compiles/steps since the last clear
    lazytpu.debug.tensor_info(t)       shape, dtype, storage dtype, pending
"""
import torch

from . import _C
from . import metrics as _m

__all__ = ["live_tensors", "fallback_report", "step_report", "tensor_info",
           "caller"]


def live_tensors(core=0):
    return _C.live_tensors(core)


def fallback_report():
    """'aten::op: N' lines for every op that ran on the CPU fallback."""
    ops = _m.executed_fallback_ops()
    return "\n".join("%s: %d" % (o, _C.counter_value(o)) for o in ops)


def step_report():
    keys = ("MarkStep", "UncachedCompile", "CachedCompile")
    return {k: _C.counter_value(k) for k in keys}


def tensor_info(t):
    """A dict describing a device tensor, from the C core."""
    s = torch.ops.lazytpu.tensor_info(t)
    out = {}
    for part in s.split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
    return out


def caller():
    """The user frame the shim records for fallbacks and value reads."""
    return _C.caller()
