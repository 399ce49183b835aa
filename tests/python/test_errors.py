"""User errors read like eager PyTorch's (op, shapes, dtypes, devices) and
never crash the process."""
import re

import pytest
import torch

import lazytpu
import lazytpu.metrics as met


def test_shape_mismatch_names_op_and_shapes(dev):
    a = torch.ones(2, 3, device=dev)
    with pytest.raises(RuntimeError, match=r"add.*\[2, 3\].*\[4\]"):
        a + torch.ones(4, device=dev)
    with pytest.raises(RuntimeError, match=r"mm.*\[2, 3\].*\[4, 5\]"):
        a @ torch.ones(4, 5, device=dev)
    with pytest.raises(RuntimeError, match=r"cat"):
        torch.cat([a, torch.ones(3, 3, device=dev)], 1)
    with pytest.raises(RuntimeError, match=r"shape '\[4\]' is invalid for input of size 6"):
        a.view(4)
    with pytest.raises(IndexError, match="Dimension out of range"):
        a.sum(5)
    # the device is still usable afterwards
    assert (a * 2).sum().item() == 12.0


def test_device_mismatch(dev):
    a = torch.ones(2, 3, device=dev)
    msg = "Expected all tensors to be on the same device"
    with pytest.raises(RuntimeError, match=msg):
        a + torch.ones(2, 3)
    with pytest.raises(RuntimeError, match=msg):
        torch.ones(2, 3) * a
    with pytest.raises(RuntimeError, match=msg):
        a @ torch.ones(3, 2)
    with pytest.raises(RuntimeError, match=msg):
        a + a.to(lazytpu.device(1))
    # a 0-dim CPU tensor is a scalar, like in eager CUDA
    assert (a * torch.tensor(3.0)).sum().item() == 18.0


def test_host_memory_access(dev):
    a = torch.ones(2, 3, device=dev)
    # data_ptr() is a device address (an identity, as a CUDA tensor's), no
    # host pointer: test_hf.py checks what libraries read from it
    assert a.data_ptr() == a.untyped_storage().data_ptr() != 0
    with pytest.raises(RuntimeError, match=r"no host memory"):
        a.storage()
    with pytest.raises(TypeError, match=r"numpy.*cpu\(\)"):
        a.numpy()
    assert a.cpu().numpy().sum() == 6.0


def test_unsupported_dtype_and_device_index(dev):
    with pytest.raises(RuntimeError, match=r"dtype Float8_e4m3fn is not supported on the device"):
        torch.ones(3).to(torch.float8_e4m3fn).to(dev)
    with pytest.raises(RuntimeError, match=r"device index 99 out of range"):
        torch.zeros(2, device="lazytpu:99")
    with pytest.raises(ValueError):
        lazytpu.device(99)


def test_fallback_is_counted_with_call_site(dev):
    a = torch.arange(6.0).reshape(2, 3).to(dev)
    before = met.counter_value("aten::_logcumsumexp") or 0
    out = torch.logcumsumexp(a, 1)                # no native kernel: CPU fallback
    assert torch.equal(out.cpu(), torch.logcumsumexp(torch.arange(6.0).reshape(2, 3), 1))
    assert out.device == a.device
    assert met.counter_value("aten::_logcumsumexp") == before + 1
    assert "aten::_logcumsumexp" in met.executed_fallback_ops()
    report = met.metrics_report()
    assert re.search(r"aten::_logcumsumexp.*test_errors\.py:\d+", report), report[-2000:]


def test_views_never_reach_the_device_unfunctionalized(dev):
    # as_strided/view/_reshape_alias/alias fail loudly if ever reached; normal
    # code only sees their *_copy forms
    a = torch.arange(12.0).to(dev)
    assert a.view(3, 4)[1].sum().item() == 22.0
    assert a.reshape(2, 6).t().contiguous().view(-1).cpu()[1].item() == 6.0
    assert torch.as_strided(a, (2, 2), (4, 1), 1).cpu().tolist() == [[1.0, 2.0], [5.0, 6.0]]


def test_partial_kernel_falls_back(dev):
    # embedding_bag's backward has no device kernel for scale_grad_by_freq:
    # that case runs on the CPU fallback (counted), with correct gradients
    import torch.nn.functional as F
    w, i, off = torch.randn(8, 3), torch.tensor([1, 2, 1, 5, 1]), torch.tensor([0, 2])
    wd, wc = w.to(dev).requires_grad_(), w.clone().requires_grad_()
    before = met.counter_value("aten::_embedding_bag_backward") or 0
    F.embedding_bag(i.to(dev), wd, off.to(dev), scale_grad_by_freq=True).sum().backward()
    F.embedding_bag(i, wc, off, scale_grad_by_freq=True).sum().backward()
    torch.testing.assert_close(wd.grad.cpu(), wc.grad, atol=1e-5, rtol=1e-5)
    assert met.counter_value("aten::_embedding_bag_backward") == before + 1
