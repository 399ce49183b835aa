"""Round 3 lowerings (issue 20 item 7, issue 24 item 0): ops that used to run
on the counted CPU fallback (or raise) now run natively. Values AND gradients
vs eager PyTorch on the CPU, and no CPU fallback (check_op fails on any
aten:: fallback counter)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazytpu
import lazytpu.metrics as met

from conftest import check_op, fallback_counts

g = torch.Generator().manual_seed(0)


def R(*s):
    return torch.randn(*s, generator=g)


# ------------------------------------------------ adaptive max pooling --

@pytest.mark.parametrize("shape,out", [((2, 3, 20), 5), ((2, 3, 17), 5), ((3, 10), 4),
                                       ((2, 4, 7), 9), ((1, 2, 6), 1)])
def test_adaptive_max_pool1d(shape, out):
    x = R(*shape)
    check_op(lambda t: F.adaptive_max_pool1d(t, out), x)
    check_op(lambda t: F.adaptive_max_pool1d(t, out, return_indices=True), x)


@pytest.mark.parametrize("shape,out", [((2, 3, 8, 12), (4, 3)), ((2, 3, 11, 7), (5, 3)),
                                       ((3, 9, 10), (4, 4)), ((1, 2, 5, 5), (7, 2)),
                                       ((2, 2, 6, 6), (None, 4))])
def test_adaptive_max_pool2d(shape, out):
    x = R(*shape)
    check_op(lambda t: F.adaptive_max_pool2d(t, out), x)
    check_op(lambda t: F.adaptive_max_pool2d(t, out, return_indices=True), x)


def test_adaptive_max_pool_nan_and_ties():
    # NaN wins (eager: the last NaN), ties keep the first index
    x = torch.tensor([[[1.0, 3.0, 3.0, -1.0, float("nan"), 2.0, float("nan"), 0.0]]])
    check_op(lambda t: F.adaptive_max_pool1d(t, 3, return_indices=True), x, grad=False)
    x = torch.zeros(1, 1, 4, 4)
    check_op(lambda t: F.adaptive_max_pool2d(t, 2, return_indices=True), x)


def test_adaptive_max_pool_audio_model_trains_natively(dev):
    """A 1-D audio classifier (conv, ReLU, adaptive max pooling, linear):
    5 SGD steps on the device match eager with no CPU fallback."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(1, 8, 9, stride=4), nn.ReLU(), nn.AdaptiveMaxPool1d(13),
                          nn.Conv1d(8, 8, 3), nn.ReLU(), nn.AdaptiveMaxPool1d(1), nn.Flatten(),
                          nn.Linear(8, 4))
    ref = copy.deepcopy(model)
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.05)
    before = fallback_counts()
    for step in range(5):
        x = torch.randn(6, 1, 401, generator=g)
        y = torch.randint(0, 4, (6,), generator=g)
        for m, o, xx, yy in ((model, opt, x.to(dev), y.to(dev)), (ref, opt_r, x, y)):
            o.zero_grad()
            loss = F.cross_entropy(m(xx), yy)
            loss.backward()
            o.step()
        lazytpu.mark_step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), atol=1e-4, rtol=1e-4)
    after = fallback_counts()
    assert {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)} == {}


# ------------------------------------------------ tensor_split by tensor --

@pytest.mark.parametrize("idx,dim", [([1, 3], 1), ([0, 2, 2, 5], 0), ([], 1), ([-1], 1)])
def test_tensor_split_device_indices(dev, idx, dim):
    """Indices on the device are read on the host (one named sync and one
    host read, as torch_xla pays), then split natively with gradients."""
    x = R(5, 6)
    i = torch.tensor(idx, dtype=torch.int64)
    reads0 = met.counter_value("HostReads") or 0
    syncs0 = met.counter_value("SyncCause::dynamic_shape") or 0
    check_op(lambda t: torch.tensor_split(t, i.to(dev) if t.device.type != "cpu" else i, dim), x)
    assert (met.counter_value("HostReads") or 0) > reads0
    assert (met.counter_value("SyncCause::dynamic_shape") or 0) > syncs0


