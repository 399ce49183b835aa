"""PyTorch's OpInfo database (torch.testing._internal.common_methods_invocations.op_db)
as a lazytpu coverage tool.

Every op with float32 samples on the CPU runs on the device with the same
samples and is compared with eager PyTorch on the CPU:
  - deterministic ops: values (and dtypes, shapes) within float32 tolerances,
    through each sample's output_process_fn_grad as PyTorch's test_compare_cpu
    (so eigenvectors and singular vectors compare up to sign);
  - random ops (eager gives different values under different seeds): shape,
    dtype and statistics (range, mean, spread) against several eager draws;
  - ops whose eager output is uninitialised memory (empty*): shape and dtype;
  - a sample eager rejects must be rejected on the device too.
An op passes when every sample does; it is "native" when no CPU fallback ran
(the `aten::*` counters) and "fallback" otherwise.

Each op runs in a worker process (a pool of --jobs workers): a crash or a
hang (--timeout seconds) costs that op only; the worker is replaced.

    python tests/opinfo/sweep.py                 # everything (make opinfo)
    python tests/opinfo/sweep.py --sample 25     # every 25th op
    python tests/opinfo/sweep.py --ops add,nn.functional.pad
    python tests/opinfo/sweep.py --json out.json # per-op results

Known failures, with the reason, live in expected_failures.txt beside this
file; the summary lists unexpected failures and unexpected passes apart.
"""
import argparse
import json
import os
import select
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_SAMPLES = 12
# draws of a random op's sample on each side (eager, device), pooled for the statistics
RANDOM_DRAWS = 8
# ops documented to return uninitialised memory: compared by shape and dtype
UNINITIALISED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                 "empty_permuted"}


# --------------------------------------------------------------- op names

