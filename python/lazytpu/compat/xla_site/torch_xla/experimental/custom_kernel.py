"""torch_xla.experimental.custom_kernel on lazytpu: flash_attention.

torch_xla 2.9 runs flash_attention as JAX's Pallas TPU kernel (a blocked,
online softmax). lazytpu has no Pallas: it computes what that kernel computes
with the device's own ops, traced into the step's graph like any attention:

    s = q k^T (f32 accumulation) [+ ab] [* sm_scale]
    s += 0 where (q segment id == kv segment id) and (causal: kv position <=
         q position), else the kernel's finite mask value
    o = softmax(s) (as v's dtype) @ v, in q's dtype

The gradient is autograd's through those ops (the derivative the kernel's
backward computes). Products follow the matmul precision
(torch_xla.backends.set_mat_mul_precision), as the device's other products.
Like torch_xla's wrapper, a key sequence longer than 512 that is not a
multiple of 512 is padded to one with zero keys and values (and ab with its
dtype's minimum): without ab those zero keys take part in the softmax on a
TPU, and here too.

With partition_spec (SPMD), torch_xla runs the kernel per shard
(shard_map over mesh, default the global mesh). Sharding batch or heads
gives the same result as the whole computation, which lazytpu runs with q,
k, v, ab and the output annotated with partition_spec; a spec that shards
the sequence or head_dim dims (shard_map would attend within each shard
only) is refused (NotImplementedError).

Refused as torch_xla and the kernel refuse: one of the two segment id
tensors alone (AssertionError); segment ids with a key block that is not a
multiple of 128 lanes, and head_dim > 128 not a multiple of 128 when the
keys span several 512 blocks (NotImplementedError); tensors off the device
(RuntimeError). The module's other Pallas kernels (paged and ragged paged
attention, gmm, quantized_matmul_int8) are not provided.

Importing the module defines torch.ops.xla.flash_attention(q, k, v, casual)
as 2.9 does: on device tensors the same computation (differentiable here;
2.9's op has no gradient), elsewhere (dynamo's fake tensors) an empty
tensor of q's shape, with 2.9's warning for real ones.
"""
import torch

from lazytpu.core import DEVICE_TYPES as _TYPES

from .._internal.custom_kernel import XLA_LIB

DEFAULT_MASK_VALUE = -0.7 * float(torch.finfo(torch.float32).max)

_BLOCK = 512       # torch_xla's default block_k / block_k_major
_LANES = 128       # NUM_LANES and MIN_BLOCK_SIZE of the kernel


def _pad_keys(t, size, dim, value):
    pad = list(t.shape)
    pad[dim] = size - t.shape[dim]
    return torch.cat([t, torch.full(pad, value, dtype=t.dtype, device=t.device)], dim=dim)


def _check(q, k, v, q_segment_ids, kv_segment_ids, ab):
    named = [("q", q), ("k", k), ("v", v), ("ab", ab), ("q_segment_ids", q_segment_ids),
             ("kv_segment_ids", kv_segment_ids)]
    off = ["%s on %s" % (n, t.device) for n, t in named
           if t is not None and t.device.type not in _TYPES]
    if off:
        raise RuntimeError("flash_attention: every tensor must be on the device (%s)"
                           % ", ".join(off))
    if q.dim() < 3:
        raise ValueError("flash_attention: q must be [batch, heads, seq, head_dim] "
                         "(or [heads, seq, head_dim]); got shape %s" % (list(q.shape),))
    if (q_segment_ids is None) != (kv_segment_ids is None):
        raise AssertionError("Both q_segment_ids and kv_segment_ids should be provided.")
    kv_len, head_dim = k.shape[-2], q.shape[-1]
    block = min(_BLOCK, kv_len)
    if q_segment_ids is not None and block % _LANES:
        raise NotImplementedError("flash_attention: kv block size must be a multiple of %d "
                                  "(kv_seq_len %d with segment ids)" % (_LANES, kv_len))
    if kv_len > _BLOCK and head_dim > _LANES and head_dim % _LANES:
        raise NotImplementedError("flash_attention: head_dim=%d should be a multiple of %d if "
                                  "larger (kv_seq_len %d spans several blocks)"
                                  % (head_dim, _LANES, kv_len))
    if q_segment_ids is not None and kv_len % block:
        raise NotImplementedError("flash_attention: segment ids with kv_seq_len %d, which "
                                  "torch_xla pads to a multiple of %d without padding "
                                  "kv_segment_ids" % (kv_len, _BLOCK))


