"""The native lowerings real models use (issue 13): values AND gradients vs
eager PyTorch on the CPU, with no CPU fallback (check_op fails on any
aten:: fallback counter). Random ops are checked by statistics; dynamic-shape
ops (nonzero, boolean masks) by their named sync."""
import pytest
import torch
import torch.nn.functional as F

import lazytpu
import lazytpu.metrics as met

from conftest import check_op, fallback_counts

g = torch.Generator().manual_seed(0)


def R(*s):
    return torch.randn(*s, generator=g)


def I(hi, *s):
    return torch.randint(0, hi, s, generator=g)


def _scatter_idx():   # distinct rows per column: eager's scatter is then exact
    return torch.stack([torch.randperm(5, generator=g)[:3] for _ in range(4)], 1)


CASES = {
    # convolutions
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
               (R(2, 3, 11), R(4, 3, 3), R(4))),
    "conv1d_groups": (lambda x, w: F.conv1d(x, w, groups=2, dilation=2), (R(2, 4, 12), R(6, 2, 3))),
    "conv2d_groups": (lambda x, w: F.conv2d(x, w, padding=1, groups=2), (R(2, 4, 6, 6), R(4, 2, 3, 3))),
    "conv_transpose1d": (lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1,
                                                            output_padding=1),
                         (R(2, 4, 7), R(4, 3, 3), R(3))),
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2), (R(2, 4, 5, 5),
                                                                                 R(4, 3, 2, 2), R(3))),
    "conv_transpose2d_pad_groups": (lambda x, w: F.conv_transpose2d(x, w, stride=(2, 1), padding=1,
                                                                    groups=2, dilation=(1, 2)),
                                    (R(2, 4, 5, 6), R(4, 3, 3, 3))),
    "conv3d": (lambda x, w, b: F.conv3d(x, w, b, stride=(2, 1, 1), padding=(1, 0, 1)),
               (R(2, 3, 5, 6, 7), R(4, 3, 3, 2, 3), R(4))),
    "conv3d_groups_dilation": (lambda x, w: F.conv3d(x, w, groups=2, dilation=(1, 2, 1), padding=1),
                               (R(2, 4, 5, 6, 5), R(6, 2, 3, 3, 2))),
    "conv_transpose3d": (lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2, padding=1,
                                                            output_padding=(1, 0, 1)),
                         (R(2, 4, 3, 4, 3), R(4, 3, 3, 3, 2), R(3))),
    "conv_transpose3d_groups": (lambda x, w: F.conv_transpose3d(x, w, stride=(1, 2, 1), groups=2,
                                                                dilation=(2, 1, 1)),
                                (R(1, 4, 3, 3, 4), R(4, 2, 2, 3, 2))),
    # output_padding at or past the stride (allowed below the dilation)
    "conv_transpose1d_outpad_ge_stride": (lambda x, w: F.conv_transpose1d(
        x, w, stride=2, padding=1, output_padding=2, dilation=3), (R(2, 2, 5), R(2, 3, 3))),
    "conv_transpose2d_outpad_ge_stride": (lambda x, w, b: F.conv_transpose2d(
        x, w, b, stride=1, output_padding=1, dilation=2), (R(2, 2, 4, 3), R(2, 3, 3, 3), R(3))),
    "conv_transpose3d_outpad_ge_stride": (lambda x, w: F.conv_transpose3d(
        x, w, stride=(1, 2, 1), output_padding=(1, 1, 0), dilation=(2, 1, 1)),
        (R(1, 2, 3, 3, 3), R(2, 3, 2, 2, 2))),
    # resampling and padding
    "upsample_nearest": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (R(2, 3, 4, 5),)),
    "upsample_nearest_size": (lambda x: F.interpolate(x, size=(7, 9), mode="nearest"), (R(2, 3, 4, 5),)),
    "upsample_bilinear": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), (R(2, 3, 4, 5),)),
    "upsample_bilinear_ac": (lambda x: F.interpolate(x, size=(7, 3), mode="bilinear",
                                                     align_corners=True), (R(2, 3, 4, 5),)),
    "upsample_linear1d": (lambda x: F.interpolate(x, size=11, mode="linear"), (R(2, 3, 4),)),
    "pad_constant": (lambda x: F.pad(x, (1, 2, 0, 3), value=0.5), (R(2, 3, 4, 5),)),
    "pad_negative": (lambda x: F.pad(x, (0, -1, 2, -1)), (R(2, 3, 4, 5),)),
    "pad_reflect": (lambda x: F.pad(x, (1, 2, 3, 1), mode="reflect"), (R(2, 3, 4, 5),)),
    "pad_reflect1d": (lambda x: F.pad(x, (2, 3), mode="reflect"), (R(2, 3, 6),)),
    "pad_replicate": (lambda x: F.pad(x, (1, 2, 3, 1), mode="replicate"), (R(2, 3, 4, 5),)),
    "pad_replicate3d": (lambda x: F.pad(x, (1, 0, 2, 1, 1, 1), mode="replicate"), (R(1, 2, 3, 4, 5),)),
    "pad_circular": (lambda x: F.pad(x, (1, 2, 2, 1), mode="circular"), (R(2, 3, 4, 5),)),
    # normalisations
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), (R(2, 4, 3, 5), R(4), R(4))),
    "group_norm_noaffine": (lambda x: F.group_norm(x, 3, eps=1e-3), (R(3, 6, 7),)),
    "instance_norm": (lambda x, w, b: F.instance_norm(x, weight=w, bias=b), (R(2, 3, 4, 5), R(3), R(3))),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (5,), w, b), (R(2, 3, 5), R(5), R(5))),
    # attention
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), (R(2, 3, 5, 4), R(2, 3, 6, 4),
                                                                      R(2, 3, 6, 4))),
    "sdpa_causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                    (R(2, 3, 5, 4), R(2, 3, 5, 4), R(2, 3, 5, 4))),
    "sdpa_bool_mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m > -1),
                       (R(2, 3, 5, 4), R(2, 3, 6, 4), R(2, 3, 6, 4), R(1, 1, 5, 6))),
    "sdpa_float_mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                        (R(2, 3, 5, 4), R(2, 3, 6, 4), R(2, 3, 6, 4), R(2, 1, 5, 6))),
    # embeddings
    "embedding": (lambda w, i: F.embedding(i, w, padding_idx=0), (R(10, 4), I(10, 3, 5))),
    "one_hot": (lambda i: F.one_hot(i, 7), (I(7, 3, 4),)),
    # scans, sorts
    "cumsum": (lambda x: torch.cumsum(x, 1), (R(3, 6, 2),)),
    "cumprod": (lambda x: torch.cumprod(x, 0), (R(4, 3),)),
    "sort": (lambda x: torch.sort(x, 1), (R(3, 7),)),
    "sort_desc": (lambda x: torch.sort(x, 0, descending=True), (R(5, 4),)),
    "argsort": (lambda x: torch.argsort(x, -1), (R(3, 7),)),
    "topk": (lambda x: torch.topk(x, 3, 1), (R(4, 8),)),
    "topk_smallest": (lambda x: torch.topk(x, 2, 0, largest=False), (R(5, 3),)),
    # masks and selection
    "masked_fill": (lambda x, m: x.masked_fill(m > 0, -2.0), (R(3, 5), R(3, 5))),
    "masked_scatter": (lambda x, m, s: x.masked_scatter(m > 0, s), (R(3, 5), R(3, 5), R(15))),
    "where": (lambda c, a, b: torch.where(c > 0, a, b), (R(3, 5), R(3, 5), R(5))),
    "tril_triu": (lambda x: x.tril(-1) + x.triu(2), (R(4, 5),)),
    # indexed writes and reads
    "index_add": (lambda x, s: x.index_add(0, torch.tensor([0, 2, 0]).to(x.device), s, alpha=2),
                  (R(4, 3), R(3, 3))),
    "index_copy": (lambda x, s: x.index_copy(1, torch.tensor([3, 0]).to(x.device), s),
                   (R(4, 5), R(4, 2))),
    "index_put_acc": (lambda x, v: x.index_put((torch.tensor([1, 3, 1]).to(x.device),), v,
                                               accumulate=True), (R(5, 3), R(3, 3))),
    "index_put": (lambda x, v: x.index_put((torch.tensor([4, 0]).to(x.device),), v), (R(5, 3), R(2, 3))),
    "gather": (lambda x, i: torch.gather(x, 1, i), (R(4, 5), I(5, 4, 3))),
    "scatter": (lambda x, i, s: torch.scatter(x, 0, i, s), (R(5, 4), _scatter_idx(), R(3, 4))),
    "scatter_value": (lambda x, i: torch.scatter(x, 0, i, 1.5), (R(5, 4), _scatter_idx())),
    "scatter_add": (lambda x, i, s: torch.scatter_add(x, 1, i, s), (R(4, 5), I(5, 4, 3), R(4, 3))),
    "getitem_index": (lambda x, i: x[:, i], (R(4, 6), I(6, 5))),
    "gather_int32_index": (lambda x, i: torch.gather(x, 1, i), (R(4, 5), I(5, 4, 3).int())),
    "scatter_add_int32_index": (lambda x, i, s: torch.scatter_add(x, 1, i, s),
                                (R(4, 5), I(5, 4, 3).int(), R(4, 3))),
    "take": (lambda x: torch.take(x, torch.tensor([[0, -1], [7, 3]]).to(x.device)), (R(3, 4),)),
    "put": (lambda x, s: x.put(torch.tensor([1, -2, 5]).to(x.device), s), (R(3, 4), R(3))),
    # activations, smooth functions, shifts and moments
    "logsigmoid": (lambda x: F.logsigmoid(x), (R(4, 5) * 8,)),
    "bce_with_logits": (lambda x, t: F.binary_cross_entropy_with_logits(x, t), (R(4, 5) * 4,
                                                                              torch.rand(4, 5, generator=g))),
    "bce_with_logits_weights": ((lambda w, pw: lambda x, t: F.binary_cross_entropy_with_logits(
        x, t, weight=w.to(x.device), reduction="sum", pos_weight=pw.to(x.device)))(
            torch.rand(4, 1, generator=g), torch.rand(5, generator=g) + 0.5),
        (R(4, 5), torch.rand(4, 5, generator=g))),
    "elu": (lambda x: F.elu(x, alpha=0.7), (R(4, 5) * 3,)),
    "selu": (lambda x: F.selu(x), (R(4, 5) * 3,)),
    "elu_inplace": (lambda x: F.elu(x * 1, inplace=True), (R(4, 5) * 3,)),
    "celu": (lambda x: F.celu(x, alpha=1.5), (R(4, 5) * 3,)),
    "logaddexp": (lambda a, b: torch.logaddexp(a, b), (R(4, 5) * 5, R(5) * 5)),
    "roll": (lambda x: torch.roll(x, (2, -1), (1, 0)), (R(3, 5, 2),)),
    "roll_flat": (lambda x: torch.roll(x, 4), (R(3, 5),)),
    "var_mean": (lambda x: torch.var_mean(x, 1, keepdim=True), (R(4, 6),)),
    "std_mean": (lambda x: torch.std_mean(x, (0, 2), correction=0), (R(4, 3, 5),)),
    "put_accumulate": (lambda x, s: x.put(torch.tensor([1, 1, 5]).to(x.device), s, accumulate=True),
                       (R(3, 4), R(3))),
}
# reducing scatters: every reduce, with and without self's values
for _r in ("sum", "prod", "mean", "amax", "amin"):
    for _inc in (True, False):
        CASES["scatter_reduce_%s_%s" % (_r, "self" if _inc else "noself")] = (
            (lambda r, inc: lambda x, i, s: x.scatter_reduce(1, i, s, r, include_self=inc))(_r, _inc),
            (R(4, 5), I(5, 4, 6), R(4, 6)))
        if _r != "sum":
            CASES["index_reduce_%s_%s" % (_r, "self" if _inc else "noself")] = (
                (lambda r, inc: lambda x, s: x.index_reduce(
                    0, torch.tensor([2, 0, 2, 4, 2]).to(x.device), s, r, include_self=inc))(_r, _inc),
                (R(5, 3), R(5, 3)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowering(name):
    fn, args = CASES[name]
    check_op(fn, *args, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag(mode):
    w, i, off = R(10, 4), I(10, 9), torch.tensor([0, 2, 2, 6])   # bag 1 is empty
    check_op(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), w, i, off, atol=1e-5, rtol=1e-5)
    check_op(lambda w, i: F.embedding_bag(i, w, mode=mode, padding_idx=3), w, I(10, 3, 4),
             atol=1e-5, rtol=1e-5)


def test_embedding_bag_max():
    # bag 1 is empty, bag 3 holds only padding; values and gradients native
    w, i, off = R(10, 4), torch.tensor([1, 7, 3, 3, 2, 9, 3, 5]), torch.tensor([0, 2, 2, 6, 7])
    check_op(lambda w, i, o: F.embedding_bag(i, w, o, mode="max"), w, i, off)
    check_op(lambda w, i, o: F.embedding_bag(i, w, o, mode="max", padding_idx=3), w, i, off)
    check_op(lambda w, i: F.embedding_bag(i, w, mode="max"), w, I(10, 3, 4))
    # ties: the first position reaching the maximum takes the gradient
    wt = torch.tensor([[1.0, 2.0], [1.0, 3.0], [0.0, 3.0]])
    check_op(lambda w, i: F.embedding_bag(i, w, mode="max"), wt, torch.tensor([[0, 1, 2]]))


def test_embedding_bag_max_indices(dev):
    w, i, off = R(10, 4), torch.tensor([1, 7, 3, 3, 2, 9, 3, 5]), torch.tensor([0, 2, 2, 6, 7])
    ref = torch.ops.aten._embedding_bag(w, i, off, False, 2, False, None, False, 3)
    got = torch.ops.aten._embedding_bag(w.to(dev), i.to(dev), off.to(dev), False, 2, False,
                                        None, False, 3)
    for k, (a, b) in enumerate(zip(got, ref)):
        assert torch.equal(a.cpu(), b), "output %d: %s vs %s" % (k, a.cpu(), b)


def test_scatter_reduce_legacy(dev):
    # scatter(..., reduce="add" | "multiply") (no gradient in eager either)
    x, i, s = R(4, 5), _scatter_idx().t()[:, :2].contiguous(), R(4, 3)
    for r in ("add", "multiply"):
        check_op(lambda x, i, s: x.scatter(1, i, s, reduce=r), x, i, s, grad=False)
        check_op(lambda x, i: x.scatter(1, i, 1.5, reduce=r), x, i, grad=False)


def test_scatter_reduce_integers_and_nan(dev):
    x, i = torch.randint(-9, 9, (4, 5), generator=g), I(5, 4, 6)
    s = torch.randint(-9, 9, (4, 6), generator=g)
    for r in ("sum", "prod", "mean", "amax", "amin"):
        for inc in (True, False):
            check_op(lambda x, i, s: x.scatter_reduce(1, i, s, r, include_self=inc), x, i, s)
    xf, sf = R(3, 4), R(3, 4)
    sf[1, 2] = float("nan")
    xf[0, 1] = float("nan")
    for r in ("amax", "amin"):
        check_op(lambda x, i, s: x.scatter_reduce(1, i, s, r), xf, I(4, 3, 4), sf, grad=False)


def test_scatter_duplicates_last_wins(dev):
    x, i, s = torch.zeros(2, 6), torch.tensor([[1, 1, 4, 1]] * 2), R(2, 4)
    check_op(lambda x, i, s: x.scatter(1, i, s), x, i, s, grad=False)


def _moments(t):
    t = t.detach().cpu().double()
    return t.mean().item(), t.std().item()


def test_device_rng_no_fallback(dev):
    before = fallback_counts()
    lazytpu.set_rng_state(7)
    n = torch.empty(200, 200, device=dev).normal_(2.0, 3.0)
    r = torch.randn(200, 200, device=dev)
    b = torch.bernoulli(torch.full((200, 200), 0.3, device=dev))
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3]] * 2000, device=dev)
    m = torch.multinomial(probs, 1, replacement=True)
    d = F.dropout(torch.ones(200, 200, device=dev), 0.4)
    lazytpu.mark_step()
    mn, sd = _moments(n)
    assert abs(mn - 2.0) < 0.1 and abs(sd - 3.0) < 0.1
    mn, sd = _moments(r)
    assert abs(mn) < 0.05 and abs(sd - 1.0) < 0.05
    assert abs(_moments(b)[0] - 0.3) < 0.02
    counts = torch.bincount(m.cpu().flatten(), minlength=4).double() / 2000
    assert counts[1] == 0
    torch.testing.assert_close(counts, torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.double),
                               atol=0.04, rtol=0)
    assert abs((d.cpu() != 0).double().mean().item() - 0.6) < 0.02
    new = {k: v - before.get(k, 0) for k, v in fallback_counts().items() if v > before.get(k, 0)}
    assert not new, new


def test_multinomial_without_replacement(dev):
    lazytpu.set_rng_state(3)
    p = torch.tensor([[1.0, 2.0, 0.0, 4.0, 1.0]] * 50, device=dev)
    s = torch.multinomial(p, 3).cpu()
    assert s.shape == (50, 3) and s.dtype == torch.int64
    for row in s:
        assert len(set(row.tolist())) == 3 and 2 not in row.tolist()


def test_nonzero_is_a_named_sync(dev):
    x = R(4, 5)
    xd = x.to(dev)
    before = met.counter_value("SyncCause::dynamic_shape") or 0
    torch.testing.assert_close(torch.nonzero(xd > 0).cpu(), torch.nonzero(x > 0))
    torch.testing.assert_close(xd[xd > 0].cpu(), x[x > 0])
    assert (met.counter_value("SyncCause::dynamic_shape") or 0) > before
