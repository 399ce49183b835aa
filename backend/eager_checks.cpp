/*
 * backend/eager_checks.cpp — eager's argument checks, made at trace time
 * (see eager_checks.h). Messages and exception types are torch 2.13's.
 */
#include "eager_checks.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ops/result_type.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/Exception.h>

#include <string>

#include "lt_aten.h"

namespace lazytpu {
namespace {

/* Dtypes eager's CPU kernels refuse (torch 2.13), for the dtype an op
 * computes in: the device raises eager's error instead of computing a
 * value eager would not give. Found by the property tests. */
void check_dtype_like_eager(lt_op op, c10::ScalarType st) {
  bool b = st == at::kBool, i = c10::isIntegralType(st, false);
  const char *kernel = nullptr;
  switch (op) {
    case LT_OP_neg:
      TORCH_CHECK(!b, "Negation, the `-` operator, on a bool tensor is not supported. If you "
                  "are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
      return;
    case LT_OP_relu: TORCH_CHECK(!b, "Boolean inputs not supported for relu"); return;
    case LT_OP_abs: kernel = b ? "abs_cpu" : nullptr; break;
    case LT_OP_floor: kernel = b ? "floor_vml_cpu" : nullptr; break;
    case LT_OP_ceil: kernel = b ? "ceil_vml_cpu" : nullptr; break;
    case LT_OP_round: kernel = b ? "round_vml_cpu" : nullptr; break;
    case LT_OP_trunc: kernel = b ? "trunc_vml_cpu" : nullptr; break;
    case LT_OP_pow: kernel = b ? "pow" : nullptr; break;
    case LT_OP_remainder: kernel = b ? "remainder_cpu" : nullptr; break;
    case LT_OP_fmod: kernel = b ? "fmod_cpu" : nullptr; break;
    case LT_OP_floor_divide: kernel = b ? "div_floor_cpu" : nullptr; break;
    case LT_OP_gelu: kernel = b || i ? "GeluKernelImpl" : nullptr; break;
    case LT_OP_silu: kernel = b || i ? "silu_cpu" : nullptr; break;
    case LT_OP_leaky_relu: kernel = b || i ? "leaky_relu_cpu" : nullptr; break;
    default: return;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(kernel == nullptr, "\"", kernel, "\" not implemented for '",
                              c10::toString(st), "'");
}

/* The value of a host operand (a Python number, a 0-dim CPU tensor), if
 * `t` is one. */
c10::optional<c10::Scalar> host_value(const at::Tensor &t) {
  if (!t.defined() || impl_of(t) || t.dim() != 0 || !t.device().is_cpu()) return c10::nullopt;
  return t.item();
}

/* Integer division by a zero known on the host raises, as in eager (a zero
 * inside a device tensor is found when the program runs, lazy/kernels). */
void check_zero_division(lt_op op, c10::ScalarType result, const c10::optional<c10::Scalar> &d) {
  if (op != LT_OP_floor_divide && op != LT_OP_remainder && op != LT_OP_fmod && op != LT_OP_div)
    return;
  if (!d || !c10::isIntegralType(result, true)) return;
  TORCH_CHECK(d->isFloatingPoint() || d->toLong() != 0, "ZeroDivisionError");
}

/* x ** e with an integral (or bool) x and a negative integral e known on
 * the host (eager's pow.Tensor_Scalar check). */
void check_int_pow(c10::ScalarType base, const c10::optional<c10::Scalar> &e) {
  if (!e || !c10::isIntegralType(base, true) || !e->isIntegral(true)) return;
  TORCH_CHECK(e->toLong() >= 0, "Integers to negative integer powers are not allowed.");
}

/* eager's sub_check (sub, rsub, and their Scalar forms) */
void check_sub(c10::ScalarType a, c10::ScalarType b) {
  TORCH_CHECK(a != at::kBool || b != at::kBool,
              "Subtraction, the `-` operator, with two bool tensors is not supported. "
              "Use the `^` or `logical_xor()` operator instead.");
  TORCH_CHECK(a != at::kBool && b != at::kBool,
              "Subtraction, the `-` operator, with a bool tensor is not supported. "
              "If you are trying to invert a mask, use the `~` or `logical_not()` operator "
              "instead.");
}
/* at::result_type without the dispatcher call when both tensors have one
 * dtype (the common case: the result is that dtype, whatever the dims). */
c10::ScalarType result_type_fast(const at::Tensor &a, const at::Tensor &b) {
  c10::ScalarType st = a.scalar_type();
  return st == b.scalar_type() ? st : at::result_type(a, b);
}

c10::ScalarType scalar_type_of(const c10::Scalar &s) {
  return s.isBoolean() ? at::kBool : s.isIntegral(false) ? at::kLong : at::kDouble;
}

}  // namespace

void check_unary_like_eager(lt_op op, const at::Tensor &self) {
  check_dtype_like_eager(op, self.scalar_type());
}

void check_binary_like_eager(lt_op op, const at::Tensor &self, const at::Tensor &other) {
  c10::ScalarType rt = result_type_fast(self, other);
  c10::optional<c10::Scalar> d = host_value(other);
  if (op != LT_OP_div) check_zero_division(op, rt, d);   /* true division: inf */
  check_dtype_like_eager(op, rt);
  if (op == LT_OP_pow) check_int_pow(self.scalar_type(), d);
}

void check_binary_like_eager(lt_op op, const at::Tensor &self, const c10::Scalar &other) {
  c10::ScalarType rt = at::result_type(self, other);
  if (op != LT_OP_div) check_zero_division(op, rt, other);
  check_dtype_like_eager(op, rt);
  if (op == LT_OP_pow) check_int_pow(self.scalar_type(), other);
}

void check_div_mode_like_eager(const at::Tensor &self, const at::Tensor &other) {
  check_zero_division(LT_OP_div, result_type_fast(self, other), host_value(other));
}
void check_div_mode_like_eager(const at::Tensor &self, const c10::Scalar &other) {
  check_zero_division(LT_OP_div, at::result_type(self, other), other);
}

static c10::ScalarType alpha_check(c10::ScalarType rt, const c10::Scalar &alpha) {
  TORCH_CHECK(!alpha.isBoolean() || rt == at::kBool,
              "Boolean alpha only supported for Boolean results.");
  TORCH_CHECK(at::isFloatingType(rt) || alpha.isIntegral(true),
              "For integral input tensors, argument alpha must not be a floating point number.");
  return rt;
}
c10::ScalarType check_alpha_like_eager(const at::Tensor &self, const at::Tensor &other,
                                       const c10::Scalar &alpha) {
  return alpha_check(result_type_fast(self, other), alpha);
}
c10::ScalarType check_alpha_like_eager(const at::Tensor &self, const c10::Scalar &other,
                                       const c10::Scalar &alpha) {
  return alpha_check(at::result_type(self, other), alpha);
}

void check_sub_like_eager(const at::Tensor &self, const at::Tensor &other) {
  check_sub(self.scalar_type(), other.scalar_type());
}
void check_sub_like_eager(const at::Tensor &self, const c10::Scalar &other) {
  check_sub(self.scalar_type(), scalar_type_of(other));
}

void check_floating_kernel(const at::Tensor &self, const char *kernel) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()), "\"", kernel,
                              "\" not implemented for '", c10::toString(self.scalar_type()), "'");
}