def op_key(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _unseed_random_ops():
    """OpInfo wraps random ops in wrapper_set_seed (a fixed seed before each
    call): make it keep the caller's seed, so another seed gives other values
    and the sweep can tell random ops apart."""
    for name, mod in list(sys.modules.items()):
        if name.startswith("torch.testing._internal") and hasattr(mod, "wrapper_set_seed"):
            mod.wrapper_set_seed = lambda op, *args, **kwargs: op(*args, **kwargs)


def float32_ops():
    """(key, op) of every op_db entry with float32 on the CPU."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    _unseed_random_ops()
    res = []
    for op in op_db:
        try:
            if torch.float32 not in op.supported_dtypes("cpu"):
                continue
        except Exception:
            continue
        res.append((op_key(op), op))
    return res


def expected_failures():
    """{op key: reason} from expected_failures.txt ("key  # reason" lines)."""
    res = {}
    path = os.path.join(HERE, "expected_failures.txt")
    if not os.path.exists(path):
        return res
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, reason = line.partition("#")
            res[key.strip()] = reason.strip()
    return res


# ----------------------------------------------------------------- worker

class Mismatch(Exception):
    pass


def _map(x, fn):
    import torch
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, tuple) and hasattr(x, "_fields"):   # namedtuple
        return type(x)(*[_map(v, fn) for v in x])
    if isinstance(x, (list, tuple)):
        return type(x)(_map(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return x


def _to_device(x, dev, keep_cpu=None):
    """Tensors of x on dev (but the k-th tensor stays on the CPU where
    keep_cpu[k]); 'cpu' devices named in arguments become dev."""
    import torch
    count = [0]

    def conv(t):
        k = count[0]
        count[0] += 1
        if keep_cpu is not None and k < len(keep_cpu) and keep_cpu[k]:
            return t.detach().clone()
        return t.detach().clone().to(dev)
    y = _map(x, conv)

    def fix(v):
        if isinstance(v, torch.device) and v.type == "cpu":
            return dev
        if isinstance(v, str) and v == "cpu":
            return str(dev)
        if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
            if isinstance(v, tuple) and hasattr(v, "_fields"):
                return v
            return type(v)(fix(e) for e in v)
        if isinstance(v, dict):
            return {k: fix(e) for k, e in v.items()}
        return v
    return fix(y)


def _clone_cpu(x):
    return _map(x, lambda t: t.detach().clone())


def _to_cpu(x):
    return _map(x, lambda t: t.detach().cpu())


def _flat(x, out):
    import torch
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _flat(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _flat(v, out)
    return out


def _compare(actual, expected, path="out"):
    """Raises Mismatch when actual (from the device, moved to the CPU)
    differs from expected."""
    import torch
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise Mismatch("%s: expected a tensor, got %s" % (path, type(actual).__name__))
        if actual.shape != expected.shape:
            raise Mismatch("%s: shape %s, eager %s" % (path, tuple(actual.shape),
                                                      tuple(expected.shape)))
        if actual.dtype != expected.dtype:
            raise Mismatch("%s: dtype %s, eager %s" % (path, actual.dtype, expected.dtype))
        if actual.is_sparse or expected.is_sparse or actual.is_quantized:
            return
        a, e = actual, expected
        if a.is_complex():
            a, e = torch.view_as_real(a.resolve_conj()), torch.view_as_real(e.resolve_conj())
        try:
            torch.testing.assert_close(a, e, rtol=1.3e-4, atol=1e-3, equal_nan=True,
                                       check_device=False, check_stride=False)
        except AssertionError as ex:
            raise Mismatch("%s: %s" % (path, str(ex).strip().splitlines()[0:6]))
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise Mismatch("%s: expected a sequence of %d, got %r" % (path, len(expected),
                                                                      type(actual).__name__))
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, "%s[%d]" % (path, i))
        return
    if isinstance(expected, dict):
        for k in expected:
            _compare(actual[k], expected[k], "%s[%r]" % (path, k))
        return
    if isinstance(expected, float) and isinstance(actual, float):
        if not (abs(actual - expected) <= 1e-3 + 1.3e-4 * abs(expected) or
                (actual != actual and expected != expected)):
            raise Mismatch("%s: %r, eager %r" % (path, actual, expected))
        return
    if actual != expected:
        raise Mismatch("%s: %r, eager %r" % (path, actual, expected))


def _structure(actual, expected, path="out"):
    """Shapes and dtypes only (uninitialised outputs)."""
    ea, ee = _flat(actual, []), _flat(expected, [])
    if len(ea) != len(ee):
        raise Mismatch("%s: %d tensors, eager %d" % (path, len(ea), len(ee)))
    for i, (a, e) in enumerate(zip(ea, ee)):
        if a.shape != e.shape or a.dtype != e.dtype:
            raise Mismatch("%s tensor %d: %s %s, eager %s %s" % (
                path, i, a.dtype, tuple(a.shape), e.dtype, tuple(e.shape)))


def _statistics(actuals, draws, path="out"):
    """Device draws of a random op (one per seed) against as many eager draws:
    same structure, values inside the draws' range (widened a little for
    continuous outputs), mean and spread consistent with them. Both sides are
    pooled: one draw of a small output can be far from the distribution (SDPA
    with dropout over 12 rows whose softmax is nearly one-hot: a row is ~0 or
    ~2v as its one key is dropped or kept, so one draw's quartiles swing)."""
    import torch
    for actual in actuals:
        _structure(actual, draws[0], path)
    ta = _flat(actuals[0], [])
    for i, a in enumerate(ta):
        es = [_flat(d, [])[i] for d in draws]
        if a.numel() == 0 or a.is_complex():
            continue
        e = torch.stack([x.double() for x in es])
        x = torch.stack([_flat(d, [])[i].double() for d in actuals])
        if bool(torch.isnan(x).any()) and not bool(torch.isnan(e).any()):
            raise Mismatch("%s tensor %d: NaN where eager has none" % (path, i))
        fe, fx = e[torch.isfinite(e)], x[torch.isfinite(x)]
        if fe.numel() == 0 or fx.numel() == 0:
            continue
        lo, hi = float(fe.min()), float(fe.max())
        if a.is_floating_point():
            span = max(hi - lo, 1e-6)
            distinct = torch.unique(fe).numel()
            if distinct > 8:    # continuous: allow tails beyond the draws
                lo, hi = lo - span, hi + span
        slack = 1e-4 * max(abs(lo), abs(hi)) + 1e-6
        if float(fx.min()) < lo - slack or float(fx.max()) > hi + slack:
            raise Mismatch("%s tensor %d: values in [%g, %g], eager draws in [%g, %g]"
                           % (path, i, float(fx.min()), float(fx.max()), lo, hi))
        nd = len(actuals)   # the thresholds below count the values of one draw
        if a.numel() >= 64 and a.is_floating_point():
            # masked outputs (dropout: 0; alpha dropout: a constant; feature
            # dropout: few whole channels): the share of the most common
            # value, then the statistics of the rest
            v = float(torch.mode(fe.flatten()).values)
            tol = 1e-5 * abs(v) + 1e-7
            z_e = float(((fe - v).abs() <= tol).double().mean())
            if z_e > 0.05:
                z_x = float(((fx - v).abs() <= tol).double().mean())
                if abs(z_x - z_e) > 0.35:
                    raise Mismatch("%s tensor %d: %.0f%% of value %g, eager draws %.0f%%"
                                   % (path, i, 100 * z_x, v, 100 * z_e))
                fe, fx = fe[(fe - v).abs() > tol], fx[(fx - v).abs() > tol]
                if fe.numel() < 64 * len(draws) or fx.numel() < 64 * nd:
                    continue
            # robust statistics (heavy tails such as Cauchy have no variance):
            # median and interquartile range against the draws'
            q = torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64)
            qe, qx = torch.quantile(fe, q), torch.quantile(fx, q)
            iqr_e, iqr_x = float(qe[2] - qe[0]), float(qx[2] - qx[0])
            se = iqr_e / ((fx.numel() / nd) ** 0.5) + 1e-6
            if abs(float(qx[1] - qe[1])) > 6 * se + 0.05 * abs(float(qe[1])):
                raise Mismatch("%s tensor %d: median %g, eager draws' median %g (IQR %g)"
                               % (path, i, float(qx[1]), float(qe[1]), iqr_e))
            if iqr_e > 1e-6 and not (0.5 * iqr_e <= iqr_x <= 2.0 * iqr_e):
                raise Mismatch("%s tensor %d: interquartile range %g, eager draws' %g"
                               % (path, i, iqr_x, iqr_e))


