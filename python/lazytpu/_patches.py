"""Small compatibility patches applied at import.

- Printing a device tensor: torch's repr runs several ops on the tensor's own
  device (abs, masked_select, ...), which would run on the CPU fallback and
  show up in the metrics. Like torch_xla/lazy, move it to the CPU first (one
  value read).
"""
import threading

import torch
import torch._tensor_str as _ts

from .core import DEVICE_TYPES as _TYPES

_orig_str = _ts._str


def _str(self, *args, **kwargs):
    if isinstance(self, torch.Tensor) and self.device.type in _TYPES:
        with torch.no_grad():
            cpu = self.detach().to("cpu")
        s = _orig_str(cpu, *args, **kwargs)
        dev = "device='%s'" % self.device
        if s.endswith(")"):
            extra = ""
            if self.requires_grad and "grad_fn" not in s and self.grad_fn is None:
                extra = ", requires_grad=True"
            elif self.grad_fn is not None:
                extra = ", grad_fn=<%s>" % type(self.grad_fn).__name__
            s = s[:-1] + ", " + dev + extra + ")"
        return s
    return _orig_str(self, *args, **kwargs)


_ts._str = _str


# - storage() of a device tensor: the functionalization wrapper has an empty
#   storage, so torch would give an obscure error. Say why.
_NO_HOST = ("lazytpu: a device tensor has no host memory, so %s is unavailable; "
            "copy it to the host first with .cpu()")
_orig_data_ptr = torch.Tensor.data_ptr
_orig_storage = torch.Tensor.storage


# - data_ptr() of a device tensor is a device address, as a CUDA tensor's is:
#   its storage's identity (UntypedStorage.data_ptr below) plus its offset in
#   bytes. Views of one storage get addresses inside one range, other storages
#   other ranges; safetensors' save_model / load_model and accelerate's
#   save_state / load_state tell tied and aliased weights apart by it. It is
#   not host memory: read values with .cpu().
def _data_ptr(self):
    if self.device.type in _TYPES:
        if not torch._is_functional_tensor(self):     # a fake / subclass tensor
            raise RuntimeError(_NO_HOST % "data_ptr()")
        return self.untyped_storage().data_ptr() + self.storage_offset() * self.element_size()
    return _orig_data_ptr(self)


def _storage(self):
    if self.device.type in _TYPES:
        raise RuntimeError(_NO_HOST % "storage()")
    return _orig_storage(self)


torch.Tensor.data_ptr = _data_ptr
torch.Tensor.storage = _storage

# - the storage of a device tensor (tensor.untyped_storage()) is shared by the
#   tensor, its views and detached copies, as on any device; its data_ptr() is
#   that storage's identity, a device address that is not host memory, like a
#   CUDA storage's. Libraries tell tied or aliased weights apart by it
#   (safetensors' storage_ptr, transformers' id_tensor_storage in
#   save_pretrained). Other storages are untouched.
#   Its nbytes() is the size of the storage's base value (torch reads 0 for a
#   storage-less device value): Tensor.untyped_storage() attaches it.
#   The address: a storage asked for one gets the next free range of its
#   size in a region no host pointer can be (_ADDR_BASE), kept on its Python
#   object (PyTorch keeps that object while the storage lives), so it is
#   stable while the storage lives, and a storage's range never overlaps
#   another's, live or dead. Reading memory through one faults: on x86-64
#   the address is non-canonical (bit 62), on arm64 bits 48-55 are set
#   (bit 55; the top byte, which arm64 ignores, is not relied on).
_orig_storage_data_ptr = torch.UntypedStorage.data_ptr
_orig_storage_nbytes = torch.UntypedStorage.nbytes
_orig_untyped_storage = torch.Tensor.untyped_storage

_ADDR_BASE = (1 << 62) | (1 << 55)
_ADDR_ALIGN = 1 << 12            # and one such gap after each range
_addr_next = [_ADDR_BASE]
_addr_lock = threading.Lock()


