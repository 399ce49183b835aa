/*
 * backend/lt_aten.h — the shim's shared vocabulary between aten and the C core.
 *
 * A device tensor is an at::Tensor whose TensorImpl is an LtTensorImpl: no
 * storage, DispatchKeySet(lt_dispatch_key()), contiguous sizes/strides from
 * the lt_shape, dtype = the logical lt dtype. It owns one reference to an
 * lt_tensor. Above it sits PyTorch's FunctionalTensorWrapper (see copy_ops.cpp),
 * so kernels registered here only ever see functional ops.
 *
 * Ref owns one lt_tensor reference (RAII). Every helper that creates an IR
 * value returns a Ref; wrap() turns it into an at::Tensor. Errors from the core
 * become c10::Error (RuntimeError in Python) carrying lt_last_error().
 */
#ifndef LT_ATEN_H
#define LT_ATEN_H

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/Exception.h>
#include <initializer_list>
#include <vector>

#include "lazytpu.h"
#include "hooks/lt_hooks.h"

namespace lazytpu {

/* Owns one reference to an lt_tensor (NULL allowed). */
class Ref {
 public:
  Ref() : p_(nullptr) {}
  explicit Ref(lt_tensor *p) : p_(p) {}
  Ref(Ref &&o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  Ref &operator=(Ref &&o) noexcept {
    if (this != &o) { lt_tensor_release(p_); p_ = o.p_; o.p_ = nullptr; }
    return *this;
  }
  Ref(const Ref &) = delete;
  Ref &operator=(const Ref &) = delete;
  ~Ref() { lt_tensor_release(p_); }
  static Ref borrow(lt_tensor *p) { return Ref(lt_tensor_retain(p)); }
  lt_tensor *get() const { return p_; }
  lt_tensor *release() { lt_tensor *p = p_; p_ = nullptr; return p; }
  explicit operator bool() const { return p_ != nullptr; }
  const lt_shape &shape() const { return *lt_tensor_shape(p_); }
  int ndim() const { return lt_tensor_shape(p_)->ndim; }
  lt_dtype dtype() const { return lt_tensor_dtype(p_); }
  int core() const { return lt_tensor_core(p_); }
 private:
  lt_tensor *p_;
};

/* The storage-less TensorImpl of a device tensor. */
class LtTensorImpl final : public c10::TensorImpl {
 public:
  /* Takes over the caller's reference to t. */
  explicit LtTensorImpl(lt_tensor *t);
  ~LtTensorImpl() override;
  lt_tensor *handle() const { return t_; }
  /* Makes this tensor hold t instead (takes the caller's reference), and
   * refreshes sizes/dtype. Used by in-place updates that change the shape. */
  void set_handle(lt_tensor *t);
  void refresh_metadata();
  /* Reports dtype st instead of the lt dtype. Only for empty tensors of a
   * dtype the device lacks (e.g. batch norm's uint8 reserve of size 0). */
  void set_dtype_override(c10::ScalarType st);
  /* Eager-style layout of a view: the strides/storage offset PyTorch would
   * report for it relative to its base (autograd's CopySlices applies
   * as_strided with them). The data itself stays contiguous; the layout is
   * dropped when the value's shape changes. */
  void set_view_layout(c10::IntArrayRef strides, int64_t offset);
  /* A copy standing in for a view of a raw device tensor (composite.cpp):
   * writing into it would not reach the base, so assign_value refuses. */
  void set_view_copy() { view_copy_ = true; }
  bool is_view_copy() const { return view_copy_; }

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion &version_counter,
      bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion &&version_counter,
      bool allow_tensor_metadata_change) const override;
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl> &impl) override;
  const char *tensorimpl_type_name() const override;

 private:
  lt_tensor *t_;
  int dtype_override_ = -1;
  std::vector<int64_t> vstrides_;   /* empty: contiguous */
  int64_t voffset_ = 0;
  bool view_copy_ = false;
  void copy_extra(LtTensorImpl *dst) const {
    dst->view_copy_ = view_copy_;
    dst->dtype_override_ = dtype_override_;
    dst->vstrides_ = vstrides_;
    dst->voffset_ = voffset_;
  }
};

/* Throws c10::Error with the core's last error message. */
[[noreturn]] void throw_status(lt_status st);
inline void check(lt_status st) {
  if (C10_UNLIKELY(st != LT_OK)) throw_status(st);
}
/* The same for an execution error returned by a value read (a poisoned
 * tensor, docs/errors.md): an index or class id out of range (LT_ERR_ARG)
 * becomes c10::IndexError (IndexError in Python, as eager raises for
 * x[idx], index_select, embedding, nll_loss; eager's gather and scatter_add
 * raise RuntimeError), every other status c10::Error. */
[[noreturn]] void throw_exec_status(lt_status st);
inline void check_read(lt_status st) {
  if (C10_UNLIKELY(st != LT_OK)) throw_exec_status(st);
}

/* dtype and shape conversions; to_lt_dtype throws Unsupported for dtypes the
 * device does not hold (quantized, float8, ...). */
lt_dtype to_lt_dtype(c10::ScalarType st);
bool has_lt_dtype(c10::ScalarType st);   /* to_lt_dtype would not throw */
c10::ScalarType to_scalar_type(lt_dtype dt);
lt_shape to_shape(c10::IntArrayRef sizes);
std::vector<int64_t> dims_of(const lt_shape &s);
std::vector<int64_t> sym_to_ints(c10::SymIntArrayRef s);

/* The LtTensorImpl of t, or nullptr (CPU tensor, undefined, other backend).
 * A FunctionalTensorWrapper is looked through. */
