"""torch_xla.distributed.xla_multiprocessing (``xmp``) on lazytpu.launch."""
from lazytpu.launch import MpModelWrapper, MpSerialExecutor, spawn  # noqa: F401
