"""torch_xla.amp.syncfree.sgd: lazytpu.amp's SyncFreeSGD."""
from lazytpu.amp import SyncFreeSGD as SGD  # noqa: F401