def _storage_data_ptr(self):
    if self.device.type not in _TYPES:
        return _orig_storage_data_ptr(self)
    d = self.__dict__
    n = self.nbytes()
    with _addr_lock:
        addr = d.get("_lazytpu_addr")
        if addr is None or n > d["_lazytpu_span"]:   # new, or grew (resize_)
            span = -(-max(n, 1) // _ADDR_ALIGN) * _ADDR_ALIGN
            addr = _addr_next[0]
            _addr_next[0] += span + _ADDR_ALIGN
            d["_lazytpu_addr"], d["_lazytpu_span"] = addr, span
    return addr


def _storage_nbytes(self):
    n = self.__dict__.get("_lazytpu_nbytes")
    return _orig_storage_nbytes(self) if n is None else n


# (only device tensors themselves: the fake tensors of torch.compile and other
# subclasses have storages of their own)
def _untyped_storage(self):
    s = _orig_untyped_storage(self)
    if self.device.type in _TYPES and torch._is_functional_tensor(self):
        s._lazytpu_nbytes = torch.ops.lazytpu.storage_nbytes(self)
    return s


torch.UntypedStorage.data_ptr = _storage_data_ptr
torch.UntypedStorage.nbytes = _storage_nbytes
torch.Tensor.untyped_storage = _untyped_storage

# - torch.save / copy.deepcopy pick their device path (through .cpu() / clone)
#   when torch._C._has_storage(t) is False for a lazytpu tensor. Device
#   tensors are wrapped by functionalization, whose wrapper has an (empty)
#   storage object, so answer for the device tensor itself.
_orig_has_storage = torch._C._has_storage


def _has_storage(t):
    if isinstance(t, torch.Tensor) and t.device.type in _TYPES:
        return False
    return _orig_has_storage(t)


torch._C._has_storage = _has_storage

# - cpu_tensor.copy_(device_tensor) (e.g. load_state_dict of a device
#   checkpoint into a CPU model): functionalization refuses to mutate a plain
#   tensor from a wrapped one, so read the device value first.
_orig_copy_ = torch.Tensor.copy_


def _copy_(self, src, non_blocking=False):
    if (isinstance(src, torch.Tensor) and src.device.type in _TYPES
            and self.device.type not in _TYPES):
        src = src.to("cpu")
    return _orig_copy_(self, src, non_blocking)


torch.Tensor.copy_ = _copy_

# - torch.compile on lazytpu tensors. Dynamo turns every input into a fake
#   tensor by describing its storage. A lazytpu tensor is a functional
#   wrapper around a storage-less tensor, like an XLA tensor, which dynamo
#   describes as a plain tensor ("xla" and "lazy" are special-cased by
#   name); lazytpu tensors get the same treatment, for the lazytpu backend
#   (lazytpu.compile). Other backends (inductor, eager, aot_eager, ...)
#   cannot run on the device: say what works instead, before any tracing.
_COMPILE_MSG = (
    "lazytpu: torch.compile cannot compile tensors on the lazytpu device with "
    "the %r backend. Use torch.compile(model, backend=\"lazytpu\"), or call "
    "the model without torch.compile (lazytpu already traces and compiles "
    "every step lazily), or compile a CPU model.")


def _dynamo_backend_name():
    """The backend of the torch.compile being traced on this thread: None
    outside dynamo, "lazytpu" for ours, else the other backend's name."""
    import sys
    sc = sys.modules.get("torch._dynamo.symbolic_convert")
    if sc is None:
        return None
    tx = getattr(sc.tls, "current_tx", None)
    if tx is None:
        return None
    fn = tx.output.compiler_fn
    for _ in range(8):
        # a backend marked _lazytpu_backend runs on the device (lazytpu's;
        # torch_xla's openxla in compatibility mode), also when torch.compile
        # wrapped it (_TorchCompileWrapper.compiler_fn)
        if getattr(fn, "_lazytpu_backend", False) or \
                getattr(getattr(fn, "compiler_fn", None), "_lazytpu_backend", False):
            return "lazytpu"
        inner = getattr(fn, "_torchdynamo_orig_backend", None)
        if inner is None:
            break
        fn = inner
    return (getattr(fn, "compiler_name", None) or getattr(fn, "__name__", None)
            or type(fn).__name__)


def _in_hop_compile():
    """True while a higher-order op called outside torch.compile (while_loop,
    cond, scan, map, ...) compiles itself with dynamo's eager backend to run:
    its graph runs the op's eager implementation on the device tensors, as
    any traced op (each while_loop iteration reads its condition)."""
    try:
        from torch._higher_order_ops.utils import _in_hop_compile as f
    except ImportError:  # torch without it
        return False
    return f()


def _patch_meta_describer():
    try:
        from torch._subclasses import meta_utils
    except ImportError:  # torch without dynamo support
        return
    desc = meta_utils.MetaTensorDescriber
    orig = desc.describe_tensor
    orig_is_functional = torch._is_functional_tensor

    def is_functional_not_lazytpu(t):
        if isinstance(t, torch.Tensor) and t.device.type in _TYPES:
            return False
        return orig_is_functional(t)

    def describe_tensor(self, t, *args, **kwargs):
        if not (isinstance(t, torch.Tensor) and t.device.type in _TYPES):
            return orig(self, t, *args, **kwargs)
        name = _dynamo_backend_name()
        if name is not None and name != "lazytpu" and not _in_hop_compile():
            raise RuntimeError(_COMPILE_MSG % name)
        torch._is_functional_tensor = is_functional_not_lazytpu
        try:
            return orig(self, t, *args, **kwargs)
        finally:
            torch._is_functional_tensor = orig_is_functional

    desc.describe_tensor = describe_tensor


_patch_meta_describer()

# - torch.inference_mode. PyTorch's functionalization (which every lazytpu
#   tensor goes through, as XLA tensors do) cannot create views of tensors
#   inside inference mode ("Cannot set version_counter for inference
#   tensor"); torch_xla has the same limit and Lightning swaps inference_mode
#   for no_grad on XLA. In a process that uses lazytpu, inference_mode(True)
#   therefore disables gradients like no_grad instead of switching on
#   PyTorch's inference mode: the same results, only t.is_inference() stays
#   False and torch.is_inference_mode_enabled() reports False.
_orig_inference_mode = torch.autograd.grad_mode.inference_mode


class _lazytpu_inference_mode(_orig_inference_mode):
    __doc__ = _orig_inference_mode.__doc__

    def __enter__(self):
        self._lazytpu_prev = torch.is_grad_enabled()
        if self.mode:
            torch._C._set_grad_enabled(False)
        else:
            self._inference_mode_context = torch._C._InferenceMode(False)
            self._inference_mode_context.__enter__()

    def __exit__(self, exc_type, exc_value, traceback):
        if not self.mode:
            self._inference_mode_context.__exit__(exc_type, exc_value, traceback)
        torch._C._set_grad_enabled(self._lazytpu_prev)


torch.inference_mode = _lazytpu_inference_mode
torch.autograd.grad_mode.inference_mode = _lazytpu_inference_mode
torch.autograd.inference_mode = _lazytpu_inference_mode

# - Module.to() / Module.cpu() between the host and the device keep a
#   parameter that several modules share (a tied embedding and LM head) one
#   Parameter. Module._apply converts a parameter in place (`param.data =
#   new`: every module keeps its reference) only when the old and the new
#   tensor have "compatible shallow-copy types". A CPU tensor and a lazytpu
#   tensor (a FunctionalTensorWrapper around a storage-less device tensor)
#   never do, and no answer from the backend could help: `.data =` would
#   copy the wrapper's metadata into the CPU parameter's TensorImpl, which
#   cannot become a wrapper. _apply then gives every module that holds the
#   parameter a new Parameter of its own and the tie is lost (torch_xla loses
#   it the same way). PyTorch's swap path (torch.__future__.
#   set_swap_module_params_on_conversion) keeps each Parameter object and
#   swaps its contents instead, which is what `.data =` gives CUDA tensors:
#   the tie, `model.lm_head.weight is model.embed.weight`, references held
#   by an optimizer built before the move. It is switched on for this thread
#   only, and only for a .to()/.cpu() that moves some parameter or buffer of
#   the module between lazytpu and another device; a module that never
#   touches the device converts exactly as before. Each parameter keeps its
#   class and attributes (the swap would exchange them too). A parameter the
#   swap cannot take (weak references to it, hooks on it, other holders of
#   its tensor) makes the move take PyTorch's usual path, after which shared
#   parameters are tied again (each module gets the first module's new
#   Parameter).
import copyreg as _copyreg  # noqa: E402
import threading as _threading  # noqa: E402
import weakref as _weakref  # noqa: E402

_swap_tls = _threading.local()
_orig_get_swap = torch.__future__.get_swap_module_params_on_conversion


def _get_swap_module_params_on_conversion():
    return getattr(_swap_tls, "on", False) or _orig_get_swap()


_get_swap_module_params_on_conversion.__doc__ = _orig_get_swap.__doc__
torch.__future__.get_swap_module_params_on_conversion = _get_swap_module_params_on_conversion

_PARAM_SLOTS = set(_copyreg._slotnames(torch.nn.Parameter))


def _crosses_device(module, device):
    """True when converting `module` to `device` moves one of its
    parameters or buffers between lazytpu and another device type."""
    if device is None:
        return False
    to_dev = torch.device(device).type in _TYPES
    for ts in (module.parameters(), module.buffers()):
        for t in ts:
            if (t.device.type in _TYPES) != to_dev:
                return True
    return False


def _swappable(t, max_uses):
    """torch.utils.swap_tensors would take t (no weak references, nobody
    else holding its tensor, no hooks on it, no slots of its own)."""
    if _weakref.getweakrefs(t) or t._use_count() > max_uses:
        return False
    if t._backward_hooks or getattr(t, "_post_accumulate_grad_hooks", None):
        return False
    return set(_copyreg._slotnames(type(t))) == _PARAM_SLOTS or type(t) is torch.Tensor


def _shared_parameters(module):
    """[[(module, name), ...]] for each parameter held under several names."""
    where = {}
    for _, mod in module.named_modules(remove_duplicate=False):
        for name, p in mod._parameters.items():
            if p is not None:
                where.setdefault(id(p), []).append((mod, name))
    return [w for w in where.values() if len(w) > 1]


def _convert_across(module, device, convert):
    """Runs convert() (the original .to/.cpu) with tied parameters kept."""
    if getattr(_swap_tls, "on", False) or not _crosses_device(module, device):
        return convert()
    params = list(module.parameters())
    # a parameter's tensor is held by its Python object (1); a gradient's by
    # its parameter and its Python object (2, the first dropped by _apply)
    if not all(_swappable(p, 1) and (p.grad is None or _swappable(p.grad, 2))
               for p in params):
        shared = _shared_parameters(module)
        out = convert()
        for holders in shared:
            first = holders[0][0]._parameters[holders[0][1]]
            for mod, name in holders[1:]:
                mod._parameters[name] = first
        return out
    kept = [(p, type(p), p.__dict__) for p in params]
    _swap_tls.on = True
    try:
        return convert()
    finally:
        _swap_tls.on = False
        for p, cls, attrs in kept:
            if type(p) is not cls:
                p.__class__ = cls
            if p.__dict__ is not attrs:
                p.__dict__ = attrs


_orig_module_to = torch.nn.Module.to
_orig_module_cpu = torch.nn.Module.cpu


def _module_to(self, *args, **kwargs):
    device = torch._C._nn._parse_to(*args, **kwargs)[0]
    return _convert_across(self, device, lambda: _orig_module_to(self, *args, **kwargs))


def _module_cpu(self):
    return _convert_across(self, "cpu", lambda: _orig_module_cpu(self))


_module_to.__doc__ = _orig_module_to.__doc__
_module_cpu.__doc__ = _orig_module_cpu.__doc__
torch.nn.Module.to = _module_to
torch.nn.Module.cpu = _module_cpu