def test_tensor_split_device_sections(dev):
    x = R(7, 3)
    s = torch.tensor(3)
    check_op(lambda t: torch.tensor_split(t, s.to(dev) if t.device.type != "cpu" else s), x)
    check_op(lambda t: t.tensor_split(s.to(dev) if t.device.type != "cpu" else s, dim=1), x)


def test_tensor_split_device_indices_errors(dev):
    x = R(4, 4).to(dev)
    with pytest.raises(RuntimeError, match="dtype of long"):
        torch.tensor_split(x, torch.tensor([1.0]).to(dev))
    with pytest.raises(RuntimeError, match="zero-dimensional or one-dimensional"):
        torch.tensor_split(x, torch.tensor([[1]]).to(dev))
    with pytest.raises(RuntimeError, match="at least a 1-dimensional"):
        torch.tensor_split(torch.tensor(1.0).to(dev), torch.tensor([1]).to(dev))


# ------------------------------------------------------------------ isin --

def test_isin_no_fallback_no_host_read(dev):
    """Hugging Face's logits processors call isin per generated token: it
    must trace (no fallback, no host read)."""
    vocab = torch.arange(50)
    eos = torch.tensor([7, 3, 49, 100])
    reads0 = met.counter_value("HostReads") or 0
    out = torch.isin(vocab.to(dev), eos.to(dev))
    out2 = torch.isin(vocab.to(dev), eos.to(dev), invert=True)
    assert (met.counter_value("HostReads") or 0) == reads0
    assert torch.equal(out.cpu(), torch.isin(vocab, eos))
    assert torch.equal(out2.cpu(), torch.isin(vocab, eos, invert=True))


@pytest.mark.parametrize("invert", [False, True])
@pytest.mark.parametrize("unique", [False, True])
def test_isin_tensor_tensor(invert, unique):
    e = torch.randint(-5, 6, (4, 7), generator=g)
    t = torch.randperm(11, generator=g)[:6] - 5 if unique else torch.randint(-5, 6, (3, 3),
                                                                            generator=g)
    if unique:
        e = torch.randperm(28, generator=g).reshape(4, 7) - 10
    check_op(lambda a, b: torch.isin(a, b, assume_unique=unique, invert=invert), e, t, grad=False)
    # mixed dtypes compare in the result type; NaN is never a member
    ef = torch.tensor([1.0, 2.5, float("nan"), -0.0, 3.0])
    check_op(lambda a, b: torch.isin(a, b, invert=invert), ef,
             torch.tensor([2.5, float("nan"), 0.0]), grad=False)
    check_op(lambda a, b: torch.isin(a, b, invert=invert), torch.tensor([1, 2, 3]),
             torch.tensor([1.0, 2.5]), grad=False)
    check_op(lambda a, b: torch.isin(a, b, invert=invert), torch.tensor([[1.5, 2.0]],
             dtype=torch.bfloat16), torch.tensor([2, 7]), grad=False)
    check_op(lambda a, b: torch.isin(a, b, invert=invert), torch.tensor(3),
             torch.tensor([[3]]), grad=False)
    check_op(lambda a, b: torch.isin(a, b, invert=invert), torch.tensor([1, 2]),
             torch.tensor([], dtype=torch.int64), grad=False)


@pytest.mark.parametrize("invert", [False, True])
def test_isin_scalars(dev, invert):
    e = torch.randint(-3, 4, (3, 5), generator=g)
    for v in (2, -3, 2.5, 2.0):
        check_op(lambda a: torch.isin(a, v, invert=invert), e, grad=False)
        check_op(lambda b: torch.isin(v, b, invert=invert), e, grad=False)
    check_op(lambda a: torch.isin(a, float("nan"), invert=invert), torch.tensor([1.0, float("nan")]),
             grad=False)


def test_isin_errors_like_eager(dev):
    for a, b in ((torch.tensor([True]), torch.tensor([1])),
                 (torch.tensor([1]), torch.tensor([1 + 1j]))):
        with pytest.raises(RuntimeError, match="Unsupported input type encountered for isin"):
            torch.isin(a, b)
        with pytest.raises(RuntimeError, match="Unsupported input type encountered for isin"):
            torch.isin(a.to(dev), b.to(dev))
    with pytest.raises(RuntimeError, match="Unsupported input type encountered for isin"):
        torch.isin(torch.tensor([1]).to(dev), True)


