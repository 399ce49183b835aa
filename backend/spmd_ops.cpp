/*
 * backend/spmd_ops.cpp — SPMD sharding annotations as dispatcher ops, for
 * lazytpu.spmd (python/lazytpu/spmd/):
 *   spmd_set_sharding(Tensor t, int[] enc, str frame) -> ()
 *       lt_sharding_new from enc (lt_sharding_encode's layout) then
 *       lt_tensor_set_sharding; an empty enc removes t's sharding (on the
 *       Functionalize key also from the storage's base value when t is an
 *       alias of all of it: spmd_set_sharding_functional)
 *   spmd_get_sharding(Tensor t) -> int[]      lt_sharding_encode, [] if none
 *   spmd_sharding_text(Tensor t) -> str       lt_sharding_str, "" if none
 *   spmd_full_to_shard(Tensor t) -> Tensor    manual sharding (lazy/spmd_manual.c):
 *   spmd_shard_to_full(Tensor t, int[] enc, int[] shape, str frame) -> Tensor
 *   spmd_mark_manual(Tensor t, int[] mesh_enc) -> ()
 *   spmd_from_step(Tensor t) -> bool          lt_tensor_from_step
 * The value is not changed: an annotation replaces t's value node by an
 * equal one carrying the sharding (lazy/spmd_sharding.c).
 */
#include "lt_aten.h"
#include "lazytpu_spmd.h"
#include "lt_register.h"

#include <ATen/FunctionalStorageImpl.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <string>
#include <vector>

namespace lazytpu {
namespace {

lt_tensor *device_handle(const at::Tensor &t, const char *what) {
  TORCH_CHECK(t.defined() && impl_of(t) != nullptr, "lazytpu.spmd.", what,
              ": expected a lazytpu device tensor, got a ",
              t.defined() ? t.device().str() : std::string("undefined"), " tensor");
  return handle_of(t);
}

/* lt_sharding_new from enc (lt_sharding_encode's layout; a trailing -1,
 * MANUAL, is ignored); caller owns the result. */
lt_sharding *decode_sharding(at::IntArrayRef enc, c10::string_view frame) {
  /* mesh_ndim, mesh_shape[], n_dev, ids[], ndim, axes[] */
  size_t k = 0, n = enc.size();
  auto take = [&](const char *field) {
    TORCH_CHECK(k < n, "lazytpu.spmd: internal: short sharding encoding at ", field);
    return enc[k++];
  };
  int mesh_ndim = (int)take("mesh_ndim");
  TORCH_CHECK(mesh_ndim >= 1 && mesh_ndim <= LT_MAX_DIMS, "lazytpu.spmd: bad mesh rank ", mesh_ndim);
  std::vector<int64_t> mesh(mesh_ndim);
  for (auto &v : mesh) v = take("mesh_shape");
  int64_t n_dev = take("n_dev");
  TORCH_CHECK(n_dev >= 1 && n_dev <= 64, "lazytpu.spmd: bad device count ", n_dev);
  std::vector<int64_t> ids(n_dev);
  for (auto &v : ids) v = take("device_ids");
  int ndim = (int)take("ndim");
  TORCH_CHECK(ndim >= 0 && ndim <= LT_MAX_DIMS, "lazytpu.spmd: bad tensor rank ", ndim);
  std::vector<int64_t> axes(ndim > 0 ? ndim : 1);
  for (int d = 0; d < ndim; d++) axes[d] = take("axes");
  std::string fr(frame.data(), frame.size());
  lt_sharding *s = nullptr;
  check(lt_sharding_new(mesh_ndim, mesh.data(), ids.data(), ndim, axes.data(), fr.c_str(), &s));
  return s;
}

void spmd_set_sharding(const at::Tensor &t, at::IntArrayRef enc, c10::string_view frame) {
  lt_tensor *h = device_handle(t, "mark_sharding");
  if (enc.empty()) {
    check(lt_tensor_set_sharding(h, nullptr));
    return;
  }
  lt_sharding *s = decode_sharding(enc, frame);
  lt_status st = lt_tensor_set_sharding(h, s);
  lt_sharding_release(s);
  check(st);
}

/* On the Functionalize key (t still the wrapper): the wrapper's value is
 * annotated, and so is its storage's base value when t is the whole of it (a
 * Parameter or a detach() is an alias of the tensor it wraps): the sharding
 * belongs to the tensor, and a write through a view (p[0].zero_(), or
 * p.data[i].zero_() as transformers' _init_weights does) regenerates p from
 * the base, which must then carry it (a scatter into a sharded base keeps its
 * layout: lazy/spmd_propagate.c). A view of part of the base annotates the
 * view only, as before. */
void spmd_set_sharding_functional(const at::Tensor &t, at::IntArrayRef enc,
                                  c10::string_view frame) {
  if (!at::functionalization::impl::isFunctionalTensor(t)) {
    c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKey::Functionalize);
    spmd_set_sharding(t, enc, frame);
    return;
  }
  auto *w = at::functionalization::impl::unsafeGetFunctionalWrapper(t);
  w->sync_();
  at::Tensor v = w->value();
  spmd_set_sharding(v, enc, frame);
  const at::Tensor &b = static_cast<at::functionalization::FunctionalStorageImpl *>(
                            w->storage().unsafeGetStorageImpl())->base();
  LtTensorImpl *bi = impl_of(b);
  if (bi && bi != impl_of(v) && b.scalar_type() == v.scalar_type() &&
      b.sizes() == t.sizes() && b.strides() == t.strides() && t.storage_offset() == 0)
    spmd_set_sharding(b, enc, frame);
}

/* torch_xla's _spmd_full_to_shard_shape: each core's block of t (manual). */
at::Tensor spmd_full_to_shard(const at::Tensor &t) {
  lt_tensor *out = nullptr;
  check(lt_tensor_spmd_full_to_shard(device_handle(t, "_spmd_full_to_shard_shape"), &out));
  return wrap(Ref(out));
}

/* torch_xla's _spmd_shard_to_full_shape: manual t's blocks as one value of
 * `shape` laid out by enc ([]: replicated). */
at::Tensor spmd_shard_to_full(const at::Tensor &t, at::IntArrayRef enc, at::IntArrayRef shape,
                              c10::string_view frame) {
  lt_tensor *h = device_handle(t, "_spmd_shard_to_full_shape");
  lt_sharding *s = enc.empty() ? nullptr : decode_sharding(enc, frame);
  lt_tensor *out = nullptr;
  lt_status st = lt_tensor_spmd_shard_to_full(h, s, shape.data(), (int)shape.size(), &out);
  lt_sharding_release(s);
  check(st);
  return wrap(Ref(out));
}

/* torch_xla's _mark_manual_sharding (mesh_enc: a sharding whose mesh the
 * {manual} sharding takes, [] for t's own or all cores). */
void spmd_mark_manual(const at::Tensor &t, at::IntArrayRef mesh_enc) {
  lt_tensor *h = device_handle(t, "_mark_manual_sharding");
  lt_sharding *m = mesh_enc.empty() ? nullptr : decode_sharding(mesh_enc, "");
  lt_status st = lt_tensor_spmd_mark_manual(h, m);
  lt_sharding_release(m);
  check(st);
}

bool spmd_from_step(const at::Tensor &t) {
  return lt_tensor_from_step(device_handle(t, "sharding")) != 0;
}

std::vector<int64_t> spmd_get_sharding(const at::Tensor &t) {
  lt_sharding *s = lt_tensor_sharding(device_handle(t, "sharding"));
  if (!s) return {};
  std::vector<int64_t> out(lt_sharding_encode(s, nullptr, 0));
  lt_sharding_encode(s, out.data(), (int)out.size());
  lt_sharding_release(s);
  return out;
}

std::string spmd_sharding_text(const at::Tensor &t) {
  lt_sharding *s = lt_tensor_sharding(device_handle(t, "sharding"));
  if (!s) return "";
  std::vector<char> buf(4096);
  lt_sharding_str(s, buf.data(), buf.size());
  lt_sharding_release(s);
  return std::string(buf.data());
}

}  // namespace

