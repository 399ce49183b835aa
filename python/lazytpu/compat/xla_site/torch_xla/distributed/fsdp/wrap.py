"""torch_xla.distributed.fsdp.wrap: torch's wrap policies and lazytpu.spmd's recursive_wrap."""
from torch.distributed.fsdp.wrap import (transformer_auto_wrap_policy,  # noqa: F401
                                         size_based_auto_wrap_policy, lambda_auto_wrap_policy)
from lazytpu.spmd.fsdp import recursive_wrap  # noqa: F401
