"""torch_xla.distributed.parallel_loader (``pl``) on lazytpu.loader."""
from lazytpu.loader import MpDeviceLoader, ParallelLoader, PerDeviceLoader  # noqa: F401