void keep_sharding(const at::Tensor &dst, const at::Tensor &from) {
  LtTensorImpl *d = impl_of(dst), *f = impl_of(from);
  if (d && f) check(lt_tensor_keep_sharding(d->handle(), f->handle()));
}

namespace {

/* torch_xla's _propagate_xla_data(input, output), which PyTorch's generated
 * Functionalize kernels call for an XLA tensor after an in-place or out= op
 * replaced its value `input` by `output` (the ops we have no Functionalize
 * kernel for: torch.eye(out=) of nn.init.eye_, ...): output keeps input's
 * sharding. Registered on the XLA key in torch_xla compatibility mode only. */
void propagate_xla_data(const at::Tensor &input, const at::Tensor &output) {
  keep_sharding(output, input);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(lazytpu, m) {
  m.def("spmd_set_sharding(Tensor t, int[] enc, str frame) -> ()");
  m.def("spmd_get_sharding(Tensor t) -> int[]");
  m.def("spmd_sharding_text(Tensor t) -> str");
  m.def("spmd_full_to_shard(Tensor t) -> Tensor");
  m.def("spmd_shard_to_full(Tensor t, int[] enc, int[] shape, str frame) -> Tensor");
  m.def("spmd_mark_manual(Tensor t, int[] mesh_enc) -> ()");
  m.def("spmd_from_step(Tensor t) -> bool");
}

TORCH_LIBRARY_IMPL(lazytpu, PrivateUse1, m) {
  reg_own(m, "spmd_set_sharding", TORCH_FN(spmd_set_sharding));
  reg_own(m, "spmd_get_sharding", TORCH_FN(spmd_get_sharding));
  reg_own(m, "spmd_sharding_text", TORCH_FN(spmd_sharding_text));
  reg_own(m, "spmd_full_to_shard", TORCH_FN(spmd_full_to_shard));
  reg_own(m, "spmd_shard_to_full", TORCH_FN(spmd_shard_to_full));
  reg_own(m, "spmd_mark_manual", TORCH_FN(spmd_mark_manual));
  reg_own(m, "spmd_from_step", TORCH_FN(spmd_from_step));
  if (xla_compat())
    mirror_library("aten", c10::DispatchKey::XLA)
        .impl("_propagate_xla_data", TORCH_FN(propagate_xla_data));
}

TORCH_LIBRARY_IMPL(lazytpu, Functionalize, m) {
  m.impl("spmd_set_sharding", TORCH_FN(spmd_set_sharding_functional));
}

/* Annotations and inspection: no autograd. */
TORCH_LIBRARY_IMPL(lazytpu, AutogradPrivateUse1, m) {
  reg_autograd_fallthrough(m, "spmd_set_sharding");
  reg_autograd_fallthrough(m, "spmd_get_sharding");
  reg_autograd_fallthrough(m, "spmd_sharding_text");
  reg_autograd_fallthrough(m, "spmd_full_to_shard");
  reg_autograd_fallthrough(m, "spmd_shard_to_full");
  reg_autograd_fallthrough(m, "spmd_mark_manual");
  reg_autograd_fallthrough(m, "spmd_from_step");
}

}  // namespace lazytpu
