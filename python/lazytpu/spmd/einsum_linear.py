"""Linear layers as einsums, for sharded models (torch_xla 2.9's
``XLAPatchedLinear``, ``EinsumLinear`` and ``apply_xla_patch_to_nn_linear``
in ``torch_xla.distributed.spmd``).

``nn.functional.linear`` on an input of more than two dims flattens it to
two before the product, which merges the leading dims and their sharding.
The einsum forms keep every dim of the input: forward ``...n,mn->...m``,
input gradient ``...m,mn->...n``, weight gradient ``...m,...n->mn``, bias
gradient ``...m->m``. The values are those of ``nn.functional.linear``.

Under ``torch.autocast`` on the device the layer casts its floating inputs
to the device's autocast dtype fixed when this module is imported (as
torch_xla fixes it at import: bfloat16 unless changed before) and computes
with autocast off; its backward runs in the forward's autocast state.
"""
import torch

from .. import core as _core

_DEV = _core.DEVICE_TYPE
# "xla": torch's own default (bfloat16); "lazytpu": a custom device's
# default is float16, which the device does not offer (docs/api.md)
_CAST = torch.get_autocast_dtype(_DEV) if _DEV == "xla" else torch.bfloat16


class XLAPatchedLinear(torch.autograd.Function):
    """``linear(input, weight, bias)`` with its product and gradients as
    einsums over input's whole shape (see the module's docstring)."""

    @staticmethod
    @torch.amp.custom_fwd(device_type=_DEV, cast_inputs=_CAST)
    def forward(ctx, input, weight, bias=None):
        ctx.save_for_backward(input, weight, bias)
        out = torch.einsum("...n,mn->...m", input, weight)
        return out + bias if bias is not None else out

    @staticmethod
    @torch.amp.custom_bwd(device_type=_DEV)
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        gi = gw = gb = None
        if ctx.needs_input_grad[0]:
            gi = torch.einsum("...m,mn->...n", grad_output, weight)
        if ctx.needs_input_grad[1]:
            gw = torch.einsum("...m,...n->mn", grad_output, input)
        if bias is not None and ctx.needs_input_grad[2]:
            gb = torch.einsum("...m->m", grad_output)
        return gi, gw, gb


def xla_patched_nn_linear_forward(m, input):
    """An nn.Linear's forward through XLAPatchedLinear."""
    return XLAPatchedLinear.apply(input, m.weight, m.bias)


class EinsumLinear(torch.nn.Linear):
    """An ``nn.Linear`` whose forward is XLAPatchedLinear."""

    def forward(self, input):
        return xla_patched_nn_linear_forward(self, input)


def apply_xla_patch_to_nn_linear(module):
    """Replaces every ``nn.Linear`` below ``module`` (its children, their
    children, ...) by an EinsumLinear holding the same parameter objects:
    an optimizer built before, frozen weights and sharding annotations stay
    as they were (torch_xla 2.9 loads a copy of the state dict into new
    parameters, which also makes frozen ones trainable). Returns
    ``module``; ``module`` itself is not replaced, as in torch_xla 2.9."""
    for name, child in module.named_children():
        if isinstance(child, torch.nn.Linear) and not isinstance(child, EinsumLinear):
            with torch.device("meta"):
                new = EinsumLinear(child.in_features, child.out_features,
                                   bias=child.bias is not None)
            new.weight = child.weight
            new.bias = child.bias
            new.train(child.training)
            setattr(module, name, new)
        else:
            apply_xla_patch_to_nn_linear(child)
    return module
