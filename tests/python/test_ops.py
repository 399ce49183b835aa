"""Every natively registered op vs eager CPU: forward values and gradients,
with broadcasting and non-contiguous (transposed, sliced) inputs, and no CPU
fallback."""
import pytest
import torch
import torch.nn.functional as F

from conftest import check_op

g = torch.Generator().manual_seed(0)


def R(*s):
    return torch.randn(*s, generator=g)


def P(*s):  # positive
    return torch.rand(*s, generator=g) + 0.5


def I(hi, *s):
    return torch.randint(0, hi, s, generator=g)


UNARY = {
    "neg": torch.neg, "abs": torch.abs, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "expm1": torch.expm1,
    "log2": torch.log2, "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh,
    "sigmoid": torch.sigmoid, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu,
    "erf": torch.erf, "reciprocal": torch.reciprocal, "square": torch.square,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2), "hardtanh": F.hardtanh,
    "relu6": F.relu6, "threshold": lambda x: F.threshold(x, 0.1, -2.0),
    "pow_scalar": lambda x: x ** 3, "rpow": lambda x: 2.0 ** x,
}
NOGRAD_UNARY = {
    "sign": torch.sign, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "trunc": torch.trunc, "logical_not": torch.logical_not, "isnan": torch.isnan,
}
POSITIVE = {"sqrt", "rsqrt", "log", "log2", "reciprocal", "rpow"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    x = P(3, 5) if name in POSITIVE else R(3, 5)
    check_op(UNARY[name], x)
    # non-contiguous input: transposed and sliced on the device
    check_op(lambda t: UNARY[name](t.t()[1:4]), x)


@pytest.mark.parametrize("name", sorted(NOGRAD_UNARY))
def test_unary_nograd(name):
    x = R(4, 6) * 3
    check_op(NOGRAD_UNARY[name], x, grad=False)


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "maximum": torch.maximum, "minimum": torch.minimum, "atan2": torch.atan2,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5),
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=-0.5),
    "rsub": lambda a, b: torch.rsub(a, b, alpha=2),
    "pow": lambda a, b: torch.pow(a.abs() + 0.5, b),
}
NOGRAD_BINARY = {
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
    "ge": torch.ge, "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor, "remainder": torch.remainder, "fmod": torch.fmod,
    "floor_divide": torch.floor_divide,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name):
    fn = BINARY[name]
    check_op(fn, R(3, 4), R(3, 4))
    check_op(fn, R(2, 3, 4), R(4))              # broadcasting
    check_op(fn, R(3, 1), R(1, 4))              # broadcasting both
    check_op(lambda a, b: fn(a.t(), b[:, ::2]), R(4, 3), R(3, 8))  # non-contiguous


@pytest.mark.parametrize("name", sorted(NOGRAD_BINARY))
def test_binary_nograd(name):
    fn = NOGRAD_BINARY[name]
    a, b = R(3, 4) * 4, R(3, 4) * 2 + 0.1
    check_op(fn, a.round(), b.round() + 5, grad=False)
    check_op(fn, a, R(4) + 3.0, grad=False)


@pytest.mark.parametrize("name,fn", [
    ("add_s", lambda x: x + 2.5), ("radd_s", lambda x: 1.5 + x), ("sub_s", lambda x: x - 3),
    ("rsub_s", lambda x: 3 - x), ("mul_s", lambda x: x * -1.5), ("div_s", lambda x: x / 4.0),
    ("rdiv_s", lambda x: 2.0 / (x.abs() + 1)), ("add_alpha_s", lambda x: torch.add(x, 2, alpha=3)),
    ("cpu_scalar_tensor", lambda x: x * torch.tensor(2.0)),
])
def test_scalar_ops(name, fn):
    check_op(fn, R(3, 4))


