"""torch_xla.core.dynamo_bridge: the name PyTorch's ``openxla`` backend
imports (torch_xla._dynamo.dynamo_bridge)."""
from torch_xla._dynamo.dynamo_bridge import *  # noqa: F401,F403
from torch_xla._dynamo.dynamo_bridge import extract_compiled_graph  # noqa: F401
