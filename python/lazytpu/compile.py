"""torch.compile(model_or_fn, backend="lazytpu").

Dynamo captures Python frames into FX graphs; AOTAutograd splits each into a
forward and a backward graph of aten ops. Each graph reaches lazytpu here as
one unit:

- first call (per graph and input signature): the FX graph runs once on the
  real device tensors (lazy tracing, no arithmetic), then the C core records
  it (lt_replay_record: capture, compile through the compile cache, a recipe
  binding inputs to program parameters);
- every later call: one C call binds the new input buffers and queues the
  program (lt_replay_run): no op is traced, nothing is captured or hashed.

Graph breaks run between graphs as ordinary lazy tracing. Graphs that cannot
be replayed (random ops, CPU tensors among the inputs, data-dependent
outputs) keep running their FX graph lazily each call, counted in
CompiledGraphLazy with the reason in the report's "compiled graphs" section.
Dynamo recompiles (with the guard that failed) and graph breaks (with their
reason) are noted in the metrics report too (DynamoRecompile,
DynamoGraphBreak, DynamoGraph).
"""
import sys
import threading

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.registry import register_backend

from . import _C
from .core import DEVICE_TYPES as _TYPES

_SECTION = "compiled graphs"
_lock = threading.Lock()
_ops = torch.ops.lazytpu


def _is_dev(t):
    return isinstance(t, torch.Tensor) and t.device.type in _TYPES


def _note(line):
    _C.metrics_note(_SECTION, line)


class _Recording:
    """One recorded program: which args are its inputs, how its outputs
    rebuild the FX graph's output list, which inputs it mutates."""
    __slots__ = ("rid", "tensor_idx", "template", "mutated")

    def __init__(self, rid, tensor_idx, template, mutated):
        self.rid = rid
        self.tensor_idx = tensor_idx
        self.template = template      # per output: int (replay output) or ("c", value)
        self.mutated = mutated        # [(arg index, replay output index)]

    def __del__(self):
        try:
            _ops.replay_free(self.rid)
        except Exception:  # interpreter shutdown
            pass


class _LazytpuGraph:
    """The callable for one FX graph (AOTAutograd calls it boxed: one list
    of arguments, see _boxed)."""

    def __init__(self, gm, kind):
        self.gm = gm
        self.kind = kind
        self.recs = {}       # signature -> _Recording, or a reason string (lazy)
        self.mutated = _mutated_inputs(gm)
        self.n_nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")

    def __call__(self, args):
        # torch_xla's eager mode (when compatibility mode loaded it) stays off
        # while a compiled graph runs: one program, as torch_xla runs it
        eager = sys.modules.get("lazytpu.compat.eager")
        if eager is None or not eager.is_enabled():
            return self._call(args)
        with eager.suspended():
            return self._call(args)

    def _call(self, args):
        key = tuple(a for a in args if not isinstance(a, torch.Tensor))
        rec = self.recs.get(key)
        if rec.__class__ is _Recording:
            try:
                return self._run(rec, args)
            except RuntimeError as e:
                if "was recorded for" not in str(e):
                    raise
                key = _full_signature(args)
                rec = self.recs.get(key)
                if rec.__class__ is _Recording:
                    return self._run(rec, args)
        if rec is None:
            return self._record(key, args)
        _C.counter_inc("CompiledGraphLazy", 1)
        with torch.no_grad():
            return list(self.gm(*args))

    def _run(self, rec, args):
        outs = _ops.replay_run(rec.rid, [args[i] for i in rec.tensor_idx])
        res = [outs[t] if t.__class__ is int else
               t[1] if t[0] == "c" else
               (outs[t[1]] if t[0] == "v" else args[t[1]]).as_strided(t[2], t[3], t[4])
               for t in rec.template]
        for i, k in rec.mutated:
            with torch.no_grad():
                args[i].copy_(outs[k])
        return res

    def _record(self, key, args):
        tensor_idx = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        inputs = [args[i] for i in tensor_idx]
        reason = None
        if not all(_is_dev(t) for t in inputs):
            reason = "an input is not a lazytpu tensor"
        elif not inputs:
            reason = "no tensor inputs"
        if reason is None:
            _ops.replay_sync_inputs(inputs)
        before = _host_events()
        with torch.no_grad():
            outs, roots, root_vals = _run_with_view_roots(self.gm, args, self.mutated)
        if reason is None:
            reason = _host_events_reason(before)
        template, out_ts = [], []
        root_out = {}
        for o, root in zip(outs, roots):
            if root is not None:
                # a strided view of a graph input or of an intermediate:
                # the program returns the base (no copy), the view is made
                # per call (attention's saved q/k/v, a transposed weight)
                kind, ref = root
                if kind == "v":
                    if ref not in root_out:
                        root_out[ref] = len(out_ts)
                        out_ts.append(root_vals[ref])
                    ref = root_out[ref]
                template.append((kind, ref, tuple(o.shape), o.stride(), o.storage_offset()))
            elif _is_dev(o):
                template.append(len(out_ts))
                out_ts.append(o)
            elif o is None or isinstance(o, (bool, int)):
                template.append(("c", o))
            elif reason is None:
                reason = "output of type %s" % type(o).__name__
        mutated = []
        for i in self.mutated:
            mutated.append((i, len(out_ts)))
            out_ts.append(args[i])
        if reason is None and not out_ts:
            reason = "no tensor outputs"
        if reason is None:
            try:
                rid = _ops.replay_record(inputs, out_ts)
            except RuntimeError as e:
                if "not replayable" not in str(e):
                    raise
                reason = str(e).split("\n")[0]
        if reason is not None:
            self.recs[key] = reason
            _C.counter_inc("CompiledGraphLazy", 1)
            _note("%s graph of %d ops runs lazily: %s" % (self.kind, self.n_nodes, reason))
            return outs
        rec = self.recs[key] = _Recording(rid, tensor_idx, template, mutated)
        if not mutated:
            # this call runs the recorded program too, as every later call
            # does (as torch_xla's bridge executes the graph it compiled);
            # the traced, still pending, outputs are dropped
            return self._run(rec, args)
        # mutated inputs were assigned by the traced run already: this
        # call's results are the traced ones; later calls replay
        return outs