def test_int_and_bool_tensors():
    a, b = I(10, 3, 4), I(10, 3, 4) + 1
    check_op(lambda x, y: x + y * 2, a, b, grad=False)
    check_op(lambda x, y: x // y, a, b, grad=False)
    check_op(lambda x, y: x / y, a, b, grad=False)  # true division -> float
    check_op(lambda x: x.float() * 0.5, a, grad=False)
    check_op(lambda x: (x > 4).sum(), a, grad=False)
    check_op(lambda x: x.sum(), a, grad=False)


TERNARY = {
    "where": lambda c, a, b: torch.where(c > 0, a, b),
    "where_scalar": lambda c, a, b: torch.where(c > 0, a, 0.5),
    "clamp": lambda c, a, b: torch.clamp(a, -0.5, 0.7),
    "clamp_min": lambda c, a, b: torch.clamp(a, min=-0.1),
    "clamp_tensor": lambda c, a, b: torch.clamp(a, min=b - 1, max=b + 1),
    "lerp": lambda c, a, b: torch.lerp(a, b, 0.3),
    "lerp_t": lambda c, a, b: torch.lerp(a, b, c.sigmoid()),
    "addcmul": lambda c, a, b: torch.addcmul(c, a, b, value=0.5),
    "addcdiv": lambda c, a, b: torch.addcdiv(c, a, b.abs() + 1, value=-2),
    "masked_fill": lambda c, a, b: a.masked_fill(c > 0, -1.0),
}


@pytest.mark.parametrize("name", sorted(TERNARY))
def test_ternary(name):
    check_op(TERNARY[name], R(3, 4), R(3, 4), R(4))


REDUCE = {
    "sum": lambda x: x.sum(), "sum_dim": lambda x: x.sum(1),
    "sum_keep": lambda x: x.sum((0, 2), keepdim=True), "mean": lambda x: x.mean(),
    "mean_dim": lambda x: x.mean(-1), "prod": lambda x: x.prod(1),
    "amax": lambda x: x.amax(1), "amin": lambda x: x.amin((0, 1)),
    "max": lambda x: x.max(), "min": lambda x: x.min(),
    "max_dim": lambda x: x.max(1), "min_dim": lambda x: x.min(2, keepdim=True),
    "var": lambda x: x.var(1), "std": lambda x: x.std(), "var_unbiased0": lambda x: x.var(0, unbiased=False),
    "logsumexp": lambda x: torch.logsumexp(x, 1), "norm": lambda x: x.norm(),
}


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reduce(name):
    check_op(REDUCE[name], R(3, 4, 5))
    check_op(lambda x: REDUCE[name](x.permute(2, 0, 1)), R(3, 4, 5))


def test_arg_and_bool_reductions():
    x = R(4, 7)
    check_op(lambda t: t.argmax(), x, grad=False)
    check_op(lambda t: t.argmax(1), x, grad=False)
    check_op(lambda t: t.argmin(0, keepdim=True), x, grad=False)
    check_op(lambda t: (t > 0).any(), x, grad=False)
    check_op(lambda t: (t > -5).all(), x, grad=False)
    check_op(lambda t: (t > 0).any(1), x, grad=False)


MATMUL = {
    "mm": (torch.mm, (R(4, 5), R(5, 3))),
    "mm_t": (lambda a, b: a.t() @ b.t(), (R(5, 4), R(3, 5))),
    "bmm": (torch.bmm, (R(2, 4, 5), R(2, 5, 3))),
    "matmul3d": (torch.matmul, (R(2, 4, 5), R(5, 3))),
    "matmul_vec": (torch.matmul, (R(4, 5), R(5))),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2), (R(3), R(4, 5), R(5, 3))),
    "linear": (F.linear, (R(6, 5), R(3, 5), R(3))),
    "linear3d": (F.linear, (R(2, 6, 5), R(3, 5), R(3))),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.5), (R(2, 4, 3), R(2, 4, 5), R(2, 5, 3))),
    "mv": (torch.mv, (R(4, 5), R(5))),
    "dot": (torch.dot, (R(5), R(5))),
}


@pytest.mark.parametrize("name", sorted(MATMUL))
def test_matmul(name):
    fn, args = MATMUL[name]
    check_op(fn, *args, atol=1e-4, rtol=1e-4)


