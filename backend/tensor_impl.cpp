/*
 * backend/tensor_impl.cpp — LtTensorImpl and the conversion/tracing helpers
 * of lt_aten.h.
 */
#include "lt_aten.h"
#include "../base/options.h"
#include "lt_guard.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <c10/core/AutogradState.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <mutex>
#include <sstream>
#include <typeinfo>

namespace lazytpu {

/* ------------------------------------------------------------ TensorImpl */

LtTensorImpl::LtTensorImpl(lt_tensor *t)
    : c10::TensorImpl(c10::DispatchKeySet(lt_dispatch_key()),
                      c10::scalarTypeToTypeMeta(to_scalar_type(lt_tensor_dtype(t))),
                      c10::Device(lt_device_type(),
                                  (c10::DeviceIndex)lt_tensor_core(t))),
      t_(t) {
  set_storage_access_should_throw();
  refresh_metadata();
}

LtTensorImpl::~LtTensorImpl() { lt_tensor_release(t_); }

void LtTensorImpl::set_handle(lt_tensor *t) {
  if (t == t_) { lt_tensor_release(t); return; }
  lt_tensor_release(t_);
  t_ = t;
  vstrides_.clear();
  voffset_ = 0;
  refresh_metadata();
}

void LtTensorImpl::refresh_metadata() {
  const lt_shape *s = lt_tensor_shape(t_);
  data_type_ = c10::scalarTypeToTypeMeta(
      dtype_override_ >= 0 ? (c10::ScalarType)dtype_override_
                           : to_scalar_type(lt_tensor_dtype(t_)));
  int64_t sizes[LT_MAX_DIMS], strides[LT_MAX_DIMS];
  int64_t st = 1;
  for (int i = s->ndim - 1; i >= 0; i--) {
    sizes[i] = s->dims[i];
    strides[i] = st;
    st *= s->dims[i] > 1 ? s->dims[i] : 1;
  }
  sizes_and_strides_.set_sizes(c10::IntArrayRef(sizes, s->ndim));
  if ((int)vstrides_.size() != s->ndim) { vstrides_.clear(); voffset_ = 0; }
  for (int i = 0; i < s->ndim; i++)
    sizes_and_strides_.stride_at_unchecked(i) = vstrides_.empty() ? strides[i] : vstrides_[i];
  storage_offset_ = voffset_;
  refresh_numel();
  refresh_contiguous();
}

void LtTensorImpl::set_view_layout(c10::IntArrayRef strides, int64_t offset) {
  vstrides_ = strides.vec();
  voffset_ = offset;
  refresh_metadata();
}

void LtTensorImpl::set_dtype_override(c10::ScalarType st) {
  dtype_override_ = (int)st;
  refresh_metadata();
}

c10::intrusive_ptr<c10::TensorImpl> LtTensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion &version_counter,
    bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<LtTensorImpl>(lt_tensor_retain(t_));
  copy_extra(impl.get());
  copy_tensor_metadata(this, impl.get(), version_counter,
                       allow_tensor_metadata_change);
  impl->refresh_numel();
  impl->refresh_contiguous();
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> LtTensorImpl::shallow_copy_and_detach(
    c10::VariableVersion &&version_counter,
    bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<LtTensorImpl>(lt_tensor_retain(t_));
  copy_extra(impl.get());
  copy_tensor_metadata(this, impl.get(), std::move(version_counter),
                       allow_tensor_metadata_change);
  impl->refresh_numel();
  impl->refresh_contiguous();
  return impl;
}

void LtTensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl> &impl) {
  auto *src = dynamic_cast<LtTensorImpl *>(impl.get());
  TORCH_CHECK(src != nullptr, "lazytpu: cannot shallow-copy a ",
              impl->device().str(), " tensor into a lazytpu device tensor");
  copy_tensor_metadata(src, this, version_counter(),
                       allow_tensor_metadata_change());
  if (src->t_ != t_) {
    lt_tensor_release(t_);
    t_ = lt_tensor_retain(src->t_);
  }
  src->copy_extra(this);
  refresh_numel();
  refresh_contiguous();
}

