/*
 * backend/copy_ops.cpp — how tensors enter and leave the device, and the
 * factory/identity kernels:
 *   empty.memory_format, empty_strided, lift, lift_fresh  (wrapped with a
 *     FunctionalTensorWrapper unless Functionalize is excluded: LTC's pattern)
 *   _to_copy, _copy_from, _copy_from_and_resize, copy, _local_scalar_dense
 *     (host <-> device, device <-> device, dtype casts; value reads sync)
 *   fill/zero (functional and in-place), clone, detach_copy, alias_copy
 *   as_strided, view, _reshape_alias, alias on raw tensors: marked copies
 *     (lt_guard.h; composite.cpp).
 */
#include "lt_aten.h"

#include <ATen/FunctionalStorageImpl.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/ops/_reshape_alias_copy_ops.h>
#include <ATen/ops/alias_ops.h>
#include <ATen/ops/as_strided_copy_ops.h>
#include <ATen/ops/view_copy_ops.h>
#include <ATen/ops/detach_ops.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include "lt_guard.h"
#include "lt_register.h"

#include <cmath>

namespace lazytpu {

/* A new lt_tensor with r's value when r is one of the inputs (results must
 * never share an lt_tensor with an operand: an in-place assign would then
 * change both). */
Ref fresh(Ref r, std::initializer_list<lt_tensor *> inputs) {
  for (lt_tensor *x : inputs)
    if (r.get() == x) {
      lt_attrs a = attrs_vec(dims_of(r.shape()));
      return trace(LT_OP_reshape, {r.get()}, &a);
    }
  return r;
}

namespace {

/* Records the user's frame for the rare events that follow (value reads). */
struct CallerScope {
  CallerScope() {
    std::string c = current_caller();
    lt_set_caller(c.empty() ? nullptr : c.c_str());
  }
  ~CallerScope() { lt_set_caller(nullptr); }
};

bool lt_has_dtype(c10::ScalarType st) { return has_lt_dtype(st); }

/* Device value -> new contiguous CPU tensor of dtype `want` (syncs). */
at::Tensor to_cpu(lt_tensor *h, c10::ScalarType want) {
  std::vector<int64_t> dims = dims_of(*lt_tensor_shape(h));
  c10::ScalarType read = lt_has_dtype(want) ? want : to_scalar_type(lt_tensor_dtype(h));
  at::Tensor out = at::empty(dims, at::TensorOptions().dtype(read));
  {
    CallerScope cs;
    lt_status st;
    st = lt_tensor_to_host(h, out.data_ptr(), to_lt_dtype(read));
    check_read(st);
  }
  if (read != want) out = out.to(want);
  return out;
}

/* CPU tensor -> new device tensor on core with dtype dt. */
Ref from_cpu(const at::Tensor &src, int core, lt_dtype dt) {
  at::Tensor c = src;
  if (c.scalar_type() != to_scalar_type(dt)) c = c.to(to_scalar_type(dt));
  c = c.contiguous();
  if (c.is_conj()) c = c.resolve_conj();
  if (c.is_neg()) c = c.resolve_neg();
  lt_shape s = to_shape(c.sizes());
  lt_tensor *out = nullptr;
  check(lt_tensor_from_host(core, c.data_ptr(), dt, &s, &out));
  return Ref(out);
}

/* src's value as a device value on `core` with dtype dt, broadcast to dims
 * (the semantics of dst.copy_(src)). */
Ref value_for(const at::Tensor &src, int core, lt_dtype dt, const std::vector<int64_t> &dims) {
  Ref v;
  LtTensorImpl *si = impl_of(src);
  if (si && lt_tensor_core(si->handle()) == core) {
    v = Ref::borrow(si->handle());
  } else if (si) {
    v = from_cpu(to_cpu(si->handle(), to_scalar_type(lt_tensor_dtype(si->handle()))), core, dt);
  } else {
    TORCH_CHECK(src.device().is_cpu(), "lazytpu: cannot copy from a ", src.device().str(),
                " tensor");
    v = from_cpu(src, core, dt);
  }
  v = cast(v.get(), dt);
  if (dims_of(v.shape()) != dims) {
    TORCH_CHECK(v.ndim() <= (int)dims.size(), "copy_: the source of shape ",
                c10::IntArrayRef(dims_of(v.shape())), " cannot be broadcast to ",
                c10::IntArrayRef(dims));
    if (v.ndim() < (int)dims.size()) {
      std::vector<int64_t> d(dims.size() - v.ndim(), 1);
      for (int i = 0; i < v.ndim(); i++) d.push_back(v.shape().dims[i]);
      v = reshape(v.get(), d);
    }
    v = expand(v.get(), dims);
  }
  return v;
}

/* ------------------------------------------------------------ factories */

at::Tensor lt_empty(c10::SymIntArrayRef size, c10::optional<at::ScalarType> dtype,
                    c10::optional<at::Layout> layout, c10::optional<at::Device> device,
                    c10::optional<bool> pin_memory,
                    c10::optional<at::MemoryFormat> memory_format) {
  int core = core_of_device(device);
  c10::ScalarType st = dtype.value_or(c10::get_default_dtype_as_scalartype());
  std::vector<int64_t> dims = sym_to_ints(size);
  if (!lt_has_dtype(st)) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    if (n == 0) {  /* holds no data: report the dtype asked for */
      at::Tensor t = wrap(zeros(core, dims, LT_F32));
      static_cast<LtTensorImpl *>(t.unsafeGetTensorImpl())->set_dtype_override(st);
      if (!c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Functionalize))
        return at::functionalization::impl::to_functional_tensor(t);
      return t;
    }
  }
  return wrap_functional(zeros(core, dims, to_lt_dtype(st)));
}

