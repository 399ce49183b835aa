"""lazytpu.amp: mixed precision the TPU way.

- :class:`autocast`: ``torch.autocast`` on lazytpu's device with bfloat16
  (matmul/conv in bf16 with f32 accumulation; see docs/api.md);
- :class:`GradScaler`: loss scaling whose unscale / inf check / scale update
  run on the device; with a syncfree optimizer the skipped step is decided on
  the device too, so a training step never waits for the host;
- :class:`SyncFreeSGD`, :class:`SyncFreeAdam`, :class:`SyncFreeAdamW`: their
  ``step(found_inf=t)`` applies the update only where ``t == 0``, without
  reading ``t`` on the host.

- :func:`keep_f32`: functions and module types that run in float32 inside
  autocast and in the bf16 storage mode (LAZYTPU_USE_BF16 / XLA_USE_BF16);
  ``python -m lazytpu.bf16`` suggests the list (docs/bf16.md).

bf16 needs no loss scaling (same exponent range as f32): GradScaler matters
for float16 experiments.
"""
import contextlib
import warnings

import torch

from . import _C
from . import core as _core

__all__ = ["autocast", "GradScaler", "SyncFreeSGD", "SyncFreeAdam", "SyncFreeAdamW",
           "keep_f32", "kept_f32"]