const char *LtTensorImpl::tensorimpl_type_name() const {
  return "lazytpu device tensor (it has no host storage: use .cpu() to read "
         "its values)";
}

/* ----------------------------------------------------------------- errors */

void throw_status(lt_status st) {
  const char *msg = lt_last_error();
  if (!msg || !*msg) msg = "lazytpu: unknown error";
  /* a dtype the core does not compute: the op runs on the CPU fallback */
  if (st == LT_ERR_DTYPE) throw_unsupported(msg);
  TORCH_CHECK(false, msg);
}

void throw_exec_status(lt_status st) {
  const char *msg = lt_last_error();
  if (!msg || !*msg) msg = "lazytpu: unknown error";
  TORCH_CHECK_INDEX(st != LT_ERR_ARG, msg);
  TORCH_CHECK(false, msg);
}

thread_local int t_guard_fallback = 0;

/* LAZYTPU_FALLBACK_WHY=1: each case a kernel hands to the CPU fallback is
 * printed to stderr with its reason (the fallback report names op and
 * frame, not why). */
void throw_unsupported(const std::string &what) {
  static const bool why = lt_opt_int(LT_OPT_FALLBACK_WHY) != 0;
  if (why) std::fprintf(stderr, "lazytpu: CPU fallback: %s\n", what.c_str());
  throw Unsupported({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, what);
}

/* ------------------------------------------------------------ conversions */

bool has_lt_dtype(c10::ScalarType st) {
  switch (st) {
    case c10::ScalarType::Float: case c10::ScalarType::BFloat16:
    case c10::ScalarType::Double: case c10::ScalarType::Long:
    case c10::ScalarType::Int: case c10::ScalarType::Bool:
    case c10::ScalarType::Byte: case c10::ScalarType::Char:
    case c10::ScalarType::Short: case c10::ScalarType::Half:
    case c10::ScalarType::ComplexFloat: case c10::ScalarType::ComplexDouble:
    case c10::ScalarType::ComplexHalf: case c10::ScalarType::UInt16:
    case c10::ScalarType::UInt32: case c10::ScalarType::UInt64:
      return true;
    default:
      return false;
  }
}

lt_dtype to_lt_dtype(c10::ScalarType st) {
  switch (st) {
    case c10::ScalarType::Float: return LT_F32;
    case c10::ScalarType::BFloat16: return LT_BF16;
    case c10::ScalarType::Double: return LT_F64;
    case c10::ScalarType::Long: return LT_I64;
    case c10::ScalarType::Int: return LT_I32;
    case c10::ScalarType::Bool: return LT_BOOL;
    case c10::ScalarType::Byte: return LT_U8;
    case c10::ScalarType::Char: return LT_I8;
    case c10::ScalarType::Short: return LT_I16;
    case c10::ScalarType::Half: return LT_F16;
    case c10::ScalarType::ComplexFloat: return LT_C64;
    case c10::ScalarType::ComplexDouble: return LT_C128;
    case c10::ScalarType::ComplexHalf: return LT_C32;
    case c10::ScalarType::UInt16: return LT_U16;
    case c10::ScalarType::UInt32: return LT_U32;
    case c10::ScalarType::UInt64: return LT_U64;
    default: break;
  }
  throw_unsupported(std::string("lazytpu: dtype ") + c10::toString(st) +
                    " is not supported on the device (supported: float32, bfloat16, "
                    "float16, float64, int64, int32, int16, int8, uint8, bool, complex64; "
                    "stored only: complex128, complex32, uint16, uint32, uint64)");
}

c10::ScalarType to_scalar_type(lt_dtype dt) {
  switch (dt) {
    case LT_F32: return c10::ScalarType::Float;
    case LT_BF16: return c10::ScalarType::BFloat16;
    case LT_F64: return c10::ScalarType::Double;
    case LT_I64: return c10::ScalarType::Long;
    case LT_I32: return c10::ScalarType::Int;
    case LT_BOOL: return c10::ScalarType::Bool;
    case LT_U8: return c10::ScalarType::Byte;
    case LT_I8: return c10::ScalarType::Char;
    case LT_I16: return c10::ScalarType::Short;
    case LT_F16: return c10::ScalarType::Half;
    case LT_C64: return c10::ScalarType::ComplexFloat;
    case LT_C128: return c10::ScalarType::ComplexDouble;
    case LT_C32: return c10::ScalarType::ComplexHalf;
    case LT_U16: return c10::ScalarType::UInt16;
    case LT_U32: return c10::ScalarType::UInt32;
    case LT_U64: return c10::ScalarType::UInt64;
    default: break;
  }
  TORCH_CHECK(false, "lazytpu: internal: bad lt_dtype ", (int)dt);
}

lt_shape to_shape(c10::IntArrayRef sizes) {
  TORCH_CHECK(sizes.size() <= LT_MAX_DIMS, "lazytpu: tensors have at most ",
              LT_MAX_DIMS, " dims, got ", sizes.size(), " (sizes ", sizes, ")");
  lt_shape s;
  s.ndim = (int)sizes.size();
  for (size_t i = 0; i < sizes.size(); i++) {
    TORCH_CHECK(sizes[i] >= 0, "lazytpu: negative dimension ", sizes[i],
                " in sizes ", sizes);
    s.dims[i] = sizes[i];
  }
  return s;
}

std::vector<int64_t> dims_of(const lt_shape &s) {
  return std::vector<int64_t>(s.dims, s.dims + s.ndim);
}

std::vector<int64_t> sym_to_ints(c10::SymIntArrayRef s) {
  std::vector<int64_t> v;
  v.reserve(s.size());
  for (const auto &x : s) v.push_back(x.expect_int());
  return v;
}

/* ------------------------------------------------------------- tensors */

LtTensorImpl *impl_of(const at::Tensor &t) {
  if (!t.defined()) return nullptr;
  c10::TensorImpl *ti = t.unsafeGetTensorImpl();
  if (C10_UNLIKELY(ti->key_set().has(c10::DispatchKey::Functionalize))) {
    auto *w = at::functionalization::impl::unsafeGetFunctionalWrapper(t);
    w->sync_();
    ti = w->value().unsafeGetTensorImpl();
  }
  if (!ti->key_set().has(lt_dispatch_key())) return nullptr;
  /* LtTensorImpl is final: a type comparison instead of a dynamic_cast
   * (which showed in per-op profiles) */
  return typeid(*ti) == typeid(LtTensorImpl) ? static_cast<LtTensorImpl *>(ti) : nullptr;
}

lt_tensor *handle_of(const at::Tensor &t) {
  LtTensorImpl *impl = impl_of(t);
  TORCH_CHECK(impl != nullptr, "lazytpu: expected a lazytpu device tensor, got a ",
              t.defined() ? t.device().str() : std::string("undefined"), " tensor");
  return impl->handle();
}

void assign_value(const at::Tensor &dst, lt_tensor *v) {
  LtTensorImpl *impl = impl_of(dst);
  TORCH_CHECK(impl != nullptr, "lazytpu: internal: in-place write into a non-device tensor");
  if (impl->is_view_copy() || is_view_base(impl->handle()))
    throw ViewWrite({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                    "lazytpu: in-place write into a view of a raw device tensor (or into "
                    "its base) inside a composite or custom kernel");
  check(lt_tensor_assign(impl->handle(), v));
}

static std::atomic<uint32_t> g_used_cores{0};

void note_core_used(int core) {
  uint32_t bit = 1u << (core & 31);
  if (!(g_used_cores.load(std::memory_order_relaxed) & bit))
    g_used_cores.fetch_or(bit);
}
uint32_t used_cores_mask(void) { return g_used_cores.load(); }

/* The first device tensor a thread makes turns autograd's multithreading
 * off for that thread (LAZYTPU_BACKWARD_ON_CALLER): its backward() then
 * traces on the calling thread instead of handing the graph to the device's
 * autograd thread and sleeping until it ends (backward of CPU tensors runs on
 * the caller either way). Once per thread: a user's own
 * set_multithreading_enabled later wins. */
static void backward_on_caller_once(void) {
  static thread_local bool done = false;
  if (done) return;
  done = true;
  if (lt_opt_int(LT_OPT_BACKWARD_ON_CALLER))
    c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
}

at::Tensor wrap(Ref r) {
  TORCH_CHECK(r, "lazytpu: internal: wrapping a null tensor");
  note_core_used(r.core());
  backward_on_caller_once();
  return at::Tensor(c10::make_intrusive<LtTensorImpl>(r.release()));
}

at::Tensor wrap_as(Ref r, const at::Tensor &self) {
  at::Tensor t = wrap(std::move(r));
  LtTensorImpl *si = impl_of(self);
  if (si && (!si->is_contiguous() || si->storage_offset() != 0)) {
    if (t.sizes() == self.sizes())
      static_cast<LtTensorImpl *>(t.unsafeGetTensorImpl())
          ->set_view_layout(self.strides(), self.storage_offset());
  }
  return t;
}

at::Tensor wrap_functional(Ref r) {
  at::Tensor t = wrap(std::move(r));
  if (!c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Functionalize))
    return at::functionalization::impl::to_functional_tensor(t);
  return t;
}

static std::string dev_str(const at::Tensor &t) { return t.device().str(); }

/* core N as the user's torch.device names it ("lazytpu:N", or "xla:N" in
 * compatibility mode), for error messages */
std::string core_name(int core) {
  return c10::Device(lt_device_type(), static_cast<c10::DeviceIndex>(core)).str();
}

int common_core(std::initializer_list<const at::Tensor *> ts) {
  int core = -1;
  const at::Tensor *first = nullptr;
  for (const at::Tensor *t : ts) {
    if (!t || !t->defined()) continue;
    LtTensorImpl *impl = impl_of(*t);
    if (!impl) continue;
    int c = lt_tensor_core(impl->handle());
    if (core < 0) { core = c; first = t; }
    else if (c != core) {
      TORCH_CHECK(false, "Expected all tensors to be on the same device, but found "
                  "at least two devices, ", dev_str(*first), " and ", dev_str(*t), "!");
    }
  }
  TORCH_CHECK(core >= 0, "lazytpu: internal: no device tensor among the operands");
  for (const at::Tensor *t : ts) {
    if (!t || !t->defined() || impl_of(*t)) continue;
    if (t->dim() == 0 && t->device().is_cpu()) continue;  /* CPU scalar: allowed */
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found "
                "at least two devices, ", dev_str(*first), " and ", dev_str(*t), "!");
  }
  return core;
}

