"""torch_xla.distributed.fsdp.utils: checkpoint_module."""
from types import MethodType

import torch

from torch_xla.utils.checkpoint import checkpoint


def checkpoint_module(module):
    """Replaces module.forward by a gradient-checkpointed one
    (torch_xla.utils.checkpoint): its activations are recomputed in the
    backward pass. Keyword arguments are passed through; a call none of whose
    inputs requires grad runs plainly (nothing to recompute for)."""
    assert isinstance(module, torch.nn.Module)
    original = module.forward

    def unpacked(nargs, keys, *flat):
        return original(*flat[:nargs], **dict(zip(keys, flat[nargs:])))

    def forward(m, *args, **kwargs):
        flat = args + tuple(kwargs.values())
        if any(isinstance(t, torch.Tensor) and t.requires_grad for t in flat):
            return checkpoint(unpacked, len(args), tuple(kwargs), *flat)
        return original(*args, **kwargs)

    module._xla_checkpointed_forward_original = original
    module.forward = MethodType(forward, module)
    return module
