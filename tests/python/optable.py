"""The op table of the differential property tests (issue 14, point 2).

lazy/ops.def is the op table of the core; aten ops reach its ops through the
shim. This module is the one Python table of how: for every op of ops.def,
the aten entry points that trace it, and how to draw their arguments with
hypothesis (random shapes: 0-size, 1-element, broadcasting, non-contiguous
views, large; dtypes; attributes; values with NaN/Inf/extremes and indices
out of range).

- Elementwise and reduction ops whose name is a torch function are derived
  from ops.def itself (as the shim registers them): a new such op line is
  tested without touching this file.
- Every other op is listed in ENTRIES with the aten calls that reach it
  (`covers`); test_property_ops.py checks that every op of ops.def is
  covered and that each entry really traces the ops it claims (the
  lazytpu::<op> counters).

test_property_ops.py runs a bounded sample in `make test`; `make fuzz`
runs the same table long.
"""
import math
import os
import re

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

FLOATS = (torch.float32, torch.bfloat16, torch.float64)
INTS = (torch.int64, torch.int32)
DTYPES = FLOATS + INTS + (torch.bool,)


def ops_def():
    """[(name, arity, kind)] of lazy/ops.def, in table order (arity -1: a
    variable number of inputs)."""
    out = []
    with open(os.path.join(ROOT, "lazy", "ops.def")) as f:
        for line in f:
            m = re.match(r"\s*LT_OP\(\s*(\w+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*LT_KIND_(\w+)",
                         line)
            if m:
                lo, hi = int(m.group(2)), int(m.group(3))
                out.append((m.group(1), lo if lo == hi else -1, m.group(4)))
    return out


# ------------------------------------------------------------ tensors --

SPECIALS = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e30, -1e30,
            1e-30, 3.0e38, -1.5, 0.5, 2.0]


class T:
    """A tensor argument: values drawn from `seed`, of `shape` and `dtype`,
    reached through the view `view` of a base tensor (so that the device
    sees the view ops, not a contiguous copy)."""

    def __init__(self, shape, dtype, seed, view="none", special=0.0, lo=None, hi=None,
                 scale=1.0, grad=True):
        self.shape, self.dtype, self.seed, self.view = tuple(shape), dtype, seed, view
        self.special, self.lo, self.hi, self.scale, self.grad = special, lo, hi, scale, grad

    def __repr__(self):
        extra = ""
        if self.lo is not None:
            extra = ", range=[%d, %d)" % (self.lo, self.hi)
        if self.special:
            extra += ", special=%.2f" % self.special
        if self.scale != 1.0:
            extra += ", scale=%g" % self.scale
        return "T(%s, %s, seed=%d, view=%s%s)" % (list(self.shape), str(self.dtype)[6:],
                                                  self.seed, self.view, extra)

    def _base_shape(self):
        s = list(self.shape)
        v = self.view
        if v == "t" and len(s) >= 2:
            s[-1], s[-2] = s[-2], s[-1]
        elif v == "step" and s:
            s[0] = 2 * s[0]
        elif v == "offset" and s:
            s[0] = s[0] + 1
        elif v == "expand" and s:
            s = [1 if d != 0 else 0 for d in s[:1]] + s[1:]
        elif v == "permute" and len(s) >= 3:
            s = s[1:] + s[:1]
        return s

    def values(self):
        """The base tensor (CPU)."""
        g = torch.Generator().manual_seed(self.seed)
        shape = self._base_shape()
        dt = self.dtype
        if dt == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        if dt in INTS:
            lo = -5 if self.lo is None else self.lo
            hi = 6 if self.hi is None else self.hi
            return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dt)
        if self.lo is not None:
            x = torch.rand(shape, generator=g, dtype=torch.float64) * (self.hi - self.lo) + self.lo
        else:
            x = torch.randn(shape, generator=g, dtype=torch.float64) * self.scale
        if self.special > 0 and x.numel():
            pick = torch.rand(shape, generator=g) < self.special
            which = torch.randint(0, len(SPECIALS), shape, generator=g)
            x = torch.where(pick, torch.tensor(SPECIALS, dtype=torch.float64)[which], x)
        return x.to(dt)

    def apply_view(self, b):
        v = self.view
        if v == "t" and b.dim() >= 2:
            return b.transpose(-1, -2)
        if v == "step" and b.dim():
            return b[::2]
        if v == "offset" and b.dim():
            return b[1:]
        if v == "expand" and b.dim():
            return b.expand(self.shape)
        if v == "permute" and b.dim() >= 3:
            return b.permute(b.dim() - 1, *range(b.dim() - 1))
        return b

    def make(self, device, requires_grad=False):
        """(tensor, leaf): the argument on `device` and the leaf whose
        gradient to compare (the base, before the view)."""
        b = self.values()
        if device != "cpu":
            b = b.to(device)
        if requires_grad:
            b.requires_grad_(True)
        return self.apply_view(b), b


class Case:
    """One call: fn(*args) where args are T (tensors) or plain values.
    names: op names an error message may use; tol: tolerance multiplier;
    grad: compare gradients of float inputs; random: compare shapes/dtypes
    and a value check only (random ops); known: why a difference of this
    case is expected (a gap another issue closes: counted, not raised),
    known_match: a text the difference must contain to be the known one."""

    def __init__(self, entry, fn, args, grad=True, tol=1.0, names=(), check=None,
                 desc="", known=None, known_match=None):
        self.entry, self.fn, self.args, self.grad, self.tol = entry, fn, list(args), grad, tol
        self.names = tuple(names) or (entry,)
        self.check = check
        self.desc = desc
        self.known = known
        self.known_match = known_match   # only differences saying this are known

    def __repr__(self):
        return "%s%s(%s)" % (self.entry, "[" + self.desc + "]" if self.desc else "",
                             ", ".join(repr(a) for a in self.args))


# ----------------------------------------------------------- strategies --

seeds = st.integers(0, 2 ** 31 - 1)
views = st.sampled_from(["none"] * 6 + ["t", "step", "offset", "expand", "permute"])
small_dim = st.sampled_from([0, 1, 1, 2, 2, 3, 3, 4, 5, 7])
float_dtypes = st.sampled_from([torch.float32] * 4 + [torch.bfloat16, torch.float64])
any_dtype = st.sampled_from([torch.float32] * 4 + [torch.bfloat16, torch.float64,
                                                   torch.int64, torch.int32, torch.bool])


