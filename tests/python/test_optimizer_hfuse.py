"""Horizontal fusion (lazy/compile_hfuse.c) on optimizer steps: a lazy
torch.optim step over many parameters of different sizes (SGD with momentum,
Adam, AdamW; for-loop and foreach; f32 and bf16) matches eager PyTorch on
the CPU (parameters and optimizer state after a few steps) and runs as one
kernel per step instead of one per parameter (LAZYTPU_HFUSE=0). A group
that reads another's output through a kernel is not merged with it.
The kernel count comes from LAZYTPU_PROFILE, read once per process: each
case runs in a fresh process."""
import json
import os
import subprocess
import sys

import pytest

SCRIPT = r'''
import hashlib, json, sys
import torch, lazytpu, lazytpu.metrics as met
dev = lazytpu.device()
SHAPES = [(1,), (7,), (33, 5), (256,), (64, 64), (3, 30, 50), (40000,), (10, 3, 3, 3),
          (129,), (2, 2)]

def kernels():
    return sum(met.metric_data(n)[0] for n in met.metric_names()
               if n.startswith("KernelTime::"))

def make(kind, params, foreach):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=foreach)
    if kind == "adam":
        return torch.optim.Adam(params, lr=0.05, foreach=foreach)
    return torch.optim.AdamW(params, lr=0.05, weight_decay=0.1, foreach=foreach)

def err(a, b, dt):
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    # bf16: the fused update keeps its intermediates in f32 (rounded once
    # when stored), eager rounds after every op
    tol = 1e-5 if dt == torch.float32 else 4e-2
    return ((a - b).abs() / (b.abs() + 1)).max().item() / tol

res = {}
for kind in ("sgd", "adam", "adamw"):
    for foreach in (False, True):
        for dt in (torch.float32, torch.bfloat16):
            torch.manual_seed(0)
            cpu = [torch.randn(s).to(dt).requires_grad_() for s in SHAPES]
            lz = [p.detach().clone().to(dev).requires_grad_() for p in cpu]
            oc, ol = make(kind, cpu, foreach), make(kind, lz, foreach)
            ks = []
            for step in range(3):
                for p, q in zip(cpu, lz):
                    g = torch.randn(p.shape).to(dt)
                    p.grad = g.clone()
                    q.grad = g.to(dev)
                lazytpu.mark_step()
                lazytpu.wait_device_ops()
                met.clear_all()
                oc.step()
                lazytpu.optimizer_step(ol)
                lazytpu.mark_step()
                lazytpu.wait_device_ops()
                ks.append(kernels())
            e = max(err(q, p, dt) for p, q in zip(cpu, lz))
            h = hashlib.sha1()
            for p, q in zip(cpu, lz):
                h.update(q.detach().cpu().view(torch.uint8).numpy().tobytes())
                for name, v in oc.state[p].items():
                    if torch.is_tensor(v) and v.numel() > 1:
                        lv = ol.state[q][name]
                        e = max(e, err(lv, v, dt))
                        h.update(lv.detach().cpu().view(torch.uint8).numpy().tobytes())
            res[f"{kind}-{foreach}-{str(dt)[6:]}"] = {"kernels": ks, "err": e,
                                                      "bits": h.hexdigest()}

# the dependency rule: d reads a's output through a matmul (a, d: same
# program); e is independent of both
torch.manual_seed(1)
xs = [torch.randn(8, 8) for _ in range(2)]
a = xs[0].to(dev) * 2 + 1
d = (a @ a) * 2 + 1
e = xs[1].to(dev) * 2 + 1
lazytpu.mark_step()
lazytpu.wait_device_ops()
met.clear_all()
a = xs[0].to(dev) * 2 + 1
d = (a @ a) * 2 + 1
e = xs[1].to(dev) * 2 + 1
lazytpu.mark_step()
lazytpu.wait_device_ops()
ac = xs[0] * 2 + 1
ok = (torch.allclose(a.cpu(), ac) and torch.allclose(d.cpu(), (ac @ ac) * 2 + 1, rtol=1e-5)
      and torch.allclose(e.cpu(), xs[1] * 2 + 1))
res["dependent"] = {"kernels": [kernels()], "err": 0.0 if ok else 9.0, "bits": ""}
print("RESULT " + json.dumps(res))
'''


def _run(hfuse):
    # horizontal fusion alone: with GEMM epilogues the dependency case's d
    # would run inside the matmul's kernel and never be a group of its own
    env = dict(os.environ, LAZYTPU_NUM_CORES="1", LAZYTPU_PROFILE="1",
               LAZYTPU_GEMM_EPILOGUE="0")
    env["LAZYTPU_HFUSE"] = hfuse
    p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[7:])


@pytest.fixture(scope="module")
def results():
    return {"on": _run("1"), "off": _run("0")}


N_PARAMS = 10


@pytest.mark.parametrize("mode", ["on", "off"])
def test_optimizer_steps_match_eager(results, mode):
    for case, r in results[mode].items():
        assert r["err"] <= 1.0, (mode, case, r)


def test_merged_bits_equal_unmerged(results):
    # one pass over all parameters computes exactly what one kernel per
    # parameter computes
    for case, r in results["on"].items():
        assert r["bits"] == results["off"][case]["bits"], case


def test_optimizer_step_is_one_kernel(results):
    for case, r in results["on"].items():
        if case == "dependent":
            continue
        # every step (the first one too: the momentum buffers start as copies)
        assert max(r["kernels"]) == 1, (case, r)
    for case, r in results["off"].items():
        if case != "dependent":   # one kernel per parameter (or more)
            assert min(r["kernels"]) >= N_PARAMS, (case, r)


def test_dependent_group_not_merged(results):
    # a, mm, then d and e together; unfused: a, mm, d, e
    assert results["on"]["dependent"]["kernels"] == [3], results["on"]["dependent"]
    assert results["off"]["dependent"]["kernels"] == [4], results["off"]["dependent"]
