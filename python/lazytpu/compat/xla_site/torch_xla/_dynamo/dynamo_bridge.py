"""torch_xla.core.dynamo_bridge: where PyTorch's ``openxla`` dynamo backend
(torch/_dynamo/backends/torchxla.py: AOTAutograd with this bridge as its
compiler) hands over each FX graph. Here the graph goes to lazytpu's
compiled-graph runner (lazytpu.compile, the ``lazytpu`` backend's): traced
once on the device, recorded, and replayed without tracing afterwards.
``torch.compile(model, backend="openxla")`` therefore runs as
``backend="lazytpu"`` does."""
from lazytpu import _C
from lazytpu import compile as _compile


def extract_compiled_graph(xla_model, xla_args):
    """A callable running the FX graph xla_model (its inputs: tensors on the
    xla device, as xla_args) on the device; returns its outputs. Counted in
    DynamoExtractCompiledGraph (once per FX graph, as 2.9 counts it)."""
    _C.counter_inc("DynamoExtractCompiledGraph", 1)
    graph = _compile._LazytpuGraph(xla_model, "openxla")

    def run(*args):
        return graph(list(args))

    return run


def _mark_openxla():
    """Lets the openxla backend through lazytpu's torch.compile guard (which
    refuses backends that cannot run on the device)."""
    import torch._dynamo  # noqa: F401  (registers the backends)
    from torch._dynamo.backends.registry import lookup_backend
    lookup_backend("openxla")._lazytpu_backend = True


_mark_openxla()