@st.composite
def shapes(draw, min_dims=0, max_dims=4, large=True):
    """A shape: mostly small dims (0 and 1 often), sometimes one large dim."""
    nd = draw(st.integers(min_dims, max_dims))
    s = [draw(small_dim) for _ in range(nd)]
    if large and nd >= 1 and draw(st.integers(0, 19)) == 0:
        k = draw(st.integers(0, nd - 1))
        s = [1 if d == 0 else min(d, 3) for d in s]
        s[k] = draw(st.sampled_from([257, 1000, 4099, 65537]))
        while math.prod(s) > 300000:
            j = max(range(nd), key=lambda i: s[i] if i != k else 0)
            if s[j] <= 1:
                break
            s[j] = 1
    return s


@st.composite
def tensors(draw, shape=None, dtype=None, view=True, lo=None, hi=None, grad=True,
            special=True):
    if shape is None:
        shape = draw(shapes())
    elif isinstance(shape, st.SearchStrategy):
        shape = draw(shape)
    dtype = draw(any_dtype) if dtype is None else dtype
    v = draw(views) if view else "none"
    if v == "permute" and len(shape) < 3:
        v = "none"
    if v == "t" and len(shape) < 2:
        v = "none"
    sp = 0.0
    if special and lo is None and dtype in FLOATS:
        sp = draw(st.sampled_from([0.0, 0.0, 0.0, 0.1, 0.5]))
    scale = 1.0
    if lo is None and dtype in FLOATS:
        scale = draw(st.sampled_from([1.0, 1.0, 3.0, 100.0]))
    if lo is None and dtype in INTS and draw(st.integers(0, 9)) == 0:
        lo, hi = -(2 ** 31) if dtype == torch.int32 else -(2 ** 62), 2 ** 31 - 1
    return T(shape, dtype, draw(seeds), v, sp, lo, hi, scale, grad)


def broadcast_partner(draw, shape):
    """A shape that broadcasts with `shape` (usually), or one that does not."""
    r = draw(st.integers(0, 19))
    if r == 0:
        return draw(shapes(large=False))                    # anything: maybe an error
    s = list(shape)
    if s and r < 5:
        s = s[draw(st.integers(0, len(s))):]                # fewer leading dims
    s = [1 if draw(st.integers(0, 3)) == 0 else d for d in s]
    if draw(st.integers(0, 9)) == 0:
        s = [draw(st.sampled_from([1, 2]))] + s              # more leading dims
    return s


def operand(draw, shape, dtype):
    """A second operand: a tensor of a broadcasting shape, a 0-dim CPU
    tensor, or a Python number."""
    r = draw(st.integers(0, 9))
    if r == 0:
        v = draw(st.sampled_from([0, 1, -1, 2, 3, -7, 0.5, -2.5, 1e30, float("nan"),
                                  float("inf"), True, False]))
        return v
    dt = dtype if draw(st.booleans()) else draw(any_dtype)
    return draw(tensors(shape=broadcast_partner(draw, shape), dtype=dt))


# -------------------------------------------------------------- entries --

ENTRIES = {}


def entry(name, covers=(), tol=1.0):
    """Declares a table entry: a hypothesis strategy of Cases, reaching the
    ops.def ops `covers`."""
    def deco(fn):
        ENTRIES[name] = (tuple(covers), st.composite(fn)(), tol)
        return fn
    return deco


# Elementwise ops whose torch function is not torch.<name>:
UNARY_FN = {
    "copy": torch.clone,
    "gelu": F.gelu,
    "silu": F.silu,
    "relu": torch.relu,
}
# Leaves: every entry makes them (x.to(device), Python numbers).
VIA = {"data", "scalar"}
# Ops of the table no aten call traces today (so nothing here can test
# them through PyTorch; the C tests and the libFuzzer harness do).
UNREACHED = {
    "copy": "clone shares the functional value; no aten op traces copy",
    "rand_normal": "randn / normal_ run on the CPU fallback (no device kernel registered)",
    # manual sharding: only on a sharded value under an SPMD mesh, which the
    # single-core property run has not (tests/python/test_spmd_manual.py)
    "spmd_full_to_shard": "needs a sharded value under an SPMD mesh",
    "spmd_shard_to_full": "needs a manual value under an SPMD mesh",
}
# The backward op a derived entry also reaches (through its gradient).
GRAD_OP = {"sigmoid": "sigmoid_backward", "tanh": "tanh_backward", "gelu": "gelu_backward",
           "silu": "silu_backward", "relu": "threshold_backward"}
NO_GRAD = {"sign", "floor", "ceil", "round", "trunc", "logical_not", "isnan", "eq", "ne",
           "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
           "floor_divide", "remainder", "fmod"}


def torch_fn(name):
    if name in UNARY_FN:
        return UNARY_FN[name]
    return getattr(torch, name, None)


def _derived_entries():
    """unary/binary/ternary/reduce ops of ops.def callable as torch.<name>
    and not listed by hand."""
    out = {}
    for name, arity, kind in ops_def():
        if name in HAND or name in VIA or torch_fn(name) is None:
            continue
        if kind == "UNARY":
            out[name] = unary_strategy(name)
        elif kind == "BINARY" and arity == 2:
            out[name] = binary_strategy(name)
        elif kind == "REDUCE":
            out[name] = reduce_strategy(name)
    return out


@st.composite
def _unary(draw, name):
    x = draw(tensors())
    return Case(name, torch_fn(name), [x], grad=name not in NO_GRAD, tol=4)


def unary_strategy(name):
    covers = () if name in UNREACHED else (name,)
    return (covers + ((GRAD_OP[name],) if name in GRAD_OP else ()), _unary(name), 4)


@st.composite
def _binary(draw, name):
    x = draw(tensors())
    y = operand(draw, x.shape, x.dtype)
    args = [x, y]
    if draw(st.integers(0, 9)) == 0 and isinstance(y, T):
        args = [y, x]
    return Case(name, torch_fn(name), args, grad=name not in NO_GRAD, tol=4)


def binary_strategy(name):
    return ((name,), _binary(name), 4)