# ------------------------------------------------ torch_xla's lowerings --
# (issue 24 item 0: ops torch_xla 2.9 lowers that used to fall back)

@pytest.mark.parametrize("args", [(3,), (0,), (2, 5), (4, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16])
def test_eye(dev, args, dtype):
    before = fallback_counts()
    got = torch.eye(*args, dtype=dtype, device=dev)
    assert fallback_counts() == before
    assert got.device.type == "lazytpu"
    assert torch.equal(got.cpu(), torch.eye(*args, dtype=dtype))
    # a factory result is an ordinary functional tensor: in-place works
    got.mul_(2) if dtype not in (torch.bool,) else got.logical_not_()
    ref = torch.eye(*args, dtype=dtype)
    ref.mul_(2) if dtype not in (torch.bool,) else ref.logical_not_()
    assert torch.equal(got.cpu(), ref)
    with pytest.raises(RuntimeError, match="n must be greater or equal to 0"):
        torch.eye(-1, device=dev)


def test_trace():
    check_op(torch.trace, R(4, 4))
    check_op(torch.trace, R(3, 5))
    check_op(torch.trace, R(6, 2))
    check_op(torch.trace, torch.randint(-5, 5, (3, 3), generator=g), grad=False)
    with pytest.raises(RuntimeError, match="expected a matrix"):
        torch.trace(R(3).to(lazytpu.device()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_nan_to_num(dtype):
    x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), -2.5, 0.0])
    check_op(torch.nan_to_num, x, dtype=dtype)
    check_op(lambda t: torch.nan_to_num(t, nan=0.5, posinf=10.0, neginf=-1e300), x, dtype=dtype)
    check_op(lambda t: torch.nan_to_num(t, posinf=1e300), x, dtype=dtype)
    check_op(lambda t: t.clone().nan_to_num_(nan=-3.0), x, dtype=dtype)
    check_op(torch.nan_to_num, torch.tensor([1, -2, 3]), grad=False)


def test_erfinv():
    x = torch.cat([torch.rand(200, generator=g) * 2 - 1,
                   torch.tensor([0.0, -0.0, 0.5, -0.999999, 0.9999, 1.0, -1.0, 1.5, float("nan")])])
    check_op(torch.erfinv, x, grad=False, atol=1e-5, rtol=2e-6)
    check_op(torch.erfinv, x, dtype=torch.float64, grad=False, atol=1e-12, rtol=1e-12)
    check_op(torch.erfinv, torch.rand(50, generator=g) * 1.8 - 0.9, atol=1e-5, rtol=1e-5)
    check_op(torch.erfinv, torch.tensor([0, 1, -1]), grad=False)


@pytest.mark.parametrize("k,dim,keepdim", [(1, -1, False), (3, 1, True), (4, 0, False),
                                           (2, 2, False)])
def test_kthvalue(k, dim, keepdim):
    x = torch.randperm(4 * 5 * 6, generator=g).float().reshape(4, 5, 6) / 7   # distinct
    check_op(lambda t: torch.kthvalue(t, k, dim, keepdim), x)
    # NaN counts as the largest (one per line: the index among NaNs is free in eager)
    xn = x.clone()
    xn[1, 2, 4] = xn[3, 0, 0] = xn[2, 4, 5] = float("nan")
    check_op(lambda t: torch.kthvalue(t, k, dim, keepdim), xn, grad=False)
    check_op(lambda t: torch.kthvalue(t, 1), torch.tensor(2.5))
    with pytest.raises(RuntimeError, match="out of range"):
        torch.kthvalue(x.to(lazytpu.device()), 9, 0)


@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin])
def test_cummax_cummin(fn):
    check_op(lambda t: fn(t, 1), R(4, 7))
    check_op(lambda t: fn(t, 0), R(5, 3))
    # ties and NaN take the latest index (eager's rule)
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, float("nan"), 5.0, float("nan"), -1.0],
                      [2.0, 2.0, 1.0, 1.0, 0.0, 0.0, 7.0, 7.0]])
    check_op(lambda t: fn(t, 1), x, grad=False)
    check_op(lambda t: fn(t, -1), torch.randint(-2, 3, (3, 9), generator=g), grad=False)
    check_op(lambda t: fn(t, 0), torch.tensor(1.5))
    check_op(lambda t: fn(t, 0), torch.empty(0, 3))


