"""torch_xla.distributed.spmd.debugging on lazytpu.spmd (text pictures)."""
from lazytpu.spmd.debugging import visualize_tensor_sharding, visualize_sharding  # noqa: F401
