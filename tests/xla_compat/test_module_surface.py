"""What torch_xla 2.9 makes reachable that scripts and libraries use
(compatibility mode): submodules loaded by `import torch_xla`, the TPU VM
metadata (Lightning's ThroughputMonitor reads it), torch_xla.utils.serialization
(xser) and its file layout, what 2.9's torch_xla.amp no longer has."""
import os
import subprocess
import sys

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_import_torch_xla_reaches_what_29_loads_with_it():
    """A fresh `import torch_xla` only (2.9's modules import these, so
    scripts use them as attributes): metrics, profiler, spmd, the 'xla'
    torch.distributed backend, xla_builder, scan."""
    code = ("import torch, torch_xla, torch.distributed as dist\n"
            "print(torch_xla.debug.metrics.metrics_report() is not None,\n"
            "      torch_xla.debug.profiler.Trace is not None,\n"
            "      torch_xla.distributed.spmd.Mesh is not None,\n"
            "      torch_xla.core.xla_builder is not None,\n"
            "      torch_xla.experimental.scan.scan is not None,\n"
            "      torch_xla.runtime.world_size(),\n"
            "      'xla' in dist.Backend.backend_list)\n"
            "try:\n    torch_xla.distributed.no_such_module\nexcept AttributeError as e:\n"
            "    print('refused', e)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "PJRT_"))}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300, cwd=REPO)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.strip().splitlines()
    assert lines[0] == "True True True True True 1 True", p.stdout
    assert lines[1].startswith("refused") and "no_such_module" in lines[1]


def test_tpu_metadata_is_the_simulated_board():
    from torch_xla._internal import tpu
    env = tpu.get_tpu_env()
    assert env["ACCELERATOR_TYPE"] == "v3-8" and tpu.version() == 3
    assert tpu.get_tpu_type() == "v3"
    assert env["WORKER_ID"] == 0 and env["TPU_PROCESS_BOUNDS"] == "1,1,1"
    assert tpu.get_worker_ips() == ["localhost"] and tpu.num_tpu_workers() == 1


def test_lightning_throughput_monitor_runs_without_a_tpu_peak():
    L = pytest.importorskip("lightning")
    from lightning.fabric.utilities.throughput import get_available_flops
    from lightning.pytorch.callbacks import ThroughputMonitor
    from torch.utils.data import DataLoader, TensorDataset
    # no peak FLOPs for a simulated chip: None and Lightning's own warning
    with pytest.warns(UserWarning, match="FLOPs not found for TPU 'LAZYTPU'"):
        assert get_available_flops(torch_xla.device(), torch.bfloat16) is None

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)

        def training_step(self, batch, i):
            return torch.nn.functional.cross_entropy(self.lin(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    logged = {}

    class Capture(L.pytorch.loggers.logger.Logger):
        name, version = "capture", 0

        def log_metrics(self, metrics, step=None):
            logged.update(metrics)

        def log_hyperparams(self, *args, **kwargs):
            pass

    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    trainer = L.Trainer(accelerator="tpu", devices=1, max_steps=6, logger=Capture(),
                        log_every_n_steps=1, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[ThroughputMonitor(lambda b: b[0].shape[0], window_size=2)])
    with pytest.warns(UserWarning):
        trainer.fit(Net(), DataLoader(ds, batch_size=8))
    assert logged["train/samples"] == 48
    assert logged["train/device/samples_per_sec"] > 0


def test_xser_save_load_round_trip_and_layout(tmp_path):
    import torch_xla.utils.serialization as xser
    d = torch_xla.device()
    torch.manual_seed(0)
    a, b = torch.randn(3, 4), torch.arange(5)
    data = {"w": a.to(d), "nested": [b.to(d), (a * 2).to(d), 7], "cpu": a.clone(),
            "name": "x"}
    path = str(tmp_path / "ckpt.pt")
    xser.save(data, path)
    files = sorted(os.listdir(path + ".tensors"))
    assert files == ["tensor_0.pt", "tensor_1.pt", "tensor_2.pt"]
    raw = torch.load(path, weights_only=False)        # references in the main file
    assert isinstance(raw["w"], xser.TensorReference) and raw["nested"][2] == 7
    assert torch.equal(raw["cpu"], a)
    got = xser.load(path)
    assert got["w"].device.type == "cpu" and torch.equal(got["w"], a)
    assert torch.equal(got["nested"][0], b) and torch.equal(got["nested"][1], a * 2)
    assert got["nested"][2] == 7 and got["name"] == "x" and torch.equal(got["cpu"], a)
    # saving again replaces the tensor folder
    xser.save({"only": b.to(d)}, path)
    assert os.listdir(path + ".tensors") == ["tensor_0.pt"]
    assert torch.equal(xser.load(path)["only"], b)
    # a model's state dict (the documented use)
    m = torch.nn.Linear(4, 3).to(d)
    xser.save(m.state_dict(), str(tmp_path / "m.pt"))
    cpu = torch.nn.Linear(4, 3)
    cpu.load_state_dict(xser.load(str(tmp_path / "m.pt")))
    assert torch.equal(cpu.weight, m.weight.detach().cpu())


def test_amp_is_29s():
    import torch_xla.amp as xamp
    assert hasattr(xamp, "autocast")
    with pytest.raises(AttributeError):
        xamp.GradScaler                     # noqa: B018  (gone in 2.9)
    assert xm.is_xla_tensor(torch.zeros(1, device=torch_xla.device()))


def test_utils_helpers():
    import torch_xla.utils.utils as xu
    os.environ["LT_TEST_FLAG"] = "1"
    assert xu.getenv_as("LT_TEST_FLAG", bool) is True and xu.check_env_flag("LT_TEST_FLAG")
    os.environ["LT_TEST_FLAG"] = "true"
    with pytest.raises(ValueError):
        xu.getenv_as("LT_TEST_FLAG", bool)      # 2.9 reads bools through int
    assert xu.check_env_flag("LT_TEST_FLAG") and not xu.check_env_flag("LT_TEST_UNSET")
    del os.environ["LT_TEST_FLAG"]
    t = torch.ones(2)
    data = {"a": (t, 3), "b": [t, {"c": t * 2}]}
    seen = []
    xu.for_each_instance(data, lambda v: isinstance(v, torch.Tensor), seen.append)
    assert len(seen) == 2                       # t once, t * 2 once
    out = xu.for_each_instance_rewrite(data, lambda v: isinstance(v, torch.Tensor),
                                       lambda v: v + 1)
    assert out["a"][0] is out["b"][0] and torch.equal(out["a"][0], t + 1)
    assert isinstance(out["a"], list) and out["a"][1] == 3      # tuples become lists
    # both walks visit a dict's key before its value (pytorch/xla's
    # test_util_foreach_api compares the two orders)
    walked, rewritten = [], []
    nested = {2.5: 11, "w": [12, {"k": "v"}]}
    xu.for_each_instance(nested, lambda v: isinstance(v, (int, str, float)), walked.append)
    xu.for_each_instance_rewrite(nested, lambda v: isinstance(v, (int, str, float)),
                                 lambda v: rewritten.append(v) or v)
    assert walked == rewritten == [2.5, 11, "w", 12, "k", "v"], (walked, rewritten)

    class Pair(xu.DataWrapper):
        def __init__(self, x, y):
            self.x, self.y = x, y

        def get_tensors(self):
            return [self.x, self.y]

        def from_tensors(self, tensors):
            return Pair(*tensors)

    p = xu.for_each_instance_rewrite([Pair(t, t * 3)], lambda v: isinstance(v, torch.Tensor),
                                     lambda v: v.to(torch_xla.device()))
    assert p[0].x.device.type == "xla" and torch.equal(p[0].y.cpu(), t * 3)
    assert xu.shape([[1, 2, 3], [4, 5, 6]]) == [2, 3]
    assert xu.flatten_nested_tuple((1, (2, (3,)), [4])) == (1, 2, 3, 4)
    assert xu.list_copy_append([1], 2) == [1, 2]
    gen = xu.FnDataGenerator(lambda d: d.sum(1), 4, torch.randn, dims=[3], count=2)
    batches = list(gen)
    assert len(batches) == 2 and batches[0][0].shape == (4, 3)
    assert torch.equal(batches[1][1], batches[1][0].sum(1))
    assert xu.parallel_work(2, lambda a, b: a * b, [1, 2, 3], [4, 5, 6]) == [4, 10, 18]
    ports = xu.get_free_tcp_ports(2)
    assert len(ports) == 2 and all(0 < p < 65536 for p in ports)
    printed = []
    assert xu.timed(lambda: 5, msg="x: ", printfn=printed.append) == 5
    with xu.TimedScope("y: ", printfn=printed.append):
        pass
    with xu.TimedScope("z: ", printfn=printed.append) as ts:
        ts.set_error(RuntimeError())
    assert [m[:3] for m in printed] == ["x: ", "y: "] and printed[0].endswith("ms")
    folder = xu.TmpFolder()
    name = folder.name
    assert os.path.isdir(name)
    del folder
    import gc
    gc.collect()
    assert not os.path.exists(name)
    assert xu.LazyProperty(lambda: 7).value == 7


def test_set_allow_execution_and_dimension_size():
    d = torch_xla.device()
    x = torch.arange(6.0, device=d).reshape(2, 3)
    torch_xla._XLAC._set_allow_execution(False)
    try:
        y = x * 2                                   # tracing is allowed
        with pytest.raises(RuntimeError, match="Unexpected execution happens inside the "
                                               "compiled function, exiting"):
            y.sum().item()
        with pytest.raises(RuntimeError, match="Unexpected execution"):
            torch_xla.sync()
    finally:
        torch_xla._XLAC._set_allow_execution(True)
    assert y.sum().item() == 30.0                    # still pending, runs now
    n = torch_xla._XLAC._get_xla_tensor_dimension_size(x, 1)
    assert n.device.type == "xla" and n.dtype == torch.int32 and n.dim() == 0
    assert int(n.cpu()) == 3


_PJRT_SCRIPT = '''
import torch, torch.distributed as dist, torch_xla
import torch_xla.experimental.pjrt_backend  # noqa: F401  (registers pjrt://)
def _mp_fn(i):
    dist.init_process_group("xla", init_method="pjrt://")
    t = torch.ones(1, device="xla") * (i + 1)
    dist.all_reduce(t)
    torch_xla.sync()
    if i == 0:
        print("sum", t.cpu().item(), dist.get_world_size())
if __name__ == "__main__":
    torch_xla.launch(_mp_fn)
'''


def test_legacy_pjrt_init_method(tmp_path):
    """torch_xla.experimental.pjrt_backend registers 2.9's legacy pjrt://
    init method (the same rendezvous as xla://)."""
    script = tmp_path / "pjrt.py"
    script.write_text(_PJRT_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "PJRT_"))}
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2")
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                       text=True, timeout=300, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "sum 3.0 2" in p.stdout


