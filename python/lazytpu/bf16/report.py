"""lazytpu.bf16.report: the lab's files, from the runs' records.

    losses.csv        step, the loss of every mode, each mode's gap to f32
    loss_curves.png   the curves on one plot, and the relative gap below
                      (matplotlib; without it the CSV is all, and the summary
                      says so)
    precision_<mode>.csv  per module call at step K: relative error of its
                      output and of its output's gradient against the f32 run,
                      the error it adds (gain), ranked
    keep_f32.txt      the suggested keep-in-f32 module types, per mode
    summary.txt       all of it as text, ending with the verdict lines:
                      "VERDICT: bf16 within 0.84% of f32 loss after 20 steps"
"""
import math
import os

BF16_EPS = 2.0 ** -8          # bf16's relative rounding step (8 significant bits)
SUGGEST_GAIN = 8.0            # a module multiplying the error by this much ...
SUGGEST_ERR = 2.0 ** -5       # ... up to this relative error is worth keeping in f32


def rel_err(got, ref):
    """||got - ref|| / ||ref|| (float64; NaN when shapes differ or ref is 0)."""
    if got is None or ref is None or got.shape != ref.shape:
        return float("nan")
    g, r = got.double(), ref.double()
    den = float(r.norm())
    num = float((g - r).norm())
    if den == 0:
        return 0.0 if num == 0 else float("inf")
    return num / den


def loss_gap(runs, mode):
    """Per step: (loss - f32 loss) / |f32 loss| (as many steps as both ran)."""
    ref, got = runs["f32"]["losses"], runs[mode]["losses"]
    return [(g - r) / abs(r) if r else float("nan") for g, r in zip(got, ref)]


