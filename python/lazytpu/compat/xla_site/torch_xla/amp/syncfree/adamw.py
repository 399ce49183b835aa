"""torch_xla.amp.syncfree.adamw: lazytpu.amp's SyncFreeAdamW."""
from lazytpu.amp import SyncFreeAdamW as AdamW  # noqa: F401