_PLUGIN_CODE = """
import os, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch, torch_xla
from torch_xla.experimental import plugins
print("WARN", [str(w.message) for w in caught if "plugin" in str(w.message)])
print("ENV", os.environ.get("PJRT_DYNAMIC_PLUGINS"), plugins.using_dynamic_plugins())
print("REG", sorted(plugins._plugin_registry))
try:
    p = plugins.default()
    print("DEFAULT", type(p).__name__, p.host_index(), p.physical_chip_count(),
          p.client_create_options(), p.requires_xla_coordinator())
    p.library_path()
except (KeyError, EnvironmentError) as e:
    print("REFUSED", type(e).__name__, e)
t = torch.ones(2, device=torch_xla.device())
try:
    plugins.use_dynamic_plugins()
except RuntimeError as e:
    print("LATE", e)
"""


def _plugin_run(tmp_path, **env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "PJRT_"))}
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-c", _PLUGIN_CODE], env=env, capture_output=True,
                       text=True, timeout=300, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    return dict(line.split(" ", 1) for line in p.stdout.strip().splitlines())


def test_plugin_registry_is_29s(tmp_path):
    """torch_xla.experimental.plugins as `import torch_xla` leaves it in
    2.9: dynamic plugins on, the TPU's plugin (here the simulated board:
    host 0, 8 processes for xmp.spawn, no libtpu to load), installed
    plugins from the entry-point group torch_xla.plugins (one that fails to
    load is a warning, not a failed import); use_dynamic_plugins refuses
    once a device tensor exists; CPU has no plugin."""
    site = tmp_path / "site"
    (site / "fakeplug-1.0.dist-info").mkdir(parents=True)
    (site / "fakeplug-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fakeplug\nVersion: 1.0\n")
    (site / "fakeplug-1.0.dist-info" / "entry_points.txt").write_text(
        "[torch_xla.plugins]\nfake = fakeplug:FakePlugin\nbroken = fakeplug:NoSuchClass\n")
    (site / "fakeplug.py").write_text(
        "from torch_xla.experimental import plugins\n"
        "class FakePlugin(plugins.DevicePlugin):\n"
        "    def physical_chip_count(self):\n        return 3\n")
    pp = str(site) + os.pathsep + os.environ.get("PYTHONPATH", "")
    out = _plugin_run(tmp_path, PYTHONPATH=pp)
    assert out["ENV"] == "1 True", out
    assert out["REG"] == "['FAKE', 'TPU']", out
    assert "'broken'" in out["WARN"] and "NoSuchClass" in out["WARN"], out
    assert out["DEFAULT"] == "TpuPlugin 0 8 {} False", out
    assert out["REFUSED"].startswith("OSError libtpu not found"), out
    assert out["LATE"] == "Can't enable dynamic plugins after XLA runtime is initialized", out

    out = _plugin_run(tmp_path, PYTHONPATH=pp, PJRT_DEVICE="CPU")
    assert out["ENV"] == "1 False", out                   # no CPU plugin in 2.9
    assert out["REFUSED"] == "KeyError 'CPU'", out

    out = _plugin_run(tmp_path, XLA_REGISTER_INSTALLED_PLUGINS="0")
    assert out["ENV"] == "None False" and out["REG"] == "[]", out
    assert out["REFUSED"] == "KeyError 'TPU'", out


