"""torch.lazytpu: lazytpu's device module, and PyTorch's autoload hook.

This module is small on purpose: PyTorch imports it at the end of
``import torch`` (entry point group ``torch.backends``, see pyproject.toml),
and a failure or a slow import here would break ``import torch`` for the
user. Autoloading loads the hooks library (``lazytpu/_lib/
liblazytpu_hooks.so``: what PyTorch asks of a PrivateUse1 device besides
kernels: hooks, device guard, generators, pinned memory), renames the
PrivateUse1 device to ``lazytpu`` and registers this module as
``torch.lazytpu``. The engine (``lazytpu._C``: the kernels, the simulated
cores) is loaded on first use, through ``_lazy_init``, which PyTorch calls
before the first tensor is created on the device, or by ``import lazytpu``.
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns autoloading off (then ``import
lazytpu`` registers the device).

Do no harm: until the process uses the device (``import lazytpu``, or a
tensor on ``lazytpu``), it looks to PyTorch like a CUDA build on a machine
without a GPU: ``torch.accelerator.current_accelerator()`` names lazytpu
(the device type exists), but ``is_available()`` is False and
``device_count()`` is 0, so a CPU program's DataLoader, ``fork_rng``,
DataParallel and dynamo behave as without lazytpu. ``torch.manual_seed``
does not load the engine: the seed is kept and given to every core when the
engine loads.
"""
import os
import sys

# torch is imported inside the functions: `import lazytpu` before `import
# torch` imports this module, whose first `import torch` runs PyTorch's
# autoloading, which imports this module again (still half-initialised).
NAME = "lazytpu"
_HOOKS_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lazytpu", "_lib",
                          "liblazytpu_hooks.so")
_registered = False
_hooks = []          # the loaded hooks library's path (loaded once per process)
_pending_seed = []   # torch.manual_seed before the engine loaded: [seed]


def _claim_privateuse1():
    """Raises RuntimeError if another backend already took the PrivateUse1
    name (PyTorch allows one per process)."""
    import torch
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", NAME):
        raise RuntimeError(
            "lazytpu: the PrivateUse1 device is already taken by %r; lazytpu "
            "cannot be loaded in the same process" % current)


def _load_hooks():
    """Loads the hooks library once; its static initialiser registers the
    PrivateUse1 hooks and device guard (once per process: the engine links the
    same library). torch.ops.load_library is PyTorch's loader for libraries
    whose initialisers register with it; no function of the library is called
    from Python. Raises OSError if the library is missing (unbuilt tree)."""
    if not _hooks:
        import torch
        torch.ops.load_library(_HOOKS_LIB)
        _hooks.append(_HOOKS_LIB)


def register():
    """Loads the hooks, renames PrivateUse1 to ``lazytpu`` and installs
    ``torch.lazytpu`` and the generated ``Tensor.is_lazytpu`` /
    ``Tensor.lazytpu()`` / ``Module.lazytpu()`` methods. Idempotent; raises
    RuntimeError if another backend already took the PrivateUse1 name, OSError
    if the hooks library is missing."""
    global _registered
    if _registered:
        return
    import torch
    _claim_privateuse1()
    _load_hooks()
    if torch._C._get_privateuse1_backend_name() != NAME:
        torch.utils.rename_privateuse1_backend(NAME)
    if not hasattr(torch, NAME):
        torch._register_device_module(NAME, sys.modules[__name__])
    if not hasattr(torch.Tensor, "is_" + NAME):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True,
            for_storage=False)
    _install_first_move()
    _registered = True


def _install_first_move():
    """Makes the first ``module.to("lazytpu")`` of a process that has not
    loaded the engine load it before converting anything. The engine's
    import replaces Module.to with the version that keeps tied parameters
    tied (lazytpu/_patches.py); without this, a program that only names the
    device (``ACCELERATE_TORCH_DEVICE=lazytpu``, Trainer's
    ``model.to(args.device)``) would run its first move with PyTorch's
    Module.to, which gives each module that shares a parameter (GPT-2's
    embedding and LM head) a Parameter of its own: the LM head's gradient
    then never reaches the embedding. Any other .to() is PyTorch's, after one
    device-argument parse."""
    import torch
    orig = torch.nn.Module.to

    def to(self, *args, **kwargs):
        if not is_initialized():
            device = torch._C._nn._parse_to(*args, **kwargs)[0]
            if device is not None and device.type == NAME:
                _engine()
                return torch.nn.Module.to(self, *args, **kwargs)
        return orig(self, *args, **kwargs)

    to.__doc__ = orig.__doc__
    torch.nn.Module.to = to

    def module_to_device(self, device=None):
        """Moves all parameters and buffers to the lazytpu core ``device``
        (default: the current one), as ``.to()`` does: tied parameters stay
        tied (PyTorch's generated method converts through ``_apply``, which
        unties them)."""
        return self.to(torch.device(NAME, _core(device)))

    setattr(torch.nn.Module, NAME, module_to_device)


class ImportWatch:
    """A meta path finder that notices the modules of ``pending`` being
    imported: the normal finders find and load each, and its function is
    called with the module once its code has run. It removes itself when
    none is left. (lazytpu.hf's changes to transformers; autoload below.)"""

    def __init__(self, pending):
        self.pending = pending          # module name -> function(module)

    def find_spec(self, name, path=None, target=None):
        then = self.pending.pop(name, None)
        if then is None:
            return None
        if not self.pending:
            sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            then(module)
        spec.loader.exec_module = exec_module
        return spec


def _accelerate_names_lazytpu():
    return os.environ.get("ACCELERATE_TORCH_DEVICE", "").split(":")[0] == NAME


