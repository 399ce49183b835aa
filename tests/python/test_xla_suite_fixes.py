"""torch_xla 2.9 behaviours that pytorch/xla's own tests (scripts/xla_suite.py)
exercise, checked here in fresh processes against values computed on the CPU
or against 2.9's documented behaviour: torch_xla.launch's worker count,
collectives under torch.compile, the collectives' ``output=`` tensors,
rendezvous tags and the refusal of a partial rendezvous."""
import os
from xla_script import run_xla_script

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _run(tmp_path, code, name, **extra):
    return run_xla_script(tmp_path, code, name, pjrt=None, **extra)


def test_launch_compiled_all_reduce_outputs_and_rendezvous(tmp_path):
    # one world of CPU_NUM_DEVICES=2 workers (torch_xla.launch = xmp.spawn with
    # nprocs=None); every result checked in the worker against CPU arithmetic
    out = _run(tmp_path, """
        import torch, torch_xla
        import torch_xla.core.xla_model as xm
        from torch_xla import runtime as xr

        def ar(t):
            return xm.all_reduce(xm.REDUCE_SUM, t)

        def fn(i):
            d = torch_xla.device()
            n = xr.world_size()
            base = torch.arange(2 * n * 3, dtype=torch.float32).reshape(2, n * 3)
            mine = base * (xr.global_ordinal() + 1)
            tot = base * sum(k + 1 for k in range(n))
            # xm.all_reduce traced by dynamo (fullgraph) and run on the device
            c = torch.compile(ar, backend="openxla", fullgraph=True)
            r = c(mine.to(d)).cpu()
            assert torch.equal(r, tot), (r, tot)
            # output= of the input's full size takes the shard's value and shape
            outs = [torch.zeros(2, n * 3, device=d) for _ in range(2)]
            res = xm.reduce_scatter(xm.REDUCE_SUM, [mine.to(d), mine.to(d)], 1.0, 1, n,
                                    output=outs, pin_layout=False)
            assert res is outs
            me = xr.global_ordinal()
            want = tot[:, 3 * me:3 * (me + 1)]
            for o in outs:
                assert tuple(o.shape) == (2, 3) and torch.equal(o.cpu(), want), o
            g = torch.zeros(1, device=d)
            assert xm.all_gather(mine.to(d), dim=0, output=g) is g
            assert tuple(g.shape) == (2 * n, n * 3)
            assert torch.equal(g.cpu(), torch.cat([base * (k + 1) for k in range(n)]))
            # a tag longer than lazytpu's world names (2.9 only logs the tag)
            got = xm.rendezvous("a_rendezvous_tag_that_is_much_longer_than_forty_seven_chars",
                                b"ORD=%d" % me)
            assert got == [b"ORD=%d" % k for k in range(n)], got
            try:
                xm.rendezvous("half", b"", replicas=[0])
            except ValueError as e:
                assert "Only global rendezvous" in str(e)
            else:
                raise AssertionError("a partial rendezvous must raise ValueError")
            open("worker.%d.of.%d" % (me, n), "w").write("ok")

        if __name__ == "__main__":
            torch_xla.launch(fn)
    """, "launch2.py", PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2")
    # two workers (CPU_NUM_DEVICES), not the 8 cores, each one checked
    assert sorted(p.name for p in tmp_path.glob("worker.*")) == [
        "worker.0.of.2", "worker.1.of.2"], out


def test_xla_process_group_mesh_subgroups(tmp_path):
    # torch_xla 2.9's new_group: the mesh of a row / column slice, ValueError
    # for a slice of no rectangle, NotImplementedError for the ops 2.9 leaves
    # out; collectives of a subgroup reduce over its row only (vs CPU sums)
    out = _run(tmp_path, """
        import torch, torch_xla
        import torch.distributed as dist
        import torch_xla.distributed.xla_backend as xb
        from torch_xla import runtime as xr

        def fn(i):
            dist.init_process_group("xla", init_method="xla://")
            me, n = xr.global_ordinal(), xr.world_size()
            assert isinstance(dist.group.WORLD, xb.ProcessGroupXla)
            opt = {"xla_pg_options": {"spmd": True}}
            rows = [dist.new_group(ranks=[0, 1], pg_options=opt),
                    dist.new_group(ranks=[2, 3], pg_options=opt)]
            cols = [dist.new_group(ranks=[0, 2], pg_options=opt),
                    dist.new_group(ranks=[1, 3], pg_options=opt)]
            row, col = rows[me // 2], cols[me % 2]
            assert row._mesh == [[0, 1], [2, 3]] and col._mesh == [[0, 2], [1, 3]]
            assert row.size() == 2 and row.rank() == me % 2
            for bad in ([1, 2], [0, 3], [0, 1, 2]):
                try:
                    xb._infer_mesh(bad, n)
                except ValueError:
                    pass
                else:
                    raise AssertionError("mesh of %s must raise ValueError" % bad)
            d = torch_xla.device()
            v = torch.tensor([1.0, 10.0]) * (me + 1)
            t = v.to(d)
            dist.all_reduce(t, group=row)
            r0 = 2 * (me // 2)
            assert torch.equal(t.cpu(), torch.tensor([1.0, 10.0]) * (r0 + 1 + r0 + 2)), t
            outs = [torch.zeros(2, device=d) for _ in range(2)]
            dist.all_gather(outs, v.to(d), group=col)
            want = [torch.tensor([1.0, 10.0]) * (me % 2 + 1 + 2 * k) for k in range(2)]
            assert all(torch.equal(o.cpu(), w) for o, w in zip(outs, want)), outs
            for op in ("allreduce_coalesced", "recv_anysource", "monitored_barrier"):
                try:
                    getattr(dist.group.WORLD, op)(t)
                except NotImplementedError:
                    pass
                else:
                    raise AssertionError(op)
            open("groups_ok.%d" % me, "w").write("ok")

        if __name__ == "__main__":
            torch_xla.launch(fn)
    """, "groups4.py", PJRT_DEVICE="CPU", CPU_NUM_DEVICES="4")
    assert sorted(p.name for p in tmp_path.glob("groups_ok.*")) == [
        "groups_ok.%d" % k for k in range(4)], out


def test_run_multiprocess_twice_on_one_device(tmp_path):
    # 2.9 runs fn in worker processes even for one device: the caller's
    # runtime stays uninitialized, so a second run_multiprocess works
    out = _run(tmp_path, """
        import torch, torch_xla
        from torch_xla._internal import pjrt

        def fn(k):
            t = torch.arange(4.0, device=torch_xla.device()) * k
            return t.sum().item()

        if __name__ == "__main__":
            assert pjrt.run_multiprocess(fn, 2) == {0: 12.0}
            assert pjrt.run_multiprocess(fn, k=3) == {0: 18.0}
            assert not torch_xla._XLAC._xla_runtime_is_initialized()
            torch.ones(1, device=torch_xla.device()).cpu()
            try:
                pjrt.run_multiprocess(fn, 1)
            except RuntimeError as e:
                assert "already initialized" in str(e)
            else:
                raise AssertionError("run_multiprocess after using the device")
            print("RUNMP OK")
    """, "runmp.py", PJRT_DEVICE="CPU")
    assert "RUNMP OK" in out


def test_single_process_names_as_2_9(tmp_path):
    # names pytorch/xla's tests use, checked against 2.9's documented behaviour
    metrics = tmp_path / "metrics.txt"
    out = _run(tmp_path, """
        import os
        import torch, torch_xla
        import torch_xla.core.xla_env_vars as xenv
        import torch_xla.debug.metrics as met
        from torch_xla import runtime as xr
        from torch_xla.experimental.scan_layers import scan_layers
        from torch_xla.experimental import scan as scan_module

        assert torch_xla.xm is torch_xla.core.xla_model and torch_xla.xr is xr
        assert xenv.WORLD_SIZE == "WORLD_SIZE" and xenv.PJRT_CPU_ASYNC_CLIENT == "PJRT_CPU_ASYNC_CLIENT"
        assert not hasattr(xenv, "HOST_ORDINAL")           # XRT names are gone in 2.9
        try:
            torch_xla.device(10)
        except IndexError:
            pass
        else:
            raise AssertionError("device(10) with one device must raise IndexError")
        os.environ["PJRT_SELECT_DEFAULT_DEVICE"] = "0"
        pj = os.environ.pop("PJRT_DEVICE")
        assert xr.device_type() is None
        os.environ["PJRT_DEVICE"] = pj
        # the counter a torch_xla name designates
        t = torch.tensor(3.0, device=torch_xla.device())
        before = met.counter_value("CreateXlaTensor")
        torch_xla._XLAC._xla_increment_counter("CreateXlaTensor", 3)
        assert met.counter_value("CreateXlaTensor") == before + 3
        torch_xla._XLAC._xla_increment_counter("SuiteCounter", 2)
        assert met.counter_value("SuiteCounter") == 2
        # XLA_METRICS_FILE: one record per sync
        torch_xla.sync()
        (t * 2).cpu()
        torch_xla.sync()
        text = open(os.environ["XLA_METRICS_FILE"]).read()
        assert text.count("[MetricsData; step=") == 2, text[:300]
        # scan_layers: 2.9's structure errors, tuple carries, values vs a loop
        scan_module._SCAN_COMPUTATION_CACHE.clear()
        d = torch_xla.device()
        bad = [torch.nn.Linear(4, 4), torch.nn.Linear(4, 5)]
        try:
            scan_layers([l.to(d) for l in bad], torch.zeros(2, 4, device=d))
        except ValueError as e:
            assert "Shape mismatch" in str(e)
        else:
            raise AssertionError("layers of other shapes must raise ValueError")

        class Two(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 4)
            def forward(self, x, y):
                return self.lin(x).sin(), self.lin(y).cos()

        torch.manual_seed(0)
        layers = [Two() for _ in range(3)]
        x, y = torch.randn(2, 4), torch.randn(2, 4)
        want = (x, y)
        for l in layers:
            want = l(*want)
        got = scan_layers([l.to(d) for l in layers], (x.to(d), y.to(d)))
        assert all(torch.allclose(g.cpu(), w, atol=1e-5) for g, w in zip(got, want))
        print("NAMES OK")
    """, "names.py", PJRT_DEVICE="CPU", XLA_METRICS_FILE=str(metrics))
    assert "NAMES OK" in out


def test_compile_full_graph_refusal_says_2_9s_words(tmp_path):
    # torch_xla 2.9 refuses an execution inside torch_xla.compile(full_graph=True)
    # with RuntimeError "Unexpected execution happens inside the compiled
    # function, exiting"; lazytpu says the same first, then what and where
    out = _run(tmp_path, """
        import torch, torch_xla

        def branchy(t):
            if t[0][0] > 0:           # a value read while traced
                return torch.sin(t)
            return torch.cos(t)

        t = torch.randn(5, 5, device=torch_xla.device())
        try:
            torch_xla.compile(branchy, full_graph=True)(t)
        except RuntimeError as e:
            msg = str(e)
        lines = msg.splitlines()
        assert lines[0] == "Unexpected execution happens inside the compiled function, exiting"
        assert "branchy" in lines[1] and "full_graph=True" in lines[1], msg
        # without full_graph the same function runs (the read syncs)
        r = torch_xla.compile(branchy)(t)
        want = torch.sin(t.cpu()) if t.cpu()[0][0] > 0 else torch.cos(t.cpu())
        assert torch.allclose(r.cpu(), want)
        print("OK")
    """, "full_graph.py", PJRT_DEVICE="CPU")
    assert "OK" in out


def test_placeholder_tensor_refused_by_name(tmp_path):
    # torch_xla.core.xla_builder.create_placeholder_tensor imports (pytorch/xla's
    # test_placeholder.py imports it at the top) and refuses loudly when called
    out = _run(tmp_path, """
        import torch, torch_xla
        from torch_xla.core.xla_builder import create_placeholder_tensor
        try:
            create_placeholder_tensor((2, 3), torch.bfloat16)
        except NotImplementedError as e:
            assert "create_placeholder_tensor((2, 3), torch.bfloat16)" in str(e), e
            print("OK")
    """, "placeholder.py", PJRT_DEVICE="CPU")
    assert "OK" in out


def test_eager_mode_ops_count_as_eager_not_execute_time(tmp_path):
    # torch_xla 2.9's eager mode: each eager op's run is one EagerOpExecuteTime
    # sample and no ExecuteTime sample; a torch_xla.compile'd function run in
    # eager mode is one ExecuteTime sample per call and no eager op
    out = _run(tmp_path, """
        import torch, torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met
        torch_xla.experimental.eager_mode(True)
        dev = torch_xla.device()
        a = torch.arange(6.0).to(dev)
        met.clear_all()
        b = (a * 2 + 1).sum()
        xm.wait_device_ops()
        assert met.metric_data("EagerOpExecuteTime")[0] >= 2, met.metric_data("EagerOpExecuteTime")
        assert "ExecuteTime" not in met.metric_names(), met.metric_data("ExecuteTime")
        assert b.item() == 36.0
        met.clear_all()
        f = torch_xla.compile(lambda x: (x * 3).cos())
        y = f(a)
        xm.wait_device_ops()      # ExecuteTime is recorded when the program ends
        assert met.metric_data("ExecuteTime")[0] == 1, met.metric_data("ExecuteTime")
        assert "EagerOpExecuteTime" not in met.metric_names()
        assert torch.allclose(y.cpu(), (torch.arange(6.0) * 3).cos())
        y2 = f(a)
        xm.wait_device_ops()
        assert met.metric_data("ExecuteTime")[0] == 2
        print("ok")
    """, "eager_metrics.py")
    assert "ok" in out
