"""lazytpu.spmd: one process drives every core of a device mesh, and
sharding annotations say how each tensor is laid out over it (torch_xla's
SPMD API; docs/spmd.md).

    import lazytpu.spmd as xs
    xs.use_spmd()
    mesh = xs.Mesh(range(8), (4, 2), ("data", "model"))
    xs.mark_sharding(x, mesh, ("data", None))        # 4-way data parallel
    xs.mark_sharding(linear.weight, mesh, ("model", None))

An annotation is an attribute of the value in the IR (part of the graph
key) and propagates to the values computed from it; each compiled graph
gets a partition plan (layouts, collectives, per-core memory) in the
report's "== sharding ==" section. A step holding annotations runs
partitioned over the cores of the mesh (per-core programs, collectives
between them; LAZYTPU_SPMD_PARTITION=0 runs it whole on one core), and the
report says how it ran.
"""
from .runtime import use_spmd, is_spmd, global_runtime_device_count  # noqa: F401

# The rest needs numpy (meshes are numpy arrays, as in torch_xla): loaded on
# first use, so that `torch_xla.runtime` (which maps use_spmd here) imports
# without it.
_LAZY = {
    "mesh": ["Mesh", "HybridMesh", "get_1d_mesh", "set_global_mesh", "get_global_mesh"],
    "sharding": ["ShardingType", "ShardingSpec", "mark_sharding", "clear_sharding",
                 "mark_sharding_with_gradients", "enable_manual_sharding",
                 "disable_manual_sharding", "apply_backward_optimization_barrier",
                 "optimization_barrier_", "wrap_if_sharded", "wrap_as_sharded_tensor",
                 "unwrap_sharded_tensor", "sharding_spec_text", "sharding_type_of",
                 "partition_spec_of", "MarkShardingFunction", "annotate_custom_sharding", "shard_as",
                 "_mark_manual_sharding"],
    "einsum_linear": ["XLAPatchedLinear", "xla_patched_nn_linear_forward", "EinsumLinear",
                      "apply_xla_patch_to_nn_linear"],
    "op_sharding": ["OpSharding", "global_tensor_from_cpu_shards"],
    "api": ["xla_distribute_tensor", "xla_distribute_module", "auto_policy",
            "convert_to_xla_mesh", "convert_to_xla_partition_spec"],
    "sharded_tensor": ["XLAShard", "XLAShardedTensor"],
    "fsdp": ["SpmdFullyShardedDataParallel", "recursive_wrap"],
    "debugging": ["visualize_tensor_sharding", "visualize_sharding", "sharding_grid_text",
                  "tensor_grid_text"],
}
_WHERE = {name: mod for mod, names in _LAZY.items() for name in names}

__all__ = ["use_spmd", "is_spmd", "global_runtime_device_count"] + sorted(_WHERE)


def __getattr__(name):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError("module 'lazytpu.spmd' has no attribute %r" % name)
    import importlib
    value = getattr(importlib.import_module("." + mod, __name__), name)
    globals()[name] = value
    return value
