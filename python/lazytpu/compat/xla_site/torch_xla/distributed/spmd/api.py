"""torch_xla.distributed.spmd.api (DTensor meshes and placements) on
lazytpu.spmd.api."""
from lazytpu.spmd.api import (auto_policy, convert_to_xla_mesh,  # noqa: F401
                              convert_to_xla_partition_spec, xla_distribute_tensor,
                              xla_distribute_module)
