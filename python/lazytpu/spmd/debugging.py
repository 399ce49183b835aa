"""Pictures of shardings (torch_xla.distributed.spmd.debugging):
visualize_sharding draws torch_xla 2.9's ``rich`` table; sharding_grid_text
a plain-text grid that needs no ``rich``."""
import os
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


def sharding_grid_text(sharding, print_out=True):
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


def _rich():
    """The rich modules visualize_sharding draws with; ValueError without
    rich (as torch_xla 2.9)."""
    try:
        import rich.align
        import rich.box
        import rich.console
        import rich.padding
        import rich.style
        import rich.table
    except ImportError:
        raise ValueError("`visualize_sharding` requires `rich` to be installed.") from None
    return rich


def _cells(sharding):
    """(rows, cols, {(row, col): device id or list of replica ids}) of
    the first two dims of a sharding text, as torch_xla 2.9 reads it."""
    from .runtime import global_runtime_device_count
    if sharding in ("{replicated}", ""):
        return 1, 1, {(0, 0): list(range(global_runtime_device_count()))}
    p = _parse(sharding)
    if p is None:
        raise ValueError("sharding %s is not organized as expected" % sharding)
    tiles, devs, rep = p
    if len(tiles) < 2:
        raise ValueError("sharding %s is not organized as expected (one tiled dim: "
                         "torch_xla draws the first two)" % sharding)
    rows, cols = tiles[0], tiles[1]
    out = {}
    if rep:
        depth = tiles[-1]
        for i in range(len(devs) // depth):
            out.setdefault((i // cols, i % cols), devs[i * depth:(i + 1) * depth])
    else:
        for i, d in enumerate(devs):
            out.setdefault((i // cols, i % cols), d)
    return rows, cols, out


def visualize_sharding(sharding, use_color=True, scale=1., min_width=9, max_width=80):
    """torch_xla 2.9's picture of a sharding text: a ``rich`` table of the
    tiles of its first two dims, each cell "<PJRT_DEVICE> <device id>" (or
    the list of a tile's replicas); prints it and returns the table.
    ValueError without rich or for a text it cannot read."""
    rich = _rich()
    print("Visualizing %s (showing up to the first two dimensions)" % sharding)
    rows, cols, cells = _cells(sharding)
    console = rich.console.Console(width=max_width)
    use_color = use_color and console.color_system is not None
    kind = os.environ.get("PJRT_DEVICE")
    table = rich.table.Table(show_header=False, show_lines=not use_color, padding=0,
                             highlight=not use_color, pad_edge=False,
                             box=rich.box.SQUARE if not use_color else None)
    for i in range(rows):
        row = []
        for j in range(cols):
            if (i, j) not in cells:
                raise ValueError("sharding %s is not organized as expected" % sharding)
            row.append(rich.padding.Padding(
                rich.align.Align("%s %s" % (kind, cells[i, j]), "center", vertical="middle"),
                (1, 1, 1, 1), style=rich.style.Style(bgcolor=None, color=None)))
        table.add_row(*row)
    console.print(table, end="\n\n")
    return table


def visualize_tensor_sharding(t, **kwargs):
    """visualize_sharding of t's sharding (XLAShardedTensor or device
    tensor; "" when it has none, drawn as replicated)."""
    from .sharding import sharding_spec_text
    return visualize_sharding(sharding_spec_text(t), **kwargs)


def tensor_grid_text(t, print_out=True):
    """sharding_grid_text of t's sharding."""
    from .sharding import sharding_spec_text
    return sharding_grid_text(sharding_spec_text(t) or "{replicated}", print_out=print_out)