int core_of_device(c10::optional<c10::Device> d) {
  lt_init();
  int idx = (d && d->has_index()) ? d->index() : current_core();
  TORCH_CHECK(idx >= 0 && idx < lt_num_cores(), "lazytpu: device index ", idx,
              " out of range: there are ", lt_num_cores(), " cores (", core_name(0), "..",
              lt_num_cores() - 1, ")");
  return idx;
}

Ref operand(const at::Tensor &t, int core) {
  LtTensorImpl *impl = impl_of(t);
  if (impl) return Ref::borrow(impl->handle());
  TORCH_CHECK(t.defined() && t.dim() == 0 && t.device().is_cpu(),
              "Expected all tensors to be on the same device, but found at least "
              "two devices, ", core_name(core), " and ",
              t.defined() ? dev_str(t) : std::string("undefined"), "!");
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
    /* a Python number (x.mul_(0.9)): read in place, not through aten::item
     * (a dispatch per optimizer op) */
    const void *p = t.const_data_ptr();
    switch (t.scalar_type()) {
      case at::kDouble: return scalar(core, c10::Scalar(*static_cast<const double *>(p)));
      case at::kLong: return scalar(core, c10::Scalar(*static_cast<const int64_t *>(p)));
      case at::kBool: return scalar(core, c10::Scalar(*static_cast<const bool *>(p)));
      default: return scalar(core, t.item());
    }
  }
  c10::Scalar v = t.item();
  return scalar_typed(core, v.toDouble(), to_lt_dtype(t.scalar_type()));
}

