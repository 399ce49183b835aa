"""DTensor's vocabulary on lazytpu's SPMD (torch_xla.distributed.spmd.api):
a torch DeviceMesh("xla") and Shard / Replicate placements become a Mesh
and a partition spec, then mark_sharding."""
import inspect
import warnings

from .mesh import Mesh
from .runtime import global_runtime_device_count, use_spmd
from .sharding import ShardingType, mark_sharding


def auto_policy(mod_name, mod, mesh):
    """``xla_distribute_module(..., partition_fn=auto_policy)`` asks for
    auto-sharding, which lazytpu does not simulate (use_spmd(auto=True)
    raises)."""
    return


def convert_to_xla_mesh(dt_mesh):
    """The Mesh of a DeviceMesh("xla") over every core (AssertionError
    otherwise)."""
    use_spmd()
    assert dt_mesh.size() == global_runtime_device_count(), (
        "DeviceMesh of %d devices, the runtime has %d"
        % (dt_mesh.size(), global_runtime_device_count()))
    return Mesh(dt_mesh.mesh.flatten().numpy(), tuple(dt_mesh.mesh.size()),
                dt_mesh.mesh_dim_names)


def convert_to_xla_partition_spec(tensor, placements):
    """The partition spec (one entry per tensor dim: the mesh axis that
    splits it, or None) of DTensor placements (one per mesh axis: Shard(d)
    or Replicate()); ValueError for other placements."""
    use_spmd()
    spec = [None] * len(tensor.shape)
    for mesh_idx, p in enumerate(placements):
        if p.is_shard():
            spec[p.dim] = mesh_idx
        elif p.is_replicate():
            continue
        else:
            raise ValueError("Unsupported placement type: %s" % type(p).__name__)
    return tuple(spec)


def xla_distribute_tensor(tensor, device_mesh, placements=None):
    """tensor moved to the device (if it is not there) and annotated with
    placements over device_mesh (a DeviceMesh("xla") of every core; default:
    replicated); returns the XLAShardedTensor. A tensor that already has a
    non-replicated sharding is refused (AssertionError), as is a DTensor
    that holds only a local part (ValueError)."""
    from torch.distributed.tensor.placement_types import Replicate
    from .sharded_tensor import XLAShardedTensor
    use_spmd()
    assert device_mesh.device_type == "xla", "xla_distribute_tensor: a DeviceMesh('xla')"
    mesh = convert_to_xla_mesh(device_mesh)
    if type(tensor).__name__ == "DTensor":
        raise ValueError("Cannot distribute a DTensor with local tensor on xla devices."
                         "The input tensor must be global.")
    if not tensor.is_meta and not isinstance(tensor, XLAShardedTensor):
        tensor = tensor.to(_device())
    if placements is None:
        placements = [Replicate() for _ in range(device_mesh.ndim)]
    assert len(placements) == device_mesh.ndim, (
        "`placements` must have the same length as `device_mesh.ndim`! Found placements "
        "length: %d, and device_mesh.ndim: %d." % (len(placements), device_mesh.ndim))
    spec = convert_to_xla_partition_spec(tensor, placements)
    g = tensor
    if isinstance(tensor, XLAShardedTensor):
        st = tensor.sharding_type
        assert st is None or st == ShardingType.REPLICATED, (
            "XLAShardedTensor `tensor` is already annotated with non-replication sharding. "
            "Clear the existing sharding annotation first, by callling "
            "torch_xla.distributed.spmd.clear_sharding API.")
        g = tensor.global_tensor
    return mark_sharding(g, mesh, spec)


def _device():
    from .. import core as _core
    return _core.device()


def xla_distribute_module(module, device_mesh=None, partition_fn=None, input_fn=None,
                          output_fn=None):
    """Runs partition_fn(name, submodule, device_mesh) on every submodule
    (it annotates parameters, e.g. with xla_distribute_tensor; the rest stay
    replicated) and installs input_fn / output_fn as forward pre / post
    hooks (taking (module, inputs|outputs, device_mesh), or the deprecated
    two-argument form). partition_fn=auto_policy asks for auto-sharding,
    which raises (not simulated). Returns the module."""
    use_spmd()
    if partition_fn:
        if getattr(partition_fn, "__name__", "") == "auto_policy":
            use_spmd(auto=True)        # raises: auto-sharding is not simulated
        for name, submod in module.named_modules():
            partition_fn(name, submod, device_mesh)
    if input_fn is not None:
        n = len(inspect.signature(input_fn).parameters)
        if n == 2:
            warnings.warn("Deprecating input_fn that takes two arguments (inputs, "
                          "device_mesh), please use input_fn that takes in (module, inputs, "
                          "device_mesh) instead!")
            module.register_forward_pre_hook(lambda _, inputs: input_fn(inputs, device_mesh))
        elif n == 3:
            module.register_forward_pre_hook(
                lambda mod, inputs: input_fn(mod, inputs, device_mesh))
        else:
            raise ValueError("input_fn should take in 3 arguments, but got %d arguments!" % n)
    if output_fn is not None:
        n = len(inspect.signature(output_fn).parameters)
        if n == 2:
            warnings.warn("Deprecating output_fn that takes two arguments (inputs, "
                          "device_mesh), please use output_fn that takes in (module, inputs, "
                          "device_mesh) instead!")
            module.register_forward_hook(
                lambda mod, inputs, outputs: output_fn(outputs, device_mesh))
        elif n == 3:
            module.register_forward_hook(
                lambda mod, inputs, outputs: output_fn(mod, outputs, device_mesh))
        else:
            raise ValueError("output_fn should take in 3 arguments, but got %d arguments!" % n)
    return module


__all__ = ["auto_policy", "convert_to_xla_mesh", "convert_to_xla_partition_spec",
           "xla_distribute_tensor", "xla_distribute_module"]
