"""torch_xla.experimental.xla_quantized_matmul (compatibility mode):
torch.ops.xla.quantized_matmul and XlaQuantizedLinear against the
dequantized product on the CPU (per channel, blockwise, zero points,
activation quantization, int4 weights), as 2.9's perf/quantized_ops.md uses
them."""
import pytest
import torch

import torch_xla
import torch_xla.backends
import torch_xla.debug.metrics as met
from torch_xla.experimental.xla_quantized_matmul import XlaQuantizedLinear

DEV = "xla"


pytestmark = pytest.mark.usefixtures("highest_precision")   # conftest.py


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 16, generator=g)
    w = torch.randint(-128, 128, (8, 16), dtype=torch.int8, generator=g)
    return x, w, torch.rand(8, generator=g), torch.rand(8, generator=g)


@pytest.mark.parametrize("symmetric", [True, False])
def test_per_channel_matches_dequantized(symmetric):
    x, w, s, z = _data()
    zp = None if symmetric else z
    # the weight dequantized: W = w * s per output row; a zero point
    # subtracts x . z per output
    want = x @ (w.float() * s[:, None]).T
    if zp is not None:
        want = want - x.sum(-1, keepdim=True) * zp
    m = XlaQuantizedLinear(16, 8, is_symmetric=symmetric).to(DEV)
    m.load_quantized_weight(w.to(DEV), s.to(DEV), None if zp is None else zp.to(DEV))
    before = set(met.executed_fallback_ops())
    got = m(x.to(DEV))
    assert got.device.type == "xla" and got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-4)
    assert set(met.executed_fallback_ops()) - before <= {"aten::_local_scalar_dense"}
    # the op on the CPU computes the same
    torch.testing.assert_close(torch.ops.xla.quantized_matmul(x, w, s, zp), want,
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("symmetric", [True, False])
def test_blockwise_int4_matches_dequantized(symmetric):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 16, generator=g)
    w = torch.randint(-8, 8, (4, 4, 8), dtype=torch.int8, generator=g)    # [in/b, b, out]
    s, z = torch.rand(4, 8, generator=g), torch.rand(4, 8, generator=g)
    zp = None if symmetric else z
    blocks = x.reshape(5, 4, 4)
    want = torch.einsum("sn,bsn->bn", s, torch.einsum("scn,bsc->bsn", w.float(), blocks))
    if zp is not None:
        want = want - blocks.sum(-1) @ zp
    m = XlaQuantizedLinear(16, 8, is_symmetric=symmetric, block_size=4, int4_weight=True)
    m = m.to(DEV)
    m.load_quantized_weight(w.to(DEV), s.to(DEV), None if zp is None else zp.to(DEV))
    torch.testing.assert_close(m(x.to(DEV)).cpu(), want, rtol=1e-5, atol=1e-4)


def test_activation_quantization_is_exact_integer_math():
    x, w, s, _ = _data(2)
    scale = x.abs().amax(-1, keepdim=True) / 127
    xq = torch.round(x / scale)
    want = (xq.double() @ w.double().T).float() * s * scale
    got = torch.ops.xla.quantized_matmul(x.to(DEV), w.to(DEV), s.to(DEV),
                                         quantize_activation=True)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-4)
    with pytest.raises(AssertionError, match="does not support activation quantization"):
        torch.ops.xla.quantized_matmul(x.to(DEV), w.reshape(4, 4, 8).to(DEV),
                                       torch.rand(4, 8).to(DEV), block_size=4,
                                       quantize_activation=True)


def test_refusals_and_gradient():
    x, w, s, _ = _data(3)
    m = XlaQuantizedLinear(16, 8, is_symmetric=True, block_size=4, int4_weight=True)
    with pytest.raises(ValueError, match="outside int4's range"):
        m.load_quantized_weight(torch.full((4, 4, 8), 9, dtype=torch.int8), torch.rand(4, 8))
    with pytest.raises(AssertionError, match="Weight dtype is expected to be torch.int8"):
        XlaQuantizedLinear(16, 8).load_quantized_weight(w.float(), s, s)
    with pytest.raises(AssertionError, match=r"Weight shape is expected to be \[output_dim"):
        XlaQuantizedLinear(16, 8).load_quantized_weight(w.T.contiguous(), s, s)
    # differentiable in x (torch_xla's op has no backward; here its ops do)
    xd = x.to(DEV).requires_grad_()
    torch.ops.xla.quantized_matmul(xd, w.to(DEV), s.to(DEV)).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), (w.float() * s[:, None]).sum(0).expand_as(x),
                               rtol=1e-5, atol=1e-4)