def _cpu_tensors(op, dev, n):
    """Per sample, which tensors a device-generated sample keeps on the CPU
    (tensor_split's indices must be a CPU tensor, ...); None when the
    device samples cannot be made or do not line up."""
    import torch
    try:
        torch.manual_seed(0)
        res = []
        for s in op.sample_inputs(dev, torch.float32, requires_grad=False):
            flags = []
            _map((s.input, s.args, s.kwargs), lambda t: flags.append(t.device.type == "cpu") or t)
            res.append(flags)
            if len(res) >= n:
                break
        return res
    except Exception:
        return None


def _call(op, inp, args, kwargs):
    return op(inp, *args, **kwargs)


def _eager(op, sample, seed):
    import torch
    torch.manual_seed(seed)
    inp, args, kwargs = _clone_cpu((sample.input, sample.args, sample.kwargs))
    return _call(op, inp, args, kwargs)


def _same(a, b):
    try:
        _compare(a, b)
        return True
    except (Mismatch, Exception):
        return False


def run_op(op, dev, max_samples=MAX_SAMPLES):
    """Runs op's float32 samples on dev. Returns a result dict."""
    import torch
    import lazytpu
    import lazytpu.metrics as met
    torch.manual_seed(0)
    samples = []
    try:
        for s in op.sample_inputs("cpu", torch.float32, requires_grad=False):
            samples.append(s)
            if len(samples) >= max_samples:
                break
    except Exception as ex:
        return {"status": "nosamples", "error": "sample_inputs: %s" % ex}
    if not samples:
        return {"status": "nosamples"}
    # eager first: which samples eager rejects, whether the op is random
    # (another seed gives other values) or returns uninitialised memory
    # (the same seed twice differs)
    eager = []
    random_op = False
    for sample in samples:
        try:
            expected = _eager(op, sample, 0)
        except Exception as ex:
            eager.append((None, ex, "values", None))
            continue
        kind, draws = "values", None
        if op.name in UNINITIALISED or not _same(_eager(op, sample, 0), expected):
            kind = "uninitialised"
        else:
            draws = [expected] + [_eager(op, sample, s) for s in range(1, RANDOM_DRAWS)]
            random_op |= any(not _same(d, expected) for d in draws[1:])
        eager.append((expected, None, kind, draws))
    placement = _cpu_tensors(op, dev, len(samples))
    fallbacks = {}
    mode = "random" if random_op else "values"
    for k, sample in enumerate(samples):
        expected, eager_err, kind, draws = eager[k]
        if kind == "values" and random_op:
            kind = "random"
        if kind == "uninitialised":
            mode = kind
        keep = placement[k] if placement and k < len(placement) else None
        dinp = _to_device((sample.input, sample.args, sample.kwargs), dev, keep)
        before = {n: met.counter_value(n) for n in met.executed_fallback_ops()}
        try:
            actuals = []
            # a random op: as many device draws as eager draws (seeds 0..RANDOM_DRAWS-1)
            for seed in (range(len(draws)) if kind == "random" and draws else (0,)):
                if seed:   # fresh inputs: an in-place sample changed the last ones
                    dinp = _to_device((sample.input, sample.args, sample.kwargs), dev, keep)
                torch.manual_seed(seed)
                out = _call(op, *dinp)
                lazytpu.mark_step()
                actuals.append(_to_cpu(out))
            actual = actuals[0]
            dev_err = None
        except Exception as ex:
            actual, dev_err = None, ex
        for n in met.executed_fallback_ops():
            d = met.counter_value(n) - (before.get(n) or 0)
            if d > 0:
                fallbacks[n] = fallbacks.get(n, 0) + d
        where = "sample %d (%s)" % (k, _describe(sample))
        if eager_err is not None:
            if dev_err is None:
                return {"status": "fail", "error": "%s: eager raised %s: %s; the device did not"
                        % (where, type(eager_err).__name__, str(eager_err)[:200])}
            continue
        if dev_err is not None:
            return {"status": "fail", "error": "%s: %s: %s" % (
                where, type(dev_err).__name__, str(dev_err).strip()[:400]),
                "fallbacks": fallbacks}
        try:
            if kind == "values":
                # through the sample's output_process_fn_grad, as PyTorch's own
                # device-vs-CPU test (test_compare_cpu) does: outputs unique only
                # up to sign (eigenvectors, singular vectors) compare by |v|
                proc = sample.output_process_fn_grad
                _compare(proc(actual), proc(expected))
            elif kind == "uninitialised":
                _structure(actual, expected)
            else:
                _statistics(actuals, draws)
        except Mismatch as ex:
            return {"status": "fail", "error": "%s: %s" % (where, ex), "fallbacks": fallbacks}
    return {"status": "fallback" if fallbacks else "native", "fallbacks": fallbacks,
            "samples": len(samples), "mode": mode}