def test_model_comparator_finds_the_first_differing_layer(tmp_path):
    """mc.save in a model's forward, one run on the CPU and one on the
    device: compare() is empty within tolerance and names the layer (and
    element) that differs once the device run is perturbed there."""
    import torch.nn as nn
    import torch_xla.debug.model_comparator as mc

    class Net(nn.Module):
        def __init__(self, bump=0.0):
            super().__init__()
            self.fc1, self.fc2, self.bump = nn.Linear(6, 5), nn.Linear(5, 3), bump

        def forward(self, x):
            x = mc.save("fc1", torch.relu(self.fc1(x)))
            x = x + self.bump * (torch.arange(5, device=x.device) == 2)
            return mc.save("out", self.fc2(x))

    x = torch.randn(4, 6)
    runs = {}
    for tag, device, bump in (("cpu", "cpu", 0.0), ("dev", xm.xla_device(), 0.0),
                              ("bad", xm.xla_device(), 1.0)):
        torch.manual_seed(0)
        net = Net(bump).to(device)
        mc.configure(str(tmp_path / tag))
        net(x.to(device))
        net(x.to(device))
        mc.save(None, x, step=3)
        runs[tag] = str(tmp_path / tag)
    mc.configure(None)
    saved = sorted(os.listdir(runs["cpu"]))
    assert saved == ["fc1.0", "fc1.1", "out.0", "out.1", "step-3"], saved
    named = os.listdir(os.path.join(runs["cpu"], "step-3"))
    assert len(named) == 1 and named[0].startswith("test_module_surface.py.l"), named
    assert mc.compare(runs["cpu"], runs["dev"], rtol=1e-4, atol=1e-5) == ""
    report = mc.compare(runs["cpu"], runs["bad"], rtol=1e-4, atol=1e-5)
    assert 'Changes in saved tensor "out" with id=0' in report, report
    assert "fc1" not in report, report
    os.remove(os.path.join(runs["bad"], "fc1.1"))
    assert "Mismatch: fc1.1 not in" in mc.compare(runs["cpu"], runs["bad"])


