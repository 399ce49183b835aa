/*
 * backend/ops_math.cpp — elementwise, reduction and matmul kernels.
 *
 * The simple ones are generated from the op table (lazy/ops.def): every
 * unary/binary elementwise op whose aten name equals the table name is
 * registered if aten has a schema of the expected form (checked against the
 * dispatcher at load time: `name(Tensor)`, `name.Tensor(Tensor, Tensor)`,
 * `name.Scalar(Tensor, Scalar)`, ...). The rest are written by hand below,
 * composing table ops where aten's op is a combination (addmm = mm + add, ...).
 */
#include "lt_aten.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/baddbmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/dot_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mv_ops.h>
#include "eager_checks.h"
#include "lt_register.h"

#include <cmath>
#include <limits>

namespace lazytpu {

void cpu_fallback_boxed(const c10::OperatorHandle &op, torch::jit::Stack *stack);

namespace {

/* ------------------------------------------------ generated elementwise */

template <int OP>
at::Tensor unary_fn(const at::Tensor &self) {
  check_unary_like_eager((lt_op)OP, self);
  return wrap_as(trace((lt_op)OP, {handle_of(self)}), self);
}

template <int OP>
at::Tensor binary_fn(const at::Tensor &self, const at::Tensor &other) {
  int core = common_core({&self, &other});
  check_binary_like_eager((lt_op)OP, self, other);
  Ref a = operand(self, core), b = operand(other, core);
  return wrap_as(trace((lt_op)OP, {a.get(), b.get()}), self);
}

template <int OP>
at::Tensor binary_scalar_fn(const at::Tensor &self, const c10::Scalar &other) {
  check_binary_like_eager((lt_op)OP, self, other);
  lt_tensor *a = handle_of(self);
  Ref b = scalar(lt_tensor_core(a), other);
  return wrap_as(trace((lt_op)OP, {a, b.get()}), self);
}

/* The schema aten::<name>.<overload>, if it exists and its arguments are
 * exactly `kinds` ('T' tensor, 'S' scalar) returning one tensor. */
bool has_schema(const std::string &name, const char *overload, const char *kinds) {
  auto op = c10::Dispatcher::singleton().findSchema({"aten::" + name, overload});
  if (!op) return false;
  const auto &s = op->schema();
  const auto &args = s.arguments();
  if (args.size() != strlen(kinds) || s.returns().size() != 1) return false;
  for (size_t i = 0; i < args.size(); i++) {
    auto k = args[i].type()->kind();
    if (kinds[i] == 'T' && k != c10::TypeKind::TensorType) return false;
    if (kinds[i] == 'S' && k != c10::TypeKind::NumberType) return false;
  }
  return s.returns()[0].type()->kind() == c10::TypeKind::TensorType;
}

std::string full_name(const std::string &name, const char *overload) {
  return *overload ? name + "." + overload : name;
}

template <int OP>
void register_generated(torch::Library &m) {
  std::string name = lt_op_name((lt_op)OP);
  lt_op_kind kind = lt_op_kind_of((lt_op)OP);
  if (kind == LT_KIND_UNARY) {
    if (has_schema(name, "", "T")) reg(m, name, TORCH_FN(unary_fn<OP>));
  } else if (kind == LT_KIND_BINARY) {
    for (const char *ov : {"Tensor", "", "Tensor_Tensor"})
      if (has_schema(name, ov, "TT")) {
        reg(m, full_name(name, ov), TORCH_FN(binary_fn<OP>));
        break;
      }
    for (const char *ov : {"Scalar", "Tensor_Scalar"})
      if (has_schema(name, ov, "TS")) {
        reg(m, full_name(name, ov), TORCH_FN(binary_scalar_fn<OP>));
        break;
      }
  }
}

/* ------------------------------------------------ handwritten elementwise */

bool is_one(const c10::Scalar &s) { return !s.isComplex() && s.toDouble() == 1.0; }
bool is_zero(const c10::Scalar &s) { return !s.isComplex() && s.toDouble() == 0.0; }

at::Tensor add_impl(const at::Tensor &self, const at::Tensor &other,
                    const c10::Scalar &alpha, lt_op op) {
  int core = common_core({&self, &other});
  c10::ScalarType rt = check_alpha_like_eager(self, other, alpha);
  Ref a = operand(self, core), b = operand(other, core);
  if (!is_one(alpha)) {
    /* other * alpha in the result's dtype (an i32 operand of an i64 sum
     * must not wrap at 32 bits) */
    lt_dtype want = to_lt_dtype(rt);
    if (c10::isIntegralType(rt, false) && b.dtype() != want) b = cast(b.get(), want);
    b = mul_scalar(b.get(), alpha);
  }
  return wrap_as(trace(op, {a.get(), b.get()}), self);
}

at::Tensor lt_add(const at::Tensor &self, const at::Tensor &other, const c10::Scalar &alpha) {
  return add_impl(self, other, alpha, LT_OP_add);
}
at::Tensor lt_sub(const at::Tensor &self, const at::Tensor &other, const c10::Scalar &alpha) {
  check_sub_like_eager(self, other);
  return add_impl(self, other, alpha, LT_OP_sub);
}
at::Tensor lt_rsub(const at::Tensor &self, const at::Tensor &other, const c10::Scalar &alpha) {
  check_sub_like_eager(self, other);
  return add_impl(other, self, alpha, LT_OP_sub);
}
at::Tensor scalar_tensor_op(const at::Tensor &self, const c10::Scalar &other,
                            const c10::Scalar &alpha, lt_op op, bool reverse) {
  lt_tensor *a = handle_of(self);
  int core = lt_tensor_core(a);
  check_alpha_like_eager(self, other, alpha);
  Ref b = scalar(core, other);
  if (!is_one(alpha)) b = mul_scalar(b.get(), alpha);  /* weak * weak stays weak */
  if (reverse) {
    Ref x = mul_scalar(a, alpha);
    Ref o = scalar(core, other);
    return wrap(trace(op, {o.get(), x.get()}));
  }
  return wrap_as(trace(op, {a, b.get()}), self);
}
at::Tensor lt_add_scalar(const at::Tensor &self, const c10::Scalar &other, const c10::Scalar &alpha) {
  return scalar_tensor_op(self, other, alpha, LT_OP_add, false);
}
at::Tensor lt_sub_scalar(const at::Tensor &self, const c10::Scalar &other, const c10::Scalar &alpha) {
  check_sub_like_eager(self, other);
  return scalar_tensor_op(self, other, alpha, LT_OP_sub, false);
}
at::Tensor lt_rsub_scalar(const at::Tensor &self, const c10::Scalar &other, const c10::Scalar &alpha) {
  check_sub_like_eager(self, other);
  return scalar_tensor_op(self, other, alpha, LT_OP_sub, true);
}

at::Tensor div_mode(Ref q, c10::optional<c10::string_view> mode, lt_dtype want) {
  if (!mode) return wrap(std::move(q));
  if (*mode == "trunc") q = trace(LT_OP_trunc, {q.get()});
  else if (*mode == "floor") q = trace(LT_OP_floor, {q.get()});
  else TORCH_CHECK(false, "div expected rounding_mode to be one of None, 'trunc', or "
                   "'floor' but found '", *mode, "'");
  return wrap(cast(q.get(), want));
}
at::Tensor lt_div_mode(const at::Tensor &self, const at::Tensor &other,
                       c10::optional<c10::string_view> mode) {
  int core = common_core({&self, &other});
  if (mode) check_div_mode_like_eager(self, other);
  Ref a = operand(self, core), b = operand(other, core);
  Ref q = trace(LT_OP_div, {a.get(), b.get()});
  lt_dtype want = lt_dtype_promote(a.dtype(), b.dtype());
  if (impl_of(other) == nullptr) want = a.dtype();
  return div_mode(std::move(q), mode, mode ? want : q.dtype());
}
at::Tensor lt_div_scalar_mode(const at::Tensor &self, const c10::Scalar &other,
                              c10::optional<c10::string_view> mode) {
  if (mode) check_div_mode_like_eager(self, other);
  lt_tensor *a = handle_of(self);
  Ref b = scalar(lt_tensor_core(a), other);
  Ref q = trace(LT_OP_div, {a, b.get()});
  lt_dtype want = lt_tensor_dtype(a);
  if (!lt_dtype_is_float(want) && other.isFloatingPoint()) want = q.dtype();
  return div_mode(std::move(q), mode, mode ? want : q.dtype());
}

at::Tensor lt_pow_scalar_base(const c10::Scalar &self, const at::Tensor &exponent) {
  lt_tensor *e = handle_of(exponent);
  Ref b = scalar(lt_tensor_core(e), self);
  return wrap(trace(LT_OP_pow, {b.get(), e}));
}

at::Tensor lt_square(const at::Tensor &self) {
  lt_tensor *a = handle_of(self);
  return wrap(trace(LT_OP_mul, {a, a}));
}

at::Tensor lt_where(const at::Tensor &cond, const at::Tensor &self, const at::Tensor &other) {
  int core = common_core({&cond, &self, &other});
  Ref c = operand(cond, core), a = operand(self, core), b = operand(other, core);
  return wrap(trace(LT_OP_where, {c.get(), a.get(), b.get()}));
}
at::Tensor lt_where_so(const at::Tensor &cond, const at::Tensor &self, const c10::Scalar &other) {
  int core = common_core({&cond, &self});
  Ref c = operand(cond, core), a = operand(self, core), b = scalar(core, other);
  return wrap(trace(LT_OP_where, {c.get(), a.get(), b.get()}));
}
at::Tensor lt_where_ss(const at::Tensor &cond, const c10::Scalar &self, const at::Tensor &other) {
  int core = common_core({&cond, &other});
  Ref c = operand(cond, core), a = scalar(core, self), b = operand(other, core);
  return wrap(trace(LT_OP_where, {c.get(), a.get(), b.get()}));
}
at::Tensor lt_masked_fill(const at::Tensor &self, const at::Tensor &mask, const c10::Scalar &v) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, "
              "but got mask with dtype ", mask.scalar_type());
  int core = common_core({&self, &mask});
  Ref a = operand(self, core), c = operand(mask, core);
  Ref b = scalar_typed(core, v.toDouble(), a.dtype());
  return wrap_as(trace(LT_OP_where, {c.get(), b.get(), a.get()}), self);
}
at::Tensor lt_masked_fill_t(const at::Tensor &self, const at::Tensor &mask, const at::Tensor &v) {
  TORCH_CHECK(v.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, "
              "but got tensor with ", v.dim(), " dimension(s).");
  int core = common_core({&self, &mask, &v});
  Ref a = operand(self, core), c = operand(mask, core), b = operand(v, core);
  Ref bc = cast(b.get(), a.dtype());
  return wrap(trace(LT_OP_where, {c.get(), bc.get(), a.get()}));
}

