"""lazytpu.core: devices, steps and the torch_xla-style helpers.

Device tensors live on ``lazytpu:N`` (PyTorch's PrivateUse1 device, renamed).
Every aten op on them is traced, nothing runs until a step
boundary: :func:`mark_step`, :func:`optimizer_step` with ``barrier=True``, a
loader step, or a value read (``.item()``, ``.cpu()``, ``print``).
"""
import os
import queue
import sys
import threading
import time

import torch

from . import _C
from .collectives import reduce_gradients
from .world import get_local_ordinal, get_ordinal, world_size

__all__ = [
    "device", "devices", "device_count", "xla_device", "mark_step",
    "wait_device_ops", "optimizer_step", "get_ordinal", "get_local_ordinal",
    "world_size", "is_master_ordinal", "master_print", "add_step_closure",
    "save", "set_rng_state", "get_rng_state", "is_lazytpu_tensor",
    "device_kind", "supported_devices", "get_memory_info", "RateTracker",
    "to_cpu", "wait_step_closures",
]

# The device type of device tensors: "lazytpu", or "xla" when this process
# serves torch_xla scripts (LAZYTPU_XLA_COMPAT=1, see lazytpu.compat). The
# kernels are the same; only the name PyTorch reports differs.
DEVICE_TYPE = "xla" if _C.xla_compat() else "lazytpu"
DEVICE_TYPES = ("lazytpu", "xla") if _C.xla_compat() else ("lazytpu",)

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
    """True for a tensor on one of lazytpu's cores."""
    return isinstance(t, torch.Tensor) and t.device.type in DEVICE_TYPES


def device_kind(dev=None):
    """The hardware a device stands for, as torch_xla's xla_device_hw names
    it: "TPU" (or "CPU" when PJRT_DEVICE=CPU asks for it)."""
    if dev is not None and torch.device(dev).type not in DEVICE_TYPES:
        raise ValueError("lazytpu.device_kind: %s is not a lazytpu device" % dev)
    return "CPU" if os.environ.get("PJRT_DEVICE", "TPU").upper() == "CPU" else "TPU"


def supported_devices(max_devices=None):
    """Device strings of this process's cores ("lazytpu:0", ...; "xla:0", ...
    in torch_xla compatibility mode), at most max_devices."""
    n = device_count() if max_devices is None else min(int(max_devices), device_count())
    return ["%s:%d" % (DEVICE_TYPE, i) for i in range(n)]


def get_memory_info(device=None):
    """Device memory of a core: {"bytes_used", "bytes_limit",
    "peak_bytes_used"} (torch_xla >= 2.1 names) plus "kb_free" and
    "kb_total" (the older names), from the core's buffer accounting, and
    "buffers_used" (live device buffers)."""
    core = 0 if device is None else (torch.device(device).index or 0)
    used, peak, limit, nbuf = _C.memory_info(core)
    return {"bytes_used": used, "bytes_limit": limit, "peak_bytes_used": peak,
            "kb_free": max(limit - used, 0) // 1024, "kb_total": limit // 1024,
            "buffers_used": nbuf}


class RateTracker:
    """Samples per second, smoothed (rate) and since creation (global_rate):
    add(count) after each step."""

    def __init__(self, smooth_factor=None):
        self._smooth = 0.4 if smooth_factor is None else float(smooth_factor)
        self._start = self._last = time.time()
        self._partial = 0
        self._count = 0
        self._rate = 0.0

    def update(self, count):
        now = time.time()
        dt = now - self._last
        self._partial += count
        self._count += count
        if dt > 0:
            r = self._partial / dt
            self._rate = r if self._rate == 0 else (
                self._smooth * r + (1 - self._smooth) * self._rate)
            self._partial = 0
            self._last = now
        return self._rate

    add = update

    def rate(self):
        return self._rate

    def global_rate(self):
        dt = time.time() - self._start
        return self._count / dt if dt > 0 else 0.0


_frame_text = {}   # (code, line) -> "file.py:LINE in function"; code -> False if internal


