"""torch_xla.distributed.spmd (``xs``) on lazytpu.spmd."""
from lazytpu.spmd import (XLAShard, XLAShardedTensor, Mesh, HybridMesh, ShardingType,  # noqa: F401
                          ShardingSpec, mark_sharding, mark_sharding_with_gradients,
                          clear_sharding, wrap_if_sharded, set_global_mesh, get_global_mesh,
                          get_1d_mesh, enable_manual_sharding, disable_manual_sharding,
                          apply_backward_optimization_barrier,
                          XLAPatchedLinear, xla_patched_nn_linear_forward)
from . import xla_sharding, xla_sharded_tensor, debugging  # noqa: F401,E402