Ref clamp_ref(Ref x, Ref lo, Ref hi) {
  if (lo) x = trace(LT_OP_maximum, {x.get(), lo.get()});
  if (hi) x = trace(LT_OP_minimum, {x.get(), hi.get()});
  return x;
}
at::Tensor lt_clamp(const at::Tensor &self, const c10::optional<c10::Scalar> &min,
                    const c10::optional<c10::Scalar> &max) {
  TORCH_CHECK(min || max, "torch.clamp: At least one of 'min' or 'max' must not be None");
  lt_tensor *a = handle_of(self);
  int core = lt_tensor_core(a);
  Ref lo = min ? scalar(core, *min) : Ref(), hi = max ? scalar(core, *max) : Ref();
  return wrap_as(fresh(clamp_ref(Ref::borrow(a), std::move(lo), std::move(hi)), {a}), self);
}
at::Tensor lt_clamp_t(const at::Tensor &self, const c10::optional<at::Tensor> &min,
                      const c10::optional<at::Tensor> &max) {
  bool hl = min && min->defined(), hh = max && max->defined();
  TORCH_CHECK(hl || hh, "torch.clamp: At least one of 'min' or 'max' must not be None");
  check_broadcast_like_eager({&self, hl ? &*min : nullptr, hh ? &*max : nullptr});
  int core = common_core({&self, hl ? &*min : nullptr, hh ? &*max : nullptr});
  Ref lo = hl ? operand(*min, core) : Ref(), hi = hh ? operand(*max, core) : Ref();
  lt_tensor *a = handle_of(self);
  return wrap(fresh(clamp_ref(Ref::borrow(a), std::move(lo), std::move(hi)), {a}));
}
at::Tensor lt_clamp_min(const at::Tensor &self, const c10::Scalar &v) { return lt_clamp(self, v, c10::nullopt); }
at::Tensor lt_clamp_max(const at::Tensor &self, const c10::Scalar &v) { return lt_clamp(self, c10::nullopt, v); }
at::Tensor lt_clamp_min_t(const at::Tensor &self, const at::Tensor &v) { return lt_clamp_t(self, v, c10::nullopt); }
at::Tensor lt_clamp_max_t(const at::Tensor &self, const at::Tensor &v) { return lt_clamp_t(self, c10::nullopt, v); }

