"""torch_xla's environment variables mapped onto lazytpu's. Runs when
torch_xla is imported, BEFORE the engine loads (it reads its settings once):
this module imports nothing of lazytpu."""
import os
import sys


# the starting LAZYTPU_MATMUL_PRECISION translate_env chose (or the user's)
matmul_level = None


def _note(msg):
    sys.stderr.write("lazytpu: %s\n" % msg)


def translate_env():
    """Maps torch_xla's environment variables onto lazytpu's, before the
    engine starts (called by the torch_xla package on import):

    XLA_USE_BF16, XLA_DOWNCAST_BF16 -> LAZYTPU_USE_BF16 (f32 stored as bf16);
    PT_XLA_DEBUG, PT_XLA_DEBUG_LEVEL -> LAZYTPU_DEBUG (step warnings);
    XLA_SAVE_TENSORS_FILE (+ XLA_SAVE_TENSORS_FMT text|dot) -> LAZYTPU_SAVE_GRAPHS;
    XLA_METRICS_FILE -> the report is appended there at each torch_xla.sync() (debug/metrics_saver.py) and at exit (torch_xla/_exit.py);
    XLA_IR_DEBUG -> user frames in graph dumps (always on in lazytpu);
    PJRT_DEVICE: TPU or CPU accepted (the device kind reported), else an error;
      it also picks the starting LAZYTPU_MATMUL_PRECISION when unset: default
      (a TPU's bf16 passes) for TPU, f32 for CPU;
    CPU_NUM_DEVICES (with PJRT_DEVICE=CPU) -> LAZYTPU_NUM_CORES (default 1, as
    torch_xla's CPU client: spawn starts that many workers);
    XLA_FLAGS: ignored, with a one-line note."""
    e = os.environ
    for k in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16"):
        if e.get(k, "0") not in ("", "0"):
            e.setdefault("LAZYTPU_USE_BF16", "1")
    if e.get("PT_XLA_DEBUG", "0") not in ("", "0") or \
            e.get("PT_XLA_DEBUG_LEVEL", "0") not in ("", "0"):
        e.setdefault("LAZYTPU_DEBUG", "1")
    if e.get("XLA_SAVE_TENSORS_FILE"):
        path = e["XLA_SAVE_TENSORS_FILE"]
        fmt = e.get("XLA_SAVE_TENSORS_FMT", "text").lower()
        if fmt == "dot" and not path.endswith(".dot"):
            path += ".dot"
        e.setdefault("LAZYTPU_SAVE_GRAPHS", path)
    pjrt = e.get("PJRT_DEVICE", "TPU").upper()
    if pjrt not in ("TPU", "CPU"):
        raise RuntimeError("lazytpu: PJRT_DEVICE=%s is not available; lazytpu simulates "
                           "TPU cores (PJRT_DEVICE=TPU or CPU)" % e["PJRT_DEVICE"])
    # f32 products as the device computes them: a TPU's bf16 passes at XLA's
    # DEFAULT precision, full f32 on XLA:CPU (torch_xla.backends)
    global matmul_level
    matmul_level = e.setdefault("LAZYTPU_MATMUL_PRECISION", "default" if pjrt == "TPU" else "f32")
    # the one LAZYTPU_* read outside the options table (base/options.def):
    # this runs before lazytpu._C may load (loading it starts the engine)
    if pjrt == "CPU" and not e.get("LAZYTPU_SHM_NAME"):
        n = e.get("CPU_NUM_DEVICES", "").strip() or "1"
        if not n.isdigit() or int(n) < 1:
            raise RuntimeError("lazytpu: CPU_NUM_DEVICES=%s: must be a positive number" % n)
        e.setdefault("LAZYTPU_NUM_CORES", n)
    if e.get("XLA_FLAGS"):
        _note("XLA_FLAGS=%s is ignored (lazytpu is not XLA)" % e["XLA_FLAGS"])