@pytest.mark.parametrize("p", [2.0, 1.0, 0.0, float("inf"), 3.0, 0.5, 1.5])
def test_cdist(p):
    check_op(lambda a, b: torch.cdist(a, b, p), R(5, 3), R(4, 3), atol=1e-5, rtol=1e-4)
    check_op(lambda a, b: torch.cdist(a, b, p), R(2, 5, 3), R(1, 6, 3), atol=1e-5, rtol=1e-4)
    # equal rows: zero distances (eager's backward gives 0 there)
    a = R(3, 4)
    check_op(lambda a, b: torch.cdist(a, b, p), a, torch.cat([a[:2], R(1, 4)]), atol=1e-5,
             rtol=1e-4)


def test_cdist_matrix_product_path():
    # p = 2 with more than 25 rows: eager's |a|^2 + |b|^2 - 2ab form
    check_op(lambda a, b: torch.cdist(a, b), R(30, 4), R(27, 4), atol=1e-4, rtol=1e-4)
    check_op(lambda a, b: torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
             R(3, 4), R(5, 4), atol=1e-4, rtol=1e-4)
    check_op(lambda a, b: torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist"),
             R(30, 4), R(27, 4), atol=1e-4, rtol=1e-4)


# ----------------------------------------------------------- linear algebra

def _well(*s, dtype=torch.float32):
    a = torch.randn(*s, generator=g, dtype=torch.float64)
    return (a + 3 * torch.eye(s[-1], dtype=torch.float64)).to(dtype)


def _sym(*s, dtype=torch.float32):
    a = torch.randn(*s, generator=g, dtype=torch.float64)
    return (a + a.mT).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inv(dtype):
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    check_op(torch.linalg.inv, _well(4, 4, dtype=dtype), atol=tol, rtol=tol)
    check_op(torch.linalg.inv, _well(2, 3, 5, 5, dtype=dtype), atol=tol, rtol=tol)
    check_op(torch.inverse, _well(1, 1, dtype=dtype), atol=tol, rtol=tol)
    check_op(lambda a: torch.linalg.inv_ex(a), _well(3, 3, 3, dtype=dtype), atol=tol, rtol=tol)
    check_op(torch.linalg.inv, _well(0, 3, 3, dtype=dtype), atol=tol, rtol=tol)


def test_inv_singular(dev):
    a = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    inv, info = torch.linalg.inv_ex(a.to(dev))
    assert info.dtype == torch.int32 and info.item() == torch.linalg.inv_ex(a)[1].item() == 2
    with pytest.raises(RuntimeError, match="singular"):
        torch.linalg.inv(a.to(dev))
    b = torch.stack([torch.eye(2), a])
    _, info = torch.linalg.inv_ex(b.to(dev))
    assert torch.equal(info.cpu(), torch.linalg.inv_ex(b)[1])
    with pytest.raises(RuntimeError, match="square"):
        torch.linalg.inv(R(2, 3).to(dev))


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eigh(uplo, dtype):
    """Eigenvalues are unique, eigenvectors only up to sign: compare the
    values, the reconstruction V diag(w) V^T and V^T V, and the gradients of
    the eigenvalues (distinct for these random matrices) and of a
    sign-invariant function of the vectors."""
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    for a in (_sym(5, 5, dtype=dtype), _sym(2, 3, 4, 4, dtype=dtype)):
        # the other triangle holds garbage that must not be read
        junk = torch.triu(R(*a.shape).to(dtype), 1) * 100
        a = a + (junk if uplo == "L" else junk.mT)

        def recon(t):
            w, v = torch.linalg.eigh(t, UPLO=uplo)
            return w, v @ torch.diag_embed(w) @ v.mT, v.mT @ v

        check_op(recon, a, grad=False, atol=tol, rtol=tol)
        check_op(lambda t: torch.linalg.eigvalsh(t, UPLO=uplo), a, atol=tol, rtol=tol)
        check_op(lambda t: torch.linalg.eigh(t, UPLO=uplo)[1].abs().sum(-2), a, atol=tol,
                 rtol=tol)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 3), (2, 1, 3, 6)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_svd(shape, dtype):
    """Singular values are unique, vectors up to sign: compare S, the
    reconstruction, U^T U and Vh Vh^T (full and reduced), and gradients of
    S and of the reconstruction through the reduced factors."""
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    a = R(*shape).to(dtype)
    k = min(shape[-2:])
    for full in (False, True):
        def recon(t):
            u, s, vh = torch.linalg.svd(t, full_matrices=full)
            return (s, (u[..., :k] * s.unsqueeze(-2)) @ vh[..., :k, :], u.mT @ u, vh @ vh.mT,
                    u.shape[-1], vh.shape[-2])
        check_op(recon, a, grad=False, atol=tol, rtol=tol)
    check_op(torch.linalg.svdvals, a, atol=tol, rtol=tol)
    check_op(lambda t: torch.linalg.svd(t, full_matrices=False)[1], a, atol=tol, rtol=tol)

    def lowrank(t):   # a sign-invariant function of the reduced factors
        u, s, vh = torch.linalg.svd(t, full_matrices=False)
        return (u[..., :1] * s[..., None, :1]) @ vh[..., :1, :]
    check_op(lowrank, a, atol=tol * 10, rtol=tol * 10)
    u, s, v = torch.svd(a.to(lazytpu.device()))   # the old API: V, some=True
    torch.testing.assert_close(s.cpu(), torch.svd(a)[1], atol=tol, rtol=tol)
    torch.testing.assert_close(((u * s.unsqueeze(-2)) @ v.mT).cpu(), a, atol=tol * 10,
                               rtol=tol * 10)