Ref scalar(int core, const c10::Scalar &s) {
  lt_dtype dt;
  double v;
  if (s.isBoolean()) { dt = LT_BOOL; v = s.toBool() ? 1.0 : 0.0; }
  else if (s.isIntegral(false)) { dt = LT_I64; v = (double)s.toLong(); }
  else {
    if (s.isComplex()) throw_unsupported("lazytpu: complex Python scalars are not computed "
                                         "on the device");
    dt = LT_F64; v = s.toDouble();
  }
  lt_tensor *out = nullptr;
  check(lt_scalar(core, v, dt, 1, &out));
  return Ref(out);
}

Ref scalar_typed(int core, double v, lt_dtype dt) {
  lt_tensor *out = nullptr;
  check(lt_scalar(core, v, dt, 0, &out));
  return Ref(out);
}

Ref trace(lt_op op, std::initializer_list<lt_tensor *> in, const lt_attrs *attrs) {
  lt_tensor *out = nullptr;
  check(lt_trace(op, in.begin(), (int)in.size(), attrs, &out));
  return Ref(out);
}

Ref trace_n(lt_op op, const std::vector<lt_tensor *> &in, const lt_attrs *attrs) {
  lt_tensor *out = nullptr;
  check(lt_trace(op, in.data(), (int)in.size(), attrs, &out));
  return Ref(out);
}