/* Reports the strides asked for (autograd's CopySlices allocates its buffer
 * with the base's strides and then applies the view's as_strided to it). */
at::Tensor lt_empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                            c10::optional<at::ScalarType> dtype,
                            c10::optional<at::Layout> layout,
                            c10::optional<at::Device> device,
                            c10::optional<bool> pin_memory) {
  int core = core_of_device(device);
  c10::ScalarType st = dtype.value_or(c10::get_default_dtype_as_scalartype());
  at::Tensor t = wrap(zeros(core, sym_to_ints(size), to_lt_dtype(st)));
  std::vector<int64_t> strides = sym_to_ints(stride);
  if (strides.size() == size.size())
    static_cast<LtTensorImpl *>(t.unsafeGetTensorImpl())->set_view_layout(strides, 0);
  if (!c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Functionalize))
    return at::functionalization::impl::to_functional_tensor(t);
  return t;
}

at::Tensor lt_new_empty_strided(const at::Tensor &self, c10::SymIntArrayRef size,
                                c10::SymIntArrayRef stride, c10::optional<at::ScalarType> dtype,
                                c10::optional<at::Layout> layout, c10::optional<at::Device> device,
                                c10::optional<bool> pin_memory) {
  return lt_empty_strided(size, stride, dtype ? dtype : self.scalar_type(), layout,
                          device ? device : self.device(), pin_memory);
}

at::Tensor lt_lift(const at::Tensor &self) {
  if (at::functionalization::impl::isFunctionalTensor(self)) return self;
  if (c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Functionalize))
    return self;
  return at::functionalization::impl::to_functional_tensor(self);
}

/* ----------------------------------------------------------- transfers */

at::Tensor lt_to_copy(const at::Tensor &self, c10::optional<at::ScalarType> dtype,
                      c10::optional<at::Layout> layout, c10::optional<at::Device> device,
                      c10::optional<bool> pin_memory, bool non_blocking,
                      c10::optional<at::MemoryFormat> memory_format) {
  c10::ScalarType want = dtype.value_or(self.scalar_type());
  if (!impl_of(self)) {
    /* host -> device (reached with a CPU self when the target is ours) */
    TORCH_CHECK(self.device().is_cpu(), "lazytpu: cannot copy a ", self.device().str(),
                " tensor to the device");
    TORCH_CHECK(device && is_lt_device_type(device->type()),
                "lazytpu: _to_copy of a CPU tensor reached the device without a target");
    return wrap_functional(from_cpu(self, core_of_device(device), to_lt_dtype(want)));
  }
  lt_tensor *h = handle_of(self);
  if (device && !is_lt_device_type(device->type())) {
    TORCH_CHECK(device->is_cpu(), "lazytpu: cannot copy a device tensor to ",
                device->str());
    return to_cpu(h, want);
  }
  int core = (device && device->has_index()) ? core_of_device(device) : lt_tensor_core(h);
  lt_dtype dt = to_lt_dtype(want);
  return wrap(fresh(value_for(self, core, dt, dims_of(*lt_tensor_shape(h))), {h}));
}

