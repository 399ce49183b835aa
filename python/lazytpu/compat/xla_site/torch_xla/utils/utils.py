"""torch_xla.utils.utils on lazytpu: torch_xla 2.9's small helpers (test
and example scripts use them): synthetic data iterators, nested-structure
walkers, environment flags, timing, free ports, a thread pool map."""
import contextlib
import os
import shutil
import socket
import sys
import tempfile
import time
from concurrent import futures

from lazytpu.utils import SampleGenerator  # noqa: F401


class Cleaner(object):
    """Calls func when garbage collected."""

    def __init__(self, func):
        self.func = func

    def __del__(self):
        self.func()


class LazyProperty(object):
    """``.value`` is gen_fn()'s result, computed on first access."""

    def __init__(self, gen_fn):
        self._gen_fn = gen_fn

    @property
    def value(self):
        if self._gen_fn is not None:
            self._value = self._gen_fn()
            self._gen_fn = None
        return self._value


class TmpFolder(object):
    """A fresh temporary directory (``.name``), removed with the object."""

    def __init__(self):
        self.name = tempfile.mkdtemp()
        self.cleaner = Cleaner(lambda: shutil.rmtree(self.name, ignore_errors=True))


class FnDataGenerator(object):
    """count batches of (data, func(data)), data = gen_tensor(batch_size,
    *dims)."""

    def __init__(self, func, batch_size, gen_tensor, dims=None, count=1):
        self._func, self._batch_size, self._gen_tensor = func, batch_size, gen_tensor
        self._dims = list(dims) if dims else [1]
        self._count = count
        self._emitted = 0

    def __len__(self):
        return self._count

    def __iter__(self):
        return FnDataGenerator(self._func, self._batch_size, self._gen_tensor,
                               dims=self._dims, count=self._count)

    def __next__(self):
        return self.next()

    def next(self):
        if self._emitted >= self._count:
            raise StopIteration
        self._emitted += 1
        data = self._gen_tensor(self._batch_size, *self._dims)
        return data, self._func(data)


class DataWrapper(object):
    """Base of objects that carry tensors to the device: get_tensors() lists
    the CPU tensors, from_tensors(device copies) rebuilds the object."""

    def get_tensors(self):
        raise NotImplementedError("The method is missing an implementation")

    def from_tensors(self, tensors):
        raise NotImplementedError("The method is missing an implementation")


def as_list(t):
    return t if isinstance(t, (list, tuple)) else [t]


def getenv_as(name, type, defval=None):
    """os.environ[name] converted with `type` (a bool through int, as in
    torch_xla: "0" / "1"); defval when unset."""
    v = os.environ.get(name)
    if v is None:
        return defval
    return bool(int(v)) if type is bool else type(v)