lt_attrs attrs_of(std::initializer_list<int64_t> v) {
  lt_attrs a;
  memset(&a, 0, sizeof a);
  TORCH_CHECK(v.size() <= LT_MAX_ATTRS, "lazytpu: internal: too many attrs");
  for (int64_t x : v) a.i[a.n++] = x;
  return a;
}

lt_attrs attrs_vec(const std::vector<int64_t> &v) {
  lt_attrs a;
  memset(&a, 0, sizeof a);
  TORCH_CHECK(v.size() <= LT_MAX_ATTRS, "lazytpu: internal: too many attrs");
  for (int64_t x : v) a.i[a.n++] = x;
  return a;
}

Ref reshape(lt_tensor *x, const std::vector<int64_t> &dims) {
  const lt_shape *s = lt_tensor_shape(x);
  if ((int)dims.size() == s->ndim &&
      std::equal(dims.begin(), dims.end(), s->dims))
    return Ref::borrow(x);
  lt_attrs a = attrs_vec(dims);
  return trace(LT_OP_reshape, {x}, &a);
}

Ref expand(lt_tensor *x, const std::vector<int64_t> &dims) {
  const lt_shape *s = lt_tensor_shape(x);
  if ((int)dims.size() == s->ndim &&
      std::equal(dims.begin(), dims.end(), s->dims))
    return Ref::borrow(x);
  lt_attrs a = attrs_vec(dims);
  return trace(LT_OP_expand, {x}, &a);
}

Ref permute(lt_tensor *x, const std::vector<int64_t> &perm) {
  bool ident = true;
  for (size_t i = 0; i < perm.size(); i++) ident = ident && perm[i] == (int64_t)i;
  if (ident) return Ref::borrow(x);
  lt_attrs a = attrs_vec(perm);
  return trace(LT_OP_permute, {x}, &a);
}

static lt_dtype complex_part(lt_dtype dt) {
  return dt == LT_C64 ? LT_F32 : dt == LT_C128 ? LT_F64 : LT_F16;
}

/* x ([..., 2] pairs of a float) as a complex tensor */
static Ref to_complex_pairs(lt_tensor *pairs) {
  return trace(LT_OP_view_as_complex, {pairs});
}