_aten = torch.ops.aten
# ops whose result shares its operand's storage (as eager lays it out)
_VIEW_OPS = {_aten.t.default, _aten.transpose.int, _aten.permute.default,
             _aten.view.default, _aten._unsafe_view.default, _aten.unsqueeze.default,
             _aten.squeeze.dim, _aten.squeeze.dims, _aten.squeeze.default,
             _aten.slice.Tensor, _aten.select.int, _aten.alias.default,
             _aten.split.Tensor, _aten.split_with_sizes.default}


def _view_root(n):
    """The node whose storage FX node n views (through _VIEW_OPS and the
    getitems of a split), or n itself."""
    import operator
    while n.op == "call_function" and (n.target in _VIEW_OPS or n.target is operator.getitem):
        n = n.args[0]
    return n


def _run_with_view_roots(gm, args, mutated=()):
    """Runs gm on args (tracing); returns its outputs, per output None or
    the base it is a strided view of (("a", placeholder index) or ("v",
    node)), and node -> value of those bases. An output is listed only when
    it is not laid out contiguously at offset 0 (those are free already)
    and its base is (a view of a copy would need one anyway). Inputs the
    graph writes (mutated) are no bases: their view must keep the value
    from before the write."""
    graph = gm.graph
    out_node = next(n for n in graph.nodes if n.op == "output")
    onodes = out_node.args[0]
    if not isinstance(onodes, (list, tuple)):
        onodes = [onodes]
    ph = {n: i for i, n in enumerate(n for n in graph.nodes if n.op == "placeholder")}
    want = {}
    for o in onodes:
        if isinstance(o, torch.fx.Node):
            r = _view_root(o)
            if r is not o:
                want[o] = r
    interp = torch.fx.Interpreter(gm, garbage_collect_values=False)
    outs = list(interp.run(*args))
    roots, vals = [], {}
    for o, val in zip(onodes, outs):
        r = want.get(o) if isinstance(o, torch.fx.Node) else None
        base = interp.env.get(r) if r is not None else None
        if (r is None or not _is_dev(val) or not _is_dev(base) or base.dtype != val.dtype or
                not base.is_contiguous() or base.storage_offset() != 0 or
                (val.is_contiguous() and val.storage_offset() == 0)):
            roots.append(None)
            continue
        if r in ph:
            roots.append(("a", ph[r]) if ph[r] not in mutated else None)
        else:
            roots.append(("v", r))
            vals[r] = base
    return outs, roots, vals


