"""Small compatibility patches applied at import.

- Printing a device tensor: torch's repr runs several ops on the tensor's own
  device (abs, masked_select, ...), which would run on the CPU fallback and
  show up in the metrics. Like torch_xla/lazy, move it to the CPU first (one
  value read).
"""
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


# - data_ptr()/storage() of a device tensor: the functionalization wrapper has
#   an empty storage, so torch would return 0 / an obscure error. Say why.
_NO_HOST = ("lazytpu: a device tensor has no host memory, so %s is unavailable; "
            "copy it to the host first with .cpu()")
_orig_data_ptr = torch.Tensor.data_ptr
_orig_storage = torch.Tensor.storage


def _data_ptr(self):
    if self.device.type in _TYPES:
        raise RuntimeError(_NO_HOST % "data_ptr()")
    return _orig_data_ptr(self)


def _storage(self):
    if self.device.type in _TYPES:
        raise RuntimeError(_NO_HOST % "storage()")
    return _orig_storage(self)


torch.Tensor.data_ptr = _data_ptr
torch.Tensor.storage = _storage

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
        if name is not None and name != "lazytpu":
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
