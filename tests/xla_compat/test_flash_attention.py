"""torch_xla.experimental.custom_kernel.flash_attention (compatibility mode)
against attention written out on the CPU: the kernel's formula (ab, then
sm_scale, segment and causal masks with its finite mask value), gradients,
torch_xla's key padding past 512, torch.ops.xla.flash_attention, SPMD
partition specs, and what the kernel refuses."""
import pytest
import torch

import torch_xla
import torch_xla.backends
import torch_xla.runtime as xr
from torch_xla.experimental.custom_kernel import DEFAULT_MASK_VALUE, flash_attention

DEV = "xla"


pytestmark = pytest.mark.usefixtures("highest_precision")   # conftest.py


def reference(q, k, v, causal=False, q_seg=None, kv_seg=None, sm_scale=1.0, ab=None):
    """Attention on the CPU in float64, the mask added as the kernel adds it."""
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-2, -1)
    if ab is not None:
        s = s + ab.double()
    s = s * sm_scale
    lq, lk = s.shape[-2], s.shape[-1]
    keep = torch.ones(s.shape, dtype=torch.bool)
    if q_seg is not None:
        keep &= (q_seg[:, None, :, None] == kv_seg[:, None, None, :])
    if causal:
        keep &= torch.ones(lq, lk, dtype=torch.bool).tril()
    s = s + torch.where(keep, 0.0, DEFAULT_MASK_VALUE).double()
    return (torch.softmax(s, -1) @ v).float()


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def test_matches_attention():
    q, k, v = rand(3, 2, 128, 4, seed=1), rand(3, 2, 128, 4, seed=2), rand(3, 2, 128, 4, seed=3)
    o = flash_attention(q.to(DEV), k.to(DEV), v.to(DEV))
    assert o.device.type == "xla" and o.dtype == torch.float32 and o.shape == q.shape
    torch.testing.assert_close(o.cpu(), reference(q, k, v), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_ab_scale_segments_causal(causal):
    b, h, lq, lk, d = 2, 3, 128, 256, 8
    q, k, v = rand(b, h, lq, d, seed=4), rand(b, h, lk, d, seed=5), rand(b, h, lk, d, seed=6)
    ab = rand(b, h, lq, lk, seed=7)
    q_seg = torch.tensor([[0] * 64 + [1] * 64, [2] * 128])
    kv_seg = torch.tensor([[0] * 100 + [1] * 156, [2] * 200 + [3] * 56])
    o = flash_attention(q.to(DEV), k.to(DEV), v.to(DEV), causal, q_seg.to(DEV),
                        kv_seg.to(DEV), 0.35, ab=ab.to(DEV))
    want = reference(q, k, v, causal, q_seg, kv_seg, 0.35, ab)
    torch.testing.assert_close(o.cpu(), want, atol=1e-5, rtol=1e-4)
    plain = reference(q, k, v, False, None, None, 0.35, ab)
    assert not torch.allclose(want, plain, atol=1e-3)   # the masks changed it


def test_gradients_match_attention():
    q, k, v = rand(4, 2, 128, 8, seed=8), rand(4, 2, 128, 8, seed=9), rand(4, 2, 128, 8, seed=10)
    ab = rand(4, 2, 128, 128, seed=11)
    w = rand(4, 2, 128, 8, seed=12)
    grads = []
    for dev in ("cpu", DEV):
        ts = [t.clone().to(dev).requires_grad_() for t in (q, k, v, ab)]
        if dev == "cpu":
            o = reference(*ts[:3], causal=True, sm_scale=0.5, ab=ts[3])
        else:
            o = flash_attention(*ts[:3], causal=True, sm_scale=0.5, ab=ts[3])
        (o * w.to(dev)).sum().backward()
        grads.append([t.grad.cpu() for t in ts])
    for name, want, got in zip("q k v ab".split(), *grads):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4, msg=lambda m: name + ": " + m)