at::Tensor lt_copy_from(const at::Tensor &self, const at::Tensor &dst, bool non_blocking) {
  LtTensorImpl *di = impl_of(dst);
  if (!di) {
    /* device -> host (dst may be strided / need a broadcast: copy_ does it) */
    TORCH_CHECK(dst.device().is_cpu(), "lazytpu: cannot copy a device tensor to ",
                dst.device().str());
    at::Tensor tmp = to_cpu(handle_of(self), dst.scalar_type());
    const_cast<at::Tensor &>(dst).copy_(tmp);
    return dst;
  }
  lt_tensor *dh = di->handle();
  Ref v = value_for(self, lt_tensor_core(dh), lt_tensor_dtype(dh),
                    dims_of(*lt_tensor_shape(dh)));
  assign_value(dst, v.get());
  return dst;
}

at::Tensor lt_copy_from_and_resize(const at::Tensor &self, const at::Tensor &dst) {
  LtTensorImpl *di = impl_of(dst);
  if (!di) {
    TORCH_CHECK(dst.device().is_cpu(), "lazytpu: cannot copy a device tensor to ",
                dst.device().str());
    const_cast<at::Tensor &>(dst).resize_(self.sizes());
    return lt_copy_from(self, dst, false);
  }
  lt_tensor *dh = di->handle();
  Ref v = value_for(self, lt_tensor_core(dh), lt_tensor_dtype(dh), self.sizes().vec());
  assign_value(dst, v.get());
  di->refresh_metadata();
  return dst;
}

/* functional copy: self's shape/dtype/device with src's values */
at::Tensor lt_copy(const at::Tensor &self, const at::Tensor &src, bool non_blocking) {
  lt_tensor *h = handle_of(self);
  Ref v = value_for(src, lt_tensor_core(h), lt_tensor_dtype(h), dims_of(*lt_tensor_shape(h)));
  LtTensorImpl *si = impl_of(src);
  return wrap_as(fresh(std::move(v), {h, si ? si->handle() : nullptr}), self);
}

c10::Scalar lt_local_scalar_dense(const at::Tensor &self) {
  /* the counter torch_xla users look for: .item() calls (each a host read,
   * see lazy/host_reads.c) */
  static lt_counter *item_calls = lt_counter_get("aten::_local_scalar_dense");
  lt_counter_add(item_calls, 1);
  lt_tensor *h = handle_of(self);
  TORCH_CHECK(lt_shape_numel(lt_tensor_shape(h)) == 1,
              "a Tensor with ", lt_shape_numel(lt_tensor_shape(h)),
              " elements cannot be converted to Scalar");
  CallerScope cs;
  lt_dtype dt = lt_tensor_dtype(h);
  if (dt == LT_BOOL) {
    uint8_t b = 0;
    check_read(lt_tensor_to_host(h, &b, LT_BOOL));
    return c10::Scalar(b != 0);
  }
  if (lt_dtype_is_complex(dt)) {
    double v[2] = {0, 0};
    check(lt_tensor_to_host(h, v, LT_C128));
    if (dt == LT_C128) return c10::Scalar(c10::complex<double>(v[0], v[1]));
    return c10::Scalar(c10::complex<double>((float)v[0], (float)v[1]));
  }
  if (dt == LT_U64) {
    uint64_t v = 0;
    check(lt_tensor_to_host(h, &v, LT_U64));
    return c10::Scalar(v);
  }
  if (lt_dtype_is_int(dt)) {
    int64_t v = 0;
    check_read(lt_tensor_to_host(h, &v, LT_I64));
    return c10::Scalar(v);
  }
  double v = 0;
  check_read(lt_tensor_to_host(h, &v, LT_F64));
  if (dt == LT_F32) return c10::Scalar((double)(float)v);
  if (dt == LT_BF16) return c10::Scalar((double)c10::BFloat16((float)v));
  if (dt == LT_F16) return c10::Scalar((double)c10::Half((float)v));
  return c10::Scalar(v);
}