at::Tensor lt_hardtanh(const at::Tensor &self, const c10::Scalar &lo, const c10::Scalar &hi) {
  /* eager keeps an integer tensor's dtype: the bounds are truncated to it */
  if (c10::isIntegralType(self.scalar_type(), /*includeBool=*/false))
    return lt_clamp(self, c10::Scalar(lo.toLong()), c10::Scalar(hi.toLong()));
  return lt_clamp(self, lo, hi);
}
at::Tensor lt_hardtanh_backward(const at::Tensor &grad, const at::Tensor &self,
                                const c10::Scalar &lo, const c10::Scalar &hi) {
  int core = common_core({&grad, &self});
  Ref g = operand(grad, core), x = operand(self, core);
  Ref l = scalar(core, lo), h = scalar(core, hi);
  /* eager: x <= lo || x >= hi ? 0 : grad (a NaN x passes the gradient) */
  Ref outside = trace(LT_OP_logical_or, {trace(LT_OP_le, {x.get(), l.get()}).get(),
                                         trace(LT_OP_ge, {x.get(), h.get()}).get()});
  Ref z = scalar_typed(core, 0, g.dtype());
  return wrap(trace(LT_OP_where, {outside.get(), z.get(), g.get()}));
}

at::Tensor lt_threshold(const at::Tensor &self, const c10::Scalar &th, const c10::Scalar &v) {
  lt_tensor *a = handle_of(self);
  int core = lt_tensor_core(a);
  Ref t = scalar(core, th), val = scalar_typed(core, v.toDouble(), lt_tensor_dtype(a));
  Ref c = trace(LT_OP_le, {a, t.get()});
  return wrap(trace(LT_OP_where, {c.get(), val.get(), a}));
}
at::Tensor lt_threshold_backward(const at::Tensor &grad, const at::Tensor &self,
                                 const c10::Scalar &th) {
  int core = common_core({&grad, &self});
  Ref g = operand(grad, core), x = operand(self, core), t = scalar(core, th);
  return wrap(trace(LT_OP_threshold_backward, {g.get(), x.get(), t.get()}));
}

at::Tensor lt_leaky_relu(const at::Tensor &self, const c10::Scalar &slope) {
  check_unary_like_eager(LT_OP_leaky_relu, self);
  lt_tensor *a = handle_of(self);
  Ref s = scalar(lt_tensor_core(a), slope);
  return wrap(trace(LT_OP_leaky_relu, {a, s.get()}));
}
at::Tensor lt_leaky_relu_backward(const at::Tensor &grad, const at::Tensor &self,
                                  const c10::Scalar &slope, bool self_is_result) {
  int core = common_core({&grad, &self});
  Ref g = operand(grad, core), x = operand(self, core), s = scalar(core, slope);
  return wrap(trace(LT_OP_leaky_relu_backward, {g.get(), x.get(), s.get()}));
}

/* tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
Ref gelu_tanh(lt_tensor *x) {
  int core = lt_tensor_core(x);
  Ref x3 = trace(LT_OP_mul, {trace(LT_OP_mul, {x, x}).get(), x});
  Ref inner = trace(LT_OP_add, {x, mul_scalar(x3.get(), 0.044715).get()});
  Ref t = trace(LT_OP_tanh, {mul_scalar(inner.get(), 0.7978845608028654).get()});
  Ref one = scalar(core, 1.0);
  Ref p = trace(LT_OP_add, {t.get(), one.get()});
  /* (0.5 * x) * p as eager: x * p first overflows for |x| > FLT_MAX / 2 */
  return trace(LT_OP_mul, {mul_scalar(x, 0.5).get(), p.get()});
}
at::Tensor lt_gelu(const at::Tensor &self, c10::string_view approximate) {
  check_unary_like_eager(LT_OP_gelu, self);
  lt_tensor *a = handle_of(self);
  if (approximate == "tanh") return wrap(gelu_tanh(a));
  TORCH_CHECK(approximate == "none", "approximate argument must be either none or tanh.");
  return wrap(trace(LT_OP_gelu, {a}));
}
at::Tensor lt_gelu_backward(const at::Tensor &grad, const at::Tensor &self,
                            c10::string_view approximate) {
  int core = common_core({&grad, &self});
  Ref g = operand(grad, core), x = operand(self, core);
  if (approximate == "tanh") {
    /* d/dx of the tanh form */
    const double k = 0.7978845608028654, c = 0.044715;
    Ref x2 = trace(LT_OP_mul, {x.get(), x.get()});
    Ref x3 = trace(LT_OP_mul, {x2.get(), x.get()});
    Ref inner = mul_scalar(trace(LT_OP_add, {x.get(), mul_scalar(x3.get(), c).get()}).get(), k);
    Ref t = trace(LT_OP_tanh, {inner.get()});
    Ref one = scalar(core, 1.0);
    Ref left = mul_scalar(trace(LT_OP_add, {t.get(), one.get()}).get(), 0.5);
    Ref sech2 = trace(LT_OP_sub, {one.get(), trace(LT_OP_mul, {t.get(), t.get()}).get()});
    Ref dinner = mul_scalar(trace(LT_OP_add, {one.get(), mul_scalar(x2.get(), 3 * c).get()}).get(), k);
    Ref right = mul_scalar(trace(LT_OP_mul, {trace(LT_OP_mul, {x.get(), sech2.get()}).get(),
                                             dinner.get()}).get(), 0.5);
    Ref d = trace(LT_OP_add, {left.get(), right.get()});
    return wrap(trace(LT_OP_mul, {g.get(), d.get()}));
  }
  return wrap(trace(LT_OP_gelu_backward, {g.get(), x.get()}));
}

at::Tensor lt_lerp_scalar(const at::Tensor &self, const at::Tensor &end, const c10::Scalar &w) {
  check_floating_kernel(self, "lerp_kernel_scalar");
  int core = common_core({&self, &end});
  Ref a = operand(self, core), b = operand(end, core), c = scalar(core, w);
  return wrap(trace(LT_OP_lerp, {a.get(), b.get(), c.get()}));
}
at::Tensor lt_lerp_tensor(const at::Tensor &self, const at::Tensor &end, const at::Tensor &w) {
  check_floating_kernel(self, "lerp_kernel_tensor");
  int core = common_core({&self, &end, &w});
  Ref a = operand(self, core), b = operand(end, core), c = operand(w, core);
  return wrap(trace(LT_OP_lerp, {a.get(), b.get(), c.get()}));
}

at::Tensor addc_impl(const at::Tensor &self, const at::Tensor &t1, const at::Tensor &t2,
                     const c10::Scalar &value, lt_op op) {
  int core = common_core({&self, &t1, &t2});
  Ref a = operand(self, core), b = operand(t1, core), c = operand(t2, core);
  Ref p = trace(op, {b.get(), c.get()});
  if (!is_one(value)) p = mul_scalar(p.get(), value);
  return wrap_as(trace(LT_OP_add, {a.get(), p.get()}), self);
}
at::Tensor lt_addcmul(const at::Tensor &self, const at::Tensor &t1, const at::Tensor &t2,
                      const c10::Scalar &value) {
  return addc_impl(self, t1, t2, value, LT_OP_mul);
}
at::Tensor lt_addcdiv(const at::Tensor &self, const at::Tensor &t1, const at::Tensor &t2,
                      const c10::Scalar &value) {
  TORCH_CHECK(!(c10::isIntegralType(t1.scalar_type(), true) &&
                c10::isIntegralType(t2.scalar_type(), true)),
              "Integer division with addcdiv is no longer supported, and in a future "
              "release addcdiv will perform a true division of tensor1 and tensor2.");
  return addc_impl(self, t1, t2, value, LT_OP_div);
}

/* ------------------------------------------------------------- reductions */

std::vector<int64_t> dim_list(at::OptionalIntArrayRef dim) {
  if (!dim) return {};
  return dim->vec();
}

Ref cast_opt(lt_tensor *x, c10::optional<at::ScalarType> dtype) {
  if (dtype) return cast(x, to_lt_dtype(*dtype));
  return Ref::borrow(x);
}

