/*
 * backend/ops_activation.cpp — activations and smooth functions built from
 * the table's elementwise ops (the fuser makes each one loop), with eager's
 * CPU formulas:
 *   log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|))   (BCEWithLogitsLoss),
 *     backward grad * (x < 0 ? 1 - z/(1+z) : z/(1+z)), z = exp(-|x|);
 *   elu / selu / celu (aten::elu with alpha, scale, input_scale):
 *     x > 0 ? scale*x : alpha*scale*expm1(input_scale*x), and its backward
 *     from the input or from the result;
 *   logaddexp(a, b) = max + log1p(exp(-|a - b|)), a when a == b is infinite;
 *   softplus(x, beta, threshold) = x*beta > threshold ? x : log1p(exp(x*beta))/beta,
 *     backward grad * (x*beta > threshold ? 1 : z/(z+1)), z = exp(x*beta);
 *   binary_cross_entropy_with_logits (eager's composite, out of place).
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <ATen/ops/result_type.h>

#include <cmath>

namespace lazytpu {
namespace {

void check_float(const at::Tensor &t, const char *op) {
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), "\"", op, "\" not implemented for '",
              t.scalar_type(), "'");
}

Ref num(int core, double v, lt_dtype dt) { return scalar_typed(core, v, dt); }

Ref log_sigmoid(lt_tensor *x) {
  int core = lt_tensor_core(x);
  lt_dtype dt = lt_tensor_dtype(x);
  Ref mn = trace(LT_OP_minimum, {x, num(core, 0, dt).get()});
  Ref z = trace(LT_OP_exp, {trace(LT_OP_neg, {trace(LT_OP_abs, {x}).get()}).get()});
  return trace(LT_OP_sub, {mn.get(), trace(LT_OP_log1p, {z.get()}).get()});
}

std::tuple<at::Tensor, at::Tensor> lt_log_sigmoid_forward(const at::Tensor &self) {
  check_float(self, "log_sigmoid_cpu");
  lt_tensor *x = handle_of(self);
  /* eager's CPU buffer is empty: the backward recomputes from the input */
  return std::make_tuple(wrap(log_sigmoid(x)),
                         wrap(zeros(lt_tensor_core(x), {0}, lt_tensor_dtype(x))));
}

/* eager's composite, out of place (its in-place steps would reach the
 * device on raw tensors): (1 - t) * x - w_pos * log_sigmoid(x), w_pos =
 * (pos_weight - 1) * t + 1; times weight; reduced */
at::Tensor lt_bce_with_logits(const at::Tensor &self, const at::Tensor &target,
                              const c10::optional<at::Tensor> &weight,
                              const c10::optional<at::Tensor> &pos_weight, int64_t reduction) {
  bool hw = weight && weight->defined(), hp = pos_weight && pos_weight->defined();
  int core = common_core({&self, &target, hw ? &*weight : nullptr, hp ? &*pos_weight : nullptr});
  Ref x = operand(self, core), t = operand(target, core);
  lt_dtype dt = to_lt_dtype(at::result_type(self, target));
  if (!lt_dtype_is_float(dt)) throw_unsupported("binary_cross_entropy_with_logits: dtypes");
  Ref ls = log_sigmoid(x.get());
  if (hp) {
    Ref pw = operand(*pos_weight, core);
    Ref lw = trace(LT_OP_add, {trace(LT_OP_mul, {trace(LT_OP_sub, {pw.get(), num(core, 1, dt).get()})
                                                     .get(), t.get()}).get(),
                               num(core, 1, dt).get()});
    ls = trace(LT_OP_mul, {ls.get(), lw.get()});
  }
  Ref loss = trace(LT_OP_sub, {trace(LT_OP_mul, {trace(LT_OP_sub, {num(core, 1, dt).get(), t.get()})
                                                     .get(), x.get()}).get(), ls.get()});
  if (hw) loss = trace(LT_OP_mul, {loss.get(), operand(*weight, core).get()});
  if (reduction == 1) return wrap(reduce(LT_OP_mean, loss.get(), {}, false));
  if (reduction == 2) return wrap(reduce(LT_OP_sum, loss.get(), {}, false));
  return wrap(std::move(loss));
}

at::Tensor lt_log_sigmoid_backward(const at::Tensor &grad, const at::Tensor &self,
                                   const at::Tensor &buffer) {
  int core = common_core({&grad, &self});
  Ref g = operand(grad, core), x = operand(self, core);
  lt_dtype dt = x.dtype();
  Ref z = trace(LT_OP_exp, {trace(LT_OP_neg, {trace(LT_OP_abs, {x.get()}).get()}).get()});
  Ref q = trace(LT_OP_div, {z.get(), trace(LT_OP_add, {num(core, 1, dt).get(), z.get()}).get()});
  Ref neg = trace(LT_OP_lt, {x.get(), num(core, 0, dt).get()});
  Ref d = trace(LT_OP_where, {neg.get(), trace(LT_OP_sub, {num(core, 1, dt).get(), q.get()}).get(),
                              q.get()});
  return wrap(trace(LT_OP_mul, {d.get(), g.get()}));
}

at::Tensor lt_elu(const at::Tensor &self, const c10::Scalar &alpha, const c10::Scalar &scale,
                  const c10::Scalar &input_scale) {
  check_float(self, "elu_cpu");
  lt_tensor *x = handle_of(self);
  int core = lt_tensor_core(x);
  lt_dtype dt = lt_tensor_dtype(x);
  double a = alpha.toDouble(), s = scale.toDouble(), is = input_scale.toDouble();
  Ref pos = trace(LT_OP_mul, {x, num(core, s, dt).get()});
  Ref e = trace(LT_OP_expm1, {trace(LT_OP_mul, {x, num(core, is, dt).get()}).get()});
  Ref negv = trace(LT_OP_mul, {e.get(), num(core, a * s, dt).get()});
  Ref le = trace(LT_OP_le, {x, num(core, 0, dt).get()});
  return wrap(trace(LT_OP_where, {le.get(), negv.get(), pos.get()}));
}