/* ------------------------------------------------------------ fill/zero */

double fill_value(const c10::Scalar &v, lt_dtype dt) {
  if (v.isComplex() || lt_dtype_is_complex(dt) || lt_dtype_is_storage_only(dt))
    throw_unsupported("lazytpu: fill of a complex or stored-only tensor");
  if (dt == LT_BOOL) return v.toDouble() != 0 ? 1.0 : 0.0;
  if (lt_dtype_is_int(dt)) return v.isIntegral(true) ? (double)v.toLong() : std::trunc(v.toDouble());
  return v.toDouble();
}

at::Tensor lt_fill_scalar(const at::Tensor &self, const c10::Scalar &value) {
  lt_tensor *h = handle_of(self);
  lt_dtype dt = lt_tensor_dtype(h);
  return wrap_as(full(lt_tensor_core(h), dims_of(*lt_tensor_shape(h)), fill_value(value, dt), dt),
                 self);
}

at::Tensor lt_fill_tensor(const at::Tensor &self, const at::Tensor &value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got "
              "tensor with ", value.dim(), " dimensions.");
  lt_tensor *h = handle_of(self);
  Ref v = value_for(value, lt_tensor_core(h), lt_tensor_dtype(h), dims_of(*lt_tensor_shape(h)));
  LtTensorImpl *vi = impl_of(value);
  return wrap_as(fresh(std::move(v), {h, vi ? vi->handle() : nullptr}), self);
}

at::Tensor lt_zero(const at::Tensor &self) { return lt_fill_scalar(self, 0); }

at::Tensor &assign_into(const at::Tensor &self, const at::Tensor &v) {
  assign_value(self, handle_of(v));
  return const_cast<at::Tensor &>(self);
}

at::Tensor &lt_fill__scalar(at::Tensor &self, const c10::Scalar &value) {
  return assign_into(self, lt_fill_scalar(self, value));
}
at::Tensor &lt_fill__tensor(at::Tensor &self, const at::Tensor &value) {
  return assign_into(self, lt_fill_tensor(self, value));
}
at::Tensor &lt_zero_(at::Tensor &self) { return assign_into(self, lt_zero(self)); }

/* ------------------------------------------------------------ identities */

/* A computed value is shared by a new tensor (nothing traced: a detach or a
 * Parameter of a moved weight stays data, as torch_xla's, and adds no
 * compile to the next step); a pending one gets an identity node. */
at::Tensor lt_clone(const at::Tensor &self, c10::optional<at::MemoryFormat> mf) {
  lt_tensor *h = handle_of(self);
  if (!lt_tensor_is_pending(h)) {
    lt_tensor *out = nullptr;
    check(lt_tensor_share(h, &out));
    return wrap(Ref(out));
  }
  return wrap(fresh(Ref::borrow(h), {h}));
}
/* detach/alias keep self's (view) layout. Their result always shares
 * self's value, pending or not: functionalization calls alias_copy twice
 * per in-place update of an alias (a Parameter, a detached momentum
 * buffer) to regenerate it from its base, and an identity node per call
 * cost the trace, the capture and the hash of every optimizer step. */
at::Tensor lt_detach_copy(const at::Tensor &self) {
  lt_tensor *out = nullptr;
  check(lt_tensor_share(handle_of(self), &out));
  at::Tensor t = wrap(Ref(out));
  static_cast<LtTensorImpl *>(t.unsafeGetTensorImpl())
      ->set_view_layout(self.strides(), self.storage_offset());
  return t;
}

/* ------------------------------------------------------- must not reach */