at::Tensor lt_sum(const at::Tensor &self, c10::optional<at::ScalarType> dtype) {
  Ref x = cast_opt(handle_of(self), dtype);
  return wrap(reduce(LT_OP_sum, x.get(), {}, false));
}
at::Tensor lt_sum_dim(const at::Tensor &self, at::OptionalIntArrayRef dim, bool keepdim,
                      c10::optional<at::ScalarType> dtype) {
  Ref x = cast_opt(handle_of(self), dtype);
  return wrap(reduce(LT_OP_sum, x.get(), dim_list(dim), keepdim));
}
at::Tensor lt_mean(const at::Tensor &self, c10::optional<at::ScalarType> dtype) {
  Ref x = cast_opt(handle_of(self), dtype);
  TORCH_CHECK(lt_dtype_is_float(x.dtype()), "mean(): could not infer output dtype. Input "
              "dtype must be either a floating point or complex dtype. Got: ",
              to_scalar_type(x.dtype()));
  return wrap(reduce(LT_OP_mean, x.get(), {}, false));
}
at::Tensor lt_mean_dim(const at::Tensor &self, at::OptionalIntArrayRef dim, bool keepdim,
                       c10::optional<at::ScalarType> dtype) {
  Ref x = cast_opt(handle_of(self), dtype);
  TORCH_CHECK(lt_dtype_is_float(x.dtype()), "mean(): could not infer output dtype. Input "
              "dtype must be either a floating point or complex dtype. Got: ",
              to_scalar_type(x.dtype()));
  return wrap(reduce(LT_OP_mean, x.get(), dim_list(dim), keepdim));
}
at::Tensor lt_prod(const at::Tensor &self, c10::optional<at::ScalarType> dtype) {
  Ref x = cast_opt(handle_of(self), dtype);
  return wrap(reduce(LT_OP_prod, x.get(), {}, false));
}
at::Tensor lt_prod_dim(const at::Tensor &self, int64_t dim, bool keepdim,
                       c10::optional<at::ScalarType> dtype) {
  Ref x = cast_opt(handle_of(self), dtype);
  return wrap(reduce(LT_OP_prod, x.get(), {dim}, keepdim));
}
at::Tensor lt_amax(const at::Tensor &self, at::IntArrayRef dim, bool keepdim) {
  check_empty_reduce("amax", self, dim, dim.empty(), false, false);
  return wrap(reduce(LT_OP_amax, handle_of(self), dim.vec(), keepdim));
}
at::Tensor lt_amin(const at::Tensor &self, at::IntArrayRef dim, bool keepdim) {
  check_empty_reduce("amin", self, dim, dim.empty(), false, false);
  return wrap(reduce(LT_OP_amin, handle_of(self), dim.vec(), keepdim));
}
at::Tensor lt_max_all(const at::Tensor &self) {
  TORCH_CHECK(self.numel() > 0, "max(): Expected reduction dim to be specified for "
              "input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
  return wrap(reduce(LT_OP_amax, handle_of(self), {}, false));
}
at::Tensor lt_min_all(const at::Tensor &self) {
  TORCH_CHECK(self.numel() > 0, "min(): Expected reduction dim to be specified for "
              "input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
  return wrap(reduce(LT_OP_amin, handle_of(self), {}, false));
}
at::Tensor argreduce(lt_op op, const at::Tensor &self, c10::optional<int64_t> dim, bool keepdim) {
  const char *name = op == LT_OP_argmax ? "argmax" : "argmin";
  if (dim) check_empty_reduce(name, self, {*dim}, false, true, true);
  else check_empty_reduce(name, self, {}, true, true, true);
  lt_tensor *x = handle_of(self);
  int nd = lt_tensor_shape(x)->ndim;
  int64_t d = dim ? c10::maybe_wrap_dim(*dim, nd) : -1;
  lt_attrs a = attrs_of({d, keepdim ? 1 : 0});
  return wrap(trace(op, {x}, &a));
}
/* bool: eager's argmax/argmin refuse it, max.dim/min.dim take it */
at::Tensor lt_argmax(const at::Tensor &self, c10::optional<int64_t> dim, bool keepdim) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "argmax(): does not support bool input");
  return argreduce(LT_OP_argmax, self, dim, keepdim);
}
at::Tensor lt_argmin(const at::Tensor &self, c10::optional<int64_t> dim, bool keepdim) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "argmin(): does not support bool input");
  return argreduce(LT_OP_argmin, self, dim, keepdim);
}
std::tuple<at::Tensor, at::Tensor> lt_max_dim(const at::Tensor &self, int64_t dim, bool keepdim) {
  check_empty_reduce("max", self, {dim}, false, true, true);
  return std::make_tuple(wrap(reduce(LT_OP_amax, handle_of(self), {dim}, keepdim)),
                         argreduce(LT_OP_argmax, self, dim, keepdim));
}
std::tuple<at::Tensor, at::Tensor> lt_min_dim(const at::Tensor &self, int64_t dim, bool keepdim) {
  check_empty_reduce("min", self, {dim}, false, true, true);
  return std::make_tuple(wrap(reduce(LT_OP_amin, handle_of(self), {dim}, keepdim)),
                         argreduce(LT_OP_argmin, self, dim, keepdim));
}
at::Tensor lt_any(const at::Tensor &self) { return wrap(reduce(LT_OP_any, handle_of(self), {}, false)); }
at::Tensor lt_all(const at::Tensor &self) { return wrap(reduce(LT_OP_all, handle_of(self), {}, false)); }
at::Tensor lt_any_dim(const at::Tensor &self, int64_t dim, bool keepdim) {
  return wrap(reduce(LT_OP_any, handle_of(self), {dim}, keepdim));
}
at::Tensor lt_all_dim(const at::Tensor &self, int64_t dim, bool keepdim) {
  return wrap(reduce(LT_OP_all, handle_of(self), {dim}, keepdim));
}

/* var = sum((x - mean)^2) / (N - correction) */
Ref var_ref(lt_tensor *x, const std::vector<int64_t> &dims, double correction, bool keepdim) {
  const lt_shape *s = lt_tensor_shape(x);
  int64_t n = 1;
  if (dims.empty()) n = lt_shape_numel(s);
  for (int64_t d : dims) n *= s->dims[c10::maybe_wrap_dim(d, s->ndim)];
  Ref mean = reduce(LT_OP_mean, x, dims, true);
  Ref c = trace(LT_OP_sub, {x, mean.get()});
  Ref sq = trace(LT_OP_mul, {c.get(), c.get()});
  Ref sum = reduce(LT_OP_sum, sq.get(), dims, keepdim);
  double denom = (double)n - correction;
  Ref k = scalar(lt_tensor_core(x), denom > 0 ? 1.0 / denom : std::numeric_limits<double>::quiet_NaN());
  return trace(LT_OP_mul, {sum.get(), k.get()});
}
double correction_of(const std::optional<at::Scalar> &c) {
  return c ? c->toDouble() : 1.0;
}
at::Tensor lt_var_correction(const at::Tensor &self, at::OptionalIntArrayRef dim,
                             const std::optional<at::Scalar> &correction, bool keepdim) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "std and var only support floating point and complex dtypes");
  return wrap(var_ref(handle_of(self), dim_list(dim), correction_of(correction), keepdim));
}
at::Tensor lt_std_correction(const at::Tensor &self, at::OptionalIntArrayRef dim,
                             const std::optional<at::Scalar> &correction, bool keepdim) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "std and var only support floating point and complex dtypes");
  Ref v = var_ref(handle_of(self), dim_list(dim), correction_of(correction), keepdim);
  return wrap(trace(LT_OP_sqrt, {v.get()}));
}

