"""torch_xla._dynamo.dynamo_backend2: torch_xla's second dynamo backend
(``torch.compile(f, backend=dynamo_backend)``), here lazytpu's own."""
from lazytpu.compile import lazytpu_backend as dynamo_backend  # noqa: F401
