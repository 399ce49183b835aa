"""lazytpu.bf16.driver: runs a user's training script once, in one mode, and
records what the lab compares (one process per mode, started by the lab):

    python -m lazytpu.bf16.driver MODE STEPS K SEED KEEP OUT.pt script.py [args]

KEEP: names for lazytpu.amp.keep_f32, comma-separated ("-": none).

The script runs unchanged (runpy, as ``__main__``). Global hooks watch it:
- ``Tensor.backward`` (patched here only): the tensor it is called on is the
  step's loss, kept on the device and read at the end (no sync per step);
- the optimizers' global step post hook counts steps, times them and stops
  the script after STEPS (an exception the script does not catch:
  :class:`LabStop` derives from BaseException);
- at step K only, global module forward hooks keep each module's first
  input and output and a tensor hook on the output its gradient; they are
  read after the last step.
MODE "autocast" runs the script inside ``torch.autocast(<device>, bf16)``,
left off during ``backward()``, its cast cache cleared at each optimizer
step; the other modes are set by the environment the lab gives the process.
"""
import os
import random
import runpy
import sys
import time

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from .. import _C
from .. import amp
from .. import core as _core


class LabStop(BaseException):
    """Raised from the optimizer's step hook after the last step."""


def _first_float(obj):
    """The first floating tensor in a module's arguments / results."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.is_floating_point() else None
    if isinstance(obj, (list, tuple)):
        for o in obj:
            t = _first_float(o)
            if t is not None:
                return t
    if isinstance(obj, dict):
        for o in obj.values():
            t = _first_float(o)
            if t is not None:
                return t
    return None


class Recorder:
    """The state of one run: losses, step times, the step-K records."""

    def __init__(self, mode, steps, k):
        self.mode, self.steps, self.k = mode, steps, k
        self.done = 0                  # optimizer steps completed
        self.pending = []              # losses backward() saw in this step
        self.losses = []               # one device tensor per step
        self.times = []                # wall time at each step's end
        self.t0 = time.perf_counter()
        self.records = {}              # module key -> {"type", "in", "out", "grad"}
        self.order = []
        self.names = {}                # id(module) -> qualified name
        self.calls = {}                # name -> calls seen at step K
        self.stack = []                # keys of the module calls under way
        self.handles = []

    # ------------------------------------------------------------ steps
    def on_backward(self, loss):
        self.pending.append(loss.detach())

    def on_step(self, opt, args, kwargs):
        if self.mode == "autocast":
            # the autocast context never exits in this run: drop its bf16
            # copies of the weights the step just changed (leaving a `with
            # torch.autocast` block does this in the user's own loop)
            torch.clear_autocast_cache()
        if not self.pending:
            return                     # a step without a backward: not counted
        p, self.pending = self.pending, []
        self.losses.append(p[0] if len(p) == 1 else sum(p[1:], p[0]) / len(p))
        self.done += 1
        self.times.append(time.perf_counter())
        if self.done == self.k:
            self.stop_recording()
        if self.done == self.k - 1:
            self.start_recording()
        if self.done >= self.steps:
            raise LabStop()

    # ------------------------------------------------- step-K module hooks
    def start_recording(self):
        mm = torch.nn.modules.module
        self.handles = [mm.register_module_forward_pre_hook(self._pre),
                        mm.register_module_forward_hook(self._post, always_call=True)]

    def stop_recording(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    def _name(self, mod):
        n = self.names.get(id(mod))
        if n is None:                  # a root: name its tree
            root = type(mod).__name__
            for sub, m in mod.named_modules():
                self.names.setdefault(id(m), root + ("." + sub if sub else ""))
            n = self.names[id(mod)]
        return n

    def _pre(self, mod, args):
        if not torch.is_grad_enabled():
            return None
        name = self._name(mod)
        c = self.calls.get(name, 0) + 1
        self.calls[name] = c
        key = name if c == 1 else "%s#%d" % (name, c)
        x = _first_float(args)
        rec = {"type": type(mod).__name__, "in": None if x is None else x.detach(),
               "out": None, "grad": None, "parent": None, "children": []}
        self.records[key] = rec
        self.order.append(key)
        if self.stack:
            rec["parent"] = self.stack[-1]
            self.records[self.stack[-1]]["children"].append(key)
        self.stack.append(key)
        return None

    def _post(self, mod, args, out):
        if not torch.is_grad_enabled() or not self.stack:
            return None
        key = self.stack.pop()
        rec = self.records[key]
        y = _first_float(out)
        if y is not None:
            rec["out"] = y.detach()
            if y.requires_grad:
                y.register_hook(lambda g, rec=rec: rec.__setitem__("grad", g.detach()))
        return None

    # --------------------------------------------------------------- end
    def result(self):
        """Host values of everything recorded (the one read of the run)."""
        def host(t):
            return None if t is None else t.detach().float().cpu()
        losses = [float(host(l).reshape(-1)[0]) if l.numel() == 1 else float(host(l).mean())
                  for l in self.losses]
        mods = []
        for key in self.order:
            r = self.records[key]
            mods.append({"name": key, "type": r["type"], "parent": r["parent"],
                         "children": r["children"], "in": host(r["in"]),
                         "out": host(r["out"]), "grad": host(r["grad"])})
        _C.wait(-1)
        peaks = {}
        for c in range(_C.num_cores()):
            used, peak, limit, nbuf = _C.memory_info(c)
            if peak:
                peaks[c] = int(peak)
        ends = self.times
        steps = [b - a for a, b in zip([self.t0] + ends[:-1], ends)]
        return {"mode": self.mode, "losses": losses, "step_times": steps, "peak_bytes": peaks,
                "k": self.k, "modules": mods, "bf16_storage": bool(_C.bf16_mode()),
                "matmul_precision": _C.matmul_precision()}


def main(argv):
    mode, steps, k, seed = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    keep, out, script, args = argv[4], argv[5], argv[6], argv[7:]
    if keep != "-":
        amp.keep_f32([n for n in keep.split(",") if n])
    rec = Recorder(mode, steps, k)
    orig_backward = torch.Tensor.backward

    def backward(self, *a, **kw):
        rec.on_backward(self)
        if mode == "autocast" and torch.is_autocast_enabled(_core.DEVICE_TYPE):
            with torch.autocast(_core.DEVICE_TYPE, enabled=False):
                return orig_backward(self, *a, **kw)
        return orig_backward(self, *a, **kw)

    torch.Tensor.backward = backward
    register_optimizer_step_post_hook(rec.on_step)
    if k == 1:
        rec.start_recording()
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
        numpy.random.seed(seed)
    except ImportError:            # numpy is optional for the user's script
        pass
    sys.argv = [script] + list(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    ac = torch.autocast(_core.DEVICE_TYPE, dtype=torch.bfloat16) if mode == "autocast" else None
    status = "finished"
    try:
        if ac is not None:
            ac.__enter__()
        runpy.run_path(script, run_name="__main__")
    except LabStop:
        status = "stopped"
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        if ac is not None:
            ac.__exit__(None, None, None)
    res = rec.result()
    res["status"] = status
    torch.save(res, out)


if __name__ == "__main__":
    main(sys.argv[1:])