def test_linalg_no_fallback_in_a_model_step(dev):
    """A step that whitens features (eigh of a covariance), inverts a
    matrix and takes a nuclear-norm penalty (svdvals), with gradients: no
    CPU fallback."""
    torch.manual_seed(0)
    w = torch.randn(6, 4, requires_grad=True)
    x = torch.randn(32, 6)

    def step(w, x):
        h = x @ w
        c = h.mT @ h / h.shape[0] + 0.1 * torch.eye(4, device=h.device)
        ev, vec = torch.linalg.eigh(c)
        white = h @ vec @ torch.diag_embed(ev.rsqrt()) @ vec.mT
        inv = torch.linalg.inv(c)
        return white.pow(2).mean() + inv.trace() + torch.linalg.svdvals(w).sum()

    check_op(step, w, x, atol=1e-4, rtol=1e-4)


# ------------------------------------------- grouped products (MoE) --

_OFFS = torch.tensor([3, 4, 8], dtype=torch.int32)     # groups of 3, 1 and 4


@pytest.mark.parametrize("form", ["2dx3d", "2dx2d", "3dx2d", "3dx3d"])
def test_grouped_mm(form):
    """torch._grouped_mm (F.grouped_mm) in its four forms, values and
    gradients (autograd's formula runs the other forms) against the CPU's
    kernel, no fallback. Every position belongs to a group: the CPU leaves
    positions past the last end unwritten."""
    if form == "2dx3d":
        check_op(lambda a, b, o: torch._grouped_mm(a, b, offs=o), R(8, 4), R(3, 4, 4), _OFFS)
    elif form == "2dx2d":
        check_op(lambda a, b, o: torch._grouped_mm(a, b, offs=o), R(4, 8), R(8, 4), _OFFS)
    elif form == "3dx2d":
        check_op(lambda a, b, o: torch._grouped_mm(a, b, offs=o), R(3, 4, 4), R(4, 8), _OFFS)
    else:
        check_op(lambda a, b: torch._grouped_mm(a, b), R(3, 4, 8), R(3, 8, 4))


def test_grouped_mm_rows_past_the_last_group_are_zero(dev):
    a, b = R(8, 4), R(3, 4, 4)
    offs = torch.tensor([2, 5, 6], dtype=torch.int32)
    got = torch._grouped_mm(a.to(dev), b.to(dev), offs=offs.to(dev)).cpu()
    want = torch._grouped_mm(a, b, offs=offs)
    torch.testing.assert_close(got[:6], want[:6])
    assert torch.equal(got[6:], torch.zeros(2, 4))
    with pytest.raises(RuntimeError, match="needs offs"):
        torch._grouped_mm(a.to(dev), b.to(dev))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.int16])
