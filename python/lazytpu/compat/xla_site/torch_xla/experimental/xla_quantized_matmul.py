"""torch_xla.experimental.xla_quantized_matmul on lazytpu: weight-only
int8 / int4 quantized linear layers (torch_xla 2.9's
docs/source/perf/quantized_ops.md).

Importing the module defines ``torch.ops.xla.quantized_matmul(x, w, scale,
zero_point=None, block_size=-1, int4_weight=False, quantize_activation=False)``
and ``XlaQuantizedLinear``. Weights are int8 tensors holding the quantized
values:

- per channel (block_size -1): w [out, in], scale and zero_point [out];
  ``out = (x @ w^T) * scale - (x @ zero_point-per-row)``;
- blockwise (block_size b): w [in / b, b, out], scale and zero_point
  [in / b, out]; each block's partial product is scaled, then summed.

int4_weight: the values must lie in int4's range [-8, 7] (torch_xla casts
them to XLA's s4, which would change values outside it: refused here, when
the layer loads its weight or when the op gets a CPU weight).
quantize_activation (per channel only): x is quantized to int8 per row
(absmax / 127) and the int8 x int8 product accumulated exactly (in float64
on the device: every sum of int8 products below 2^53 is exact, as XLA's
int32 accumulation), then scaled by both scales. Otherwise the product runs
in x's dtype with the weights converted to it (exact: int8 values are exact
in bf16 and f32), as torch_xla's dot of a float by an int8 operand.
"""
import torch
import torch.nn.functional as F

from .._internal.custom_kernel import XLA_LIB

XLA_LIB.define(
    "quantized_matmul(Tensor x, Tensor w, Tensor scale, Tensor? zero_point=None, "
    "int? block_size=-1, bool? int4_weight=False, bool? quantize_activation=False) -> Tensor")


def _check_per_channel(in_dim, out_dim, w, scale, zero_point):
    assert w.dtype == torch.int8, "Weight dtype is expected to be torch.int8, got %s." % w.dtype
    assert w.dim() == 2, "Weight tensor is expected to be 2D, got %dD Tensor." % w.dim()
    assert list(w.shape) == [out_dim, in_dim], (
        "Weight shape is expected to be [output_dim, input_dim], output_dim: %d, input_dim: "
        "%d, but got %s." % (out_dim, in_dim, list(w.shape)))
    assert scale.dim() == 1 and scale.shape[0] == w.shape[0], (
        "weight scaler shape is expect to be [out_channel,], got %s, weight shape %s."
        % (scale.shape, list(w.shape)))
    if zero_point is not None:
        assert zero_point.dim() == 1 and zero_point.shape[0] == w.shape[0], (
            "zero point shape is expect to be [out_channel,], got %s, weight shape %s."
            % (zero_point.shape, list(w.shape)))


def _check_blockwise(in_dim, out_dim, block, w, scale, zero_point):
    assert w.dtype == torch.int8, "Weight dtype is expected to be torch.int8, got %s." % w.dtype
    assert w.dim() == 3, "Weight tensor is expected to be 3D, got %dD Tensor." % w.dim()
    assert in_dim % block == 0, (
        "input_dim should be divisible by block_size, got input_dim: %d, block_size: %d."
        % (in_dim, block))
    assert w.shape[0] == in_dim // block and w.shape[1] == block, (
        "Weight shape is expected to be [input_dim / block_size, block_size, output_dim], "
        "input_dim: %d, block_size: %d, output_dim: %d, but got %s."
        % (in_dim, block, out_dim, list(w.shape)))
    assert scale.dim() == 2 and tuple(scale.shape) == (w.shape[0], w.shape[-1]), (
        "weight scaler shape is expect to be [in_channel / block_size, out_channel], got %s, "
        "weight shape %s." % (scale.shape, list(w.shape)))
    if zero_point is not None:
        assert zero_point.dim() == 2 and tuple(zero_point.shape) == (w.shape[0], w.shape[-1]), (
            "zero_point shape is expect to be [in_channel / block_size, out_channel], got %s, "
            "weight shape %s." % (zero_point.shape, list(w.shape)))


