"""torch_xla.distributed.fsdp (FSDP v1) on lazytpu: parameters sharded over
the replicas, gathered for each wrapped module's forward and backward with
lazytpu's all_gather, gradients reduce-scattered (see
xla_fully_sharded_data_parallel.py)."""
from .xla_fully_sharded_data_parallel import XlaFullyShardedDataParallel  # noqa: F401
from .state_dict_utils import (consolidate_sharded_model_checkpoints,  # noqa: F401
                               consolidate_sharded_state_dicts)
from .utils import checkpoint_module  # noqa: F401

__all__ = ["XlaFullyShardedDataParallel", "consolidate_sharded_state_dicts",
           "consolidate_sharded_model_checkpoints", "checkpoint_module"]