def test_bf16_inputs_keep_their_dtype():
    q, k, v = (rand(1, 2, 128, 16, seed=s).bfloat16() for s in (13, 14, 15))
    o = flash_attention(q.to(DEV), k.to(DEV), v.to(DEV), causal=True)
    assert o.dtype == torch.bfloat16
    torch.testing.assert_close(o.cpu().float(), reference(q, k, v, causal=True),
                               atol=2e-2, rtol=2e-2)


def test_keys_past_512_are_padded_as_torch_xla_pads_them():
    q, k, v = rand(1, 2, 64, 4, seed=16), rand(1, 2, 600, 4, seed=17), rand(1, 2, 600, 4, seed=18)
    o = flash_attention(q.to(DEV), k.to(DEV), v.to(DEV)).cpu()
    # torch_xla's wrapper pads k and v to 1024 with zeros that take part in
    # the softmax when there is no ab
    kp = torch.cat([k, torch.zeros(1, 2, 424, 4)], -2)
    vp = torch.cat([v, torch.zeros(1, 2, 424, 4)], -2)
    torch.testing.assert_close(o, reference(q, kp, vp), atol=1e-5, rtol=1e-4)
    assert not torch.allclose(o, reference(q, k, v), atol=1e-4)
    # with ab the padding is masked out: plain attention
    ab = rand(1, 2, 64, 600, seed=19)
    o = flash_attention(q.to(DEV), k.to(DEV), v.to(DEV), ab=ab.to(DEV)).cpu()
    torch.testing.assert_close(o, reference(q, k, v, ab=ab), atol=1e-5, rtol=1e-4)


def test_xla_op():
    q, k, v = rand(3, 2, 128, 4, seed=20), rand(3, 2, 128, 4, seed=21), rand(3, 2, 128, 4, seed=22)
    o = torch.ops.xla.flash_attention(q.to(DEV), k.to(DEV), v.to(DEV), True)
    torch.testing.assert_close(o.cpu(), reference(q, k, v, causal=True), atol=1e-5, rtol=1e-4)
    with pytest.warns(UserWarning, match="only be applied to tensors on XLA device"):
        assert torch.ops.xla.flash_attention(q, k, v).shape == q.shape


def test_refusals():
    q = torch.randn(1, 2, 64, 4, device=DEV)
    seg = torch.zeros(1, 64, dtype=torch.long, device=DEV)
    with pytest.raises(AssertionError, match="Both q_segment_ids and kv_segment_ids"):
        flash_attention(q, q, q, q_segment_ids=seg)
    with pytest.raises(NotImplementedError, match="multiple of 128"):
        flash_attention(q, q, q, q_segment_ids=seg, kv_segment_ids=seg)
    big = torch.randn(1, 1, 8, 200, device=DEV)
    kv = torch.randn(1, 1, 1024, 200, device=DEV)
    with pytest.raises(NotImplementedError, match="head_dim=200"):
        flash_attention(big, kv, kv)
    with pytest.raises(RuntimeError, match=r"k on cpu"):
        flash_attention(q, q.cpu(), q)


def test_partition_spec_in_spmd_mode(spmd_mode):
    import numpy as np
    import torch_xla.distributed.spmd as xs
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n, 1), ("fsdp", "tensor"))
    q, k, v = (rand(n, 2, 128, 8, seed=s) for s in (23, 24, 25))
    o = flash_attention(q.to(DEV), k.to(DEV), v.to(DEV), causal=True,
                        partition_spec=("fsdp", None, None, None), mesh=mesh)
    assert torch_xla._XLAC._get_xla_sharding_spec(o).startswith("{devices=[%d,1,1,1]" % n)
    torch.testing.assert_close(o.cpu(), reference(q, k, v, causal=True), atol=1e-5, rtol=1e-4)
    with pytest.raises(NotImplementedError, match="sequence or head_dim"):
        flash_attention(q.to(DEV), k.to(DEV), v.to(DEV),
                        partition_spec=(None, None, "fsdp", None), mesh=mesh)
