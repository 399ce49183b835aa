"""Full model state dicts from FSDP v1 shards.

An FSDP model's ``state_dict()`` holds each replica's shards
(``..._fsdp_shard.flat_param_K``) and the buffers; ``get_shard_metadata()``
says how to put them back: per FSDP module (by its prefix) and shard name
the original name and size of the (flat) parameter, and per flat parameter
the names, shapes and sizes of the parameters flattened into it.
"""
import glob
from collections import OrderedDict

import torch


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _strip(name):
    return name.replace("_fsdp_wrapped_module.", "").replace("_fpw_module.", "")


def consolidate_sharded_state_dicts(state_dict_list, shard_metadata):
    """The full (unsharded, unflattened) state dict, keyed as the original
    model's, from every replica's ``model.state_dict()`` in rank order and
    one replica's ``model.get_shard_metadata()``."""
    assert len(state_dict_list) == shard_metadata["world_size"], \
        "%d state dicts for a world of %d" % (len(state_dict_list),
                                             shard_metadata["world_size"])
    buffer_info = shard_metadata.get("buffer_info", {})
    full = OrderedDict()
    for name, value in state_dict_list[0].items():
        parts = name.split(".")
        k = next((i for i, s in enumerate(parts) if s.startswith("_fsdp_shard")), None)
        if k is None:
            if name in buffer_info:
                value = value.to(buffer_info[name]["_orig_dtype"])
            full[name] = value
            continue
        prefix, suffix = ".".join(parts[:k]), ".".join(parts[k:])
        info = shard_metadata["shard_info"][prefix][suffix]
        whole = torch.cat([sd[name] for sd in state_dict_list], dim=0)
        size = info["_orig_size"]
        whole = whole[:_numel(size)].view(*size) if whole.dim() == 1 else whole[:size[0]]
        full[(prefix + "." if prefix else "") + info["_orig_name"]] = whole
    for name in list(full):
        if "_fsdp_wrapped_module.flat_param_" in name:
            flat = full.pop(name)
            names, shapes, numels = shard_metadata["flatten_info"][name]
            prefix = name.rsplit(".", 1)[0] if "." in name else ""
            for t, s, n in zip(flat.split(list(numels)), shapes, names):
                full[(prefix + "." if prefix else "") + n] = t.view(s)
    return OrderedDict((_strip(k), v) for k, v in full.items())


def consolidate_sharded_model_checkpoints(ckpt_prefix, ckpt_suffix="*.pth", save_path="",
                                          save_model=True):
    """Consolidates the checkpoint files ``ckpt_prefix + ckpt_suffix`` (one
    per replica, each {"model": state_dict, "shard_metadata": metadata});
    saves {"model": full state dict} to save_path (default
    ckpt_prefix + "_consolidated.pth") when save_model. Returns
    (full state dict, path or None)."""
    pattern = ckpt_prefix + ckpt_suffix
    paths = glob.glob(pattern)
    assert paths, "Cannot find any files matching %s." % pattern
    print("found %d checkpoint files in %s" % (len(paths), pattern))
    ckpts = sorted(((torch.load(p, map_location="cpu", weights_only=False), p) for p in paths),
                   key=lambda c: c[0]["shard_metadata"]["rank"])
    for rank, (ck, path) in enumerate(ckpts):
        meta = ck["shard_metadata"]
        assert meta["world_size"] == len(ckpts), (
            "Expecting %d files (based on metadata in %s) but got %d files. Please check "
            "if you have missing or unexpected files in %s."
            % (meta["world_size"], path, len(ckpts), pattern))
        assert meta["rank"] == rank, (
            "Expecting rank %d for %s but it is ranked %d (out of %d files). Please check "
            "if you have missing or unexpected files in %s."
            % (meta["rank"], path, rank, len(ckpts), pattern))
    full = consolidate_sharded_state_dicts([c["model"] for c, _ in ckpts],
                                           ckpts[0][0]["shard_metadata"])
    out = None
    if save_model:
        out = save_path or ckpt_prefix + "_consolidated.pth"
        torch.save({"model": full}, out)
        print("saved consolidated model to %s" % out)
    return full, out