class autocast(torch.amp.autocast_mode.autocast):
    """``torch.autocast(<lazytpu device type>, dtype=torch.bfloat16)``; other
    dtypes are refused with a warning (autocast disabled), like torch_xla on
    TPU."""

    def __init__(self, device=None, enabled=True, dtype=None, cache_enabled=True):
        dev_type = _core.DEVICE_TYPE if device is None else torch.device(device).type
        if dev_type not in _core.DEVICE_TYPES:
            raise ValueError("lazytpu.amp.autocast: %s is not a lazytpu device" % device)
        if dtype is None:
            dtype = torch.bfloat16
        if dtype != torch.bfloat16:
            warnings.warn("lazytpu.amp.autocast: only torch.bfloat16 is supported on the "
                          "device (TPU autocast); autocast disabled")
            enabled = False
        super().__init__(dev_type, enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler for the device. With a syncfree optimizer (below)
    ``scaler.step(opt)`` passes the device-side overflow flag to the
    optimizer instead of reading it on the host."""

    def __init__(self, device=None, **kwargs):
        super().__init__(_core.DEVICE_TYPE if device is None else str(torch.device(device).type),
                         **kwargs)

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        if getattr(optimizer, "_lazytpu_syncfree", False):
            found = sum(v for v in optimizer_state["found_inf_per_device"].values())
            return optimizer.step(*args, found_inf=found, **kwargs)
        return super()._maybe_opt_step(optimizer, optimizer_state, *args, **kwargs)


def _state_tensors(opt):
    for st in opt.state.values():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                yield st, k, v


def _syncfree_step(opt, parent_step, closure, found_inf):
    """parent_step(closure), kept only where found_inf == 0: parameters and
    optimizer state are selected on the device (no host read)."""
    if found_inf is None:
        return parent_step(closure)
    if found_inf.dim() != 0:
        raise ValueError("syncfree step: found_inf must be a 0-dim tensor, got shape %s"
                         % tuple(found_inf.shape))
    params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
    with torch.no_grad():
        saved_p = [p.detach().clone() for p in params]
        had = {(id(st), k): v.detach().clone() for st, k, v in _state_tensors(opt)
               if _core.is_lazytpu_tensor(v)}
    loss = parent_step(closure)
    with torch.no_grad():
        skip = found_inf.to(params[0].device if params else found_inf.device) != 0
        for p, old in zip(params, saved_p):
            p.copy_(torch.where(skip, old, p))
        for st, k, v in _state_tensors(opt):
            if not _core.is_lazytpu_tensor(v):
                continue   # host-side state (Adam's step count): selecting it would read the flag
            old = had.get((id(st), k))
            # state created by this step goes back to its initial zeros
            st[k] = torch.where(skip, torch.zeros_like(v) if old is None else old, v)
    return loss


def _device_step_count(opt, capturable):
    """Unless the caller chose: capturable (the step count on the device)
    for groups whose parameters are all device tensors."""
    if capturable is not None:
        return
    for g in opt.param_groups:
        if g["params"] and all(_core.is_lazytpu_tensor(p) for p in g["params"]):
            g["capturable"] = True


class SyncFreeSGD(torch.optim.SGD):
    """SGD whose ``step(found_inf=t)`` skips the update where t != 0, on the
    device."""
    _lazytpu_syncfree = True

    def step(self, closure=None, found_inf=None):
        return _syncfree_step(self, super().step, closure, found_inf)


class SyncFreeAdam(torch.optim.Adam):
    """Adam with a device-side skipped step (see SyncFreeSGD). Its step
    count lives on the device (``capturable=True`` unless given, for device
    parameters; torch_xla's syncfree Adam keeps it there too): a skipped
    step does not count, so the bias correction is that of the steps
    taken."""
    _lazytpu_syncfree = True

    def __init__(self, params, *args, capturable=None, **kwargs):
        super().__init__(params, *args, capturable=bool(capturable), **kwargs)
        _device_step_count(self, capturable)

    def step(self, closure=None, found_inf=None):
        return _syncfree_step(self, super().step, closure, found_inf)


class SyncFreeAdamW(torch.optim.AdamW):
    """AdamW with a device-side skipped step and step count (see
    SyncFreeAdam)."""
    _lazytpu_syncfree = True

    def __init__(self, params, *args, capturable=None, **kwargs):
        super().__init__(params, *args, capturable=bool(capturable), **kwargs)
        _device_step_count(self, capturable)

    def step(self, closure=None, found_inf=None):
        return _syncfree_step(self, super().step, closure, found_inf)


# ------------------------------------------------------------------ keep_f32

_LOW = (torch.bfloat16, torch.float16)
_kept = {"ops": frozenset(), "modules": frozenset(), "names": (), "mode": None,
         "hooks": ()}


def _op_name(func):
    """The name keep_f32 matches a torch function by: torch.sub, Tensor.sub,
    ``a - b`` (Tensor.__sub__ / __rsub__) are "sub"; in-place forms
    (sub_, __isub__) are never matched."""
    name = getattr(func, "__name__", "")
    if name.startswith("__i"):
        return None
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        if name.startswith("r") and name[1:] in ("sub", "add", "mul", "truediv", "matmul", "pow"):
            name = name[1:]
        return "div" if name == "truediv" else name
    return None if name.endswith("_") else name


def _tensors_to_f32(obj, low):
    """obj with its lazytpu bf16/f16 tensors cast to f32 (low collects the
    dtypes it cast from)."""
    if isinstance(obj, torch.Tensor):
        if obj.dtype in _LOW and _core.is_lazytpu_tensor(obj):
            low.add(obj.dtype)
            return obj.float()
        return obj
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_tensors_to_f32(o, low) for o in obj)
    if isinstance(obj, dict):
        return {k: _tensors_to_f32(v, low) for k, v in obj.items()}
    return obj


def _round_out(obj, storage, back):
    """A kept region's results: rounded to bf16 storage (bf16 storage mode:
    the cast pair leaves an f32 tensor stored as bf16) or cast back to the
    low dtype the inputs had (a native bf16 program outside autocast)."""
    if isinstance(obj, torch.Tensor):
        if obj.dtype != torch.float32 or not _core.is_lazytpu_tensor(obj):
            return obj
        if back is not None:
            return obj.to(back)
        return obj.to(torch.bfloat16).to(torch.float32) if storage else obj
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_round_out(o, storage, back) for o in obj)
    if isinstance(obj, dict):
        return {k: _round_out(v, storage, back) for k, v in obj.items()}
    return obj


class _Region:
    """One kept call: entered with its arguments, left with its results."""
    __slots__ = ("storage", "prev", "ac", "back")

    def enter(self, args, kwargs):
        low = set()
        args, kwargs = _tensors_to_f32(args, low), _tensors_to_f32(kwargs, low)
        self.ac = None
        if torch.is_autocast_enabled(_core.DEVICE_TYPE):
            self.ac = torch.autocast(_core.DEVICE_TYPE, enabled=False)
            self.ac.__enter__()
        # bf16_mode() decides the mode when nothing on the device did yet:
        # only asked once a kept call sees device tensors
        self.storage = bool(_C.bf16_mode()) if _has_device_tensor((args, kwargs)) else False
        self.prev = _C.keep_f32_storage(True) if self.storage else None
        self.back = low.pop() if (self.ac is None and len(low) == 1) else None
        return args, kwargs

    def leave(self, out):
        if self.storage:
            _C.keep_f32_storage(self.prev)
        if self.ac is not None:
            self.ac.__exit__(None, None, None)
        return _round_out(out, self.storage, self.back)


def _has_device_tensor(obj):
    if isinstance(obj, torch.Tensor):
        return _core.is_lazytpu_tensor(obj)
    if isinstance(obj, (list, tuple)):
        return any(_has_device_tensor(o) for o in obj)
    if isinstance(obj, dict):
        return any(_has_device_tensor(o) for o in obj.values())
    return False


class _KeepMode(torch.overrides.TorchFunctionMode):
    """Runs the kept torch functions in f32 (the rest untouched)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _op_name(func) not in _kept["ops"] or not _has_device_tensor((args, kwargs)):
            return func(*args, **kwargs)
        r = _Region()
        args, kwargs = r.enter(args, kwargs)
        out = None
        try:
            out = func(*args, **kwargs)
        finally:
            out = r.leave(out)
        return out


def _module_matches(mod):
    cls = type(mod)
    return cls.__name__ in _kept["modules"] or \
        "%s.%s" % (cls.__module__, cls.__qualname__) in _kept["modules"]


_stack = []


def _pre_hook(mod, args):
    """Global forward pre-hook: a kept module's call enters its region
    (positional arguments cast; keyword arguments are not seen by global
    hooks)."""
    if not _module_matches(mod):
        return None
    r = _Region()
    args, _ = r.enter(args, {})
    _stack.append((mod, r))
    return args


def _post_hook(mod, args, out):
    """Global forward hook (always called, also when forward raised)."""
    if not _stack or _stack[-1][0] is not mod:
        return None
    _, r = _stack.pop()
    return r.leave(out)


def keep_f32(names):
    """Runs the named torch functions and module types in float32 where
    bf16 would be used, process-wide, from now on; ``keep_f32([])`` clears.
    Returns the previous list.

    - all-lowercase names are torch functions, as called from Python:
      "softmax" is torch.softmax, Tensor.softmax and F.softmax, "sub" also
      ``a - b``, "matmul" also ``a @ b``, "layer_norm" F.layer_norm (in-place
      forms are never matched);
    - other names (or classes) are module types: "LayerNorm", a class's
      ``__name__`` or ``"module.QualName"``: the module's whole forward runs
      in f32.

    A kept call casts its bf16/f16 device tensors to f32 and runs with
    autocast off (inside ``torch.autocast``, its results stay f32, as
    autocast's own f32 ops); in the bf16 storage mode (LAZYTPU_USE_BF16 /
    XLA_USE_BF16) every value it computes is stored in f32 and its results
    are rounded to bf16 once, at the end. A native bf16 program gets its
    results back in bf16. The backward of a kept function runs in the dtypes
    its forward used (autocast); in storage mode it is stored as usual.
    Function names cost a Python call per torch function while any is kept
    (a TorchFunctionMode); module types, a check per module call."""
    prev = list(_kept["names"])
    names = list(names)
    ops, mods = set(), set()
    for n in names:
        if isinstance(n, type):
            mods.add("%s.%s" % (n.__module__, n.__qualname__))
        elif not isinstance(n, str) or not n:
            raise TypeError("lazytpu.amp.keep_f32: expected names (str) or module classes, got %r"
                            % (n,))
        elif n.islower() and "." not in n:
            ops.add(n)
        else:
            mods.add(n)
    _kept.update(ops=frozenset(ops), modules=frozenset(mods), names=tuple(names))
    if ops and _kept["mode"] is None:
        _kept["mode"] = _KeepMode()
        _kept["mode"].__enter__()
    elif not ops and _kept["mode"] is not None:
        mode, _kept["mode"] = _kept["mode"], None
        with contextlib.suppress(Exception):   # another mode was pushed above it
            mode.__exit__(None, None, None)
    if mods and not _kept["hooks"]:
        mm = torch.nn.modules.module
        _kept["hooks"] = (mm.register_module_forward_pre_hook(_pre_hook),
                          mm.register_module_forward_hook(_post_hook, always_call=True))
    elif not mods and _kept["hooks"]:
        for h in _kept["hooks"]:
            h.remove()
        _kept["hooks"] = ()
    return prev


def kept_f32():
    """The names keep_f32 was last given."""
    return list(_kept["names"])