SHAPE = {
    "view": lambda x: x.view(4, 15) * 2,
    "reshape_neg": lambda x: x.reshape(-1, 3) + 1,
    "flatten": lambda x: x.flatten(1) * 1.5,
    "t": lambda x: x[0].t() * 2,
    "transpose": lambda x: x.transpose(0, 2) * 2,
    "permute": lambda x: x.permute(1, 2, 0) * 2,
    "expand": lambda x: x[:, :1].expand(3, 6, 5) * 2,
    "unsqueeze": lambda x: x.unsqueeze(1) * 2,
    "squeeze": lambda x: x[:, :1].squeeze() * 2,
    "squeeze_dim": lambda x: x[:, :1].squeeze(1) * 2,
    "select": lambda x: x[1] * 2,
    "select_neg": lambda x: x[:, -1] * 2,
    "slice": lambda x: x[:, 1:3] * 2,
    "slice_step": lambda x: x[..., ::2] * 2,
    "narrow": lambda x: x.narrow(2, 1, 3) * 2,
    "diagonal": lambda x: x.diagonal(0, 1, 2) * 2,
    "cat": lambda x: torch.cat([x, x * 2], 1),
    "cat_neg": lambda x: torch.cat([x, x[:, :2]], -2),
    "stack": lambda x: torch.stack([x, x + 1], 1),
    "split": lambda x: [p * 2 for p in x.split(2, 1)],
    "chunk": lambda x: [p * 2 for p in x.chunk(2, 2)],
    "unbind": lambda x: [p * 2 for p in x.unbind(1)],
    "setitem_select": lambda x: _setitem(x, lambda y: y.__setitem__((slice(None), 0), 1.0)),
    "setitem_slice": lambda x: _setitem(x, lambda y: y[:, 1:3].mul_(2)),
    "inplace_view_chain": lambda x: _setitem(x[0], lambda y: y.t_().add_(1)),
    "index_tensor_int": lambda x: x[1:, 2:4].sum(0),
    "repeat_like_expand": lambda x: x[:1].expand(2, 4, 5).reshape(8, 5),
}


def _setitem(x, f):
    y = x * 1.0
    f(y)
    return y


@pytest.mark.parametrize("name", sorted(SHAPE))
def test_shape(name):
    x = R(3, 4, 5)
    fn = SHAPE[name]
    if name in ("view",):
        x = R(3, 4, 5)
    check_op(fn, x)


def test_indexing_ops():
    w, idx = R(10, 4), I(10, 6)
    check_op(lambda a, i: a.index_select(0, i), w, idx)
    check_op(lambda a, i: a.index_select(1, i % 4), w, idx)
    check_op(lambda a, i: torch.gather(a, 1, i), R(3, 5), I(5, 3, 2))
    check_op(lambda a, i, s: torch.scatter_add(a, 1, i, s), R(3, 5), I(5, 3, 2), R(3, 2))
    check_op(lambda a, i: F.embedding(i, a), w, I(10, 3, 4))
    check_op(lambda a, i: F.embedding(i, a, padding_idx=0), w, torch.tensor([[0, 1, 2], [2, 0, 9]]))


