"""torch_xla.distributed.fsdp on lazytpu: the wrap policies (FSDPv2 uses them);
torch_xla's FSDPv1 class is not mapped."""
from . import wrap  # noqa: F401