/* (var, mean) and (std, mean) over the same dims */
std::tuple<at::Tensor, at::Tensor> lt_var_mean_correction(
    const at::Tensor &self, at::OptionalIntArrayRef dim,
    const std::optional<at::Scalar> &correction, bool keepdim) {
  return std::make_tuple(lt_var_correction(self, dim, correction, keepdim),
                         lt_mean_dim(self, dim, keepdim, c10::nullopt));
}
std::tuple<at::Tensor, at::Tensor> lt_std_mean_correction(
    const at::Tensor &self, at::OptionalIntArrayRef dim,
    const std::optional<at::Scalar> &correction, bool keepdim) {
  return std::make_tuple(lt_std_correction(self, dim, correction, keepdim),
                         lt_mean_dim(self, dim, keepdim, c10::nullopt));
}

at::Tensor lt_logsumexp(const at::Tensor &self, at::IntArrayRef dim, bool keepdim) {
  lt_tensor *x = handle_of(self);
  Ref xf = lt_dtype_is_float(lt_tensor_dtype(x)) ? Ref::borrow(x) : cast(x, LT_F32);
  Ref m = reduce(LT_OP_amax, xf.get(), dim.vec(), true);
  /* rows of -inf: subtract 0 instead of -inf (no NaN) */
  Ref finite = trace(LT_OP_eq, {trace(LT_OP_abs, {m.get()}).get(),
                                scalar(lt_tensor_core(x), INFINITY).get()});
  Ref zero = scalar_typed(lt_tensor_core(x), 0, m.dtype());
  Ref ms = trace(LT_OP_where, {finite.get(), zero.get(), m.get()});
  Ref e = trace(LT_OP_exp, {trace(LT_OP_sub, {xf.get(), ms.get()}).get()});
  Ref s = trace(LT_OP_log, {reduce(LT_OP_sum, e.get(), dim.vec(), true).get()});
  Ref r = trace(LT_OP_add, {s.get(), ms.get()});
  if (!keepdim) {
    std::vector<int64_t> d = dims_of(*lt_tensor_shape(x)), keep;
    int64_t mask = 0;
    for (int64_t k : dim) mask |= (int64_t)1 << c10::maybe_wrap_dim(k, (int64_t)d.size());
    if (dim.empty()) mask = -1;
    for (size_t i = 0; i < d.size(); i++) if (!(mask >> i & 1)) keep.push_back(d[i]);
    r = reshape(r.get(), keep);
  }
  return wrap(std::move(r));
}

Ref norm_ref(lt_tensor *x, double p, const std::vector<int64_t> &dims, bool keepdim) {
  int core = lt_tensor_core(x);
  Ref a = trace(LT_OP_abs, {x});
  if (std::isinf(p)) return reduce(p > 0 ? LT_OP_amax : LT_OP_amin, a.get(), dims, keepdim);
  if (p == 1) return reduce(LT_OP_sum, a.get(), dims, keepdim);
  if (p == 2) {
    Ref s = reduce(LT_OP_sum, trace(LT_OP_mul, {x, x}).get(), dims, keepdim);
    return trace(LT_OP_sqrt, {s.get()});
  }
  if (p == 0) {   /* the count of non-zero elements */
    Ref z = scalar(core, 0);
    Ref nz = cast(trace(LT_OP_ne, {x, z.get()}).get(), lt_tensor_dtype(a.get()));
    return reduce(LT_OP_sum, nz.get(), dims, keepdim);
  }
  Ref pp = scalar(core, p), ip = scalar(core, 1.0 / p);
  Ref s = reduce(LT_OP_sum, trace(LT_OP_pow, {a.get(), pp.get()}).get(), dims, keepdim);
  return trace(LT_OP_pow, {s.get(), ip.get()});
}
at::Tensor lt_norm_scalar(const at::Tensor &self, const c10::Scalar &p) {
  return wrap(norm_ref(handle_of(self), p.toDouble(), {}, false));
}
at::Tensor lt_norm_dim(const at::Tensor &self, const c10::optional<c10::Scalar> &p,
                       at::IntArrayRef dim, bool keepdim) {
  return wrap(norm_ref(handle_of(self), p ? p->toDouble() : 2.0, dim.vec(), keepdim));
}
at::Tensor lt_linalg_vector_norm(const at::Tensor &self, const c10::Scalar &ord,
                                 at::OptionalIntArrayRef dim, bool keepdim,
                                 c10::optional<at::ScalarType> dtype) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "linalg.vector_norm: Expected a "
              "floating point or complex tensor as input. Got ", self.scalar_type());
  Ref x = cast_opt(handle_of(self), dtype);
  return wrap(norm_ref(x.get(), ord.toDouble(), dim_list(dim), keepdim));
}

/* ------------------------------------------------------------------ matmul */

/* The device multiplies floating matrices (the MXU's job); integer ones
 * (eager supports them on the CPU) run on the CPU fallback. */
template <class Op, class... A>
at::Tensor matmul_fallback(A &&...a) {
  return at::native::call_fallback_fn<&cpu_fallback_boxed, Op>::call(std::forward<A>(a)...);
}

