"""torch.compile on a model whose tensors are on lazytpu: it must not crash
or go silently wrong. With dynamo's backends it raises an error that says
what to do; the model keeps working without torch.compile afterwards."""
import pytest
import torch
import torch.nn as nn

import lazytpu

DEV = torch.device("lazytpu")


@pytest.mark.parametrize("backend", ["inductor", "eager", "aot_eager"])
def test_compile_raises_a_clear_error(backend):
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(DEV)
    x = torch.randn(3, 4)
    cm = torch.compile(m, backend=backend)
    with pytest.raises(Exception) as info:
        cm(x.to(DEV))
    msg = str(info.value)
    assert "lazytpu" in msg and "torch.compile" in msg and "without torch.compile" in msg
    # nothing half-done: the plain model still runs and matches the CPU
    ref = m.to("cpu")(x)
    torch.testing.assert_close(m.to(DEV)(x.to(DEV)).cpu(), ref)


def test_compile_of_cpu_model_unaffected():
    torch._dynamo.reset()
    m = nn.Linear(4, 2)
    x = torch.randn(3, 4)
    cm = torch.compile(m, backend="eager")
    torch.testing.assert_close(cm(x), m(x))
