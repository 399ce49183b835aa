"""Text pictures of shardings (torch_xla.distributed.spmd.debugging)."""
import re

import numpy as np


def _parse(sharding):
    """(tile dims, device list, replicated last dim?) of XLA's text."""
    if sharding in ("{replicated}", "") or "devices=" not in sharding:
        return None
    m = re.search(r"devices=\[([0-9,]+)\]([0-9,]+)", sharding)
    if not m:
        raise ValueError("visualize_sharding: cannot read %r" % sharding)
    tiles = [int(x) for x in m.group(1).split(",")]
    devs = [int(x) for x in m.group(2).split(",")]
    return tiles, devs, "last_tile_dim_replicate" in sharding


def visualize_sharding(sharding, use_color=False, print_out=True):
    """A text grid of a sharding string: one cell per tile (rows = tiles of
    dim 0, columns = tiles of dim 1) naming its cores. Prints it (unless
    print_out=False) and returns the text."""
    p = _parse(sharding)
    if p is None:
        text = "+----------------+\n|  replicated    |\n|  (every core)  |\n+----------------+"
    else:
        tiles, devs, rep = p
        n_rep = tiles[-1] if rep else 1
        tdims = tiles[:-1] if rep else tiles
        if len(tdims) > 2:
            raise ValueError("visualize_sharding: only 1-D and 2-D shardings are drawn, got "
                             "tile shape %s" % tdims)
        grid = np.array(devs).reshape(tuple(tdims) + (n_rep,))
        if len(tdims) == 1:
            grid = grid.reshape(tdims[0], 1, n_rep)
        rows, cols = grid.shape[0], grid.shape[1]
        cells = [[" ".join("TPU %d" % d for d in grid[r, c].tolist()) for c in range(cols)]
                 for r in range(rows)]
        w = max(len(s) for row in cells for s in row) + 2
        line = "+" + "+".join("-" * w for _ in range(cols)) + "+"
        out = [line]
        for row in cells:
            out.append("|" + "|".join(s.center(w) for s in row) + "|")
            out.append(line)
        text = "\n".join(out)
    if print_out:
        print(text)
    return text


def visualize_tensor_sharding(t, **kwargs):
    """visualize_sharding of t's sharding (XLAShardedTensor or device
    tensor)."""
    from .sharding import sharding_spec_text
    return visualize_sharding(sharding_spec_text(t) or "{replicated}",
                              use_color=kwargs.get("use_color", False),
                              print_out=kwargs.get("print_out", True))