@st.composite
def _reduce(draw, name):
    x = draw(tensors())
    fn = torch_fn(name)
    nd = len(x.shape)
    kind = draw(st.integers(0, 3))
    keep = draw(st.booleans())
    if name in ("argmax", "argmin"):
        if kind == 0 or nd == 0:
            return Case(name, fn, [x], grad=False, desc="all")
        d = draw(st.integers(-nd, nd - 1))
        return Case(name, lambda t: fn(t, d, keepdim=keep), [x], grad=False,
                    desc="dim=%d keepdim=%s" % (d, keep))
    if kind == 0 or nd == 0:
        return Case(name, fn, [x], grad=name not in ("any", "all"), tol=8, desc="all")
    if name in ("prod", "any", "all") and kind == 3:
        kind = 1
    if kind == 3:
        dims = sorted(set(draw(st.lists(st.integers(-nd, nd - 1), min_size=1, max_size=nd))))
        dims = [d for d in dims if (d % nd) not in [e % nd for e in dims if e != d and e < d]]
        return Case(name, lambda t: fn(t, dims, keepdim=keep), [x], tol=8,
                    grad=name not in ("any", "all"), desc="dims=%s keepdim=%s" % (dims, keep))
    d = draw(st.integers(-nd - 1, nd))  # sometimes out of range: both must raise
    return Case(name, lambda t: fn(t, d, keepdim=keep), [x], tol=8,
                grad=name not in ("any", "all"), desc="dim=%d keepdim=%s" % (d, keep))


def reduce_strategy(name):
    return ((name,), _reduce(name), 8)


# ---- hand-written entries (ops whose aten entry is not torch.<name>) ----

@entry("cast", covers=["cast"])
def _cast(draw):
    x = draw(tensors())
    to = draw(any_dtype)
    # NaN/Inf/out-of-range float -> int: undefined in C; eager gives what
    # x86's conversion gives (INT_MIN), the device saturates (NaN -> 0)
    known = ("float -> int of NaN/Inf/huge values saturates on the device"
             if x.dtype in FLOATS and to in INTS else None)
    return Case("cast", lambda t: t.to(to), [x], desc="to %s" % to, known=known,
                known_match="values differ")


@entry("binary_variants", covers=["add", "sub", "div", "mul", "trunc"])
def _binary_variants(draw):
    x = draw(tensors())
    y = operand(draw, x.shape, x.dtype)
    which = draw(st.sampled_from(["add_alpha", "sub_alpha", "rsub", "div_floor", "div_trunc",
                                  "true_div", "mul_scalar", "radd"]))
    alpha = draw(st.sampled_from([2, -1, 0.5, 3]))
    fns = {
        "add_alpha": lambda a, b: torch.add(a, b, alpha=alpha),
        "sub_alpha": lambda a, b: torch.sub(a, b, alpha=alpha),
        "rsub": lambda a, b: torch.rsub(a, b) if isinstance(b, torch.Tensor) else b - a,
        "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
        "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        "true_div": lambda a, b: a / b,
        "mul_scalar": lambda a, b: a * 3,
        "radd": lambda a, b: 2.5 + a,
    }
    return Case("binary_variants", fns[which], [x, y], tol=4,
                grad=which not in ("div_floor", "div_trunc"),
                names=("add", "sub", "div", "mul", "rsub"), desc="%s alpha=%s" % (which, alpha))


@entry("leaky_relu", covers=["leaky_relu", "leaky_relu_backward"])
def _leaky(draw):
    x = draw(tensors(dtype=draw(float_dtypes)))
    slope = draw(st.sampled_from([0.01, 0.2, -0.5, 0.0, 1.5]))
    return Case("leaky_relu", lambda t: F.leaky_relu(t, slope), [x], desc="slope=%g" % slope)


@entry("activations", covers=["threshold_backward", "tanh"])
def _acts(draw):
    x = draw(tensors(dtype=draw(float_dtypes)))
    which = draw(st.sampled_from(["threshold", "hardtanh", "relu6", "gelu_tanh", "softplus",
                                  "elu", "hardsigmoid", "mish", "logsigmoid", "square"]))
    fns = {
        "threshold": lambda t: F.threshold(t, 0.1, -2.0),
        "hardtanh": lambda t: F.hardtanh(t, -0.5, 2.0),
        "relu6": F.relu6,
        "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "softplus": F.softplus,
        "elu": F.elu,
        "hardsigmoid": F.hardsigmoid,
        "mish": F.mish,
        "logsigmoid": F.logsigmoid,
        "square": torch.square,
    }
    # elu has no device kernel: its decomposed backward gives NaN for a NaN
    # input where eager's kernel passes the gradient (not fixed yet)
    known = "elu backward of NaN inputs" if which == "elu" and x.special else None
    return Case("activations", fns[which], [x], tol=8, desc=which, known=known,
                known_match="gradient of input",
                names=(which, "threshold", "hardtanh", "clamp", "gelu", "tanh", "sigmoid"))


@entry("where", covers=["where"])
def _where(draw):
    c = draw(tensors(dtype=torch.bool))
    x = draw(tensors(shape=broadcast_partner(draw, c.shape)))
    y = operand(draw, x.shape, x.dtype)
    return Case("where", torch.where, [c, x, y])


@entry("clamp", covers=["clamp"])
def _clamp(draw):
    x = draw(tensors())
    lo = draw(st.sampled_from([None, -1, 0.5, -2.5, float("nan")]))
    hi = draw(st.sampled_from([None, 1, 2.5, 0, float("inf")]))
    if draw(st.integers(0, 3)) == 0:
        lo = draw(tensors(shape=broadcast_partner(draw, x.shape), dtype=x.dtype))
        hi = draw(st.sampled_from([None])) if draw(st.booleans()) else \
            draw(tensors(shape=broadcast_partner(draw, x.shape), dtype=x.dtype))
    return Case("clamp", lambda t, a, b: torch.clamp(t, a, b), [x, lo, hi],
                names=("clamp", "clamp_min", "clamp_max"))


@entry("lerp", covers=["lerp"])
def _lerp(draw):
    dt = draw(float_dtypes)
    a = draw(tensors(dtype=dt))
    b = draw(tensors(shape=broadcast_partner(draw, a.shape), dtype=dt))
    w = draw(st.sampled_from([0.0, 0.25, 1.0, -0.5])) if draw(st.booleans()) else \
        draw(tensors(shape=broadcast_partner(draw, a.shape), dtype=dt))
    return Case("lerp", torch.lerp, [a, b, w], tol=4)