def _check_int4(w):
    """The int8 container holds int4 values (a host read of w)."""
    if bool(((w < -8) | (w > 7)).any()):
        raise ValueError("quantized_matmul: int4_weight=True, but the weight holds values "
                         "outside int4's range [-8, 7] (torch_xla's cast to s4 would change "
                         "them)")


def _quantize_rows(x, n_bits=8):
    """x as int8 values per row (absmax scaling) and the per-row scale."""
    scale = x.abs().amax(dim=-1, keepdim=True) / (2 ** (n_bits - 1) - 1)
    return torch.round(x / scale).to(torch.int8), scale.to(x.dtype)


def _quantized_matmul(x, w, scale, zero_point=None, block_size=-1, int4_weight=False,
                      quantize_activation=False):
    if int4_weight and w.device.type == "cpu":       # device weights: checked when loaded
        _check_int4(w)
    x_scale = None
    if block_size == -1:
        _check_per_channel(x.shape[-1], scale.shape[0], w, scale, zero_point)
        if quantize_activation:
            xq, x_scale = _quantize_rows(x)
            out = F.linear(xq.to(torch.float64), w.to(torch.float64)).to(torch.int32)
            x = xq.to(scale.dtype)       # the zero-point term sees the int8 rows, as in 2.9
        else:
            out = F.linear(x, w.to(x.dtype))
        out = out * scale
    else:
        assert not quantize_activation, (
            "Blockwise quantization does not support activation quantization.")
        _check_blockwise(x.shape[-1], w.shape[-1], block_size, w, scale, zero_point)
        x = x.reshape(*x.shape[:-1], x.shape[-1] // block_size, block_size)
        out = torch.einsum("scn,...sc->...sn", w.to(x.dtype), x)
        out = torch.einsum("sn,...sn->...n", scale, out)
    if zero_point is not None:
        if block_size == -1:
            out = out - torch.einsum("...c,z->...z", x, zero_point)
        else:
            out = out - torch.matmul(x.sum(dim=-1), zero_point)
    if x_scale is not None:
        out = out * x_scale
    return out


# above autograd and functionalization, on every device: the body's ops are
# traced (and differentiated: torch_xla's op has no backward) as any others
XLA_LIB.impl("quantized_matmul", _quantized_matmul, "CompositeImplicitAutograd")


class XlaQuantizedLinear(torch.nn.Module):
    """A linear layer over quantized int8 weights (buffers ``weight``,
    ``weight_scaler`` and, unless symmetric, ``zero_point``), loaded with
    load_quantized_weight; forward is torch.ops.xla.quantized_matmul."""

    def __init__(self, input_dim, output_dim, is_symmetric=False, block_size=-1,
                 int4_weight=False, quantize_activation=False):
        super().__init__()
        self.input_dim, self.output_dim = input_dim, output_dim
        self.is_symmetric = is_symmetric
        self.block_size = block_size
        self.int4_weight = int4_weight
        self.quantize_activation = quantize_activation
        self.register_buffer("weight", torch.zeros(output_dim, input_dim).to(torch.int8))
        self.register_buffer("weight_scaler", torch.zeros(output_dim))
        if not is_symmetric:
            self.register_buffer("zero_point", torch.zeros(output_dim))
        else:
            self.zero_point = None

    def load_quantized_weight(self, weight, weight_scaler, zero_point=None):
        """weight: [out, in] per channel, [in / block_size, block_size, out]
        blockwise; weight_scaler (and zero_point): [out] per channel,
        [in / block_size, out] blockwise."""
        if self.block_size == -1:
            _check_per_channel(self.input_dim, self.output_dim, weight, weight_scaler,
                               zero_point)
        else:
            _check_blockwise(self.input_dim, self.output_dim, self.block_size, weight,
                             weight_scaler, zero_point)
        if self.int4_weight:
            _check_int4(weight)
        self.weight = weight
        self.weight_scaler = weight_scaler
        self.zero_point = zero_point

    def forward(self, x):
        return torch.ops.xla.quantized_matmul(
            x, self.weight, self.weight_scaler, self.zero_point, block_size=self.block_size,
            int4_weight=self.int4_weight, quantize_activation=self.quantize_activation)
