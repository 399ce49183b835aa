"""JAX jit on the CPU as an optional peer of bench/step_latency.py: the same
three models (MLP 784-256-10 batch 64 and the CNN with SGD momentum, the
2-layer transformer with AdamW), one jitted training step per model
(forward, cross entropy, gradients, the optimizer update; parameters and
optimizer state donated), each step waited for (`block_until_ready` on
the loss), as step_latency's synchronous ways wait.

Run by an interpreter that has JAX (a scratch environment: lazytpu's .venv
does not get JAX), as a child of step_latency.py (`--jax-python PATH`):

    PYTHON_WITH_JAX bench/jax_peer.py --model mlp --steps 200 --warmup 5

prints {"times": [seconds per timed step, ...], "jax": version} as JSON on
its last line. JAX runs at its own defaults (XLA's CPU thread pool); nothing
here sets a thread or OpenMP variable.
"""
import argparse
import json
import time

import jax
import jax.numpy as jnp


def _linear(key, n_in, n_out):
    bound = n_in ** -0.5
    kw, kb = jax.random.split(key)
    return {"w": jax.random.uniform(kw, (n_in, n_out), jnp.float32, -bound, bound),
            "b": jax.random.uniform(kb, (n_out,), jnp.float32, -bound, bound)}


def _conv(key, c_in, c_out):
    bound = (c_in * 9) ** -0.5
    kw, kb = jax.random.split(key)
    return {"w": jax.random.uniform(kw, (c_out, c_in, 3, 3), jnp.float32, -bound, bound),
            "b": jax.random.uniform(kb, (c_out,), jnp.float32, -bound, bound)}


def _dense(p, x):
    return x @ p["w"] + p["b"]


# ------------------------------------------------------------------ models

def mlp_init(key):
    k1, k2 = jax.random.split(key)
    return {"fc1": _linear(k1, 784, 256), "fc2": _linear(k2, 256, 10)}, {}


def mlp_apply(p, state, x):
    return _dense(p["fc2"], jax.nn.relu(_dense(p["fc1"], x))), state


def cnn_init(key):
    k = jax.random.split(key, 3)
    p = {"conv1": _conv(k[0], 1, 16), "bn1": {"g": jnp.ones(16), "b": jnp.zeros(16)},
         "conv2": _conv(k[1], 16, 32), "bn2": {"g": jnp.ones(32), "b": jnp.zeros(32)},
         "fc": _linear(k[2], 32 * 7 * 7, 10)}
    state = {n: {"mean": jnp.zeros(c), "var": jnp.ones(c)} for n, c in (("bn1", 16), ("bn2", 32))}
    return p, state


