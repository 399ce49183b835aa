"""torch_xla.utils.dlpack: DLPack exchange of xla tensors. lazytpu's device
memory belongs to its simulated cores, so an exchange copies: to_dlpack gives
a capsule of a host copy of the tensor's value (its pending graph runs first),
from_dlpack copies a CPU DLPack tensor to the device. As 2.9, only CPU DLPack
tensors are accepted (ValueError otherwise)."""
from typing import Any

import torch
import torch.utils.dlpack as _dlpack
from torch.utils.dlpack import DLDeviceType

import torch_xla


def to_dlpack(xla_tensor: Any):
    """A DLPack capsule holding a host copy of xla_tensor's value (writes to
    it do not reach the device tensor)."""
    if not isinstance(xla_tensor, torch.Tensor) or xla_tensor.device.type != "xla":
        raise RuntimeError("to_dlpack: expected an xla tensor, got %s" % (
            xla_tensor.device if isinstance(xla_tensor, torch.Tensor) else type(xla_tensor)))
    return _dlpack.to_dlpack(xla_tensor.detach().cpu())


def from_dlpack(ext_tensor: Any):
    """An xla tensor (on the current device) with a copy of ext_tensor, a
    DLPack capsule or an object with __dlpack__ on the CPU."""
    if hasattr(ext_tensor, "__dlpack_device__") and hasattr(ext_tensor, "__dlpack__"):
        device_type, _ = ext_tensor.__dlpack_device__()
        if device_type != DLDeviceType.kDLCPU:
            raise ValueError("PyTorch/XLA DLPack implementation currently only supports CPU.")
    host = _dlpack.from_dlpack(ext_tensor)
    if host.device.type != "cpu":
        raise ValueError("PyTorch/XLA DLPack implementation currently only supports CPU.")
    return host.to(torch_xla.device())
