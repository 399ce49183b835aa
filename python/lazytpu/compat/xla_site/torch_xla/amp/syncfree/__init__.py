"""torch_xla.amp.syncfree on lazytpu.amp."""
from lazytpu.amp import SyncFreeAdam as Adam  # noqa: F401
from lazytpu.amp import SyncFreeAdamW as AdamW  # noqa: F401
from lazytpu.amp import SyncFreeSGD as SGD  # noqa: F401