at::Tensor lt_elu_backward(const at::Tensor &grad, const c10::Scalar &alpha,
                           const c10::Scalar &scale, const c10::Scalar &input_scale,
                           bool is_result, const at::Tensor &self_or_result) {
  int core = common_core({&grad, &self_or_result});
  Ref g = operand(grad, core), y = operand(self_or_result, core);
  lt_dtype dt = g.dtype();
  double a = alpha.toDouble(), s = scale.toDouble(), is = input_scale.toDouble();
  TORCH_CHECK(!is_result || a >= 0, "In-place elu backward calculation is triggered with a "
              "negative slope which is not supported. This is caused by calling in-place "
              "forward function with a negative slope, please call out-of-place version "
              "instead.");
  Ref neg;
  if (is_result)   /* y = a*s*expm1(is*x): d/dx = is * (y + a*s) */
    neg = trace(LT_OP_mul, {trace(LT_OP_add, {y.get(), num(core, a * s, dt).get()}).get(),
                            num(core, is, dt).get()});
  else
    neg = trace(LT_OP_mul, {trace(LT_OP_exp, {trace(LT_OP_mul, {y.get(), num(core, is, dt).get()})
                                                  .get()}).get(),
                            num(core, is * a * s, dt).get()});
  Ref le = trace(LT_OP_le, {y.get(), num(core, 0, dt).get()});
  Ref d = trace(LT_OP_where, {le.get(), neg.get(), num(core, s, dt).get()});
  return wrap(trace(LT_OP_mul, {g.get(), d.get()}));
}

at::Tensor lt_logaddexp(const at::Tensor &self, const at::Tensor &other) {
  int core = common_core({&self, &other});
  Ref a = operand(self, core), b = operand(other, core);
  lt_dtype dt = to_lt_dtype(at::result_type(self, other));
  if (!lt_dtype_is_float(dt)) throw_unsupported("logaddexp: integer inputs");   /* eager's error */
  a = cast(a.get(), dt);
  b = cast(b.get(), dt);
  Ref m = trace(LT_OP_maximum, {a.get(), b.get()});
  Ref d = trace(LT_OP_abs, {trace(LT_OP_sub, {a.get(), b.get()}).get()});
  Ref r = trace(LT_OP_add, {m.get(), trace(LT_OP_log1p, {trace(LT_OP_exp, {trace(LT_OP_neg,
                                              {d.get()}).get()}).get()}).get()});
  Ref inf = trace(LT_OP_eq, {trace(LT_OP_abs, {a.get()}).get(), num(core, INFINITY, dt).get()});
  Ref same = trace(LT_OP_logical_and, {inf.get(), trace(LT_OP_eq, {a.get(), b.get()}).get()});
  return wrap(trace(LT_OP_where, {same.get(), a.get(), r.get()}));
}

at::Tensor lt_softplus(const at::Tensor &self, const c10::Scalar &beta,
                       const c10::Scalar &threshold) {
  check_float(self, "softplus_cpu");
  lt_tensor *x = handle_of(self);
  int core = lt_tensor_core(x);
  lt_dtype dt = lt_tensor_dtype(x);
  double b = beta.toDouble();
  Ref xb = trace(LT_OP_mul, {x, num(core, b, dt).get()});
  Ref sp = trace(LT_OP_div, {trace(LT_OP_log1p, {trace(LT_OP_exp, {xb.get()}).get()}).get(),
                             num(core, b, dt).get()});
  Ref lin = trace(LT_OP_gt, {xb.get(), num(core, threshold.toDouble(), dt).get()});
  return wrap(trace(LT_OP_where, {lin.get(), x, sp.get()}));
}

at::Tensor lt_softplus_backward(const at::Tensor &grad, const at::Tensor &self,
                                const c10::Scalar &beta, const c10::Scalar &threshold) {
  int core = common_core({&grad, &self});
  Ref g = operand(grad, core), x = operand(self, core);
  lt_dtype dt = x.dtype();
  Ref xb = trace(LT_OP_mul, {x.get(), num(core, beta.toDouble(), dt).get()});
  Ref z = trace(LT_OP_exp, {xb.get()});
  Ref d = trace(LT_OP_div, {trace(LT_OP_mul, {g.get(), z.get()}).get(),
                            trace(LT_OP_add, {z.get(), num(core, 1, dt).get()}).get()});
  Ref lin = trace(LT_OP_gt, {xb.get(), num(core, threshold.toDouble(), dt).get()});
  return wrap(trace(LT_OP_where, {lin.get(), g.get(), d.get()}));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "log_sigmoid_forward", TORCH_FN(lt_log_sigmoid_forward));
  reg(m, "log_sigmoid_backward", TORCH_FN(lt_log_sigmoid_backward));
  reg(m, "elu", TORCH_FN(lt_elu));
  reg(m, "elu_backward", TORCH_FN(lt_elu_backward));
  reg(m, "logaddexp", TORCH_FN(lt_logaddexp));
  reg(m, "softplus", TORCH_FN(lt_softplus));
  reg(m, "softplus_backward", TORCH_FN(lt_softplus_backward));
  reg(m, "binary_cross_entropy_with_logits", TORCH_FN(lt_bce_with_logits));
}

}  // namespace lazytpu
