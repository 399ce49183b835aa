"""torch_xla.amp.syncfree.adam: lazytpu.amp's SyncFreeAdam."""
from lazytpu.amp import SyncFreeAdam as Adam  # noqa: F401