def final_gap(runs, mode):
    """|relative gap| averaged over the last tenth of the steps (>= 1 step)."""
    gap = loss_gap(runs, mode)
    if not gap:
        return float("nan")
    tail = gap[-max(1, len(gap) // 10):]
    return sum(abs(g) for g in tail) / len(tail)


def module_table(runs, mode):
    """Rows for the modules called at step K in both runs: name, type, output
    error, gradient error, input error, gain = output error / the largest of
    the input's and the children's output errors (the error the module's own
    arithmetic adds), ranked by gain then output error."""
    ref = {m["name"]: m for m in runs["f32"]["modules"]}
    got = {m["name"]: m for m in runs[mode]["modules"]}
    errs = {}
    for name, m in got.items():
        r = ref.get(name)
        if r is None or m["out"] is None:
            continue
        errs[name] = rel_err(m["out"], r["out"])
    rows = []
    for name, m in got.items():
        if name not in errs:
            continue
        r = ref[name]
        e_in = rel_err(m["in"], r["in"]) if m["in"] is not None else 0.0
        e_kids = [errs[c] for c in m["children"] if c in errs and not math.isnan(errs[c])]
        base = max([e_in if not math.isnan(e_in) else 0.0] + e_kids)
        e_out = errs[name]
        gain = e_out / max(base, BF16_EPS / 2)
        rows.append({"name": name, "type": m["type"], "out_err": e_out,
                     "grad_err": rel_err(m["grad"], r["grad"]), "in_err": e_in,
                     "gain": gain, "leaf": not m["children"]})
    rows.sort(key=lambda x: (-_num(x["gain"]), -_num(x["out_err"])))
    return rows


def _num(v):
    return -1.0 if v is None or math.isnan(v) else v


def suggest(rows):
    """Module types whose own arithmetic adds the error: gain >= SUGGEST_GAIN
    and an output error >= SUGGEST_ERR, worst first."""
    out = []
    for r in rows:
        if r["gain"] >= SUGGEST_GAIN and r["out_err"] >= SUGGEST_ERR and r["type"] not in out:
            out.append(r["type"])
    return out


def _pct(v):
    return "nan" if v is None or math.isnan(v) else "%.3g%%" % (100 * v)


def _fmt(v):
    return "nan" if v is None or math.isnan(v) else "%.3g" % v


def _mib(b):
    return "%.1f MiB" % (b / 2.0 ** 20)


def step_time(rec):
    """Median step time (s), steps 1 and K, K+1 left out (compiles, the
    recording) when enough are left."""
    t = list(enumerate(rec["step_times"], 1))
    skip = {1, rec["k"], rec["k"] + 1}
    keep = [v for i, v in t if i not in skip] or [v for _, v in t]
    if not keep:
        return float("nan")
    keep.sort()
    return keep[len(keep) // 2]


def _plot(runs, path, steps):
    """The curves (and the gap to f32) as a PNG; False without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 7), sharex=True,
                               gridspec_kw={"height_ratios": [2, 1]})
    for i, (m, rec) in enumerate(runs.items()):
        xs = range(1, len(rec["losses"]) + 1)
        a.plot(xs, rec["losses"], label=m, lw=1.2, color="C%d" % i)
        if m != "f32":
            gap = loss_gap(runs, m)
            b.plot(xs[:len(gap)], [100 * g for g in gap], label=m, lw=1.0, color="C%d" % i)
    a.set_ylabel("loss")
    a.set_title("lazytpu.bf16: loss per mode (%d steps)" % steps)
    a.legend()
    b.axhline(0, color="k", lw=0.5)
    b.set_ylabel("gap to f32 (%)")
    b.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def write(runs, out_dir, script, steps, k, max_gap=None, keep=()):
    """Writes the files; returns (summary text, worst final gap in percent)."""
    modes = list(runs)
    others = [m for m in modes if m != "f32"]
    n = min(len(r["losses"]) for r in runs.values())
    lines = ["lazytpu.bf16 lab: %s, %d steps, modes %s, precision table at step %d"
             % (script, n, ", ".join(modes), k)]
    if keep:
        lines.append("every run with lazytpu.amp.keep_f32(%r)" % list(keep))
    lines.append("")
    # ---- losses
    with open(os.path.join(out_dir, "losses.csv"), "w") as f:
        f.write(",".join(["step"] + modes + ["gap_%s" % m for m in others]) + "\n")
        gaps = {m: loss_gap(runs, m) for m in others}
        for i in range(n):
            f.write(",".join([str(i + 1)] + ["%.9g" % runs[m]["losses"][i] for m in modes] +
                             ["%.6g" % gaps[m][i] for m in others]) + "\n")
    png = _plot(runs, os.path.join(out_dir, "loss_curves.png"), n)
    lines.append("loss curves: %s" % ("loss_curves.png, losses.csv" if png else
                                       "losses.csv (matplotlib is not installed: no PNG)"))
    lines.append("")
    lines.append("step  " + "  ".join("%12s" % m for m in modes) +
                 "  " + "  ".join("%14s" % ("gap " + m) for m in others))
    show = sorted(set([0, n - 1] + list(range(0, n, max(1, n // 10)))))
    for i in show:
        if i >= n:
            continue
        lines.append("%4d  " % (i + 1) + "  ".join("%12.6g" % runs[m]["losses"][i] for m in modes)
                     + "  " + "  ".join("%14s" % _pct(gaps[m][i]) for m in others))
    lines.append("")
    # ---- memory and time
    lines.append("mode          peak device memory per core      step time (median)   run wall time")
    for m in modes:
        r = runs[m]
        mem = ", ".join("core %d: %s" % (c, _mib(b)) for c, b in sorted(r["peak_bytes"].items()))
        lines.append("%-12s  %-32s %10.2f ms          %6.1f s"
                     % (m, mem or "-", 1e3 * step_time(r), r.get("wall_s", float("nan"))))
    lines.append("")
    # ---- precision tables and suggestions
    if k > 1:
        lines.append("note: at step %d the weights already differ between the modes (the updates "
                     "of steps 1..%d): the errors below include that drift; --step 1 shows the "
                     "arithmetic alone" % (k, k - 1))
        lines.append("")
    suggested = {}
    for m in others:
        rows = module_table(runs, m)
        suggested[m] = suggest(rows)
        with open(os.path.join(out_dir, "precision_%s.csv" % m), "w") as f:
            f.write("rank,module,type,out_rel_err,grad_rel_err,in_rel_err,gain\n")
            for i, r in enumerate(rows, 1):
                f.write("%d,%s,%s,%.6g,%.6g,%.6g,%.6g\n" % (i, r["name"], r["type"], r["out_err"],
                                                            r["grad_err"], r["in_err"], r["gain"]))
        lines.append("precision at step %d, %s vs f32 (relative error; gain = error the module "
                     "adds):" % (k, m))
        lines.append("  %-4s %-40s %-16s %10s %10s %10s %8s"
                     % ("rank", "module", "type", "output", "grad", "input", "gain"))
        for i, r in enumerate(rows[:12], 1):
            lines.append("  %-4d %-40s %-16s %10s %10s %10s %8s"
                         % (i, r["name"][-40:], r["type"][:16], _pct(r["out_err"]),
                            _pct(r["grad_err"]), _pct(r["in_err"]), _fmt(r["gain"])))
        if len(rows) > 12:
            lines.append("  ... %d more in precision_%s.csv" % (len(rows) - 12, m))
        lines.append("")
    with open(os.path.join(out_dir, "keep_f32.txt"), "w") as f:
        for m in others:
            f.write("%s: %s\n" % (m, suggested[m]))
    union = []
    for m in others:
        union += [t for t in suggested[m] if t not in union]
    if union:
        lines.append("suggested keep-in-f32 module types: %s" % union)
        lines.append("  apply: lazytpu.amp.keep_f32(%r) before the model runs" % union)
    else:
        lines.append("suggested keep-in-f32: nothing (no module adds more than %gx the bf16 "
                     "error of its inputs)" % SUGGEST_GAIN)
    lines.append("")
    # ---- verdict
    worst, worst_mode = -1.0, None
    for m in others:
        g = final_gap(runs, m)
        lines.append("VERDICT: %s within %s of f32 loss after %d steps" % (m, _pct(g), n))
        if not math.isnan(g) and g > worst:
            worst, worst_mode = g, m
    worst_pct = 100 * worst if worst_mode else float("nan")
    if worst_mode:
        ok = "" if max_gap is None else (" (limit %g%%: %s)" % (max_gap, "PASS" if worst_pct <=
                                                                max_gap else "FAIL"))
        lines.append("VERDICT: all modes within %s of f32 loss after %d steps (worst: %s)%s"
                     % (_pct(worst), n, worst_mode, ok))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "summary.txt"), "w") as f:
        f.write(text)
    return text, worst_pct
