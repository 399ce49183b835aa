"""pytorch/xla's own tests, unchanged, on lazytpu (``make xla-suite``).

    LAZYTPU_PYTORCH_XLA_TESTS=/path/to/xla/test python scripts/xla_suite.py [-k PATTERN]
        [--json out.json] [--timeout S]

Fetches nothing: point LAZYTPU_PYTORCH_XLA_TESTS (or --tests) at the test/
directory of a pytorch/xla checkout (v2.9.0). Each file below runs as
``python -m lazytpu FILE ARGS`` with ``PJRT_DEVICE=CPU`` (the CPU flavour of
torch_xla: ``xm.xla_device_hw`` is "CPU", as in pytorch/xla's CI), one file at
a time, through scripts/xla_suite_probe.py, which records each unittest
outcome. A file without unittest tests (the ``test_mp_*`` scripts) is one
test: it passes when it exits 0. Prints per-file pass / fail / error / skip,
the expected failures (scripts/xla_suite_expected.txt, each with a reason)
and a total; exits 1 on an unexpected failure or an expected failure that
passed (so the list stays current).

Which files. "Device-generic" here means: the file tests torch_xla's
user-facing Python surface (devices, steps, collectives and multi-process,
torch.distributed, FSDP, metrics and debugging, amp, dynamo, checkpointing,
eager mode, the runtime, loops) and runs on torch_xla's CPU device in
pytorch/xla's CI. Left out, with the reason:
  - op coverage and lowering (test_operations*.py, test_ops*.py, test_core_aten_ops.py,
    test_python_ops.py, ds/, quantized_ops/): per-op numerics, tested by lazytpu's
    own OpInfo sweep; test_operations asserts on IR/HLO text throughout;
  - SPMD: spmd/ runs here (its own group: the files pytorch/xla's CPU CI runs, on one
    device or 4 as that CI does, most also @tpu as its TPU CI does, on lazytpu's 8
    simulated cores), except spmd/test_xla_sharding_hlo.py and
    test_spmd_lowering_context.py (HLO text and XLA's lowering context),
    test_spmd_graph_dump.py (the layout of XLA's graph dump file), test_xla_auto_sharding.py
    (auto-sharding is not simulated: use_spmd(auto=True) raises),
    test_sharding_strategies.py (a benchmark script, batch 131072 x 2048, in no CI) and test_train_spmd_imagenet.py (torchvision); *_spmd.py
    elsewhere run too (scan/test_scan_spmd.py, eager/test_eager_spmd.py), except
    test_autocast_xla.py (each of its tests reads the HLO text) and
    test_assume_pure_spmd.py (JAX);
  - TPU / GPU / Neuron only (*_tpu.py, test_pallas*, test_*kernel*.py, test_fp8.py,
    test_gmm.py, test_splash_attention.py, neuron/, test_profile_mp_mnist.py);
  - XLA artefacts: stablehlo/, test_hlo_metadata.py, test_input_output_aliases.py
    (buffer donation in the HLO), test_user_computation_debug_cache.py,
    test_jax_interop.py and test_assume_pure*.py (JAX), test_callback.py;
  - dynamo bridge internals (dynamo/test_bridge.py, test_graph_input_matcher.py,
    test_none_remover.py, test_num_output.py, test_dynamo_aliasing.py,
    test_dynamo_graph_dump.py): unit tests of torch_xla's FX bridge classes;
  - training scripts that need torchvision models or a data set
    (test_train_mp_imagenet*.py); test_train_mp_mnist.py runs in
    tests/python/test_torch_xla.py. test_train_mp_mnist_fsdp_with_ckpt.py runs
    here on fake data (one epoch), for FSDP with gradient checkpointing.
"""
import argparse
import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "xla_suite_probe.py")
EXPECTED = os.path.join(HERE, "xla_suite_expected.txt")

