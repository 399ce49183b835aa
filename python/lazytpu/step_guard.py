"""lazytpu.step_guard: says when a training loop forgets its step boundary.

Without ``mark_step()`` (or ``optimizer_step(opt, barrier=True)``, a
``MpDeviceLoader``, a framework integration) nothing ends a step: every
iteration is traced into one graph that keeps growing until a value read or
LAZYTPU_GRAPH_LIMIT cuts it, and each cut compiles a new, larger graph. The
symptom is a compile per step and a slow loop; the cause is easy to miss.

At ``import lazytpu`` a global optimizer step hook (PyTorch's
``register_optimizer_step_post_hook``; it costs one call per
``optimizer.step()`` and does nothing for optimizers whose parameters are not
on lazytpu) compares the ops pending on the optimizer's core with what was
pending at its previous step. When the pending graph has grown across three
optimizer steps in a row with no step boundary between them, it warns once
per process (a ``UserWarning`` naming the core, the pending ops and the
remedy) and counts ``StepBoundaryMissing``.
"""
import warnings
import weakref

from torch.optim.optimizer import register_optimizer_step_post_hook

from . import _C
from .core import DEVICE_TYPES

_last = weakref.WeakKeyDictionary()   # optimizer -> (pending ops, steps grown, least)
_warned = []

MESSAGE = ("lazytpu: %d optimizer steps in a row were traced into one graph on lazytpu:%d "
           "(%d ops pending, no step boundary since): each step adds to it and every cut "
           "compiles a new graph. End each step after optimizer.step() with "
           "lazytpu.mark_step() (torch_xla: xm.mark_step() / torch_xla.sync()), or use "
           "lazytpu.optimizer_step(opt, barrier=True), a lazytpu loader, or "
           "lazytpu.hf.enable() with Hugging Face")


def _core_of(optimizer):
    """The core of the optimizer's first parameter, None if not on lazytpu."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            return (p.device.index or 0) if p.device.type in DEVICE_TYPES else None
    return None


def _after_step(optimizer, args, kwargs):
    core = _core_of(optimizer)
    if core is None:
        return
    n = _C.pending_ops(core)
    prev, streak, least = _last.get(optimizer, (0, 0, n))
    # grown since the previous step (nothing reset the count), and to at least
    # twice the smallest step seen: a loop with boundaries stays near one
    # step's ops, whose count may still differ a little from step to step
    streak = streak + 1 if (prev > 0 and n > prev) else 0
    least = min(least, n) if n > 0 else least
    _last[optimizer] = (n, streak, least)
    if streak >= 2 and n >= 2 * least:
        _C.counter_inc("StepBoundaryMissing", 1)
        if not _warned:
            _warned.append(True)
            warnings.warn(MESSAGE % (streak + 1, core, n), UserWarning, stacklevel=3)


_handle = register_optimizer_step_post_hook(_after_step)