def test_dlpack_copies_through_the_host():
    import numpy as np
    import torch_xla.utils.dlpack as xdlpack
    t = torch.arange(6.0, device=xm.xla_device()).reshape(2, 3) * 2
    cap = xdlpack.to_dlpack(t)
    host = torch.utils.dlpack.from_dlpack(cap)
    assert host.device.type == "cpu" and torch.equal(host, torch.arange(6.0).reshape(2, 3) * 2)
    back = xdlpack.from_dlpack(np.arange(4, dtype=np.int32))
    assert back.device.type == "xla" and back.dtype == torch.int32
    assert back.cpu().tolist() == [0, 1, 2, 3]
    with pytest.raises(RuntimeError, match="expected an xla tensor"):
        xdlpack.to_dlpack(torch.ones(2))


_DP_CODE = """
import torch, torch.nn as nn, copy
import torch_xla.core.xla_model as xm
import torch_xla.distributed.data_parallel as dp
data = [(torch.randn(4, 3), torch.randn(4, 2)) for _ in range(3)]

def loop_fn(model, loader, device, context):
    opt = context.getattr_or("opt", lambda: torch.optim.SGD(model.parameters(), lr=0.1))
    losses = []
    for x, y in loader:
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        xm.optimizer_step(opt)
        losses.append(loss.item())
    return losses

torch.manual_seed(0)
ref = nn.Linear(3, 2)
par = dp.DataParallel(copy.deepcopy(ref))          # the devices: xla:0 alone
got = par(loop_fn, data)[0]
want = loop_fn(ref, iter(data), torch.device("cpu"), dp.Context(torch.device("cpu")))
print("DEVICES", par.devices)
print("LOSS", max(abs(a - b) for a, b in zip(got, want)), len(got))
print("W", (par.models[0].weight.cpu() - ref.weight).abs().max().item())
"""


