"""torch_xla 2.9's SPMD mode as its Python surface shows it (compatibility
mode): one logical device, the runtime's cores, the xla process group
refused, torch.ops.xla.dynamo_mark_sharding, send_cpu_data_to_device with
input_sharding, MpDeviceLoader's dict of specs."""
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.spmd as xs
import torch_xla.distributed.xla_backend  # noqa: F401
import torch_xla.runtime as xr


pytestmark = pytest.mark.usefixtures("spmd_mode")   # conftest.py


def test_one_logical_device_over_the_runtime_cores():
    n = xr.global_runtime_device_count()
    assert n == xr.addressable_runtime_device_count() > 1
    assert xr.global_device_count() == xr.addressable_device_count() == 1
    assert xr.local_device_count() == 1
    assert xm.get_xla_supported_devices() == ["xla:0"]
    assert xm.xla_replication_devices([torch_xla.device()]) == [xr.device_type() + ":0"]
    assert len(xr.global_runtime_device_attributes()) == n
    del os.environ["XLA_USE_SPMD"]
    assert not xr.is_spmd() and xr.global_device_count() == n


def test_xla_process_group_refused_in_spmd_mode():
    with pytest.raises(AssertionError, match="not supported with SPMD"):
        dist.init_process_group("xla", init_method="xla://")


def test_dynamo_mark_sharding_op():
    n = xr.global_runtime_device_count()
    t = torch.randn(4, n, device="xla")
    out = torch.ops.xla.dynamo_mark_sharding(t, list(range(n)), [1, n], "('a', 'b')",
                                             "(None, 'b')")
    torch.testing.assert_close(out.cpu(), t.cpu())
    want = "{devices=[1,%d]%s}" % (n, ",".join(str(i) for i in range(n)))
    assert torch_xla._XLAC._get_xla_sharding_spec(t) == want
    c = torch.zeros(2)                    # not an xla tensor: returned unannotated
    assert torch.equal(torch.ops.xla.dynamo_mark_sharding(c, [0], [1], "None", "(None,)"), c)


def test_send_cpu_data_to_device_with_input_sharding():
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (1, n))
    cpu = torch.arange(16.0).reshape(1, 16)
    xt, = xm.send_cpu_data_to_device([cpu], torch_xla.device(),
                                     input_sharding=xs.ShardingSpec(mesh, (0, 1)))
    ref = cpu.to("xla")
    xs.mark_sharding(ref, mesh, (0, 1))
    assert torch_xla._XLAC._get_xla_sharding_spec(xt) == \
        torch_xla._XLAC._get_xla_sharding_spec(ref)
    torch.testing.assert_close(xt.cpu(), cpu)
    plain, = xm.send_cpu_data_to_device(torch.ones(3), torch_xla.device())
    assert torch_xla._XLAC._get_xla_sharding_spec(plain) == "{replicated}"


def test_loader_dict_input_sharding():
    n = xr.global_runtime_device_count()
    mesh = xs.get_1d_mesh("x")
    batch = {"x": torch.randn(n, 4), "y": torch.randn(n, 4, 2)}
    loader = pl.MpDeviceLoader([batch], torch_xla.device(),
                               input_sharding={"x": xs.ShardingSpec(mesh, ("x", None))})
    with pytest.raises(KeyError, match="missing"):
        next(iter(loader))
    loader = pl.MpDeviceLoader([batch], torch_xla.device(),
                               input_sharding={"x": xs.ShardingSpec(mesh, ("x", None)),
                                               "y": xs.ShardingSpec(mesh, (None, "x", None))})
    got = next(iter(loader))
    rng = ",".join(str(i) for i in range(n))
    assert torch_xla._XLAC._get_xla_sharding_spec(got["x"]) == "{devices=[%d,1]%s}" % (n, rng)
    assert torch_xla._XLAC._get_xla_sharding_spec(got["y"]) == "{devices=[1,%d,1]%s}" % (
        n, rng)
    torch.testing.assert_close(got["y"].cpu(), batch["y"])
