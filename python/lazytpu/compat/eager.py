"""Eager execution for torch_xla's ``torch_xla.experimental.eager_mode``:
every torch operation on device tensors runs as soon as it returns.

A torch function mode (above autograd: one user-level call, such as
``F.linear`` or ``loss.backward()``, is one unit) ends the pending graph of
the cores after each call that produced device tensors. Each distinct
operation compiles once (the compile cache makes later calls hits). The
time spent is reported as the metrics ``EagerOpCompileTime`` (compiles
caused by eager execution) and ``EagerOpExecuteTime`` (one sample per
executed operation). Inside ``torch_xla.compile`` and the step of
``torch.compile`` eager execution is suspended (:func:`suspended`), so those
stay one graph.
"""
import contextlib
import threading

import torch
from torch.overrides import TorchFunctionMode

from lazytpu import _C
from lazytpu import core as _core

_state = threading.local()
_enabled = [False]
_mode = [None]


def _has_device_tensor(x):
    if isinstance(x, torch.Tensor):
        return x.device.type in _core.DEVICE_TYPES
    if isinstance(x, (list, tuple)):
        return any(_has_device_tensor(v) for v in x)
    return False


def _count(name):
    return _C.counter_value(name) or 0


def _acc(name):
    d = _C.metric_data(name)
    return d[1] if d else 0


class _EagerMode(TorchFunctionMode):

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(_state, "suspended", 0) or torch.compiler.is_compiling():
            return func(*args, **(kwargs or {}))
        # what the op itself runs (a value read inside allclose, item, ...)
        # is eager work too: not counted in ExecuteTime
        was = _C.set_eager_op_scope(True)
        try:
            out = func(*args, **(kwargs or {}))
        finally:
            _C.set_eager_op_scope(was)
        if _has_device_tensor(out) or func is torch.Tensor.backward or \
                getattr(func, "__name__", "").endswith("_"):
            run_pending()
        return out


def run_pending():
    """Runs what is pending on the cores now (one eager operation): one
    EagerOpExecuteTime sample per graph run, one EagerOpCompileTime sample
    per graph compiled."""
    cached, uncached = _count("CachedCompile"), _count("UncachedCompile")
    compile_ns = _acc("CompileTime")
    t0 = _C.now_ns()
    was = _C.set_eager_op_scope(True)
    try:
        _C.sync(-1, _C.SYNC_EXPLICIT, 0)
    finally:
        _C.set_eager_op_scope(was)
    dt = _C.now_ns() - t0
    new = _count("UncachedCompile") - uncached
    graphs = new + _count("CachedCompile") - cached
    if new:
        per = float(_acc("CompileTime") - compile_ns) / new
        for _ in range(new):
            _C.metric_add("EagerOpCompileTime", _C.UNIT_NS, per)
    for _ in range(graphs):
        _C.metric_add("EagerOpExecuteTime", _C.UNIT_NS, float(dt) / graphs)


def set_enabled(enable):
    """Turns eager execution on or off for this process."""
    enable = bool(enable)
    if enable == _enabled[0]:
        return
    if enable:
        _C.sync(-1, _C.SYNC_EXPLICIT, 0)
        _mode[0] = _EagerMode()
        _mode[0].__enter__()
    else:
        _mode[0].__exit__(None, None, None)
        _mode[0] = None
    _enabled[0] = enable


def is_enabled():
    return _enabled[0]


@contextlib.contextmanager
def suspended():
    """Traces lazily inside the block even in eager mode (one graph)."""
    _state.suspended = getattr(_state, "suspended", 0) + 1
    try:
        yield
    finally:
        _state.suspended -= 1