/* eager's checks of a max/min-like reduction over an empty input: no dim
 * given (RuntimeError; IndexError for argmax/argmin), or a reduced dim of
 * size 0 (IndexError, naming the dim as given, or wrapped for the arg-
 * and max/min.dim forms). */
void check_empty_reduce(const char *name, const at::Tensor &self, at::IntArrayRef dim,
                        bool no_dim, bool index_error, bool wrapped_name) {
  if (self.numel() != 0) return;
  if (no_dim) {
    std::string m = std::string(name) + "(): Expected reduction dim to be specified for "
                    "input.numel() == 0." + (index_error ? "" : " Specify the reduction dim "
                    "with the 'dim' argument.");
    if (index_error) TORCH_CHECK_INDEX(false, m);
    TORCH_CHECK(false, m);
  }
  for (int64_t d : dim) {
    int64_t w = c10::maybe_wrap_dim(d, std::max<int64_t>(self.dim(), 1));
    TORCH_CHECK_INDEX(self.dim() == 0 || self.size(w) != 0, name, "(): Expected reduction dim ",
                      wrapped_name ? w : d, " to have non-zero size.");
  }
}

void check_broadcast_like_eager(std::initializer_list<const at::Tensor *> ts) {
  std::vector<int64_t> s;
  bool first = true;
  for (const at::Tensor *t : ts) {
    if (!t || !t->defined()) continue;
    s = first ? t->sizes().vec() : at::infer_size(s, t->sizes());
    first = false;
  }
}

bool integer_matmul(std::initializer_list<const at::Tensor *> ts) {
  for (const at::Tensor *t : ts)
    if (t->defined() && t->dim() > 0 && !at::isFloatingType(t->scalar_type())) return true;
  return false;
}

}  // namespace lazytpu
