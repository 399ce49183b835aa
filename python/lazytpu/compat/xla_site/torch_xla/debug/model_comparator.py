"""torch_xla.debug.model_comparator (``mc``): record a model's intermediate
tensors in two runs (say CPU and device) and report where they differ.

    mc.configure(dir)          # or MODELCMP_SAVEDIR=dir; None: save() does nothing
    x = mc.save("layer1", x)   # in forward: stores a host copy, returns x
    report = mc.compare(dir_a, dir_b, rtol=1e-3, atol=1e-3)   # '' when equal

Files: ``<dir>[/step-<step>]/<name>.<n>`` (torch.save of the CPU tensor, n
counting saves of that name, from 0 per step), written by the master
ordinal only. A name of None is the caller's ``file.l<line>``. Run as a
module (``python -m torch_xla.debug.model_comparator DIR1 DIR2``) it prints
the report and exits 1 when there is one."""
import argparse
import os
import re
import sys

import torch

_state = {"dir": None, "counts": {}, "step": None}
_SAVED = re.compile(r"^(?P<name>.+)\.(?P<n>\d+)$")


def configure(save_dir):
    """Saves go to save_dir from now on (None: nowhere); counts restart."""
    _state.update(dir=save_dir, counts={}, step=None)


def _save_dir():
    return _state["dir"] if _state["dir"] is not None else os.environ.get("MODELCMP_SAVEDIR")


def _master():
    try:
        import torch_xla.core.xla_model as xm
        return xm.is_master_ordinal()
    except ImportError:
        return True


def _caller_name():
    f = sys._getframe(2)
    here = os.path.abspath(__file__)
    while f is not None and os.path.abspath(f.f_code.co_filename) == here:
        f = f.f_back
    if f is None:
        return "noname"
    return "%s.l%d" % (os.path.basename(f.f_code.co_filename), f.f_lineno)


def save(name, tensor, step=None):
    """Stores a host copy of tensor under name (and step); returns tensor."""
    root = _save_dir()
    if root is None:
        return tensor
    data = tensor.detach().cpu()
    if not _master():
        return tensor
    name = _caller_name() if name is None else name
    folder = root if step is None else os.path.join(root, "step-%d" % step)
    os.makedirs(folder, exist_ok=True)
    if step is not None:
        if step != _state["step"]:
            _state.update(step=step, counts={})
    n = _state["counts"].get(name, 0)
    _state["counts"][name] = n + 1
    torch.save(data, os.path.join(folder, "%s.%d" % (name, n)))
    return tensor


def _unravel(flat, shape):
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return list(reversed(idx))


def compare_tensors(tensor1, tensor2, rtol=1e-05, atol=1e-08, max_diffs=25):
    """'' when the tensors agree (per element |a - b| <= max(atol,
    rtol * max(|a|, |b|))), else one line per differing element, largest
    error first, at most max_diffs of them."""
    if list(tensor1.shape) != list(tensor2.shape):
        return "Tensors have different shape: %s vs. %s\n" % (list(tensor1.shape),
                                                              list(tensor2.shape))
    a = tensor1.detach().cpu().reshape(-1).double()
    b = tensor2.detach().cpu().reshape(-1).double()
    err = (a - b).abs()
    bound = torch.maximum(torch.maximum(a.abs(), b.abs()) * rtol,
                          torch.full_like(err, atol))
    bad = (err > bound) | (err.isnan() & ~(a.isnan() & b.isnan()))
    where = bad.nonzero().reshape(-1)
    if where.numel() == 0:
        return ""
    order = err[where].nan_to_num(nan=float("inf")).argsort(descending=True)
    lines = []
    for i in where[order[:max_diffs]].tolist():
        lines.append("%s: %r vs. %r\terror=%r\n" % (_unravel(i, list(tensor1.shape)),
                                                    a[i].item(), b[i].item(), err[i].item()))
    if where.numel() > max_diffs:
        lines.append("... aborting after %d differences\n" % max_diffs)
    return "".join(lines)


def tensor_file_compare(path1, path2, rtol=1e-05, atol=1e-08, max_diffs=25):
    """compare_tensors of two saved files, headed by the tensor's name, save
    count and step."""
    diff = compare_tensors(torch.load(path1), torch.load(path2), rtol=rtol, atol=atol,
                           max_diffs=max_diffs)
    if not diff:
        return ""
    m = _SAVED.match(os.path.basename(path1))
    step = re.match(r"^step-(\d+)$", os.path.basename(os.path.dirname(path1)))
    head = 'Changes in saved tensor "%s" with id=%s%s\n' % (
        m.group("name") if m else os.path.basename(path1), m.group("n") if m else "?",
        " at step=%s" % step.group(1) if step else "")
    return head + "".join("  %s\n" % line for line in diff.rstrip("\n").split("\n"))


def _saved(root):
    out = set()
    for folder, _, files in os.walk(root):
        for f in files:
            if _SAVED.match(f):
                out.add(os.path.relpath(os.path.join(folder, f), root))
    return out


def compare(save_dir1, save_dir2, rtol=1e-05, atol=1e-08, max_diffs=25):
    """The differences between two saved runs ('' when none): tensors saved
    in one run only, then each pair that differs (tensor_file_compare)."""
    one, two = _saved(save_dir1), _saved(save_dir2)
    report = []
    for rel in sorted(one - two):
        report.append("Mismatch: %s not in %s\n" % (rel, save_dir2))
    for rel in sorted(two - one):
        report.append("Mismatch: %s not in %s\n" % (rel, save_dir1))
    for rel in sorted(one & two):
        report.append(tensor_file_compare(os.path.join(save_dir1, rel),
                                          os.path.join(save_dir2, rel), rtol=rtol, atol=atol,
                                          max_diffs=max_diffs))
    return "".join(report)


def _main(argv=None):
    p = argparse.ArgumentParser(description="compare two model_comparator save dirs")
    p.add_argument("--rtol", type=float, default=1e-05)
    p.add_argument("--atol", type=float, default=1e-08)
    p.add_argument("--max_diffs", type=int, default=25)
    p.add_argument("savedir1", metavar="SAVEDIR1")
    p.add_argument("savedir2", metavar="SAVEDIR2")
    a = p.parse_args(argv)
    report = compare(a.savedir1, a.savedir2, rtol=a.rtol, atol=a.atol, max_diffs=a.max_diffs)
    if report:
        print(report, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
