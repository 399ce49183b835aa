"""torch_xla.distributed.spmd (``xs``) on lazytpu.spmd."""
from lazytpu.spmd import (XLAShard, XLAShardedTensor, Mesh, HybridMesh, ShardingType,  # noqa: F401
                          ShardingSpec, mark_sharding, mark_sharding_with_gradients,
                          clear_sharding, wrap_if_sharded, set_global_mesh, get_global_mesh,
                          get_1d_mesh, enable_manual_sharding, disable_manual_sharding,
                          _mark_manual_sharding, apply_backward_optimization_barrier,
                          shard_as, annotate_custom_sharding,
                          XLAPatchedLinear, xla_patched_nn_linear_forward,
                          xla_distribute_tensor, xla_distribute_module, auto_policy)
from . import xla_sharding, xla_sharded_tensor, debugging, api  # noqa: F401,E402