LtTensorImpl *impl_of(const at::Tensor &t);
/* Borrowed handle of a device tensor; throws if t is not one. */
lt_tensor *handle_of(const at::Tensor &t);

/* Makes dst (a device tensor, raw or functional) hold value v: how in-place
 * kernels write. Throws ViewWrite (lt_guard.h) when dst is a view copy. */
void assign_value(const at::Tensor &dst, lt_tensor *v);

/* An in-place update's result dst, about to replace from's value (a
 * functional wrapper's replace_), keeps from's SPMD sharding
 * (lt_tensor_keep_sharding). Nothing for non-device tensors. */
void keep_sharding(const at::Tensor &dst, const at::Tensor &from);

/* Wraps r in a new device tensor (takes the reference). */
at::Tensor wrap(Ref r);
/* wrap(), keeping self's eager-style view layout when the result has self's
 * shape. Used by ops that functionalization also uses for in-place updates
 * (x.add_ = add + replace): a view updated in place must keep reporting its
 * strides, or autograd's CopySlices would address the wrong elements. */
at::Tensor wrap_as(Ref r, const at::Tensor &self);
/* Same, plus a FunctionalTensorWrapper unless Functionalize is excluded in
 * TLS (for factory functions: empty, lift, ...). */
at::Tensor wrap_functional(Ref r);

/* Core of the first device tensor among ts (nullptr/undefined skipped).
 * Checks that every other operand is on the same core, or is a 0-dim CPU
 * tensor (a scalar); else throws PyTorch's device-mismatch error. */
int common_core(std::initializer_list<const at::Tensor *> ts);
/* The core a device option names (index -1 -> the current device). */
int core_of_device(c10::optional<c10::Device> d);
/* Remembers that a core has tensors (mark_step syncs these). */
void note_core_used(int core);
uint32_t used_cores_mask(void);

/* Operand for tracing: a device tensor (borrowed reference), or a 0-dim CPU
 * tensor turned into a scalar on `core` (wrapped numbers stay weak). */
Ref operand(const at::Tensor &t, int core);
/* A Python number as a wrapped scalar (weak in promotion). */
Ref scalar(int core, const c10::Scalar &s);
/* A typed 0-dim value (strong: behaves like a 0-dim tensor of dtype dt). */
Ref scalar_typed(int core, double v, lt_dtype dt);

/* Tracing helpers: throw on error. */
Ref trace(lt_op op, std::initializer_list<lt_tensor *> in,
          const lt_attrs *attrs = nullptr);
Ref trace_n(lt_op op, const std::vector<lt_tensor *> &in,
            const lt_attrs *attrs = nullptr);
lt_attrs attrs_of(std::initializer_list<int64_t> v);
lt_attrs attrs_vec(const std::vector<int64_t> &v);

/* r, or a new lt_tensor with r's value when r is one of `inputs`: results
 * must never share an lt_tensor with an operand (an in-place assign would
 * then change both). */
Ref fresh(Ref r, std::initializer_list<lt_tensor *> inputs);

/* Common compositions. */
Ref reshape(lt_tensor *x, const std::vector<int64_t> &dims);
Ref expand(lt_tensor *x, const std::vector<int64_t> &dims);
Ref permute(lt_tensor *x, const std::vector<int64_t> &perm);
Ref cast(lt_tensor *x, lt_dtype dt);       /* no-op (retain) if same dtype */
Ref zeros(int core, const std::vector<int64_t> &dims, lt_dtype dt);
Ref full(int core, const std::vector<int64_t> &dims, double v, lt_dtype dt);
/* Reduction (sum/mean/amax/...) over dims (empty = all), keepdim. */
Ref reduce(lt_op op, lt_tensor *x, const std::vector<int64_t> &dims,
           bool keepdim);
Ref binary(lt_op op, lt_tensor *a, lt_tensor *b);
/* The class-index target t of an NLL loss over C classes as the core's i64
 * indices (ops_nn.cpp): i64 as is; Byte cast when byte_ok (eager's
 * nll_loss takes it, nll_loss2d does not). In torch_xla compatibility mode
 * any integer target is cast, and a floating one taken as torch_xla's
 * lowering takes it (a one-hot comparison with the classes 0..C-1): a value
 * that is not one of them (a fraction, out of range, NaN) matches no class
 * and counts as ignore_index. Any other target is returned unchanged: the
 * core refuses it, and the CPU fallback raises eager's error. */
Ref nll_target(lt_tensor *t, int64_t C, int64_t ignore_index, bool byte_ok);
Ref mul_scalar(lt_tensor *x, const c10::Scalar &s);  /* x * s; x if s == 1 */

/* The device type and dispatch key device tensors carry: PrivateUse1
 * ("lazytpu"), or XLA in torch_xla compatibility mode (runtime.cpp). */
c10::DeviceType lt_device_type(void);
c10::DispatchKey lt_dispatch_key(void);
/* 1 for the device types that are lazytpu's: PrivateUse1, and XLA in
 * compatibility mode. */
bool is_lt_device_type(c10::DeviceType t);

/* current_core, set_current_core and the per-core random state (rng_*) are
 * the hooks library's: hooks/lt_hooks.h. */

/* Hook set by the Python module: describes the user's Python frame that is
 * running now ("train.py:42 in step"), or "" . Called only on rare events
 * (fallbacks, value reads). */
typedef std::string (*caller_hook_fn)(void);
void set_caller_hook(caller_hook_fn fn);
std::string current_caller(void);

}  // namespace lazytpu

#endif