def _walk(value, select_fn, fn, seen):
    if id(value) in seen:
        return
    seen.add(id(value))
    if select_fn(value):
        fn(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk(k, select_fn, fn, seen)
            _walk(v, select_fn, fn, seen)
    elif isinstance(value, (list, tuple, set)):
        for v in value:
            _walk(v, select_fn, fn, seen)
    elif isinstance(value, DataWrapper):
        for v in value.get_tensors():
            _walk(v, select_fn, fn, seen)
    elif hasattr(value, "__dict__"):
        for v in value.__dict__.values():
            _walk(v, select_fn, fn, seen)


def for_each_instance(value, select_fn, fn):
    """fn(v) for every v in the nested value (dict keys and values, lists,
    tuples, sets, a DataWrapper's tensors, objects' attributes) that
    select_fn picks, each object once."""
    _walk(value, select_fn, fn, set())


def _rewrite(value, select_fn, fn, done):
    if id(value) in done:
        return done[id(value)]
    if select_fn(value):
        out = fn(value)
        done[id(value)] = out
    elif isinstance(value, dict):
        out = done[id(value)] = {}
        for k, v in value.items():
            key = _rewrite(k, select_fn, fn, done)     # the key first, as for_each_instance
            out[key] = _rewrite(v, select_fn, fn, done)
    elif isinstance(value, set):
        out = done[id(value)] = set()
        for v in value:
            out.add(_rewrite(v, select_fn, fn, done))
    elif isinstance(value, (list, tuple)):
        # a list for either, as torch_xla rewrites them (the new container
        # is recorded before its items, for self-references)
        out = done[id(value)] = []
        for v in value:
            out.append(_rewrite(v, select_fn, fn, done))
    elif isinstance(value, DataWrapper):
        out = value.from_tensors([_rewrite(v, select_fn, fn, done)
                                  for v in value.get_tensors()])
        done[id(value)] = out
    elif hasattr(value, "__dict__"):
        import copy
        out = done[id(value)] = copy.copy(value)
        for k, v in value.__dict__.items():
            setattr(out, k, _rewrite(v, select_fn, fn, done))
    else:
        out = done[id(value)] = value
    return out


def for_each_instance_rewrite(value, select_fn, fn):
    """A copy of the nested value with every v select_fn picks replaced by
    fn(v) (each object once; lists and tuples come back as lists, dicts as
    dicts, a DataWrapper rebuilt by from_tensors, objects as shallow
    copies, as in torch_xla)."""
    return _rewrite(value, select_fn, fn, {})


def shape(inputs):
    """The nested list/tuple shape of inputs ([2, 3] for two lists of three);
    AssertionError when siblings differ."""
    out = []
    if isinstance(inputs, (list, tuple)):
        inner = None
        for x in inputs:
            s = shape(x)
            assert inner is None or inner == s
            inner = s
        out.extend([len(inputs)] + (inner or []))
    return out


def flatten_nested_tuple(inputs):
    if isinstance(inputs, (list, tuple)):
        return tuple(x for i in inputs for x in flatten_nested_tuple(i))
    return (inputs,)


def list_copy_append(ilist, item):
    return list(ilist) + [item]


def null_print(*args, **kwargs):
    return


def eprint(*args, **kwargs):
    print(*args, file=sys.stderr, **kwargs)


def get_print_fn(debug=None):
    """eprint when debug (default: the DEBUG variable) is set, else a no-op."""
    if debug is None:
        debug = int(os.environ.get("DEBUG", "0"))
    return eprint if debug else null_print


def timed(fn, msg="", printfn=eprint):
    """fn()'s result; prints msg and the milliseconds it took."""
    printfn = printfn or get_print_fn()
    t0 = time.time()
    res = fn()
    printfn("{}{:.3f}ms".format(msg, 1000.0 * (time.time() - t0)))
    return res


def get_free_tcp_ports(n=1):
    """n TCP ports free now (bound once by the OS, then released)."""
    ports = []
    for _ in range(n):
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
            s.bind(("", 0))
            ports.append(s.getsockname()[1])
    return ports


def parallel_work(num_workers, fn, *args):
    """[fn(*a) for a in zip(*args)] on num_workers threads, in order; a
    worker's exception is raised here."""
    with futures.ThreadPoolExecutor(max_workers=num_workers) as ex:
        return list(ex.map(fn, *args))


class TimedScope(object):
    """A with-block that prints msg and its milliseconds on exit, unless
    set_error() was called."""

    def __init__(self, msg="", printfn=eprint):
        self._msg = msg
        self._printfn = printfn or get_print_fn()
        self._error = None

    def __enter__(self):
        self._start = time.time()
        return self

    def __exit__(self, type, value, traceback):
        if self._error is None:
            self._printfn("{}{:.3f}ms".format(self._msg, 1000.0 * (time.time() - self._start)))

    def set_error(self, error):
        self._error = error


def check_env_flag(name, default=""):
    """The variable is "true" or a positive integer."""
    flag = os.getenv(name, default)
    return flag == "true" or (flag.isdigit() and int(flag) > 0)