def _describe(sample):
    import torch

    def d(x):
        if isinstance(x, torch.Tensor):
            return "%s%s" % (str(x.dtype).replace("torch.", ""), list(x.shape))
        if isinstance(x, (list, tuple)):
            return "(" + ", ".join(d(v) for v in x) + ")"
        return repr(x)[:40]
    parts = [d(sample.input)] + [d(a) for a in sample.args]
    parts += ["%s=%s" % (k, d(v)) for k, v in sample.kwargs.items()]
    return ", ".join(parts)[:300]


def worker_main():
    """Reads op keys on stdin, writes one JSON result per line on fd 3's copy
    of stdout (prints of the op go to stderr)."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(1)
    import lazytpu
    dev = lazytpu.device()
    ops = dict(float32_ops())
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        key = line.strip()
        if not key:
            continue
        t0 = time.time()
        try:
            res = run_op(ops[key], dev)
        except Exception as ex:  # a bug of the sweep itself
            res = {"status": "fail", "error": "sweep: %s: %s" % (type(ex).__name__, ex)}
        res["key"] = key
        res["seconds"] = round(time.time() - t0, 2)
        out.write(json.dumps(res) + "\n")
        out.flush()


# ----------------------------------------------------------------- parent

class Worker:
    def __init__(self, python):
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        env["PYTHONPATH"] = os.path.join(HERE, "..", "..", "python") + os.pathsep + \
            env.get("PYTHONPATH", "")
        self.p = subprocess.Popen([python, os.path.abspath(__file__), "--worker"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, env=env, text=True, bufsize=1)
        self.key = None
        self.started = None
        self.ready = False
        self.buf = ""

    def send(self, key):
        self.key = key
        self.started = time.time()
        self.p.stdin.write(key + "\n")
        self.p.stdin.flush()

    def kill(self):
        try:
            self.p.kill()
            self.p.wait(timeout=10)
        except Exception:
            pass


def sweep(keys, jobs, timeout, python, progress=True):
    """Runs keys over `jobs` workers; returns {key: result}."""
    todo = list(keys)
    results = {}
    workers = [Worker(python) for _ in range(max(1, min(jobs, len(todo))))]
    t_start = time.time()
    while workers:
        for w in list(workers):
            if w.ready and w.key is None:
                if todo:
                    w.send(todo.pop(0))
                else:
                    w.p.stdin.close()
                    w.kill()
                    workers.remove(w)
        if not workers:
            break
        fds = [w.p.stdout for w in workers]
        r, _, _ = select.select(fds, [], [], 1.0)
        for w in list(workers):
            if w.p.stdout in r:
                line = w.p.stdout.readline()
                if not line:        # died
                    code = w.p.wait()
                    if w.key is not None:
                        results[w.key] = {"key": w.key, "status": "crash",
                                          "error": "worker died (exit %s)" % code}
                        _progress(progress, results, len(keys), w.key, t_start)
                    elif not w.ready:
                        raise SystemExit("sweep: a worker failed to start (exit %s)" % code)
                    workers.remove(w)
                    if todo or w.key is None and False:
                        pass
                    if todo:
                        workers.append(Worker(python))
                    continue
                msg = json.loads(line)
                if msg.get("ready"):
                    w.ready = True
                    continue
                results[msg["key"]] = msg
                _progress(progress, results, len(keys), msg["key"], t_start)
                w.key = None
            elif w.key is not None and time.time() - w.started > timeout:
                results[w.key] = {"key": w.key, "status": "hang",
                                  "error": "no result after %ds" % timeout}
                _progress(progress, results, len(keys), w.key, t_start)
                w.kill()
                workers.remove(w)
                if todo:
                    workers.append(Worker(python))
    return results


def _progress(on, results, total, key, t0):
    if not on:
        return
    r = results[key]
    line = "[%d/%d %4.0fs] %-40s %s" % (len(results), total, time.time() - t0, key, r["status"])
    if r["status"] in ("fail", "crash", "hang"):
        line += ": " + r.get("error", "")[:300]
    elif r.get("fallbacks"):
        line += " " + ",".join(sorted(r["fallbacks"]))
    print(line, flush=True)


def summarize(results, expected):
    """(text, counts) of a sweep."""
    counts = {"native": 0, "fallback": 0, "fail": 0, "crash": 0, "hang": 0, "nosamples": 0}
    for r in results.values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    tested = len(results) - counts["nosamples"]
    passed = counts["native"] + counts["fallback"]
    lines = ["", "== OpInfo sweep (PyTorch op_db, float32 samples) =="]
    lines.append("ops with float32 samples: %d (no float32 samples: %d)"
                 % (tested, counts["nosamples"]))
    pct = 100.0 * passed / tested if tested else 0.0
    lines.append("passed: %d (%.1f%%): native %d, via CPU fallback %d" %
                 (passed, pct, counts["native"], counts["fallback"]))
    lines.append("failed: %d (wrong/raised %d, crashed %d, hung %d)" % (
        counts["fail"] + counts["crash"] + counts["hang"], counts["fail"], counts["crash"],
        counts["hang"]))
    fb = {}
    for r in results.values():
        for n, c in (r.get("fallbacks") or {}).items():
            if r["status"] in ("native", "fallback"):
                fb[n] = fb.get(n, 0) + 1
    if fb:
        lines.append("fallback aten ops (by ops using them): " + ", ".join(
            "%s %d" % (n, c) for n, c in sorted(fb.items(), key=lambda x: -x[1])[:40]))
    bad = sorted(k for k, r in results.items() if r["status"] in ("fail", "crash", "hang"))
    unexpected = [k for k in bad if k not in expected]
    known = [k for k in bad if k in expected]
    if known:
        lines.append("known failures (%d):" % len(known))
        for k in known:
            lines.append("  %s: %s" % (k, expected[k]))
    if unexpected:
        lines.append("UNEXPECTED failures (%d):" % len(unexpected))
        for k in unexpected:
            lines.append("  %s [%s]: %s" % (k, results[k]["status"],
                                           results[k].get("error", "")[:300]))
    fixed = sorted(k for k in expected if k in results and
                   results[k]["status"] in ("native", "fallback"))
    if fixed:
        lines.append("unexpected passes (remove from expected_failures.txt): " + ", ".join(fixed))
    return "\n".join(lines), counts, unexpected


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ops", help="comma-separated op keys (name or name.variant)")
    ap.add_argument("--sample", type=int, default=0, help="every Nth op only")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=180, help="seconds per op")
    ap.add_argument("--json", help="write per-op results here")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 on failures not in expected_failures.txt")
    args = ap.parse_args(argv)
    if args.worker:
        worker_main()
        return 0
    keys = [k for k, _ in float32_ops()]
    if args.ops:
        want = args.ops.split(",")
        keys = [k for k in keys if k in want or k.split(".")[0] in want or
                any(k == w or k.startswith(w + ".") for w in want)]
    if args.sample > 1:
        keys = keys[::args.sample]
    t0 = time.time()
    results = sweep(keys, args.jobs, args.timeout, sys.executable, not args.quiet)
    text, counts, unexpected = summarize(results, expected_failures())
    print(text)
    print("run time: %.0fs with %d workers" % (time.time() - t0, args.jobs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    return 1 if (args.strict and unexpected) else 0


if __name__ == "__main__":
    sys.exit(main())