def _conv_bn_relu_pool(p, bn, st, x):
    y = jax.lax.conv_general_dilated(x, p["w"], (1, 1), ((1, 1), (1, 1)),
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    y = y + p["b"][None, :, None, None]
    mean = y.mean((0, 2, 3))
    var = y.var((0, 2, 3))
    n = y.shape[0] * y.shape[2] * y.shape[3]
    new = {"mean": 0.9 * st["mean"] + 0.1 * mean, "var": 0.9 * st["var"] + 0.1 * var * n / (n - 1)}
    y = (y - mean[None, :, None, None]) * jax.lax.rsqrt(var + 1e-5)[None, :, None, None]
    y = jax.nn.relu(y * bn["g"][None, :, None, None] + bn["b"][None, :, None, None])
    y = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    return y, new


def cnn_apply(p, state, x):
    y, s1 = _conv_bn_relu_pool(p["conv1"], p["bn1"], state["bn1"], x)
    y, s2 = _conv_bn_relu_pool(p["conv2"], p["bn2"], state["bn2"], y)
    return _dense(p["fc"], y.reshape(y.shape[0], -1)), {"bn1": s1, "bn2": s2}


def _layer_norm(p, x):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * p["g"] + p["b"]


def _ln(d):
    return {"g": jnp.ones(d), "b": jnp.zeros(d)}


def transformer_init(key, d=128, heads=4, ff=512, layers=2):
    ks = jax.random.split(key, 4 * layers + 1)
    blocks = [{"ln1": _ln(d), "qkv": _linear(ks[4 * i], d, 3 * d), "proj": _linear(ks[4 * i + 1], d, d),
               "ln2": _ln(d), "ff1": _linear(ks[4 * i + 2], d, ff), "ff2": _linear(ks[4 * i + 3], ff, d)}
              for i in range(layers)]
    return {"blocks": blocks, "ln": _ln(d), "head": _linear(ks[-1], d, 10), "heads": heads}, {}


def transformer_apply(p, state, x):
    b, s, d = x.shape
    h = p["heads"]
    for blk in p["blocks"]:
        q, k, v = jnp.split(_dense(blk["qkv"], _layer_norm(blk["ln1"], x)), 3, axis=2)
        q, k, v = (t.reshape(b, s, h, d // h).transpose(0, 2, 1, 3) for t in (q, k, v))
        att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) * (d // h) ** -0.5, axis=-1)
        o = (att @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
        x = x + _dense(blk["proj"], o)
        x = x + _dense(blk["ff2"], jax.nn.gelu(_dense(blk["ff1"], _layer_norm(blk["ln2"], x)),
                                               approximate=False))
    return _dense(p["head"], _layer_norm(p["ln"], x).mean(1)), state


# name: (init, apply, input shape, optimizer): step_latency.py's MODELS
MODELS = {
    "mlp": (mlp_init, mlp_apply, (64, 784), "sgd"),
    "cnn": (cnn_init, cnn_apply, (32, 1, 28, 28), "sgd"),
    "transformer": (transformer_init, transformer_apply, (16, 64, 128), "adamw"),
}


# -------------------------------------------------------------- training

def make_step(apply, opt):
    """One jitted step: (params, opt state, model state, x, y) -> the
    same, updated, and the loss; SGD momentum 0.9 lr 0.01 (torch's
    update rule) or AdamW lr 1e-3 (torch's defaults)."""
    def loss_fn(p, state, x, y):
        logits, new_state = apply(p, state, x)
        logp = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(logp, y[:, None], 1).mean(), new_state

    def step(p, o, state, x, y):
        (loss, state), g = jax.value_and_grad(loss_fn, has_aux=True)(p, state, x, y)
        if opt == "sgd":
            o = jax.tree_util.tree_map(lambda b, gi: 0.9 * b + gi, o, g)
            p = jax.tree_util.tree_map(lambda w, b: w - 0.01 * b, p, o)
        else:
            t = o["t"] + 1
            m = jax.tree_util.tree_map(lambda mi, gi: 0.9 * mi + 0.1 * gi, o["m"], g)
            v = jax.tree_util.tree_map(lambda vi, gi: 0.999 * vi + 0.001 * gi * gi, o["v"], g)
            c1, c2 = 1 - 0.9 ** t, 1 - 0.999 ** t
            p = jax.tree_util.tree_map(
                lambda w, mi, vi: w * (1 - 1e-3 * 1e-2) - 1e-3 * (mi / c1) / (jnp.sqrt(vi / c2) + 1e-8),
                p, m, v)
            o = {"t": t, "m": m, "v": v}
        return p, o, state, loss

    return jax.jit(step, donate_argnums=(0, 1, 2))


def run(name, steps, warmup):
    init, apply, shape, opt = MODELS[name]
    key = jax.random.PRNGKey(0)
    p, state = init(key)
    static = {k: v for k, v in p.items() if isinstance(v, int)}   # head count: not a leaf
    p = {k: v for k, v in p.items() if k not in static}

    def apply_p(params, st, x):
        return apply({**params, **static}, st, x)

    zeros = jax.tree_util.tree_map(jnp.zeros_like, p)
    o = zeros if opt == "sgd" else {"t": jnp.zeros((), jnp.float32), "m": zeros,
                                    "v": jax.tree_util.tree_map(jnp.zeros_like, p)}
    kx, ky = jax.random.split(jax.random.PRNGKey(1))
    x = jax.random.normal(kx, shape, jnp.float32)
    y = jax.random.randint(ky, (shape[0],), 0, 10)
    step = make_step(apply_p, opt)
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        p, o, state, loss = step(p, o, state, x, y)
        loss.block_until_ready()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times, float(loss)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="mlp", choices=list(MODELS))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    times, loss = run(a.model, a.steps, a.warmup)
    print(json.dumps({"times": times, "loss": loss, "jax": jax.__version__}))


if __name__ == "__main__":
    main()
