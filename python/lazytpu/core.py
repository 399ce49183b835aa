"""lazytpu.core: devices, steps and the torch_xla-style helpers.

Device tensors live on ``lazytpu:N`` (PyTorch's PrivateUse1 device, renamed).
Every aten op on them is traced, nothing runs until a step
boundary: :func:`mark_step`, :func:`optimizer_step` with ``barrier=True``, a
loader step, or a value read (``.item()``, ``.cpu()``, ``print``).
"""
import os
import sys
import threading

import torch

from . import _C

__all__ = [
    "device", "devices", "device_count", "xla_device", "mark_step",
    "wait_device_ops", "optimizer_step", "get_ordinal", "get_local_ordinal",
    "world_size", "is_master_ordinal", "master_print", "add_step_closure",
    "save", "set_rng_state", "get_rng_state", "is_lazytpu_tensor",
]

DEVICE_TYPE = "lazytpu"

_closures = threading.local()


def device_count():
    """Number of simulated cores visible to this process."""
    return _C.num_cores()


def device(n=None):
    """torch.device of core ``n`` (default: this process's core, 0)."""
    if n is None:
        n = 0
    n = int(n)
    if n < 0 or n >= device_count():
        raise ValueError("lazytpu.device(%d): there are %d cores (0..%d)"
                         % (n, device_count(), device_count() - 1))
    return torch.device(DEVICE_TYPE, n)


xla_device = device


def devices():
    """All cores as torch.device objects."""
    return [torch.device(DEVICE_TYPE, i) for i in range(device_count())]


def is_lazytpu_tensor(t):
    return isinstance(t, torch.Tensor) and t.device.type == DEVICE_TYPE


def _caller(depth=2):
    """The user's frame as "file.py:LINE in function": the first frame
    outside lazytpu and torch, starting `depth` frames up; only called on rare events (step
    boundaries), never per traced op."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        return None
    while f is not None:
        fn = f.f_code.co_filename
        if ("/lazytpu/" not in fn and "/torch/" not in fn
                and not fn.startswith("<frozen")):
            return "%s:%d in %s" % (os.path.basename(fn), f.f_lineno,
                                    f.f_code.co_name)
        f = f.f_back
    return None


def _sync(cause, wait):
    _C.sync(-1, cause, 1 if wait else 0, _caller(3))


def mark_step(wait=False):
    """Ends the step: compiles (or fetches from the cache) and launches the
    pending graph of every used core, then runs the step closures."""
    _sync(_C.SYNC_MARK_STEP, wait)
    _run_step_closures()


def wait_device_ops(devices=None):
    """Blocks until every program queued on the cores has finished."""
    if _C.trace_enabled():
        t0 = _C.now_ns()
        _C.wait(-1)
        _C.trace_event("wait_device_ops", "wait", t0, _C.now_ns() - t0, -1)
        return
    _C.wait(-1)


def _all_reduce_hook():
    try:
        from . import spawn as _spawn  # helper G's module
    except ImportError:
        return None
    return getattr(_spawn, "_all_reduce_gradients", None)


def optimizer_step(optimizer, barrier=False, optimizer_args=None):
    """optimizer.step(**optimizer_args), all-reducing gradients first when
    the world has more than one process; with barrier=True also ends the
    step (mark_step with cause optimizer_step)."""
    if world_size() > 1:
        hook = _all_reduce_hook()
        if hook is None:
            raise RuntimeError("lazytpu.optimizer_step: world size %d but "
                               "lazytpu.spawn has no _all_reduce_gradients"
                               % world_size())
        hook(optimizer)
    loss = optimizer.step(**(optimizer_args or {}))
    if barrier:
        _sync(_C.SYNC_OPTIMIZER_STEP, False)
        _run_step_closures()
    return loss


def get_ordinal():
    """Global ordinal of this process (0 outside spawn)."""
    return int(os.environ.get("LAZYTPU_ORDINAL", "0"))


def get_local_ordinal():
    return int(os.environ.get("LAZYTPU_LOCAL_ORDINAL", str(get_ordinal())))


def world_size():
    """Number of processes (1 outside spawn)."""
    return int(os.environ.get("LAZYTPU_WORLD_SIZE", "1"))


def is_master_ordinal(local=True):
    return (get_local_ordinal() if local else get_ordinal()) == 0


def master_print(*args, **kwargs):
    """print() on ordinal 0 only."""
    if is_master_ordinal(local=False):
        print(*args, **kwargs)


def add_step_closure(fn, args=()):
    """Runs fn(*args) right after the next mark_step (values it reads are then
    ready without adding a sync point in the middle of the step)."""
    lst = getattr(_closures, "items", None)
    if lst is None:
        lst = _closures.items = []
    lst.append((fn, tuple(args)))


def _run_step_closures():
    lst = getattr(_closures, "items", None)
    if not lst:
        return
    _closures.items = []
    t0 = _C.now_ns() if _C.trace_enabled() else 0
    for fn, args in lst:
        fn(*args)
    if t0:
        _C.trace_event("step_closures", "closure", t0, _C.now_ns() - t0, -1)


def _to_cpu(data):
    if isinstance(data, torch.Tensor):
        return data.cpu() if is_lazytpu_tensor(data) else data
    if isinstance(data, dict):
        return type(data)((k, _to_cpu(v)) for k, v in data.items())
    if isinstance(data, (list, tuple)):
        out = [_to_cpu(v) for v in data]
        return type(data)(out) if not hasattr(data, "_fields") else type(data)(*out)
    return data


def save(data, path, master_only=True, global_master=False):
    """torch.save of data with every device tensor moved to the CPU first
    (written by the master ordinal only, unless master_only=False)."""
    cpu = _to_cpu(data)
    if not master_only or is_master_ordinal(local=not global_master):
        torch.save(cpu, path)


def set_rng_state(seed, device=None):
    """Seeds the device random generator (dropout, bernoulli, rand)."""
    core = 0 if device is None else torch.device(device).index or 0
    _C.set_rng_state(int(seed) & ((1 << 64) - 1), core)


def get_rng_state(device=None):
    core = 0 if device is None else torch.device(device).index or 0
    return _C.get_rng_state(core)