at::Tensor lt_mm(const at::Tensor &self, const at::Tensor &mat2) {
  if (integer_matmul({&self, &mat2})) return matmul_fallback<at::_ops::mm>(self, mat2);
  int core = common_core({&self, &mat2});
  Ref a = operand(self, core), b = operand(mat2, core);
  return wrap(trace(LT_OP_mm, {a.get(), b.get()}));
}
at::Tensor lt_bmm(const at::Tensor &self, const at::Tensor &mat2) {
  if (integer_matmul({&self, &mat2})) return matmul_fallback<at::_ops::bmm>(self, mat2);
  int core = common_core({&self, &mat2});
  Ref a = operand(self, core), b = operand(mat2, core);
  return wrap(trace(LT_OP_bmm, {a.get(), b.get()}));
}
at::Tensor add_scaled(Ref prod, const at::Tensor &self, int core, const c10::Scalar &beta,
                      const c10::Scalar &alpha) {
  if (!is_one(alpha)) prod = mul_scalar(prod.get(), alpha);
  if (is_zero(beta)) return wrap(std::move(prod));  /* self ignored, even NaN */
  Ref s = operand(self, core);
  if (!is_one(beta)) s = mul_scalar(s.get(), beta);
  return wrap(trace(LT_OP_add, {s.get(), prod.get()}));
}
at::Tensor lt_addmm(const at::Tensor &self, const at::Tensor &mat1, const at::Tensor &mat2,
                    const c10::Scalar &beta, const c10::Scalar &alpha) {
  if (integer_matmul({&mat1, &mat2}))
    return matmul_fallback<at::_ops::addmm>(self, mat1, mat2, beta, alpha);
  int core = common_core({&self, &mat1, &mat2});
  Ref a = operand(mat1, core), b = operand(mat2, core);
  /* nn.Linear's bias: one op, the bias written into the product's output
   * before the GEMM accumulates onto it (no pass of its own) */
  bool bias_row = mat1.dim() == 2 && mat2.dim() == 2 &&
                  ((self.dim() == 1 && self.size(0) == mat2.size(1)) ||
                   (self.dim() == 2 && self.size(0) == 1 && self.size(1) == mat2.size(1)));
  if (bias_row && is_one(beta) && is_one(alpha) && is_lt_device_type(self.device().type()) &&
      at::isFloatingType(mat1.scalar_type()) &&
      self.scalar_type() == mat1.scalar_type() && mat1.scalar_type() == mat2.scalar_type() &&
      mat1.size(1) == mat2.size(0)) {
    Ref bias = operand(self, core);
    return wrap(trace(LT_OP_addmm, {bias.get(), a.get(), b.get()}));
  }
  return add_scaled(trace(LT_OP_mm, {a.get(), b.get()}), self, core, beta, alpha);
}
at::Tensor lt_baddbmm(const at::Tensor &self, const at::Tensor &b1, const at::Tensor &b2,
                      const c10::Scalar &beta, const c10::Scalar &alpha) {
  if (integer_matmul({&b1, &b2}))
    return matmul_fallback<at::_ops::baddbmm>(self, b1, b2, beta, alpha);
  int core = common_core({&self, &b1, &b2});
  Ref a = operand(b1, core), b = operand(b2, core);
  return add_scaled(trace(LT_OP_bmm, {a.get(), b.get()}), self, core, beta, alpha);
}
at::Tensor lt_mv(const at::Tensor &self, const at::Tensor &vec) {
  if (integer_matmul({&self, &vec})) return matmul_fallback<at::_ops::mv>(self, vec);
  int core = common_core({&self, &vec});
  TORCH_CHECK(self.dim() == 2 && vec.dim() == 1, "vector + matrix @ vector expected, got ",
              self.dim(), ", ", vec.dim());
  Ref a = operand(self, core), v = operand(vec, core);
  Ref col = reshape(v.get(), {vec.size(0), 1});
  Ref p = trace(LT_OP_mm, {a.get(), col.get()});
  return wrap(reshape(p.get(), {self.size(0)}));
}
at::Tensor lt_dot(const at::Tensor &self, const at::Tensor &other) {
  if (integer_matmul({&self, &other})) return matmul_fallback<at::_ops::dot>(self, other);
  int core = common_core({&self, &other});
  TORCH_CHECK(self.dim() == 1 && other.dim() == 1, "1D tensors expected, but got ",
              self.dim(), "D and ", other.dim(), "D tensors");
  TORCH_CHECK(self.size(0) == other.size(0), "inconsistent tensor size, expected tensor [",
              self.size(0), "] and src [", other.size(0),
              "] to have the same number of elements, but got ", self.size(0), " and ",
              other.size(0), " elements respectively");
  Ref a = operand(self, core), b = operand(other, core);
  Ref r = reshape(a.get(), {1, self.size(0)}), c = reshape(b.get(), {other.size(0), 1});
  Ref p = trace(LT_OP_mm, {r.get(), c.get()});
  return wrap(reshape(p.get(), {}));
}

