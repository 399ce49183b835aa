"""torch_xla.distributed.spmd.xla_sharded_tensor on lazytpu.spmd."""
from lazytpu.spmd.sharded_tensor import XLAShard, XLAShardedTensor  # noqa: F401