Ref cast(lt_tensor *x, lt_dtype dt) {
  lt_dtype from = lt_tensor_dtype(x);
  if (from == dt) return Ref::borrow(x);
  bool cf = lt_dtype_is_complex(from), ct = lt_dtype_is_complex(dt);
  if (cf || ct) {
    /* complex values move as (re, im) pairs of their float */
    if (cf && ct) {
      Ref pr = trace(LT_OP_view_as_real, {x});
      return to_complex_pairs(cast(pr.get(), complex_part(dt)).get());
    }
    if (cf) {   /* the real part, like a CPU copy (which also warns) */
      Ref pr = trace(LT_OP_view_as_real, {x});
      lt_attrs a = attrs_of({(int64_t)pr.ndim() - 1, 0});
      Ref re = trace(LT_OP_select, {pr.get()}, &a);
      return cast(re.get(), dt);
    }
    Ref re = cast(x, complex_part(dt));
    std::vector<int64_t> d = dims_of(re.shape());
    d.push_back(1);
    Ref col = reshape(re.get(), d);
    Ref zero = zeros(lt_tensor_core(x), d, complex_part(dt));
    lt_attrs a = attrs_of({(int64_t)d.size() - 1});
    Ref pairs = trace(LT_OP_cat, {col.get(), zero.get()}, &a);
    return to_complex_pairs(pairs.get());
  }
  lt_attrs a = attrs_of({(int64_t)dt});
  return trace(LT_OP_cast, {x}, &a);
}

Ref full(int core, const std::vector<int64_t> &dims, double v, lt_dtype dt) {
  if (lt_dtype_is_complex(dt)) {   /* (v, 0) pairs */
    Ref re = full(core, dims, v, complex_part(dt));
    return cast(re.get(), dt);
  }
  if (lt_dtype_is_storage_only(dt)) {
    TORCH_CHECK(v == 0, "lazytpu: internal: fill of a stored-only dtype");
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<uint8_t> buf((size_t)std::max<int64_t>(n, 1) * lt_dtype_size(dt), 0);
    lt_shape s = to_shape(dims);
    lt_tensor *out = nullptr;
    check(lt_tensor_from_host(core, buf.data(), dt, &s, &out));
    return Ref(out);
  }
  Ref s = scalar_typed(core, v, dt);
  if (dims.empty()) return s;
  std::vector<int64_t> ones(dims.size(), 1);
  Ref r = reshape(s.get(), ones);
  return expand(r.get(), dims);
}

Ref zeros(int core, const std::vector<int64_t> &dims, lt_dtype dt) {
  return full(core, dims, 0.0, dt);
}

Ref reduce(lt_op op, lt_tensor *x, const std::vector<int64_t> &dims, bool keepdim) {
  int nd = lt_tensor_shape(x)->ndim;
  int64_t mask = 0;
  if (dims.empty()) mask = nd ? ((int64_t)1 << nd) - 1 : 0;
  for (int64_t d : dims) mask |= (int64_t)1 << c10::maybe_wrap_dim(d, nd);
  if (mask == 0 && nd == 0) {
    /* reduction of a 0-dim tensor: the value itself (dtype rule still applies) */
    lt_attrs a = attrs_of({0, keepdim ? 1 : 0});
    return trace(op, {x}, &a);
  }
  lt_attrs a = attrs_of({mask, keepdim ? 1 : 0});
  return trace(op, {x}, &a);
}

Ref binary(lt_op op, lt_tensor *a, lt_tensor *b) { return trace(op, {a, b}); }

Ref mul_scalar(lt_tensor *x, const c10::Scalar &s) {
  if (!s.isBoolean() && !s.isComplex() && s.toDouble() == 1.0) return Ref::borrow(x);
  Ref k = scalar(lt_tensor_core(x), s);
  return trace(LT_OP_mul, {x, k.get()});
}

/* --------------------------------------------------------------- caller */

static std::atomic<caller_hook_fn> g_caller_hook{nullptr};

void set_caller_hook(caller_hook_fn fn) { g_caller_hook.store(fn); }

std::string current_caller(void) {
  caller_hook_fn fn = g_caller_hook.load();
  return fn ? fn() : std::string();
}

}  // namespace lazytpu

/* ------------------------------------------ torch-free entry points (lt_shim.h) */

#include "lt_shim.h"

uint32_t lazytpu_used_cores_mask(void) { return lazytpu::used_cores_mask(); }
void lazytpu_set_caller_hook(std::string (*fn)(void)) { lazytpu::set_caller_hook(fn); }