def test_data_parallel_on_one_device_and_refusals():
    """DataParallel on the process's one device (CPU_NUM_DEVICES=1, as
    pytorch/xla's CI runs it) trains as the plain loop does; several devices
    of one process, and XLA lowering functions, are refused."""
    import torch.nn as nn
    import torch_xla.core.xla_op_registry as xor
    import torch_xla.distributed.data_parallel as dp
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "PJRT_"))}
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1")
    p = subprocess.run([sys.executable, "-c", _DP_CODE], env=env, capture_output=True,
                       text=True, timeout=300, cwd=REPO)
    assert p.returncode == 0, p.stderr[-3000:]
    out = dict(line.split(" ", 1) for line in p.stdout.strip().splitlines())
    assert out["DEVICES"] == "['xla:0']", out
    loss_err, n = out["LOSS"].split()
    assert float(loss_err) < 1e-5 and n == "3", out
    assert float(out["W"]) < 1e-5, out
    with pytest.raises(NotImplementedError, match="over 2 devices"):
        dp.DataParallel(nn.Linear(3, 2), device_ids=["xla:0", "xla:1"])
    with pytest.raises(NotImplementedError, match="'my_op' is an XLA lowering function"):
        xor.register("my_op", lambda a: a)(torch.ones(2, device=xm.xla_device()))


def test_send_cpu_data_to_device_moves_a_data_wrappers_tensors_only():
    """A DataWrapper (pytorch/xla's PackedSequence example): its
    get_tensors() go to the device, from_tensors() rebuilds it, and what it
    does not list (batch_sizes) stays on the CPU."""
    import torch.nn as nn
    import torch_xla.utils.utils as xu

    class PackWrapper(xu.DataWrapper):
        def __init__(self, pack):
            self.pack = pack

        def get_tensors(self):
            return [self.pack.data, self.pack.sorted_indices, self.pack.unsorted_indices]

        def from_tensors(self, tensors):
            return nn.utils.rnn.PackedSequence(tensors[0], self.pack.batch_sizes,
                                               tensors[1], tensors[2])

    batch = torch.tensor([[1., 2, 3], [4, 5, 0], [6, 0, 0]]).unsqueeze(-1)
    pack = nn.utils.rnn.pack_padded_sequence(batch, [3, 2, 1], batch_first=True)
    out = xm.send_cpu_data_to_device({"x": PackWrapper(pack)}, xm.xla_device())["x"]
    assert isinstance(out, nn.utils.rnn.PackedSequence)
    assert out.batch_sizes.device.type == "cpu" and out.data.device.type == "xla"
    assert torch.equal(out.data.cpu(), pack.data)


