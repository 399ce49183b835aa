"""torch_xla.distributed.xla_backend: registers the torch.distributed backend
'xla' (and init_method 'xla://'), implemented by lazytpu.distributed over
lazytpu's collectives."""
from lazytpu.distributed import ProcessGroupLazyTPU as ProcessGroupXla  # noqa: F401
from lazytpu.distributed import register_backend as _register

_register("xla")
