
# loaded on first access, as 2.9 has it loaded once torch_xla is imported
from lazytpu.compat import submodules_on_access as _on_access  # noqa: E402

__getattr__ = _on_access(__name__, ("spmd",))