def test_histc_of_integers(dev, dtype):
    """histc of an integer tensor (the CPU refuses it; CUDA's semantics,
    which an MoE router's token count relies on): counts in the input's
    dtype, the last bin closed, values outside [min, max] not counted, the
    data's range when min == max; no fallback."""
    x = torch.randint(0, 12, (64,), generator=g).to(dtype)
    before = fallback_counts()
    for bins, lo, hi in ((8, 0, 7), (5, 2, 9), (4, 0, 0), (12, 0, 11)):
        got = torch.histc(x.to(dev), bins=bins, min=lo, max=hi).cpu()
        want = torch.histc(x.float(), bins=bins, min=lo, max=hi).to(dtype)
        assert got.dtype == dtype and torch.equal(got, want), (bins, lo, hi, got, want)
    assert fallback_counts() == before
    xf = R(50)                                   # floats: the CPU's kernel
    assert torch.equal(torch.histc(xf.to(dev), bins=7, min=-1, max=1).cpu(),
                       torch.histc(xf, bins=7, min=-1, max=1))


@pytest.mark.parametrize("beta,threshold", [(1, 20), (2, 5), (0.5, 1)])
def test_softplus(beta, threshold):
    """softplus and its gradient natively (Mamba's dt projection ran both on
    the CPU fallback), eager's formula on both sides of the threshold."""
    check_op(lambda t: F.softplus(t, beta, threshold), R(64) * 10)


# ------------------- ops that ran on the CPU fallback in real models --

_EDGES = torch.tensor([-5.0, -3.0, -2.9, 0.0, 2.9, 3.0, 5.0])


@pytest.mark.parametrize("inplace", [False, True])
def test_hardswish(inplace):
    """MobileNetV3's activation, also in place (nn.Hardswish(inplace=True)),
    with eager's gradient at the corners (0 at -3, 1 at 3)."""
    x = torch.cat([_EDGES, R(30) * 4])
    check_op(lambda t: F.hardswish(t * 1, inplace=inplace), x)


@pytest.mark.parametrize("fn", ["glu", "prelu", "smooth_l1", "smooth_l1_beta0", "huber",
                                "pixel_shuffle", "pixel_unshuffle"])
def test_composites_of_native_ops(fn):
    x = R(2, 8, 6, 6)
    if fn == "glu":
        check_op(lambda t: F.glu(t, 1), x)
    elif fn == "prelu":
        check_op(lambda t, w: F.prelu(t, w), torch.cat([x, torch.zeros(1, 8, 6, 6)]),
                 R(8).abs())
    elif fn in ("smooth_l1", "smooth_l1_beta0", "huber"):
        y = x + torch.cat([torch.zeros(10), torch.full((5,), 0.5), R(561)]).reshape(x.shape)
        beta = 0.0 if fn == "smooth_l1_beta0" else 0.5
        for red in ("mean", "sum", "none"):
            if fn == "huber":
                check_op(lambda a, b: F.huber_loss(a, b, reduction=red, delta=beta), x, y)
            else:
                check_op(lambda a, b: F.smooth_l1_loss(a, b, reduction=red, beta=beta), x, y)
    elif fn == "pixel_shuffle":
        check_op(lambda t: F.pixel_shuffle(t, 2), x)
        check_op(lambda t: F.pixel_shuffle(t, 2), R(3, 2, 8, 4, 5))
    else:
        check_op(lambda t: F.pixel_unshuffle(t, 3), x)
        check_op(lambda t: F.pixel_unshuffle(t, 2), R(3, 2, 2, 4, 6))


@pytest.mark.parametrize("dim", [0, 2])
def test_weight_norm(dim):
    """nn.utils.weight_norm's kernel (_weight_norm_interface, wav2vec2's
    positional convolution) with gradients for v and g, no fallback."""
    v = R(6, 4, 3)
    g = R(6, 1, 1) if dim == 0 else R(1, 1, 3)
    check_op(lambda a, b: torch._weight_norm(a, b, dim), v, g, atol=1e-5, rtol=1e-4)
