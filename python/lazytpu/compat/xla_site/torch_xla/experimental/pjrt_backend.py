"""torch_xla.experimental.pjrt_backend: importing it registers the legacy
``pjrt://`` init method of torch.distributed (torch_xla's name before
``xla://``), with the same rendezvous as ``xla://``: no address needed
inside a lazytpu world."""
import torch.distributed as dist

from torch_xla.distributed import xla_backend  # noqa: F401  (the 'xla' backend)
from lazytpu import distributed as _dist

dist.register_rendezvous_handler("pjrt", _dist._rendezvous)
