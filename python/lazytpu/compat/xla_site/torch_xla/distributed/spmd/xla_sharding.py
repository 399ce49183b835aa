"""torch_xla.distributed.spmd.xla_sharding on lazytpu.spmd."""
from lazytpu.spmd import (Mesh, HybridMesh, ShardingType, ShardingSpec, mark_sharding,  # noqa: F401
                          mark_sharding_with_gradients, MarkShardingFunction, clear_sharding,
                          wrap_if_sharded, wrap_as_sharded_tensor, unwrap_sharded_tensor,
                          set_global_mesh, get_global_mesh, get_1d_mesh,
                          enable_manual_sharding, disable_manual_sharding,
                          _mark_manual_sharding, apply_backward_optimization_barrier,
                          shard_as, annotate_custom_sharding,
                          XLAPatchedLinear, xla_patched_nn_linear_forward, EinsumLinear,
                          apply_xla_patch_to_nn_linear)