@entry("reductions_more", covers=["amax", "amin", "argmax", "sum", "mean"], tol=8)
def _red_more(draw):
    x = draw(tensors())
    nd = len(x.shape)
    d = draw(st.integers(-max(nd, 1), max(nd, 1) - 1))
    keep = draw(st.booleans())
    which = draw(st.sampled_from(["max_dim", "min_dim", "max", "min", "std", "var",
                                  "logsumexp", "norm", "sum_dtype", "mean_dtype", "max_other",
                                  "count_nonzero", "nansum"]))
    corr = draw(st.sampled_from([0, 1, 2]))
    fns = {
        "max_dim": lambda t: torch.max(t, d, keepdim=keep),
        "min_dim": lambda t: torch.min(t, d, keepdim=keep),
        "max": torch.max,
        "min": torch.min,
        "std": lambda t: torch.std(t, d, correction=corr, keepdim=keep),
        "var": lambda t: torch.var(t, d, correction=corr, keepdim=keep),
        "logsumexp": lambda t: torch.logsumexp(t, d, keepdim=keep),
        "norm": lambda t: torch.linalg.vector_norm(t, draw_ord, d, keepdim=keep),
        "sum_dtype": lambda t: torch.sum(t, d, keepdim=keep, dtype=torch.float64),
        "mean_dtype": lambda t: torch.mean(t, d, keepdim=keep, dtype=torch.float32),
        "max_other": lambda t: torch.max(t, t.flip(0) if t.dim() else t),
        "count_nonzero": lambda t: torch.count_nonzero(t, d),
        "nansum": lambda t: torch.nansum(t, d),
    }
    draw_ord = draw(st.sampled_from([2, 1, float("inf"), 3]))
    return Case("reductions_more", fns[which], [x], tol=16, grad=which not in (
        "count_nonzero",), desc="%s dim=%d keepdim=%s corr=%d ord=%s" % (
        which, d, keep, corr, draw_ord),
        names=("max", "min", "std", "var", "logsumexp", "norm", "sum", "mean", "amax", "amin",
               "argmax", "count_nonzero", "nansum", which))



@entry("views", covers=["reshape", "permute", "expand", "slice", "select", "diagonal",
                        "arange"])     # flip reads through an arange index
