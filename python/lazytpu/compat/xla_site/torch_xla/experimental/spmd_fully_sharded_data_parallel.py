"""torch_xla.experimental.spmd_fully_sharded_data_parallel (FSDPv2) on lazytpu.spmd."""
from lazytpu.spmd.fsdp import SpmdFullyShardedDataParallel  # noqa: F401
from lazytpu.spmd.fsdp import _partition_spec as _prepare_spmd_partition_spec  # noqa: F401