/* cumsum / cumprod along dim; dtype= casts first (like eager) */
at::Tensor scan(lt_op op, const at::Tensor &self, int64_t dim,
                std::optional<at::ScalarType> dtype) {
  lt_tensor *x = handle_of(self);
  Ref in = dtype ? cast(x, to_lt_dtype(*dtype)) : Ref::borrow(x);
  int nd = in.ndim();
  lt_attrs a = attrs_of({nd ? c10::maybe_wrap_dim(dim, nd) : 0});
  if (nd == 0) TORCH_CHECK(dim == 0 || dim == -1, "Dimension out of range (expected to be in "
                           "range of [-1, 0], but got ", dim, ")");
  return wrap(trace(op, {in.get()}, &a));
}
at::Tensor lt_cumsum(const at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dtype) {
  return scan(LT_OP_cumsum, self, dim, dtype);
}
at::Tensor lt_cumprod(const at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dtype) {
  return scan(LT_OP_cumprod, self, dim, dtype);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define LT_OP(name, ...) register_generated<LT_OP_##name>(m);
#include "../lazy/ops.def"
#undef LT_OP

  reg(m, "add.Tensor", TORCH_FN(lt_add));
  reg(m, "sub.Tensor", TORCH_FN(lt_sub));
  reg(m, "rsub.Tensor", TORCH_FN(lt_rsub));
  reg(m, "add.Scalar", TORCH_FN(lt_add_scalar));
  reg(m, "sub.Scalar", TORCH_FN(lt_sub_scalar));
  reg(m, "rsub.Scalar", TORCH_FN(lt_rsub_scalar));
  reg(m, "div.Tensor_mode", TORCH_FN(lt_div_mode));
  reg(m, "div.Scalar_mode", TORCH_FN(lt_div_scalar_mode));
  reg(m, "pow.Scalar", TORCH_FN(lt_pow_scalar_base));
  reg(m, "square", TORCH_FN(lt_square));
  reg(m, "sgn", TORCH_FN(unary_fn<LT_OP_sign>));
  reg(m, "max.other", TORCH_FN(binary_fn<LT_OP_maximum>));
  reg(m, "min.other", TORCH_FN(binary_fn<LT_OP_minimum>));
  reg(m, "where.self", TORCH_FN(lt_where));
  reg(m, "where.ScalarOther", TORCH_FN(lt_where_so));
  reg(m, "where.ScalarSelf", TORCH_FN(lt_where_ss));
  reg(m, "masked_fill.Scalar", TORCH_FN(lt_masked_fill));
  reg(m, "masked_fill.Tensor", TORCH_FN(lt_masked_fill_t));
  reg(m, "clamp", TORCH_FN(lt_clamp));
  reg(m, "clamp.Tensor", TORCH_FN(lt_clamp_t));
  reg(m, "clamp_min", TORCH_FN(lt_clamp_min));
  reg(m, "clamp_max", TORCH_FN(lt_clamp_max));
  reg(m, "clamp_min.Tensor", TORCH_FN(lt_clamp_min_t));
  reg(m, "clamp_max.Tensor", TORCH_FN(lt_clamp_max_t));
  reg(m, "hardtanh", TORCH_FN(lt_hardtanh));
  reg(m, "hardtanh_backward", TORCH_FN(lt_hardtanh_backward));
  reg(m, "threshold", TORCH_FN(lt_threshold));
  reg(m, "threshold_backward", TORCH_FN(lt_threshold_backward));
  reg(m, "leaky_relu", TORCH_FN(lt_leaky_relu));
  reg(m, "leaky_relu_backward", TORCH_FN(lt_leaky_relu_backward));
  reg(m, "gelu", TORCH_FN(lt_gelu));
  reg(m, "gelu_backward", TORCH_FN(lt_gelu_backward));
  reg(m, "lerp.Scalar", TORCH_FN(lt_lerp_scalar));
  reg(m, "lerp.Tensor", TORCH_FN(lt_lerp_tensor));
  reg(m, "addcmul", TORCH_FN(lt_addcmul));
  reg(m, "addcdiv", TORCH_FN(lt_addcdiv));

  reg(m, "sum", TORCH_FN(lt_sum));
  reg(m, "sum.dim_IntList", TORCH_FN(lt_sum_dim));
  reg(m, "mean", TORCH_FN(lt_mean));
  reg(m, "mean.dim", TORCH_FN(lt_mean_dim));
  reg(m, "prod", TORCH_FN(lt_prod));
  reg(m, "prod.dim_int", TORCH_FN(lt_prod_dim));
  reg(m, "amax", TORCH_FN(lt_amax));
  reg(m, "amin", TORCH_FN(lt_amin));
  reg(m, "max", TORCH_FN(lt_max_all));
  reg(m, "min", TORCH_FN(lt_min_all));
  reg(m, "max.dim", TORCH_FN(lt_max_dim));
  reg(m, "min.dim", TORCH_FN(lt_min_dim));
  reg(m, "argmax", TORCH_FN(lt_argmax));
  reg(m, "argmin", TORCH_FN(lt_argmin));
  reg(m, "any", TORCH_FN(lt_any));
  reg(m, "all", TORCH_FN(lt_all));
  reg(m, "any.dim", TORCH_FN(lt_any_dim));
  reg(m, "all.dim", TORCH_FN(lt_all_dim));
  reg(m, "var.correction", TORCH_FN(lt_var_correction));
  reg(m, "logsumexp", TORCH_FN(lt_logsumexp));
  reg(m, "norm.Scalar", TORCH_FN(lt_norm_scalar));
  reg(m, "norm.ScalarOpt_dim", TORCH_FN(lt_norm_dim));
  reg(m, "linalg_vector_norm", TORCH_FN(lt_linalg_vector_norm));
  reg(m, "std.correction", TORCH_FN(lt_std_correction));
  reg(m, "var_mean.correction", TORCH_FN(lt_var_mean_correction));
  reg(m, "std_mean.correction", TORCH_FN(lt_std_mean_correction));
  reg(m, "cumsum", TORCH_FN(lt_cumsum));
  reg(m, "cumprod", TORCH_FN(lt_cumprod));

  reg(m, "mm", TORCH_FN(lt_mm));
  reg(m, "bmm", TORCH_FN(lt_bmm));
  reg(m, "addmm", TORCH_FN(lt_addmm));
  reg(m, "baddbmm", TORCH_FN(lt_baddbmm));
  reg(m, "mv", TORCH_FN(lt_mv));
  reg(m, "dot", TORCH_FN(lt_dot));
}

}  // namespace lazytpu