def _views(draw):
    x = draw(tensors())
    s = list(x.shape)
    nd = len(s)
    which = draw(st.sampled_from(["reshape", "flatten", "permute", "expand", "slice", "select",
                                  "diagonal", "t", "squeeze", "unsqueeze", "flip", "narrow",
                                  "repeat", "split", "unbind", "chunk", "movedim", "roll",
                                  "contiguous_t"]))
    d = draw(st.integers(-max(nd, 1), max(nd, 1) - 1))
    if which == "reshape":
        n = math.prod(s)
        opts = [[n], [-1], [1, n], [n, 1]] + ([[2, n // 2], [-1, 2]] if n % 2 == 0 else []) + \
            [[n + 1]]
        shp = draw(st.sampled_from(opts))
        fn = lambda t: t.reshape(shp)   # noqa: E731
        desc = "reshape %s" % shp
    elif which == "flatten":
        fn, desc = torch.flatten, "flatten"
    elif which == "permute":
        perm = draw(st.permutations(list(range(nd))))
        fn, desc = (lambda t: t.permute(*perm)), "permute %s" % perm
    elif which == "expand":
        tgt = [draw(st.sampled_from([d_, 3])) if d_ == 1 else d_ for d_ in s]
        if draw(st.integers(0, 4)) == 0:
            tgt = [2] + tgt
        if draw(st.integers(0, 9)) == 0 and tgt:
            tgt[0] = tgt[0] + 2                   # invalid: both raise
        fn, desc = (lambda t: t.expand(tgt)), "expand %s" % tgt
    elif which == "slice":
        a = draw(st.integers(-6, 6))
        b = draw(st.sampled_from([None, -1, 0, 2, 5, 100]))
        stp = draw(st.sampled_from([1, 1, 2, 3, 7]))
        fn = lambda t: t[(slice(None),) * (d % max(nd, 1)) + (slice(a, b, stp),)] if nd else t  # noqa
        desc = "dim %d [%d:%s:%d]" % (d, a, b, stp)
    elif which == "select":
        i = draw(st.integers(-6, 6))
        fn, desc = (lambda t: t.select(d, i)), "select dim=%d index=%d" % (d, i)
    elif which == "diagonal":
        off = draw(st.integers(-3, 3))
        d2 = draw(st.integers(-max(nd, 1), max(nd, 1) - 1))
        fn, desc = (lambda t: torch.diagonal(t, off, d, d2)), "diag off=%d %d,%d" % (off, d, d2)
    elif which == "t":
        fn, desc = (lambda t: t.transpose(d, -1)), "transpose %d,-1" % d
    elif which == "squeeze":
        fn, desc = (lambda t: t.squeeze(d)), "squeeze %d" % d
    elif which == "unsqueeze":
        fn, desc = (lambda t: t.unsqueeze(d)), "unsqueeze %d" % d
    elif which == "flip":
        fn, desc = (lambda t: t.flip(d)), "flip %d" % d
    elif which == "narrow":
        a = draw(st.integers(0, 3))
        ln = draw(st.integers(0, 3))
        fn, desc = (lambda t: t.narrow(d, a, ln)), "narrow %d %d %d" % (d, a, ln)
    elif which == "repeat":
        r = [draw(st.sampled_from([1, 2, 3, 0])) for _ in range(nd + draw(st.integers(0, 1)))]
        fn, desc = (lambda t: t.repeat(r)), "repeat %s" % r
    elif which == "split":
        k = draw(st.integers(1, 3))
        fn, desc = (lambda t: t.split(k, d)), "split %d dim=%d" % (k, d)
    elif which == "unbind":
        fn, desc = (lambda t: t.unbind(d)), "unbind %d" % d
    elif which == "chunk":
        k = draw(st.integers(1, 4))
        fn, desc = (lambda t: t.chunk(k, d)), "chunk %d dim=%d" % (k, d)
    elif which == "movedim":
        fn, desc = (lambda t: torch.movedim(t, d, 0)), "movedim %d" % d
    elif which == "roll":
        sh = draw(st.integers(-3, 3))
        fn, desc = (lambda t: torch.roll(t, sh, d)), "roll %d dim=%d" % (sh, d)
    else:
        fn, desc = (lambda t: (t.transpose(d, -1).contiguous() * 2)), "contiguous t %d" % d
    return Case("views", fn, [x], desc=desc,
                names=("reshape", "view", "permute", "expand", "slice", "select", "diagonal",
                       "transpose", "squeeze", "flip", "narrow", "repeat", "split", "unbind",
                       "chunk", "movedim", "roll", "Dimension out of range", "shape", "index",
                       "start", "out of range", "dims", "Number of dimensions", "size"))


@entry("as_strided", covers=["as_strided", "as_strided_scatter"])
def _as_strided(draw):
    n = draw(st.integers(0, 24))
    x = draw(tensors(shape=[n]))
    nd = draw(st.integers(0, 3))
    size = [draw(st.integers(0, 4)) for _ in range(nd)]
    stride = [draw(st.integers(0, 5)) for _ in range(nd)]
    off = draw(st.integers(0, 4))
    # eager reads/writes the storage before a view's data (x[1:] with
    # offset 0: as_strided_scatter writes where nobody sees it); a device
    # tensor has no storage outside its data and refuses
    known = ("an offset before the view's data (eager uses storage outside it)"
             if x.view == "offset" and off < 1 else
             "as_strided of a non-dense view: refused by design (DESIGN.md 3)"
             if x.view in ("step", "expand") and n > 1 else None)
    if draw(st.booleans()):
        return Case("as_strided", lambda t: torch.as_strided(t, size, stride, off), [x],
                    desc="size=%s stride=%s off=%d" % (size, stride, off), known=known,
                    names=("as_strided", "setStorage", "storage", "out of bounds"))
    src = draw(tensors(shape=size, dtype=x.dtype))
    return Case("as_strided", lambda t, u: torch.as_strided_scatter(t, u, size, stride, off),
                [x, src], desc="scatter size=%s stride=%s off=%d" % (size, stride, off),
                known=known, names=("as_strided", "setStorage", "storage", "out of bounds"))


@entry("scatters", covers=["slice_scatter", "select_scatter", "diagonal_scatter"])
def _scatters(draw):
    x = draw(tensors(shapes(min_dims=1)))
    s = list(x.shape)
    nd = len(s)
    d = draw(st.integers(-nd, nd - 1))
    which = draw(st.sampled_from(["slice", "select", "diagonal", "setitem"]))
    if which == "slice":
        a = draw(st.integers(0, 3))
        b = draw(st.sampled_from([None, 2, 4, 100]))
        stp = draw(st.sampled_from([1, 2]))
        ln = len(range(*slice(a, b, stp).indices(s[d])))
        shp = list(s)
        shp[d] = ln
        src = draw(tensors(shape=shp, dtype=x.dtype))
        fn = lambda t, u: torch.slice_scatter(t, u, d, a, b, stp)   # noqa: E731
        desc = "slice dim=%d %d:%s:%d" % (d, a, b, stp)
    elif which == "select":
        i = draw(st.integers(-s[d] - 1, s[d]))
        shp = s[:d % nd] + s[d % nd + 1:]
        src = draw(tensors(shape=shp, dtype=x.dtype))
        fn = lambda t, u: torch.select_scatter(t, u, d, i)   # noqa: E731
        desc = "select dim=%d index=%d" % (d, i)
    elif which == "diagonal":
        if nd < 2:
            return Case("scatters", lambda t: t * 1, [x], desc="skip")
        off = draw(st.integers(-2, 2))
        probe = torch.empty(s, device="meta").diagonal(off, 0, 1)
        src = draw(tensors(shape=list(probe.shape), dtype=x.dtype))
        fn = lambda t, u: torch.diagonal_scatter(t, u, off, 0, 1)   # noqa: E731
        desc = "diagonal off=%d" % off
    else:
        i = draw(st.integers(0, max(s[0] - 1, 0)))
        src = draw(tensors(shape=s[1:], dtype=x.dtype))

        def fn(t, u):
            t = t.clone()
            t[i] = u
            return t
        desc = "x[%d] = src" % i
    return Case("scatters", fn, [x, src], desc=desc,
                names=("slice_scatter", "select_scatter", "diagonal_scatter", "index", "shape",
                       "expected", "out of range", "size"))


@entry("cat", covers=["cat"])
def _cat(draw):
    base = draw(shapes(min_dims=1, max_dims=3))
    nd = len(base)
    d = draw(st.integers(-nd, nd - 1))
    k = draw(st.integers(1, 4))
    args = []
    for _ in range(k):
        s = list(base)
        s[d] = draw(st.sampled_from([0, 1, 2, 3]))
        if draw(st.integers(0, 19)) == 0:
            s = [0]                               # legacy empty: skipped by cat
        args.append(draw(tensors(shape=s)))
    which = draw(st.sampled_from(["cat", "cat", "stack", "hstack"]))
    if which == "cat":
        fn = lambda *ts: torch.cat(list(ts), d)   # noqa: E731
    elif which == "stack":
        fn = lambda *ts: torch.stack(list(ts), d)   # noqa: E731
    else:
        fn = lambda *ts: torch.hstack(list(ts))   # noqa: E731
    return Case("cat", fn, args, desc="%s dim=%d" % (which, d),
                names=("cat", "stack", "Sizes of tensors", "stack expects", "size",
                       "Dimension out of range"))


def index_tensor(draw, n, shape, negative=True):
    """int64 (or int32) indices into a dim of size n: in range (negative
    ones too, where allowed), sometimes out of range."""
    lo, hi = (-n if negative else 0), max(n, 1)
    if draw(st.integers(0, 7)) == 0 or n == 0:
        lo, hi = -n - 3, n + 3
    dt = draw(st.sampled_from([torch.int64] * 3 + [torch.int32]))
    return T(shape, dt, draw(seeds), lo=lo, hi=hi)


class _Perm(T):
    """k distinct indices below n (index_put without accumulate: with
    duplicates eager writes an unspecified one of the values)."""

    def __init__(self, n, k, seed):
        super().__init__([k], torch.int64, seed, lo=0, hi=max(n, 1))
        self.n = n

    def __repr__(self):
        return "Perm(n=%d, k=%d, seed=%d)" % (self.n, self.shape[0], self.seed)

    def values(self):
        g = torch.Generator().manual_seed(self.seed)
        return torch.randperm(self.n, generator=g)[:self.shape[0]]


INDEX_NAMES = ("index_select", "gather", "scatter_add", "scatter", "index_add", "index_put",
               "embedding", "index", "masked_fill", "take_along_dim", "out of range",
               "out of bounds", "Dimension out of range", "shape", "size", "Expected")


@entry("scatter_reduce", covers=["scatter_reduce"])
def _scatter_reduce(draw):
    dt = draw(st.sampled_from([torch.float32, torch.float32, torch.float64, torch.int64]))
    x = draw(tensors(shapes(min_dims=1, max_dims=3), dtype=dt, special=False))
    s = list(x.shape)
    nd = len(s)
    d = draw(st.integers(-nd, nd - 1))
    ishape = [min(draw(st.integers(0, 4)), v) if j != d % nd else draw(st.integers(0, 4))
              for j, v in enumerate(s)]
    idx = index_tensor(draw, s[d], ishape, negative=False)
    idx.dtype = torch.int64
    red = draw(st.sampled_from(["sum", "prod", "mean", "amax", "amin"]))
    inc = draw(st.booleans())
    src = draw(tensors(shape=ishape, dtype=dt, special=False))
    fn = lambda t, i, u: t.scatter_reduce(d, i, u, red, include_self=inc)   # noqa: E731
    return Case("scatter_reduce", fn, [x, idx, src], desc="%s dim=%d include_self=%s" % (red, d, inc),
                names=INDEX_NAMES + ("scatter_reduce",),
                known="scatter_reduce index errors are IndexError on the device",
                known_match="IndexError vs eager RuntimeError")


@entry("index", covers=["index_select", "gather", "scatter_add", "embedding_backward"])
def _index(draw):
    x = draw(tensors(shapes(min_dims=1, max_dims=3)))
    s = list(x.shape)
    nd = len(s)
    d = draw(st.integers(-nd, nd - 1))
    n = s[d]
    k = draw(st.integers(0, 5))
    which = draw(st.sampled_from(["index_select", "x[idx]", "gather", "scatter_add", "scatter",
                                  "scatter_value", "index_add", "index_put", "index_put_acc",
                                  "embedding", "masked_fill", "take_along_dim"]))
    desc = "%s dim=%d" % (which, d)
    known = known_match = None
    if which == "index_select":
        fn, args = (lambda t, i: torch.index_select(t, d, i)), [x, index_tensor(draw, n, [k])]
        if nd > 1 and (d % nd != 0 or 0 in s or x.view != "none"):
            # an index out of range: eager's kernel path decides the type
            # (dim 0 of a contiguous self: IndexError, else RuntimeError
            # "INDICES element is out of DATA bounds"); lazytpu's run-time
            # check raises IndexError, naming op, shapes and dtypes
            known = "index_select error type follows eager's kernel path"
            known_match = "IndexError vs eager RuntimeError"
    elif which == "x[idx]":
        ishape = draw(st.sampled_from([[k], [2, 2], []]))
        fn = lambda t, i: t[(slice(None),) * (d % nd) + (i,)]   # noqa: E731
        args = [x, index_tensor(draw, n, ishape)]
        if 0 in s:
            known = ("x[idx] of an empty tensor: eager checks no index, the device's "
                     "index_select does")
            known_match = "lazytpu raises IndexError"
    elif which == "index_add":
        shp = list(s)
        shp[d] = k
        alpha = draw(st.sampled_from([1, 2]))
        fn = lambda t, i, u: t.index_add(d, i, u, alpha=alpha)   # noqa: E731
        args = [x, index_tensor(draw, n, [k]), draw(tensors(shape=shp, dtype=x.dtype))]
        if 0 in s:
            known = ("index_add into an empty tensor: eager raises RuntimeError "
                     "(index_select's check) or checks nothing, the device IndexError")
            known_match = "IndexError"
    elif which in ("index_put", "index_put_acc"):
        acc = which == "index_put_acc"
        if acc or draw(st.integers(0, 7)) == 0 or n == 0:
            idx = index_tensor(draw, s[0], [k])
        else:
            k = min(k, s[0])
            idx = _Perm(s[0], k, draw(seeds))
        shp = [k] + s[1:]
        src = draw(tensors(shape=shp[draw(st.integers(0, len(shp))):], dtype=x.dtype))
        fn = lambda t, i, u: t.index_put((i,), u, accumulate=acc)   # noqa: E731
        args = [x, idx, src]
    elif which == "embedding":
        n = draw(st.integers(1, 6))
        w = draw(tensors(shape=[n, draw(st.integers(1, 4))],
                         dtype=draw(st.sampled_from([torch.float32, torch.float64]))))
        pad = draw(st.sampled_from([None, None, 0, -1]))
        ids = index_tensor(draw, n, draw(st.sampled_from([[k], [2, 3], []])), negative=False)
        ids.dtype = torch.int64
        fn = lambda i, ww: F.embedding(i, ww, pad)   # noqa: E731
        args = [ids, w]
        desc = "embedding pad=%s" % pad
    elif which in ("gather", "take_along_dim", "scatter_add"):
        ishape = [min(draw(st.integers(0, 4)), v) if j != d % nd else draw(st.integers(0, 4))
                  for j, v in enumerate(s)]
        idx = index_tensor(draw, n, ishape, negative=False)
        idx.dtype = torch.int64
        # an index out of range: eager's gather/scatter_add raise
        # RuntimeError, lazytpu's run-time check IndexError (docs/errors.md)
        known = "gather/scatter_add index errors are IndexError on the device"
        known_match = "IndexError vs eager RuntimeError"
        if which == "gather":
            fn, args = (lambda t, i: torch.gather(t, d, i)), [x, idx]
        elif which == "take_along_dim":
            idx.lo = max(idx.lo, -n)                # negative indices wrap here
            fn, args = (lambda t, i: torch.take_along_dim(t, i, d)), [x, idx]
        else:
            src = draw(tensors(shape=ishape, dtype=x.dtype))
            fn, args = (lambda t, i, u: t.scatter_add(d, i, u)), [x, idx, src]
    elif which in ("scatter", "scatter_value"):
        # one write per target element (duplicates write an unspecified value)
        ishape = [min(draw(st.integers(0, 4)), v) for v in s]
        ishape[d % nd] = min(ishape[d % nd], 1)
        idx = index_tensor(draw, n, ishape, negative=False)
        idx.dtype = torch.int64
        if which == "scatter":
            src = draw(tensors(shape=ishape, dtype=x.dtype))
            fn, args = (lambda t, i, u: t.scatter(d, i, u)), [x, idx, src]
        else:
            fn, args = (lambda t, i: t.scatter(d, i, 2.5)), [x, idx]
    else:
        m = draw(tensors(shape=broadcast_partner(draw, s), dtype=torch.bool))
        v = draw(st.sampled_from([0.0, -1, 2.5, float("nan")]))
        fn, args = (lambda t, mm: t.masked_fill(mm, v)), [x, m]
        desc = "masked_fill %s" % v
    return Case("index", fn, args, desc=desc, names=INDEX_NAMES, known=known,
                known_match=known_match)


@entry("arange", covers=[])      # torch.arange on the device: made on the host
def _arange(draw):
    start = draw(st.sampled_from([0, 1, -3, 0.5, 2.5]))
    end = draw(st.sampled_from([0, 5, 10, 7.5, -2, 1000]))
    step = draw(st.sampled_from([1, 2, -1, 0.5, 3, 0]))
    dt = draw(st.sampled_from([None, torch.float32, torch.int64, torch.float64, torch.int32]))
    return Case("arange", lambda device: torch.arange(start, end, step, dtype=dt, device=device),
                [DEVICE], grad=False, desc="%s..%s step %s %s" % (start, end, step, dt),
                names=("arange", "step", "upper bound", "range"))




def _check_random(kind):
    def check(out):
        out = out.float()
        if kind == "uniform":
            assert bool(((out >= 0) & (out < 1)).all()), "rand outside [0, 1)"
        elif kind == "normal":
            assert bool(torch.isfinite(out).all()), "randn not finite"
            if out.numel() >= 1000:
                assert abs(out.mean().item()) < 0.2 and 0.8 < out.std().item() < 1.2
        elif kind == "bernoulli":
            assert bool(((out == 0) | (out == 1)).all())
    return check


@entry("random", covers=["rand_uniform"])
def _random(draw):
    s = draw(shapes(large=True))
    dt = draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
    which = draw(st.sampled_from(["rand", "randn", "bernoulli", "dropout", "rand_like"]))
    if which == "rand":
        return Case("random", lambda device: torch.rand(s, dtype=dt, device=device), [DEVICE],
                    grad=False, check=_check_random("uniform"), desc="rand %s" % s)
    if which == "randn":
        return Case("random", lambda device: torch.randn(s, dtype=dt, device=device), [DEVICE],
                    grad=False, check=_check_random("normal"), desc="randn %s" % s)
    if which == "rand_like":
        x = draw(tensors(shape=s, dtype=dt))
        return Case("random", torch.rand_like, [x], grad=False,
                    check=_check_random("uniform"), desc="rand_like")
    x = draw(tensors(shape=s, dtype=dt, lo=0, hi=1))
    if which == "bernoulli":
        return Case("random", torch.bernoulli, [x], grad=False,
                    check=_check_random("bernoulli"), desc="bernoulli")
    p = draw(st.sampled_from([0.0, 0.5, 1.0]))
    return Case("random", lambda t: F.dropout(t, p, training=True), [x], grad=False,
                check=lambda out: None, desc="dropout p=%g" % p)


def _world_of_one(t, rt, scale):
    """A collective's result on a world of one process (lazy/kernels/
    collective.c): the input times scale (integers truncated toward zero,
    saturating; bool unscaled), and/or of floats normalised to 0/1."""
    if t.dtype == torch.bool:
        return t
    r = t
    if rt in (4, 5) and t.is_floating_point():
        r = (t != 0).to(t.dtype)
    if scale == 1.0:
        return r
    if t.is_floating_point():
        return r * scale
    info = torch.iinfo(t.dtype)
    return (r.double() * scale).trunc().clamp(info.min, info.max).to(t.dtype)


@entry("collectives", covers=["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def _collectives(draw):
    x = draw(tensors(shapes(min_dims=1)))
    which = draw(st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "broadcast"]))
    scale = draw(st.sampled_from([1.0, 0.5, 2.0]))
    rt = draw(st.integers(0, 5))
    if which == "all_reduce":
        dev_fn = lambda t: torch.ops.lazytpu.all_reduce(t, rt, scale)   # noqa: E731
        ref = lambda t: _world_of_one(t, rt, scale)   # noqa: E731
        desc = "type=%d scale=%g" % (rt, scale)
    elif which == "all_gather":
        dev_fn = lambda t: torch.ops.lazytpu.all_gather(t, 0)   # noqa: E731
        ref, desc = (lambda t: t), ""
    elif which == "reduce_scatter":
        dev_fn = lambda t: torch.ops.lazytpu.reduce_scatter(t, rt, 0, scale)   # noqa: E731
        ref = lambda t: _world_of_one(t, rt, scale)   # noqa: E731
        desc = "type=%d scale=%g" % (rt, scale)
    else:
        dev_fn = lambda t: torch.ops.lazytpu.broadcast(t, 0)   # noqa: E731
        ref, desc = (lambda t: t), ""

    def fn(t):
        return dev_fn(t) if t.device.type == "lazytpu" else ref(t)
    return Case("collectives", fn, [x], grad=False, desc=which + " " + desc,
                names=(which,))


@entry("opt_barrier", covers=["opt_barrier"])
def _opt_barrier(draw):
    x = draw(tensors(shapes()))

    def fn(t):
        return torch.ops.lazytpu.optimization_barrier([t])[0] if t.device.type == "lazytpu" else t
    return Case("opt_barrier", fn, [x], grad=False, desc="", names=("opt_barrier",))


class _Device:
    """Placeholder argument: the device the case runs on."""

    def __repr__(self):
        return "device"


DEVICE = _Device()

HAND = {"cast", "leaky_relu", "where", "clamp", "lerp"} | set(VIA)


@entry("sort", covers=["argsort"], tol=1.0)
def _sort(draw):
    x = draw(tensors(dtype=draw(st.sampled_from([torch.float32, torch.float64, torch.int64,
                                                 torch.int32])), grad=False))
    nd = len(x.shape)
    d = draw(st.integers(-max(nd, 1), max(nd, 1) - 1))
    desc_ = draw(st.booleans())
    which = draw(st.sampled_from(["sort", "argsort", "topk"]))
    if which == "sort":
        fn = lambda t: torch.sort(t, dim=d, descending=desc_, stable=True)   # noqa: E731
    elif which == "argsort":
        fn = lambda t: torch.argsort(t, dim=d, descending=desc_, stable=True)   # noqa: E731
    else:
        k = draw(st.integers(0, 3))
        fn = lambda t: torch.topk(t, k, dim=d, largest=desc_, sorted=True).values   # noqa: E731
    return Case("sort", fn, [x], grad=False, desc="%s dim=%d descending=%s" % (which, d, desc_),
                names=(which, "sort", "topk", "Dimension out of range", "selected index k",
                       "out of range"))


@entry("order_stats", covers=["cummax_indices"])
def _order_stats(draw):
    x = draw(tensors(dtype=draw(st.sampled_from([torch.float32, torch.float64, torch.int64,
                                                 torch.bfloat16]))))
    nd = len(x.shape)
    d = draw(st.integers(-max(nd, 1), max(nd, 1) - 1))
    which = draw(st.sampled_from(["cummax", "cummin"]))
    fn = getattr(torch, which)
    # bf16 gradients: eager's scatter_add of the gradient rounds to bf16 after every
    # add (one index can collect hundreds), the device sums in f32: compare values only
    return Case("order_stats", lambda t: fn(t, d), [x], desc="%s dim=%d" % (which, d),
                grad=x.dtype != torch.bfloat16, names=(which, "Dimension out of range"))


@entry("isin", covers=["isin"])
def _isin(draw):
    dt = draw(st.sampled_from([torch.int64, torch.int32, torch.float32, torch.float64]))
    x = draw(tensors(dtype=dt, grad=False, lo=-4 if dt in INTS else None,
                     hi=5 if dt in INTS else None))
    tdt = dt if draw(st.booleans()) else draw(st.sampled_from([torch.int64, torch.float32]))
    # test_elements contiguous: eager's brute-force kernel view(-1)s them and raises for
    # a non-contiguous tensor of the result dtype (an eager bug the device does not copy)
    y = draw(tensors(shape=draw(shapes(max_dims=2, large=False)), dtype=tdt, grad=False,
                     view=False, lo=-4 if tdt in INTS else None, hi=5 if tdt in INTS else None))
    inv = draw(st.booleans())
    uniq = draw(st.booleans())
    which = draw(st.sampled_from(["tt", "tt", "ts", "st"]))
    v = draw(st.sampled_from([0, 1, -2, 2.5, float("nan")]))
    if which == "tt":
        fn = lambda a, b: torch.isin(a, b, invert=inv)   # noqa: E731
    elif which == "ts":
        fn = lambda a, b: torch.isin(a, v, invert=inv)   # noqa: E731
    else:
        fn = lambda a, b: torch.isin(v, b, invert=inv)   # noqa: E731
    # assume_unique changes nothing when the inputs are unique: eager's
    # sorting path then answers the same (with duplicates it is unspecified)
    del uniq
    return Case("isin", fn, [x, y], grad=False, desc="%s invert=%s v=%s" % (which, inv, v),
                names=("isin", "Unsupported input type"))


@st.composite
def _matrices(draw, square):
    dt = draw(st.sampled_from([torch.float32, torch.float64]))
    lead = draw(st.sampled_from([[], [], [2], [1, 3], [0]]))
    m = draw(st.integers(0, 6))
    n = m if square else draw(st.integers(0, 6))
    return draw(tensors(shape=lead + [m, n], dtype=dt, special=False, view=False))


@entry("linalg", covers=["inv", "eigh", "svd"], tol=64)
def _linalg(draw):
    which = draw(st.sampled_from(["inv", "eigvalsh", "eigh_recon", "svdvals", "svd_recon",
                                  "svd_full_recon"]))
    x = draw(_matrices(which not in ("svdvals", "svd_recon", "svd_full_recon")))
    n = x.shape[-1]

    def well(t):   # well conditioned: a diagonal shift (inv) / symmetric (eigh)
        if which == "inv":
            return t + 3 * (t.abs().amax() + 1) * torch.eye(n, dtype=t.dtype, device=t.device)
        return t + t.mT
    if which == "inv":
        fn = lambda t: torch.linalg.inv(well(t))   # noqa: E731
    elif which == "eigvalsh":
        fn = lambda t: torch.linalg.eigvalsh(well(t))   # noqa: E731
    elif which == "eigh_recon":
        def fn(t):
            w, v = torch.linalg.eigh(well(t))
            return w, v @ torch.diag_embed(w) @ v.mT, v.mT @ v
    elif which == "svdvals":
        fn = torch.linalg.svdvals
    else:
        full = which == "svd_full_recon"

        def fn(t):
            u, s, vh = torch.linalg.svd(t, full_matrices=full)
            k = s.shape[-1]
            return s, (u[..., :k] * s.unsqueeze(-2)) @ vh[..., :k, :], u.mT @ u, vh @ vh.mT
    # gradients where they are well defined (eigenvalues and singular values
    # of random matrices are distinct); vectors are unique only up to sign
    return Case("linalg", fn, [x], tol=64, grad=which in ("inv", "eigvalsh", "svdvals"),
                desc=which, names=("linalg", "inv", "eigh", "svd", "square", "dimensions"))


@entry("bitwise", covers=["bit_and", "bit_or", "bit_xor", "bit_not"])
def _bitwise(draw):
    dt = draw(st.sampled_from([torch.int64, torch.int32, torch.bool]))
    x = draw(tensors(dtype=dt, grad=False))
    which = draw(st.sampled_from(["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"]))
    if which == "bitwise_not":
        return Case("bitwise", torch.bitwise_not, [x], grad=False, desc=which,
                    names=(which,))
    y = draw(tensors(shape=broadcast_partner(draw, x.shape), dtype=dt, grad=False))
    fn = getattr(torch, which)
    return Case("bitwise", fn, [x, y], grad=False, desc=which,
                names=(which, "size", "shape", "broadcast"))


@entry("scatter", covers=["scatter"])
def _scatter(draw):
    x = draw(tensors(shapes(min_dims=1, max_dims=3, large=False), dtype=torch.float32))
    s = list(x.shape)
    nd = len(s)
    d = draw(st.integers(-nd, nd - 1))
    ishape = [draw(st.integers(0, n)) for n in s]
    hi = max(s[d] - 1, 0)
    idx = draw(tensors(shape=ishape, dtype=torch.int64, lo=0, hi=hi, view=False, grad=False))
    src = draw(tensors(shape=ishape, dtype=torch.float32))
    # duplicates in the index make eager's winner unspecified; use a value, as scatter.value
    v = draw(st.sampled_from([0.0, 1.5, -2.0]))
    return Case("scatter", lambda t, i: torch.scatter(t, d, i, v), [x, idx],
                desc="scatter.value dim=%d" % d, names=("scatter", "index", "size", "out of"))


@entry("complex_views", covers=["view_as_complex", "view_as_real"])
def _complex_views(draw):
    shp = draw(shapes(max_dims=3, large=False)) + [2]
    x = draw(tensors(shape=shp, dtype=torch.float32, view=False, grad=False))
    return Case("complex_views", lambda t: torch.view_as_real(torch.view_as_complex(t) * 1),
                [x], grad=False, desc="view_as_real(view_as_complex(x))",
                names=("view_as_complex", "view_as_real", "stride"))


# the neural-network entries register themselves on import
import optable_nn  # noqa: E402,F401


def table():
    """{entry name: (covers, strategy, tol)}: the hand-written entries and
    the ones derived from ops.def."""
    out = dict(_derived_entries())
    out.update(ENTRIES)
    return out


def coverage():
    """(covered, missing): ops of ops.def reached by some entry, and the
    ones nothing reaches."""
    covered = set(VIA) | set(UNREACHED)
    for covers, _, _ in table().values():
        covered |= set(covers)
    names = [n for n, _, _ in ops_def()]
    return sorted(n for n in names if n in covered), sorted(n for n in names if n not in covered)