# (run id, file, options). devices: CPU_NUM_DEVICES (1 as pytorch/xla's CI
# runs most files; 4 for the multi-process files: a world of 4 processes,
# more demanding than CI's 1). env: extra variables. args: command line.
FILES = [
    # collectives and multi-process
    ("test_mp_replication.py", {"devices": 4}),
    ("test_mp_all_gather.py", {"devices": 4}),
    ("test_mp_all_to_all.py", {"devices": 4}),
    ("test_mp_reduce_scatter.py", {"devices": 4}),
    ("test_mp_collective_permute.py", {"devices": 4}),
    ("test_mp_collective_matmul.py", {"devices": 4}),
    ("test_mp_distributed_mm.py", {"devices": 4}),
    ("test_mp_mesh_reduce.py", {"devices": 4}),
    # one device, as pytorch/xla's CI: the file asks for a rendezvous of half
    # the world, which 2.9 refuses (ValueError "Only global rendezvous is
    # supported") in any world of 2 or more; lazytpu refuses it the same way
    ("test_mp_rendezvous.py", {"devices": 1}),
    ("test_mp_save.py", {"devices": 4}),
    ("test_mp_sync_batch_norm.py", {"devices": 4}),
    ("test_mp_early_exit.py", {"devices": 4}),
    ("test_zero1.py", {"devices": 4}),
    ("eager/test_eager_all_reduce_in_place.py", {"devices": 4}),
    ("dynamo/test_traceable_collectives.py", {"devices": 4}),
    # torch.distributed and DDP
    ("test_torch_distributed_xla_backend.py", {}),
    ("torch_distributed/test_torch_distributed_all_gather_xla_backend.py", {"devices": 4}),
    ("torch_distributed/test_torch_distributed_all_reduce_xla_backend.py", {"devices": 4}),
    ("torch_distributed/test_torch_distributed_bucketed_all_reduce_xla_backend.py",
     {"devices": 4}),
    ("torch_distributed/test_torch_distributed_multi_all_reduce_xla_backend.py",
     {"devices": 4}),
    ("torch_distributed/test_torch_distributed_reduce_scatter_xla_backend.py",
     {"devices": 4}),
    ("torch_distributed/test_ddp.py", {"devices": 4}),
    ("pjrt/test_ddp.py", {}),
    # FSDP
    ("test_fsdp_auto_wrap.py", {"devices": 4}),
    ("torch_distributed/test_torch_distributed_fsdp_meta.py", {"devices": 4}),
    ("test_torch_distributed_fsdp_frozen_weight.py", {"devices": 4}),
    # metrics and debugging
    ("test_metrics.py", {}),
    ("test_metrics.py@metrics_file", {"env": {"XLA_METRICS_FILE": "{tmp}/metrics.txt"}}),
    ("pjrt/test_metrics.py", {}),
    ("metrics_compare_utils_test.py", {}),
    ("debug_tool/test_pt_xla_debug.py",
     {"env": {"PT_XLA_DEBUG": "1", "PT_XLA_DEBUG_FILE": "{tmp}/pt_xla_debug.txt"}}),
    ("debug_tool/test_pt_xla_debug.py@level1",
     {"env": {"PT_XLA_DEBUG_LEVEL": "1", "PT_XLA_DEBUG_FILE": "{tmp}/pt_xla_debug.txt"}}),
    ("debug_tool/test_mp_pt_xla_debug.py",
     {"devices": 4,
      "env": {"PT_XLA_DEBUG": "1", "PT_XLA_DEBUG_FILE": "{tmp}/pt_xla_debug.txt"}}),
    ("test_profiler_session.py", {}),
    ("pjrt/test_profiler.py", {}),
    ("test_env_var_mapper.py", {}),
    # amp
    ("test_autocast.py", {}),
    ("test_syncfree_optimizers.py", {}),
    # dynamo
    ("dynamo/test_dynamo.py", {}),
    ("dynamo/test_dynamo_integrations_util.py", {}),
    ("dynamo/test_dynamo_dynamic_shape.py", {}),
    ("dynamo/test_dynamo_config.py", {}),
    # checkpointing: as pytorch/xla's TPU CI runs it, plain and under autocast
    ("test_grad_checkpoint.py", {}),
    ("test_grad_checkpoint.py@autocast", {"args": ["--test_autocast"]}),
    # FSDP v1 nested by hand, each wrapped module gradient-checkpointed, then the
    # shards saved and consolidated; fake data (no data set, no torchvision use)
    ("test_train_mp_mnist_fsdp_with_ckpt.py",
     {"devices": 4, "args": ["--fake_data", "--num_epochs", "1", "--use_nested_fsdp",
                             "--use_gradient_checkpointing", "--ckpt_prefix",
                             "{tmp}/ckpt/final_ckpt"]}),
    # eager mode and compile
    ("eager/test_eager.py", {}),
    ("eager/test_eager_with_xla_compile.py", {}),
    ("eager/test_eager_with_torch_compile.py", {}),
    ("eager/test_eager_spmd.py", {}),
    # runtime
    ("pjrt/test_runtime.py", {}),
    ("pjrt/test_runtime_multi_cpu.py", {}),
    ("pjrt/test_dtypes.py", {}),
    # the device-plugin registry with the TPU plugin registered again by hand
    ("pjrt/test_dynamic_plugin_tpu.py@tpu", {"env": {"PJRT_DEVICE": "TPU"}}),
    ("pjrt/test_mesh_service.py", {"devices": 4}),
    ("test_devices.py", {"devices": 4}),
    ("test_persistent_cache.py", {}),
    # its tests skip unless the device is a TPU: lazytpu's simulated TPU runs
    # them (fresh processes, xmp.spawn and SPMD over the persistent cache)
    ("test_persistent_cache.py@tpu", {"env": {"PJRT_DEVICE": "TPU"}}),
    ("test_compilation_cache_utils.py", {}),
    ("test_async_closures.py", {}),
    ("test_deprecation.py", {}),
    ("test_data_type.py", {}),
    ("test_xla_graph_execution.py", {}),
    ("test_dynamic_shapes_detector.py", {}),
    ("test_placeholder.py", {}),
    ("test_inplace_update.py", {}),
    # loops
    ("test_while_loop.py", {}),
    ("scan/test_scan.py", {}),
    ("scan/test_scan_layers.py", {}),
    # its tests skip below 4 devices: the simulated TPU's 8 cores run them
    ("scan/test_scan_spmd.py@tpu", {"env": {"PJRT_DEVICE": "TPU"}}),
    ("test_gradient_accumulation.py", {}),
    # SPMD (spmd/): as pytorch/xla's CPU CI runs them (one device, or 4 for
    # its run_test_multi_devices files), and as its TPU CI does
    # (@tpu: PJRT_DEVICE=TPU, lazytpu's 8 simulated cores)
    ("spmd/test_xla_sharding.py", {}),
    ("spmd/test_xla_sharding.py@tpu", {"env": {"PJRT_DEVICE": "TPU"}}),
    ("spmd/test_xla_virtual_device.py", {}),
    ("spmd/test_xla_virtual_device.py@tpu", {"env": {"PJRT_DEVICE": "TPU"}}),
    ("spmd/test_xla_spmd_python_api_interaction.py", {}),
    ("spmd/test_xla_spmd_python_api_interaction.py@tpu", {"env": {"PJRT_DEVICE": "TPU"}}),
    ("spmd/test_dynamo_spmd.py", {}),
    ("spmd/test_spmd_debugging.py", {}),
    ("spmd/test_spmd_debugging.py@tpu", {"env": {"PJRT_DEVICE": "TPU"}}),
    ("spmd/test_mp_input_sharding.py@tpu", {"env": {"PJRT_DEVICE": "TPU"}}),
    ("spmd/test_fsdp_v2.py@tpu", {"env": {"PJRT_DEVICE": "TPU"}}),
    ("spmd/test_spmd_parameter_wrapping.py", {}),
    ("spmd/test_spmd_parameter_wrapping.py@tpu",
     {"env": {"PJRT_DEVICE": "TPU", "XLA_PARAMETER_WRAPPING_THREADSHOLD": "1"}}),
    ("spmd/test_xla_sharded_tensor.py", {"devices": 4}),
    ("spmd/test_dtensor_convert_mesh.py", {"devices": 4}),
    ("spmd/test_xla_dtensor_spec_conversion.py", {"devices": 4}),
    ("spmd/test_dtensor_redistribute.py", {"devices": 4}),
    ("spmd/test_xla_dtensor_placements.py", {"devices": 4}),
    ("spmd/test_dtensor_integration.py", {}),
    ("spmd/test_dtensor_integration2.py", {}),
    ("spmd/test_dtensor_integration3.py", {"devices": 4}),
    ("spmd/test_train_spmd_linear_model.py", {"args": ["--skip-gradient-checkpointing"]}),
    ("spmd/test_xla_distributed_checkpoint.py", {}),
    ("spmd/test_xla_distributed_checkpoint.py@tpu", {"env": {"PJRT_DEVICE": "TPU"}}),
]