def test_sync_inside_a_profiler_trace_is_refused_as_29():
    """2.9 opens an IR scope per xp.Trace and a step that resets the scopes
    refuses while one is open; reset_scope=False and a StepTrace (its own
    scope closes first) are fine; ids restart after each step."""
    import torch_xla.debug.profiler as xp
    torch_xla.sync()
    with pytest.raises(RuntimeError, match=r"^Expecting scope to be empty but it is conv1\.1$"):
        with xp.Trace("conv1"):
            torch_xla.sync()

    @xp.trace_me("conv2")
    def step():
        xm.mark_step()

    with pytest.raises(RuntimeError, match=r"but it is conv2\.2$"):
        step()
    with pytest.raises(RuntimeError, match=r"but it is outer\.3/inner\.4$"):
        with xp.Trace("outer"), xp.Trace("inner"):
            torch_xla.sync()
    with xp.Trace("kept"):
        x = torch.ones(3, device=xm.xla_device()) * 2
        torch_xla.sync(reset_scope=False)
    for n in range(2):
        with xp.StepTrace("train", step_num=n):
            with xp.Trace("fwd"):
                x = x + 1
    assert x.cpu().tolist() == [4.0, 4.0, 4.0]
    with pytest.raises(RuntimeError, match=r"but it is epoch\.1$"):
        with xp.Trace("epoch"), xp.StepTrace("train"):
            pass
    torch_xla.sync()


def test_repeat_with_fixed_output_size_matches_repeat_interleave():
    from torch_xla.experimental.custom_kernel import repeat_with_fixed_output_size
    import torch_xla.debug.metrics as met
    for length, reps in ((20, [0, 1, 2, 0, 4, 0, 6, 7, 8, 9]), (100, [0, 5, 2, 0, 4, 9, 6, 7, 8, 0]),
                         (135, [3, 6, 2, 14, 27, 47, 8, 28]), (4, [0, 0, 0])):
        x = torch.randn(len(reps))
        met.clear_all()
        got = repeat_with_fixed_output_size(x.to(xm.xla_device()),
                                            torch.tensor(reps).to(xm.xla_device()), length)
        assert not [n for n in met.counter_names() if n.startswith("aten::")]
        base = torch.repeat_interleave(x, torch.tensor(reps))[:length]
        want = torch.cat([base, x[-1].repeat(length - base.numel())])
        assert torch.equal(got.cpu(), want), (length, reps)


def test_xlac_real_devices_and_matmul_precision_entry_points():
    devs = xm.get_xla_supported_devices()
    real = torch_xla._XLAC._xla_real_devices(devs)
    assert len(real) == len(devs) and all(r.split(":")[1] == d.split(":")[1]
                                          for r, d in zip(real, devs))
    with pytest.raises(RuntimeError, match="not a device of this process"):
        torch_xla._XLAC._xla_real_devices(["xla:%d" % len(devs)])
    import torch_xla.backends as backends
    before = backends.get_mat_mul_precision()
    try:
        torch_xla._XLAC._xla_set_mat_mul_precision("high")
        assert torch_xla._XLAC._xla_get_mat_mul_precision() == "high"
        assert backends.get_mat_mul_precision() == "high"
        with pytest.raises(RuntimeError, match="unknown precision 'fast'"):
            torch_xla._XLAC._xla_set_mat_mul_precision("fast")
    finally:
        torch_xla._XLAC._xla_set_mat_mul_precision(before)