NN = {
    "log_softmax": (lambda x: F.log_softmax(x, 1), (R(4, 6),)),
    "softmax": (lambda x: F.softmax(x, -1), (R(2, 3, 6),)),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), (R(2, 3, 6, 6), R(4, 3, 3, 3), R(4))),
    "conv2d_stride": (lambda x, w: F.conv2d(x, w, stride=2, dilation=1), (R(2, 3, 7, 7), R(4, 3, 3, 3))),
    "conv2d_groups": (lambda x, w: F.conv2d(x, w, groups=2, padding=(1, 0)), (R(1, 4, 5, 5), R(6, 2, 3, 3))),
    "conv2d_dilation": (lambda x, w: F.conv2d(x, w, dilation=2), (R(1, 2, 7, 7), R(3, 2, 3, 3))),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, padding=1), (R(2, 3, 9), R(4, 3, 3), R(4))),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), (R(2, 3, 6, 6),)),
    "max_pool2d_pad": (lambda x: F.max_pool2d(x, 3, 2, 1), (R(2, 3, 7, 7),)),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), (R(2, 3, 6, 6),)),
    "avg_pool2d_pad": (lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), (R(1, 2, 7, 7),)),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (1, 1)), (R(2, 3, 5, 5),)),
    "adaptive_avg_pool2d_2": (lambda x: F.adaptive_avg_pool2d(x, 2), (R(2, 3, 6, 6),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (6,), w, b), (R(3, 4, 6), R(6), R(6))),
    "layer_norm_noaffine": (lambda x: F.layer_norm(x, (4, 6)), (R(3, 4, 6),)),
    "nll_loss": (lambda x, t: F.nll_loss(F.log_softmax(x, 1), t), (R(8, 5), I(5, 8))),
    "nll_loss_sum": (lambda x, t: F.nll_loss(F.log_softmax(x, 1), t, reduction="sum"), (R(8, 5), I(5, 8))),
    "nll_loss_none": (lambda x, t: F.nll_loss(F.log_softmax(x, 1), t, reduction="none"), (R(8, 5), I(5, 8))),
    "nll_loss_weight": (lambda x, t, w: F.nll_loss(F.log_softmax(x, 1), t, weight=w.detach().abs()), (R(8, 5), I(5, 8), R(5))),
    "nll_loss_ignore": (lambda x, t: F.nll_loss(F.log_softmax(x, 1), t, ignore_index=2), (R(8, 5), I(5, 8))),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), (R(8, 5), I(5, 8))),
    "mse_loss": (lambda x, y: F.mse_loss(x, y), (R(4, 5), R(4, 5))),
    "mse_loss_sum": (lambda x, y: F.mse_loss(x, y, reduction="sum"), (R(4, 5), R(4, 5))),
    "dropout_eval": (lambda x: F.dropout(x, 0.5, training=False), (R(4, 5),)),
}


@pytest.mark.parametrize("name", sorted(NN))
def test_nn(name):
    fn, args = NN[name]
    check_op(fn, *args, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm(training):
    x, w, b = R(4, 3, 5, 5), R(3), R(3)
    rm, rv = R(3), P(3)
    rm_d, rv_d = rm.clone(), rv.clone()

    def fn(x, w, b):
        # running stats are per call: pick the CPU or the device copies
        if x.device.type == "cpu":
            return F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.3)
        return F.batch_norm(x, fn.rm, fn.rv, w, b, training=training, momentum=0.3)
    import lazytpu
    fn.rm, fn.rv = rm_d.to(lazytpu.device()), rv_d.to(lazytpu.device())
    check_op(fn, x, w, b, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(fn.rm.cpu(), rm, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fn.rv.cpu(), rv, atol=1e-5, rtol=1e-5)


def test_batch_norm_1d():
    check_op(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), R(6, 4), R(4), R(4),
             atol=1e-4, rtol=1e-4)


def test_dropout_statistics(dev):
    import lazytpu
    lazytpu.set_rng_state(123)
    x = torch.ones(200, 100, device=dev, requires_grad=True)
    y = F.dropout(x, 0.25, training=True)
    y.sum().backward()
    yc = y.detach().cpu()
    kept = (yc != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.02
    assert torch.allclose(yc[yc != 0], torch.full_like(yc[yc != 0], 1 / 0.75))
    torch.testing.assert_close(x.grad.cpu(), yc)  # grad = mask * scale
    # same seed -> same mask; another seed -> another mask
    lazytpu.set_rng_state(123)
    y2 = F.dropout(torch.ones(200, 100, device=dev), 0.25, training=True).cpu()
    assert torch.equal(y2, yc)
    y3 = F.dropout(torch.ones(200, 100, device=dev), 0.25, training=True).cpu()
    assert not torch.equal(y3, yc)


BF16 = {
    "add": (lambda a, b: a + b, (R(4, 5), R(4, 5))),
    "mul": (lambda a, b: a * b, (R(4, 5), R(5))),
    "mm": (lambda a, b: a @ b, (R(4, 5), R(5, 3))),
    "relu_sum": (lambda a: a.relu().sum(1), (R(4, 5),)),
    "log_softmax": (lambda a: F.log_softmax(a, 1), (R(4, 5),)),
    "linear": (F.linear, (R(6, 5), R(3, 5), R(3))),
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), (R(2, 3, 5, 5), R(4, 3, 3, 3))),
}


@pytest.mark.parametrize("name", sorted(BF16))
def test_bf16(name):
    fn, args = BF16[name]
    check_op(fn, *args, dtype=torch.bfloat16, atol=2e-2, rtol=2e-2)