STATUSES = ("pass", "fail", "error", "skip")


def load_expected(path=EXPECTED):
    """{(run id, test pattern): (category, reason)} from the expected-failure
    list: lines ``RUN::TEST | category | reason`` (TEST may end in *)."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split("|", 2)]
            if len(parts) != 3 or "::" not in parts[0] or not parts[2]:
                raise SystemExit("%s:%d: want 'RUN::TEST | category | reason'" % (path, n))
            run, test = parts[0].split("::", 1)
            out[(run, test)] = (parts[1], parts[2])
    return out


def expected_for(expected, run, test):
    for (r, pat), v in expected.items():
        if r != run:
            continue
        if pat == test or (pat.endswith("*") and test.startswith(pat[:-1])):
            return v
    return None


def static_tests(path):
    """Test methods in a file that could not be imported (for the count):
    every ``test*`` method of a class; a parameterized one counts once per
    case when its cases are a literal list."""
    try:
        tree = ast.parse(open(path).read())
    except (OSError, SyntaxError):
        return []
    names = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test"):
                cases = 1
                for d in fn.decorator_list:
                    if isinstance(d, ast.Call) and getattr(d.func, "attr", "") in (
                            "parameters", "named_parameters", "product"):
                        if d.args and all(isinstance(a, (ast.Tuple, ast.Dict,
                                                         ast.Constant)) for a in d.args):
                            cases = len(d.args)
                names += ["%s.%s" % (cls.name, fn.name)] * cases
    return names


def run_file(tests_dir, run, opts, timeout, verbose=False):
    """Runs one file; returns {"tests": {id: (outcome, msg)}, "rc", "died",
    "seconds", "log"}."""
    fname = run.split("@", 1)[0]
    path = os.path.join(tests_dir, fname)
    tmp = tempfile.mkdtemp(prefix="xla-suite-")
    results = os.path.join(tmp, "results.jsonl")
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("XLA_", "PT_XLA", "PJRT_", "CPU_NUM_DEVICES", "TPU_")) or (
                k.startswith("LAZYTPU_") and k not in ("LAZYTPU_BIN_DIR",)):
            env.pop(k)
    env.update({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(opts.get("devices", 1)),
                "XLA_SUITE_RESULTS": results, "PYTHONUNBUFFERED": "1"})
    # torchvision cannot be installed beside torch 2.13: files that import it
    # at the top get tests/python/support's stand-in (its attributes raise
    # RuntimeError), so only the tests that use it fail
    env["PYTHONPATH"] = os.pathsep.join(
        [p for p in (os.path.join(os.path.dirname(HERE), "tests", "python", "support"),
                     env.get("PYTHONPATH")) if p])
    for k, v in opts.get("env", {}).items():
        env[k] = v.replace("{tmp}", tmp)
    cmd = [sys.executable, "-m", "lazytpu", PROBE, path] + [
        a.replace("{tmp}", tmp) for a in opts.get("args", [])]
    t0 = time.time()
    log_path = os.path.join(tmp, "log.txt")
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, cwd=os.path.dirname(path), env=env, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout)
            hung = False
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc, hung = -9, True
    secs = time.time() - t0
    with open(log_path, errors="replace") as f:
        log_text = f.read()
    tests, died, started = {}, None, []
    if os.path.exists(results):
        with open(results) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("event") == "died":
                    died = rec.get("msg", "")
                    continue
                tid, out = rec["test"], rec["outcome"]
                if out == "started":
                    started.append(tid)
                    continue
                prev = tests.get(tid)
                # a failed subtest or tearDown error outranks a later pass
                if prev is None or STATUSES.index(out) in (1, 2) or prev[0] == "pass" and \
                        out != "pass":
                    tests[tid] = (out, rec.get("msg", ""))
    for tid in started:
        if tid not in tests:
            tests[tid] = ("error", "hung (killed after %ds)" % timeout if hung
                          else "process died inside the test (exit %d)" % rc)
    if not tests:
        if died is not None or (rc != 0 and static_tests(path)):
            names = static_tests(path) or ["<script>"]
            msg = "died before its tests ran: %s" % (died or last_error(log_text) or
                                                      "exit %d" % rc)
            for n in names:
                tests[n] = ("error", msg)
        else:
            tests["<script>"] = (("pass", "") if rc == 0 else
                                 ("error", "hung (killed after %ds)" % timeout if hung
                                  else "exit %d: %s" % (rc, last_error(log_text))))
    elif rc != 0 and all(o == "pass" or o == "skip" for o, _ in tests.values()) and \
            (hung or rc < 0):
        tests["<exit>"] = ("error", "hung after the tests" if hung else
                           "killed by signal %d after the tests" % -rc)
    if verbose:
        sys.stdout.write(log_text[-4000:])
    keep = os.environ.get("XLA_SUITE_KEEP_LOGS")
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(log_path, os.path.join(keep, run.replace("/", "_") + ".log"))
    shutil.rmtree(tmp, ignore_errors=True)
    return {"tests": tests, "rc": rc, "seconds": secs}


def last_error(log_text):
    lines = [l for l in log_text.splitlines() if l.strip()]
    for l in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Interrupt)\b", l.strip()) or \
                "Error:" in l:
            return l.strip()[:300]
    return lines[-1][:300] if lines else ""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", default=os.environ.get("LAZYTPU_PYTORCH_XLA_TESTS"),
                    help="pytorch/xla's test/ directory (or the checkout)")
    ap.add_argument("-k", default=None, help="only runs whose id contains this")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per file")
    ap.add_argument("--json", default=None, help="write every outcome here")
    ap.add_argument("--list", action="store_true", help="print the runs and exit")
    ap.add_argument("-v", action="store_true", help="print each file's output tail")
    a = ap.parse_args(argv)
    if a.list:
        for run, _ in FILES:
            print(run)
        return 0
    if not a.tests:
        raise SystemExit("xla_suite: set LAZYTPU_PYTORCH_XLA_TESTS to the test/ directory "
                         "of a pytorch/xla checkout (nothing is fetched)")
    tests_dir = os.path.abspath(a.tests)
    if os.path.isdir(os.path.join(tests_dir, "test")) and \
            not os.path.exists(os.path.join(tests_dir, "test_utils.py")):
        tests_dir = os.path.join(tests_dir, "test")
    expected = load_expected()
    totals = dict.fromkeys(("pass", "fail", "error", "skip", "xfail", "xpass",
                            "internals"), 0)
    unexpected, report = [], {}
    print("%-66s %5s %5s %5s %5s %5s %6s" % ("file", "pass", "fail", "error", "skip",
                                            "xfail", "secs"), flush=True)
    for run, opts in FILES:
        if a.k and a.k not in run:
            continue
        if not os.path.exists(os.path.join(tests_dir, run.split("@", 1)[0])):
            print("%-66s missing in %s" % (run, tests_dir), flush=True)
            unexpected.append((run, "<file>", "error", "missing"))
            continue
        res = run_file(tests_dir, run, opts, a.timeout, a.v)
        counts = dict.fromkeys(("pass", "fail", "error", "skip", "xfail"), 0)
        for tid, (out, msg) in sorted(res["tests"].items()):
            exp = expected_for(expected, run, tid)
            if out in ("fail", "error") and exp:
                counts["xfail"] += 1
                totals["xfail"] += 1
                if exp[0] == "internals":
                    totals["internals"] += 1
            elif out == "pass" and exp:
                counts["pass"] += 1
                totals["xpass"] += 1
                unexpected.append((run, tid, "xpass", "listed as expected failure (%s)"
                                   % exp[1]))
            else:
                counts[out] += 1
                if out in ("fail", "error"):
                    unexpected.append((run, tid, out, msg))
            if not (out in ("fail", "error") and exp):
                totals[out] += 1
        report[run] = {"seconds": round(res["seconds"], 1), "rc": res["rc"],
                       "tests": {t: {"outcome": o, "msg": m}
                                 for t, (o, m) in res["tests"].items()}}
        print("%-66s %5d %5d %5d %5d %5d %6.0f" % (
            run, counts["pass"], counts["fail"], counts["error"], counts["skip"],
            counts["xfail"], res["seconds"]), flush=True)
    ran = totals["pass"] + totals["fail"] + totals["error"] + totals["xfail"]
    generic = ran - totals["internals"]
    print("\ntotal: %d tests: %d pass, %d fail, %d error, %d expected failures "
          "(%d on XLA internals), %d skipped"
          % (ran + totals["skip"], totals["pass"], totals["fail"], totals["error"],
             totals["xfail"], totals["internals"], totals["skip"]))
    if generic:
        print("device-generic tests not asserting on XLA internals: %d of %d pass (%.1f%%)"
              % (totals["pass"], generic, 100.0 * totals["pass"] / generic))
    if unexpected:
        print("\nunexpected (not in %s):" % os.path.relpath(EXPECTED))
        for run, tid, out, msg in unexpected:
            print("  %s::%s  %s  %s" % (run, tid, out, msg))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"files": report, "totals": totals}, f, indent=1, sort_keys=True)
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
