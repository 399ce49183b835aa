"""torch_xla.experimental.distributed_checkpoint on lazytpu: SPMD state dicts
saved and loaded with torch.distributed.checkpoint (planners.py), a
per-step CheckpointManager (manager.py) and prime_optimizer (util.py).

lazytpu's SPMD program is one process over the simulated cores and a
sharded tensor is one logical tensor, so a checkpoint holds whole tensors
(torch_xla's holds each host's shards); loading puts the values back into
the state dict's device tensors, keeping their sharding annotations, so a
checkpoint restores under another mesh or sharding too."""
from .manager import CheckpointManager
from .planners import SPMDLoadPlanner, SPMDSavePlanner
from .util import prime_optimizer

__all__ = ["CheckpointManager", "SPMDSavePlanner", "SPMDLoadPlanner", "prime_optimizer"]
