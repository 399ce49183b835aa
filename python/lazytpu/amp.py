"""lazytpu.amp: mixed precision the TPU way.

- :class:`autocast`: ``torch.autocast`` on lazytpu's device with bfloat16
  (matmul/conv in bf16 with f32 accumulation; see docs/api.md);
- :class:`GradScaler`: loss scaling whose unscale / inf check / scale update
  run on the device; with a syncfree optimizer the skipped step is decided on
  the device too, so a training step never waits for the host;
- :class:`SyncFreeSGD`, :class:`SyncFreeAdam`, :class:`SyncFreeAdamW`: their
  ``step(found_inf=t)`` applies the update only where ``t == 0``, without
  reading ``t`` on the host.

bf16 needs no loss scaling (same exponent range as f32): GradScaler matters
for float16 experiments.
"""
import warnings

import torch

from . import core as _core

__all__ = ["autocast", "GradScaler", "SyncFreeSGD", "SyncFreeAdam", "SyncFreeAdamW"]


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


class SyncFreeSGD(torch.optim.SGD):
    """SGD whose ``step(found_inf=t)`` skips the update where t != 0, on the
    device."""
    _lazytpu_syncfree = True

    def step(self, closure=None, found_inf=None):
        return _syncfree_step(self, super().step, closure, found_inf)


class SyncFreeAdam(torch.optim.Adam):
    """Adam with a device-side skipped step (see SyncFreeSGD)."""
    _lazytpu_syncfree = True

    def step(self, closure=None, found_inf=None):
        return _syncfree_step(self, super().step, closure, found_inf)


class SyncFreeAdamW(torch.optim.AdamW):
    """AdamW with a device-side skipped step (see SyncFreeSGD)."""
    _lazytpu_syncfree = True

    def step(self, closure=None, found_inf=None):
        return _syncfree_step(self, super().step, closure, found_inf)
