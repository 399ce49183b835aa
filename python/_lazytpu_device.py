"""torch.lazytpu: lazytpu's device module, and PyTorch's autoload hook.

This module is small on purpose: PyTorch imports it at the end of
``import torch`` (entry point group ``torch.backends``, see pyproject.toml),
and a failure or a slow import here would break ``import torch`` for the
user. It only renames the PrivateUse1 device to ``lazytpu`` and registers
itself as ``torch.lazytpu``; the engine (``lazytpu._C``: the kernels, the
simulated cores) is loaded on first use, through ``_lazy_init``, which PyTorch
calls before the first tensor is created on the device, or by
``import lazytpu``. ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns autoloading off
(then ``import lazytpu`` registers the device).
"""
import os
import sys

# torch is imported inside the functions: `import lazytpu` before `import
# torch` imports this module, whose first `import torch` runs PyTorch's
# autoloading, which imports this module again (still half-initialised).
NAME = "lazytpu"
_registered = False


def register():
    """Renames PrivateUse1 to ``lazytpu`` and installs ``torch.lazytpu`` and
    the generated ``Tensor.is_lazytpu`` / ``Tensor.lazytpu()`` /
    ``Module.lazytpu()`` methods. Idempotent; raises RuntimeError if another
    backend already took the PrivateUse1 name."""
    global _registered
    if _registered:
        return
    import torch
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", NAME):
        raise RuntimeError(
            "lazytpu: the PrivateUse1 device is already taken by %r; lazytpu "
            "cannot be loaded in the same process" % current)
    if current != NAME:
        torch.utils.rename_privateuse1_backend(NAME)
    if not hasattr(torch, NAME):
        torch._register_device_module(NAME, sys.modules[__name__])
    if not hasattr(torch.Tensor, "is_" + NAME):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True,
            for_storage=False)
    _registered = True


def autoload():
    """Entry point PyTorch calls at the end of ``import torch``."""
    register()


def _engine():
    import lazytpu
    return lazytpu


# ----------------------------------------------------- the device module ----

def _lazy_init():
    """Called by PyTorch before the first tensor is made on a lazytpu device:
    loads the engine (kernels, cores)."""
    _engine()


def is_initialized():
    return "lazytpu._C" in sys.modules


def is_available():
    return True


def device_count():
    """Simulated cores in this process (LAZYTPU_NUM_CORES, default 8)."""
    if is_initialized():
        return _engine().device_count()
    try:
        n = int(os.environ.get("LAZYTPU_NUM_CORES", "8"))
    except ValueError:
        n = 8
    return n if 1 <= n <= 64 else 8


_current = [0]


def current_device():
    """The index set by set_device (default 0)."""
    return _current[0]


def set_device(device):
    import torch
    idx = torch.device(device).index if not isinstance(device, int) else device
    idx = 0 if idx is None else int(idx)
    if not 0 <= idx < device_count():
        raise ValueError("torch.lazytpu.set_device(%d): there are %d cores"
                         % (idx, device_count()))
    _current[0] = idx


def synchronize(device=None):
    """Waits for every program queued on the cores."""
    if is_initialized():
        _engine().wait_device_ops()


def _core(device):
    import torch
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    idx = torch.device(device).index
    return current_device() if idx is None else idx


def manual_seed(seed):
    """Seeds the current core's generator."""
    _engine()._C.set_rng_state(int(seed) & ((1 << 64) - 1), current_device())


def manual_seed_all(seed):
    """Seeds every core's generator (torch.manual_seed calls this)."""
    C = _engine()._C
    for i in range(device_count()):
        C.set_rng_state(int(seed) & ((1 << 64) - 1), i)


def seed():
    import torch
    manual_seed(torch.seed())


def seed_all():
    import torch
    manual_seed_all(torch.seed())


def initial_seed():
    """The seed the current core's generator was last seeded with."""
    return _engine()._C.get_rng_seed(current_device())


def get_rng_state(device=None):
    """The core's generator state: a CPU uint8 tensor of 16 bytes (the seed,
    then the running state), as torch.Generator("lazytpu").get_state()."""
    import torch
    C = _engine()._C
    core = _core(device)
    raw = (C.get_rng_seed(core).to_bytes(8, "little")
           + C.get_rng_state(core).to_bytes(8, "little"))
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def set_rng_state(new_state, device=None):
    """Restores a state from get_rng_state (16 bytes)."""
    import torch
    if not (isinstance(new_state, torch.Tensor) and new_state.dtype == torch.uint8
            and new_state.numel() == 16):
        raise TypeError("torch.lazytpu.set_rng_state: expected the uint8 tensor of 16 "
                        "bytes get_rng_state returns")
    raw = bytes(new_state.cpu().tolist())
    _engine()._C.rng_restore(_core(device), int.from_bytes(raw[:8], "little"),
                             int.from_bytes(raw[8:], "little"))


def get_amp_supported_dtype():
    """dtypes torch.autocast("lazytpu", dtype=...) accepts."""
    import torch
    return [torch.bfloat16]


def _is_in_bad_fork():
    return False


def mark_step():
    _engine().mark_step()
