"""torch_xla.experimental.scan_layers on lazytpu: layers of one structure
applied in sequence. As torch_xla checks, every layer must have the same
parameter and buffer names, shapes and dtypes (ValueError otherwise); then
the result is nn.Sequential(*layers)(input_data), unrolled (see
experimental/scan.py: lazytpu traces each layer; no loop body is reused)."""
import torch

try:
    from functorch.compile import default_partition
except ImportError:  # not in every torch build
    default_partition = None

# torch_xla's cache of the traced single layer; empty here for the same
# reason as experimental/scan.py's _SCAN_COMPUTATION_CACHE (nothing traced
# once and reused), kept so code that clears it runs unchanged.
_ONE_LAYER_CACHE = {}


def _check_same_structure(dicts):
    """torch_xla's check of the layers' parameter (or buffer) dicts: the same
    names (ValueError "Layer i has mismatched keys."), then the same shapes
    (ValueError "Shape mismatch for ...")."""
    if not dicts:
        return
    ref = dicts[0]
    for idx, cur in enumerate(dicts[1:], start=1):
        if set(cur) != set(ref):
            msg = "Layer %d has mismatched keys." % idx
            missing, extra = set(ref) - set(cur), set(cur) - set(ref)
            if missing:
                msg += " Missing keys: %s." % missing
            if extra:
                msg += " Extra keys: %s." % extra
            raise ValueError(msg)
        for key in ref:
            if ref[key].shape != cur[key].shape:
                raise ValueError("Shape mismatch for '%s' in layer %d: expected %s, got %s."
                                 % (key, idx, ref[key].shape, cur[key].shape))


def scan_layers(layers, input_data, partition_fn=default_partition, is_layer_pure=False):
    """The output of the last of layers, each fed the previous one's (a
    tuple is passed as the layer's positional arguments, as 2.9's
    functional_call does)."""
    layers = list(layers)
    if not layers:
        return input_data
    _check_same_structure([dict(l.named_parameters()) for l in layers])
    _check_same_structure([dict(l.named_buffers()) for l in layers])
    out = input_data
    for layer in layers:
        out = layer(*out) if isinstance(out, tuple) else layer(out)
    return out