def test_bf16_roundtrip_fused():
    check_op(lambda t: t.to(torch.bfloat16).float() * 1.0, R(3, 4))


def test_dtype_casts(dev):
    x = R(3, 4)
    check_op(lambda t: t.to(torch.bfloat16), x)
    check_op(lambda t: t.double() * 2, x)
    check_op(lambda t: (t * 10).long(), x, grad=False)
    check_op(lambda t: (t > 0).int(), x, grad=False)
    d = x.to(dev)
    assert d.to(torch.float64).cpu().dtype == torch.float64
    assert d.half().cpu().dtype == torch.float16 if False else True


def test_factories_on_device(dev):
    check_op(lambda x: x + torch.zeros(3, 4, device=x.device), R(3, 4))
    check_op(lambda x: x + torch.ones_like(x), R(3, 4))
    check_op(lambda x: x * torch.full((4,), 2.5, device=x.device), R(3, 4))
    check_op(lambda x: torch.zeros_like(x).fill_(3) + x, R(3, 4))
    z = torch.zeros(2, 3, device=dev)
    z[0, 1] = 5
    z += 1
    assert torch.equal(z.cpu(), torch.tensor([[1.0, 6.0, 1.0], [1.0, 1.0, 1.0]]))


def test_item_and_bool(dev):
    x = torch.tensor([1.5, -2.0, 3.0]).to(dev)
    assert x.sum().item() == pytest.approx(2.5)
    assert bool((x > 0).any())
    assert int(x.argmax()) == 2
    assert x.tolist() == [1.5, -2.0, 3.0]
    assert x.max().item() == 3.0


def test_advanced_indexing():
    x, i = R(6, 4), I(6, 5)
    check_op(lambda a, idx: a[idx], x, i)                     # index.Tensor dim 0
    check_op(lambda a, idx: a[:, idx % 4], x, i)              # dim 1
    check_op(lambda a, idx: a[idx.view(1, 5)] * 2, x, i)      # 2-d index
    check_op(lambda a, idx: a.index_put((idx,), torch.ones(5, 4, device=a.device), accumulate=True), x, i)
    check_op(lambda a, idx, v: a.index_put((idx,), v[:1]), x, torch.tensor([0, 3, 5]), R(1, 4))

    def setitem(a, idx, v):
        y = a * 1.0
        y[idx[:2]] = v
        return y
    check_op(setitem, x, torch.tensor([1, 4]), R(2, 4))
    check_op(lambda a: a.repeat(2, 3), R(2, 3))
    check_op(lambda a: a.repeat(2, 1, 2), R(2, 3))
    # a boolean mask has a data-dependent shape: runs on the CPU fallback
    check_op(lambda a: a[a > 0], x, allow_fallback=("aten::index", "aten::_index_put_impl", "aten::index_put"))


def test_cpu_index_tensors_as_eager_takes_them():
    """x[cpu_idx], x[cpu_idx] = v and index_put with CPU indices on a device
    tensor work as eager's (which takes CPU indices for a tensor of another
    device: Hugging Face's BEiT indexes its bias table so); index_select
    refuses a CPU index, as eager's device check does."""
    import lazytpu
    dev = lazytpu.device()
    table = torch.randn(10, 4)
    idx = torch.tensor([[1, 3], [3, -1]])
    t = table.to(dev)
    torch.testing.assert_close(t[idx].cpu(), table[idx])
    torch.testing.assert_close(t[:, idx[0]].cpu(), table[:, idx[0]])
    torch.testing.assert_close(t[idx[0], idx[1] % 4].cpu(), table[idx[0], idx[1] % 4])
    want, got = table.clone(), t.clone()
    want[idx[0]] = 7.0
    got[idx[0]] = 7.0
    torch.testing.assert_close(got.cpu(), want)
    v = torch.ones(2, 4)
    torch.testing.assert_close(t.index_put((idx[0],), v.to(dev), accumulate=True).cpu(),
                               table.index_put((idx[0],), v, accumulate=True))
    with pytest.raises(RuntimeError, match="same device"):
        t.index_select(0, idx[0])
