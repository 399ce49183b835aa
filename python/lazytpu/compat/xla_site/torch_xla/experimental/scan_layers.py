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


def _structure(layer):
    return ([(n, tuple(p.shape), p.dtype) for n, p in layer.named_parameters()],
            [(n, tuple(b.shape), b.dtype) for n, b in layer.named_buffers()])


def scan_layers(layers, input_data, partition_fn=default_partition, is_layer_pure=False):
    """The output of the last of layers, each fed the previous one's."""
    layers = list(layers)
    if not layers:
        return input_data
    first = _structure(layers[0])
    for i, layer in enumerate(layers[1:], 1):
        if _structure(layer) != first:
            raise ValueError("scan_layers: layer %d has another structure than layer 0 "
                             "(parameters/buffers: %s vs %s)" % (i, _structure(layer), first))
    out = input_data
    for layer in layers:
        out = layer(out)
    return out