def _attention(q, k, v, causal, q_segment_ids, kv_segment_ids, sm_scale, ab):
    kv_len = k.shape[-2]
    if kv_len % min(_BLOCK, kv_len):
        full = -(-kv_len // _BLOCK) * _BLOCK
        k = _pad_keys(k, full, -2, 0)
        v = _pad_keys(v, full, -2, 0)
        if ab is not None:
            ab = _pad_keys(ab, full, -1, torch.finfo(ab.dtype).min)
    s = torch.matmul(q.float(), k.float().transpose(-2, -1))
    if ab is not None:
        s = s + ab.float()
    if sm_scale != 1.0:
        s = s * sm_scale
    mask = None
    if q_segment_ids is not None:
        mask = (q_segment_ids.unsqueeze(-1) == kv_segment_ids.unsqueeze(-2)).unsqueeze(-3)
    if causal:
        rows = torch.arange(q.shape[-2], device=q.device).unsqueeze(-1)
        cols = torch.arange(k.shape[-2], device=q.device).unsqueeze(0)
        mask = cols <= rows if mask is None else mask & (cols <= rows)
    if mask is not None:
        s = s + torch.where(mask, 0.0, DEFAULT_MASK_VALUE)
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p.to(v.dtype).float(), v.float()).to(q.dtype)


def _sharded(partition_spec, mesh, q, k, v, ab):
    """q, k, v, ab as clones annotated with partition_spec (None: as given),
    and the function that annotates the output."""
    if partition_spec is None:
        return (q, k, v, ab), (lambda o: o)
    import lazytpu.spmd as xs
    spec = tuple(partition_spec)
    if len(spec) != q.dim():
        raise AssertionError("flash_attention: partition_spec %s has %d entries for q of "
                             "shape %s" % (spec, len(spec), list(q.shape)))
    if spec[-2] is not None or spec[-1] is not None:
        raise NotImplementedError(
            "flash_attention: partition_spec %s shards the sequence or head_dim dim: "
            "torch_xla's shard_map would attend within each shard only; shard batch or "
            "heads" % (spec,))
    if mesh is None or isinstance(mesh, str):
        mesh = xs.get_global_mesh() or (xs.Mesh.from_str(mesh) if mesh else None)
    if mesh is None:
        raise ValueError("flash_attention: partition_spec %s needs a mesh (pass mesh= or "
                         "set_global_mesh)" % (spec,))

    def mark(t, s):
        t = t.clone()
        xs.mark_sharding(t, mesh, s)
        return t
    ab_spec = spec[:-1] + (None,)
    out = (mark(q, spec), mark(k, spec), mark(v, spec),
           mark(ab, ab_spec) if ab is not None else None)

    def finish(o):
        xs.mark_sharding(o, mesh, spec)
        return o
    return out, finish


def flash_attention(q, k, v, causal=False, q_segment_ids=None, kv_segment_ids=None,
                    sm_scale=1.0, *, ab=None, partition_spec=None, mesh=None):
    """Attention of q [batch, heads, q_len, head_dim] over k, v [batch,
    heads, kv_len, head_dim] as torch_xla 2.9's flash_attention computes it
    (see the module text); differentiable in q, k, v and ab."""
    _check(q, k, v, q_segment_ids, kv_segment_ids, ab)
    (q, k, v, ab), finish = _sharded(partition_spec, mesh, q, k, v, ab)
    return finish(_attention(q, k, v, bool(causal), q_segment_ids, kv_segment_ids,
                             float(sm_scale), ab))


XLA_LIB.define("flash_attention(Tensor q, Tensor k, Tensor v, bool casual=False) -> Tensor")


def _flash_attention_device(q, k, v, causal=False):
    return flash_attention(q, k, v, causal=causal)


def _flash_attention_other(q, k, v, causal=False):
    # torch_xla: off the device (dynamo's fake tensors) only the shape
    if k.device != torch.device("meta"):
        import warnings
        warnings.warn("XLA flash attention should only be applied to tensors on XLA device")
    return torch.empty_like(q)


# above functionalization (a kernel at the XLA key would get raw device
# tensors), so the op is also differentiable through flash_attention's ops
for _key in ("AutogradXLA", "AutogradPrivateUse1"):
    XLA_LIB.impl("flash_attention", _flash_attention_device, _key)
XLA_LIB.impl("flash_attention", _flash_attention_other, "CompositeExplicitAutograd")

def repeat_with_fixed_output_size(input, repeats, total_repeat_length):
    """torch.repeat_interleave(input, repeats) with a static length: the
    first total_repeat_length elements, padded with input[-1] past the
    repeated ones (2.9's helper for MoE token grouping; 1-D input and
    repeats). Position j takes the last element whose block starts at or
    before j: comparisons and a sum on the device, no host read, no data-
    dependent shape."""
    assert input.dim() == 1 and repeats.dim() == 1, (
        "repeat_with_fixed_output_size: input and repeats must be 1-D, got %s and %s"
        % (tuple(input.shape), tuple(repeats.shape)))
    starts = torch.cumsum(repeats, dim=0) - repeats          # exclusive prefix sums
    pos = torch.arange(int(total_repeat_length), device=input.device, dtype=starts.dtype)
    index = (starts.unsqueeze(0) <= pos.unsqueeze(1)).sum(dim=1) - 1
    return torch.gather(input, 0, index.clamp(min=0))


__all__ = ["flash_attention", "DEFAULT_MASK_VALUE", "repeat_with_fixed_output_size"]
