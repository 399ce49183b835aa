"""torch_xla.utils.serialization (``xser``): save / load nested data whose
device tensors are written one file each, as torch_xla 2.9 lays them out
(interchangeable with its files): ``path`` holds the data with each device
tensor replaced by a TensorReference(tid), ``path + ".tensors/tensor_<tid>.pt"``
holds that tensor on the CPU. ``load`` returns CPU tensors."""
import os
import shutil

import torch

import torch_xla
import torch_xla.core.xla_model as xm


class TensorReference(object):
    """Stands for the device tensor saved as tensor_<tid>.pt."""

    def __init__(self, tid):
        self.tid = tid


def _tensor_dir(path):
    return path + ".tensors"


def _tensor_file(folder, tid):
    return os.path.join(folder, "tensor_{}.pt".format(tid))


def _is_device_tensor(v):
    # exactly torch.Tensor, as 2.9 selects (a Parameter is pickled as itself)
    return type(v) is torch.Tensor and xm.is_xla_tensor(v)


def save(data, path, master_only=True, global_master=False):
    """Saves data (any nesting of lists, tuples, sets, dicts, ...) to path,
    each device tensor moved to the CPU into a file of its own under
    ``path + ".tensors"`` (replaced first if it exists). With master_only
    (the default) only the master ordinal writes: every host's local
    master, or with global_master only ordinal 0; otherwise every ordinal
    writes, so path must differ per ordinal. Views are saved as the values
    they hold (recreate them after loading)."""
    write = not master_only or xm.is_master_ordinal(local=not global_master)
    folder = _tensor_dir(path)
    if write:
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.mkdir(folder)

    def refs(tensors):
        torch_xla._XLAC._xla_sync_multi(tensors, devices=[], wait=True, sync_xla_data=False)
        out = []
        for tid, t in enumerate(tensors):
            if write:
                torch.save(t.cpu(), _tensor_file(folder, tid))
            out.append(TensorReference(tid))
        return out

    data = xm.ToXlaTensorArena(refs, _is_device_tensor).transform(data)
    if write:
        torch.save(data, path)


def load(path):
    """The data save() wrote to path, its tensors on the CPU."""
    data = torch.load(path, weights_only=False)
    folder = _tensor_dir(path)

    def tensors(refs):
        return [torch.load(_tensor_file(folder, r.tid)) for r in refs]

    return xm.ToXlaTensorArena(tensors, lambda v: type(v) is TensorReference).transform(data)