def allow_bf16(module):
    """TrainingArguments(bf16=True) refuses a device unless transformers'
    ``is_torch_bf16_gpu_available()`` (CUDA, XPU, HPU, NPU, MPS, ... ; a TPU
    through torch_xla) or torch_xla is there. The name ``module`` (a
    transformers module: training_args, or the utils package it imports the
    name from) holds then answers True also while ACCELERATE_TORCH_DEVICE
    names a lazytpu device (the device TrainingArguments then picks; bf16 is
    the TPU's type and Accelerate autocasts on it); otherwise it is
    transformers' own check. Idempotent; a module without the name is left
    alone."""
    orig = getattr(module, "is_torch_bf16_gpu_available", None)
    if orig is None or getattr(orig, "_lazytpu", False):
        return

    def is_torch_bf16_gpu_available():
        return _accelerate_names_lazytpu() or orig()

    is_torch_bf16_gpu_available._lazytpu = True
    is_torch_bf16_gpu_available.__wrapped__ = orig
    is_torch_bf16_gpu_available.__doc__ = orig.__doc__
    module.is_torch_bf16_gpu_available = is_torch_bf16_gpu_available


def autoload():
    """Entry point PyTorch calls at the end of ``import torch``. Never makes
    ``import torch`` fail: if lazytpu cannot register (the PrivateUse1 name is
    taken, the hooks library is missing), it warns and leaves torch as it
    was; ``import lazytpu`` then raises the error."""
    try:
        _claim_privateuse1()
        _load_hooks()
    except (RuntimeError, OSError) as e:
        import warnings
        warnings.warn("lazytpu: device not registered at `import torch`: %s" % e,
                      RuntimeWarning, stacklevel=2)
        return
    register()
    if _accelerate_names_lazytpu():
        # ACCELERATE_TORCH_DEVICE=lazytpu and no import: lazytpu.hf.enable()
        # runs when the engine loads, at the device's first use; a
        # TrainingArguments(bf16=True) validates its device before that.
        # transformers' training_args may be importing right now (its
        # imports import torch) and take the name from transformers.utils
        # next, or come later.
        for name in ("transformers.utils", "transformers.training_args"):
            if name in sys.modules:
                allow_bf16(sys.modules[name])
        if "transformers.training_args" not in sys.modules:
            sys.meta_path.insert(0, ImportWatch({"transformers.training_args": allow_bf16}))


def _engine_loaded():
    """Called by ``import lazytpu`` once the engine is up: gives the cores a
    seed torch.manual_seed set before."""
    if _pending_seed:
        manual_seed_all(_pending_seed.pop())


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
    """True once this process uses the device (the engine is loaded: ``import
    lazytpu``, or a tensor made on ``lazytpu``); False before, so that a
    program that never names the device sees no accelerator (DataLoader
    pinning, DataParallel, dynamo, torch.accelerator stay as on a CPU-only
    PyTorch)."""
    return is_initialized()


def device_count():
    """Simulated cores in this process (LAZYTPU_NUM_CORES, default 8) once the
    device is in use; 0 before (see is_available)."""
    if is_initialized():
        return _engine().device_count()
    return 0


_current = [0]


def current_device():
    """The index set by set_device (default 0)."""
    return _current[0]


def set_device(device):
    import torch
    idx = torch.device(device).index if not isinstance(device, int) else device
    idx = 0 if idx is None else int(idx)
    _engine()
    if not 0 <= idx < device_count():
        raise ValueError("torch.lazytpu.set_device(%d): there are %d cores"
                         % (idx, device_count()))
    _current[0] = idx


def synchronize(device=None):
    """Waits for every program queued on the cores."""
    if is_initialized():
        _engine().wait_device_ops()


class Stream:
    """A core's stream. A core runs its programs one after the other in the
    order they were queued, so every stream of a core is the same stream:
    waits between streams are no-ops and synchronize() waits for the core
    (what torch.distributed.checkpoint's device-to-CPU copies ask of it)."""

    def __init__(self, device=None, priority=0):
        import torch
        self.device = torch.device(NAME, _core(device) if is_initialized() else 0)
        self.priority = priority

    @property
    def device_type(self):
        return NAME

    def synchronize(self):
        synchronize(self.device)

    def query(self):
        """True: waits for the core first (reading a device value waits for
        it anyway, so nothing is read early)."""
        self.synchronize()
        return True

    def wait_stream(self, stream):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __eq__(self, other):
        return isinstance(other, Stream) and other.device == self.device

    def __hash__(self):
        return hash((NAME, self.device.index))

    def __repr__(self):
        return "<torch.lazytpu.Stream device=%s>" % self.device


class Event:
    """A point in a core's (single) stream: synchronize() waits for what was
    queued before it, here everything queued."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.stream = None

    def record(self, stream=None):
        self.stream = stream if stream is not None else current_stream()

    def wait(self, stream=None):
        pass

    def query(self):
        return self.stream is None or self.stream.query()

    def synchronize(self):
        if self.stream is not None:
            self.stream.synchronize()


def current_stream(device=None):
    return Stream(device)


default_stream = current_stream


class stream:
    """``with torch.lazytpu.stream(s):`` (work queued inside runs in the
    core's order anyway)."""

    def __init__(self, s):
        self.stream = s

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc):
        return False


def set_stream(s):
    pass


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
    """Seeds every core's generator (torch.manual_seed calls this). Before the
    engine is loaded the seed is kept for it (see _engine_loaded): a CPU
    program's torch.manual_seed does not load it."""
    if not is_initialized():
        _pending_seed[:] = [seed]
        return
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