def _caller(depth=2):
    """The user's frame as "file.py:LINE in function": the first frame
    outside lazytpu and torch, starting `depth` frames up; only called on rare events (step
    boundaries), never per traced op. Texts are cached per code object and
    line (a step boundary called from the same line every step formats
    nothing)."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        return None
    cache = _frame_text
    while f is not None:
        code = f.f_code
        inside = cache.get(code)
        if inside is None:
            fn = code.co_filename
            # typing_extensions: torch_xla's @deprecated wrappers (xm.mark_step)
            inside = ("/lazytpu/" in fn or "/torch/" in fn or fn.startswith("<frozen")
                      or fn.endswith("/typing_extensions.py"))
            if len(cache) < 8192:
                cache[code] = inside
        if not inside:
            key = (code, f.f_lineno)
            text = cache.get(key)
            if text is None:
                text = "%s:%d in %s" % (os.path.basename(code.co_filename), f.f_lineno,
                                        code.co_name)
                if len(cache) < 8192:
                    cache[key] = text
            return text
        f = f.f_back
    return None


def _sync(cause, wait):
    _C.sync(-1, cause, 1 if wait else 0, _caller(3))


def mark_step(wait=False, reset_scope=True):
    """Ends the step: compiles (or fetches from the cache) and launches the
    pending graph of every used core, then runs the step closures."""
    _sync(_C.SYNC_MARK_STEP, wait)
    _run_step_closures()


def wait_device_ops(devices=None):
    """Blocks until every program queued on the cores has finished."""
    if _C.trace_enabled():
        t0 = _C.now_ns()
        _C.wait(-1)
        _C.trace_event("wait_device_ops", "wait", t0, _C.now_ns() - t0, _C.TRACE_TID_HOST)
        return
    _C.wait(-1)


def optimizer_step(optimizer, barrier=False, optimizer_args=None, groups=None,
                   pin_layout=True):
    """optimizer.step(**optimizer_args), all-reducing gradients first when
    the world has more than one process; with barrier=True also ends the
    step (mark_step with cause optimizer_step)."""
    if world_size() > 1:
        reduce_gradients(optimizer, groups=groups)
    loss = optimizer.step(**(optimizer_args or {}))
    if barrier:
        _sync(_C.SYNC_OPTIMIZER_STEP, False)
        _run_step_closures()
    return loss


def is_master_ordinal(local=True):
    return (get_local_ordinal() if local else get_ordinal()) == 0


def master_print(*args, **kwargs):
    """print() on ordinal 0 only."""
    if is_master_ordinal(local=False):
        print(*args, **kwargs)


def add_step_closure(fn, args=(), run_async=False):
    """Runs fn(*args) right after the next step boundary (values it reads are
    then ready without adding a sync point in the middle of the step). With
    run_async=True it runs on a background thread once the step's programs
    have finished, so the host goes on tracing the next step meanwhile."""
    lst = getattr(_closures, "items", None)
    if lst is None:
        lst = _closures.items = []
    lst.append((fn, tuple(args), bool(run_async)))


_async_q = None
_async_errors = []


def _async_worker():
    while True:
        batch = _async_q.get()
        try:
            _C.wait(-1)
            for fn, args in batch:
                fn(*args)
        except BaseException as e:  # raised at the next step boundary
            _async_errors.append(e)
        finally:
            _async_q.task_done()


def _run_async(batch):
    global _async_q
    if _async_q is None:
        _async_q = queue.Queue()
        threading.Thread(target=_async_worker, name="lazytpu-closures", daemon=True).start()
    _async_q.put(batch)


def wait_step_closures():
    """Waits for the asynchronous step closures queued so far; raises the
    first exception one of them raised."""
    if _async_q is not None:
        _async_q.join()
    if _async_errors:
        raise _async_errors.pop(0)


def _run_step_closures():
    if _async_errors:
        raise _async_errors.pop(0)
    lst = getattr(_closures, "items", None)
    if not lst:
        return
    _closures.items = []
    t0 = _C.now_ns() if _C.trace_enabled() else 0
    async_batch = [(fn, args) for fn, args, a in lst if a]
    for fn, args, a in lst:
        if not a:
            fn(*args)
    if async_batch:
        _run_async(async_batch)
    if t0:
        _C.trace_event("step_closures", "closure", t0, _C.now_ns() - t0, _C.TRACE_TID_HOST)


def to_cpu(data):
    """data with every lazytpu tensor (in nested dicts, lists, tuples) copied
    to the CPU."""
    return _to_cpu(data)


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