def _host_events():
    """CPU fallbacks and syncs so far (name -> count)."""
    names = _C.counter_names().split("\n")
    return {n: _C.counter_value(n) for n in names
            if n.startswith("aten::") or n.startswith("SyncCause::")}


def _host_events_reason(before):
    """Why a traced graph cannot be replayed: an op ran on the CPU fallback
    or something synced (a value read) in the middle of it; the values it
    produced would be frozen into the recording. None if neither."""
    after = _host_events()
    new = [n for n, v in after.items() if v > before.get(n, 0)]
    fb = [n for n in new if n.startswith("aten::")]
    if fb:
        return "CPU fallback of %s" % ", ".join(sorted(fb))
    if new:
        return "a sync inside the graph (%s)" % ", ".join(sorted(new))
    return None


def _mutated_inputs(gm):
    """Indices of placeholders the graph writes in place (copy_ into an
    input: batch norm running stats in inference graphs)."""
    ph = [n for n in gm.graph.nodes if n.op == "placeholder"]
    idx = {n: i for i, n in enumerate(ph)}
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.aten.copy_.default:
            dst = n.args[0]
            if dst in idx and idx[dst] not in out:
                out.append(idx[dst])
    return out


def _full_signature(args):
    return tuple((tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else a
                 for a in args)


def _boxed(graph):
    def run(args):
        return graph(args)
    run._boxed_call = True
    run.graph = graph
    return run


def _fw_compiler(gm, example_inputs):
    return _boxed(_LazytpuGraph(gm, "forward"))


def _bw_compiler(gm, example_inputs):
    return _boxed(_LazytpuGraph(gm, "backward"))


def _inference_compiler(gm, example_inputs):
    return _boxed(_LazytpuGraph(gm, "inference"))


_aot = aot_autograd(fw_compiler=_fw_compiler, bw_compiler=_bw_compiler,
                    inference_compiler=_inference_compiler)


def lazytpu_backend(gm, example_inputs, **kwargs):
    """The dynamo backend: one FX graph from dynamo -> AOTAutograd -> the
    forward/backward graphs above."""
    _C.counter_inc("DynamoGraph", 1)
    _note_graph_breaks()
    return _aot(gm, example_inputs, **kwargs)


lazytpu_backend._lazytpu_backend = True


def _register():
    """By name: through the entry point (group torch_dynamo_backends) when
    the package metadata has it, which dynamo loads on first use; else here."""
    from torch._dynamo.backends import registry
    registry._discover_entrypoint_backends()
    if registry._BACKENDS.get("lazytpu") is None and "lazytpu" not in registry._COMPILER_FNS:
        register_backend(compiler_fn=lazytpu_backend, name="lazytpu")


_register()

# ---------------------------------------------------------------- dynamo events

_seen_breaks = {}


def _note_graph_breaks():
    """Graph breaks dynamo counted since the last look (reason -> count)."""
    from torch._dynamo.utils import counters
    with _lock:
        for reason, n in list(counters.get("graph_break", {}).items()):
            prev = _seen_breaks.get(reason, 0)
            if n > prev:
                _seen_breaks[reason] = n
                _C.counter_inc("DynamoGraphBreak", n - prev)
                _note("graph break (%dx): %s" % (n - prev, " ".join(str(reason).split())[:300]))


def _patch_recompile_reasons():
    from torch._dynamo import convert_frame
    orig = getattr(convert_frame, "get_and_maybe_log_recompilation_reasons", None)
    if orig is None or getattr(orig, "_lazytpu", False):
        return

    def reasons_hook(*args, **kwargs):
        reasons = orig(*args, **kwargs)
        if reasons:
            _C.counter_inc("DynamoRecompile", 1)
            code = None
            for a in args[1:2]:
                code = getattr(getattr(a, "f_code", None), "co_name", None)
            _note("recompile of %s: guard failed: %s" % (
                code or "frame", "; ".join(" ".join(str(r).split()) for r in reasons)[:400]))
        return reasons

    reasons_hook._lazytpu = True
    convert_frame.get_and_maybe_log_recompilation_reasons = reasons_hook


_patch_recompile_reasons()