/* Views of raw device tensors (lt_guard.h): marked copies. */
at::Tensor view_copy_of(const at::Tensor &base, at::Tensor t) {
  static_cast<LtTensorImpl *>(t.unsafeGetTensorImpl())->set_view_copy();
  note_view_base(handle_of(base));
  return t;
}
at::Tensor lt_as_strided(const at::Tensor &self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride, c10::optional<c10::SymInt> offset) {
  /* strides over a copy's storage are not its base's: only functionalization
   * can place such a view */
  LtTensorImpl *si = impl_of(self);
  if ((si && si->is_view_copy()) || !self.is_non_overlapping_and_dense())
    throw ViewWrite({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                    "lazytpu: as_strided of a view of a raw device tensor inside a "
                    "composite or custom kernel");
  return view_copy_of(self, at::_ops::as_strided_copy::call(self, size, stride, offset));
}
at::Tensor lt_view(const at::Tensor &self, c10::SymIntArrayRef size) {
  return view_copy_of(self, at::_ops::view_copy::call(self, size));
}
at::Tensor lt_reshape_alias(const at::Tensor &self, c10::SymIntArrayRef size,
                            c10::SymIntArrayRef stride) {
  return view_copy_of(self, at::_ops::_reshape_alias_copy::call(self, size, stride));
}
at::Tensor lt_alias(const at::Tensor &self) {
  return view_copy_of(self, lt_detach_copy(self));
}

/* Our Functionalize kernel for detach: the wrapper is synced first, then
 * detached as an alias (a view sharing its storage), as in eager. PyTorch
 * 1.13's shallow_copy_and_detach dropped the view chain of a wrapper, so
 * round 1 detached a mutated view (or Parameter, itself an alias of the
 * tensor it wraps) into an independent copy; with PyTorch 2.13 that broke
 * alias semantics instead: `p.detach().zero_()` after an optimizer step
 * left p unchanged, and safetensors saw tied weights as two storages. */
at::Tensor functional_detach(c10::DispatchKeySet ks, const at::Tensor &self) {
  if (!at::functionalization::impl::isFunctionalTensor(self)) {
    c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKey::Functionalize);
    return at::_ops::detach::call(self);
  }
  at::functionalization::impl::unsafeGetFunctionalWrapper(self)->sync_();
  return at::_ops::alias::redispatch(ks, self);
}


/* Registered by hand to keep the "overriding a kernel" warning quiet. */
struct RegisterFunctionalDetach {
  RegisterFunctionalDetach() {
    SilentWarnings silent;
    c10::WarningUtils::WarningHandlerGuard guard(&silent);
    static torch::Library lib(torch::Library::IMPL, "aten",
                              c10::DispatchKey::Functionalize, __FILE__, __LINE__);
    lib.impl("detach", TORCH_FN(functional_detach));
  }
} register_functional_detach;

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "empty.memory_format", TORCH_FN(lt_empty));
  reg(m, "empty_strided", TORCH_FN(lt_empty_strided));
  reg(m, "new_empty_strided", TORCH_FN(lt_new_empty_strided));
  reg(m, "lift", TORCH_FN(lt_lift));
  reg(m, "lift_fresh", TORCH_FN(lt_lift));
  reg(m, "_to_copy", TORCH_FN(lt_to_copy));
  reg(m, "_copy_from", TORCH_FN(lt_copy_from));
  reg(m, "_copy_from_and_resize", TORCH_FN(lt_copy_from_and_resize));
  reg(m, "copy", TORCH_FN(lt_copy), true);
  reg(m, "_local_scalar_dense", TORCH_FN(lt_local_scalar_dense));
  reg(m, "fill.Scalar", TORCH_FN(lt_fill_scalar));
  reg(m, "fill.Tensor", TORCH_FN(lt_fill_tensor));
  reg(m, "zero", TORCH_FN(lt_zero));
  reg(m, "fill_.Scalar", TORCH_FN(lt_fill__scalar));
  reg(m, "fill_.Tensor", TORCH_FN(lt_fill__tensor));
  reg(m, "zero_", TORCH_FN(lt_zero_));
  reg(m, "clone", TORCH_FN(lt_clone));
  reg(m, "detach_copy", TORCH_FN(lt_detach_copy));
  reg(m, "alias_copy", TORCH_FN(lt_detach_copy));
  reg(m, "as_strided", TORCH_FN(lt_as_strided));
  reg(m, "view", TORCH_FN(lt_view));
  reg(m, "_reshape_alias", TORCH_FN(lt_reshape_alias));
  reg(m, "alias", TORCH_FN(lt_alias));
}

}  // namespace lazytpu
