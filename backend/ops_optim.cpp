/*
 * backend/ops_optim.cpp — torch.optim's fused kernels on the device:
 *   _fused_adam_ / _fused_adamw_   Adam / AdamW(fused=True) (AdamW fused is
 *                                  the Hugging Face Trainer's default)
 *   _fused_sgd_                    SGD(fused=True)
 *   _fused_adagrad_                Adagrad(fused=True)
 * each with a float lr and a Tensor lr (.tensor_lr).
 *
 * Each parameter's update is traced from element-wise core ops into the
 * step's graph (no value read), in the arithmetic of PyTorch's CPU kernels
 * (aten/src/ATen/native/cpu/Fused{Adam,SGD,Adagrad}Kernel.cpp): bf16/f16
 * values are computed in f32 and rounded once when stored; Adam's bias
 * corrections 1 - beta^step and Adagrad's decayed lr are computed in f64
 * from the step tensor; a grad_scale
 * divides the gradients, which are written back unscaled; found_inf == 1
 * leaves every tensor as it was (a where() per tensor in place of the CPU
 * kernel's early return). A lr or step tensor on the host is read as the
 * CPU kernel reads it (lr.item()); on the device it stays in the graph.
 *
 * Registered on AutogradPrivateUse1 (AutogradXLA in compatibility mode),
 * above functionalization: PyTorch's generated Functionalize kernel for
 * these ops fails an internal assert ("mutating a non-functional tensor
 * with a functional tensor") whenever an optional list is empty
 * (max_exp_avg_sqs without amsgrad, momentum_buffer_list without momentum),
 * which is how torch.optim calls them; _fused_adagrad_ has no meta kernel
 * for it at all. Results are written into each
 * FunctionalTensorWrapper as functionalize.cpp's in-place kernels write
 * them (replace, commit, flush the storage's update list), and each mutated
 * tensor's version counter is bumped as ADInplaceOrView would.
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <ATen/FunctionalStorageImpl.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <vector>

#include "functionalize_util.h"

namespace lazytpu {
namespace {

namespace F = at::functionalization::impl;

/* The device value t holds now (a FunctionalTensorWrapper is synced and
 * looked through). */
lt_tensor *value_of(const at::Tensor &t) {
  if (F::isFunctionalTensor(t)) {
    F::sync(t);
    return handle_of(F::from_functional_tensor(t));
  }
  return handle_of(t);
}

/* Makes t hold v: what an in-place op does to it. v must not be the value
 * of any tensor the update read (`read`): it would then be shared. */
void commit(const at::Tensor &t, Ref v, const std::vector<lt_tensor *> &read) {
  for (lt_tensor *x : read) v = fresh(std::move(v), {x});
  if (F::isFunctionalTensor(t)) {
    finish_mutation(t, wrap(std::move(v)));
  } else {
    assign_value(t, v.get());
  }
  t.unsafeGetTensorImpl()->bump_version();
}

/* A 0-dim hyperparameter: a host number, or a device tensor's value. */
struct Val {
  double host = 0;
  lt_tensor *dev = nullptr;   /* borrowed */
};
Val val_of(const at::Tensor &t) {
  Val v;
  if (impl_of(t)) v.dev = value_of(t);
  else v.host = t.item<double>();
  return v;
}
Val val_of(double d) { Val v; v.host = d; return v; }

/* v as a 0-dim tensor of dtype dt on core */
Ref as_ref(int core, const Val &v, lt_dtype dt) {
  if (v.dev) return cast(v.dev, dt);
  return scalar_typed(core, v.host, dt);
}

Ref num(int core, double v, lt_dtype dt) { return scalar_typed(core, v, dt); }
Ref op2(lt_op op, const Ref &a, const Ref &b) { return trace(op, {a.get(), b.get()}); }

/* The dtype a value of dtype dt is computed in (at::opmath_type). */
lt_dtype opmath(lt_dtype dt) { return dt == LT_BF16 || dt == LT_F16 ? LT_F32 : dt; }

void check_float(const at::Tensor &p, const char *op) {
  at::ScalarType st = p.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kDouble || st == at::kBFloat16 || st == at::kHalf,
              "lazytpu: ", op, ": parameters must be float32, float64, bfloat16 or float16 "
              "(got ", st, ")");
}

/* Inputs common to one parameter's update: the core, the compute dtype, and
 * where(found_inf == 1, old, new) when a found_inf was given. */
struct Ctx {
  int core;
  lt_dtype ct;
  Ref skip;   /* bool 0-dim, or null */
  std::vector<lt_tensor *> read;   /* the values read so far (borrowed) */
  lt_tensor *load(const at::Tensor &t) {
    lt_tensor *v = value_of(t);
    read.push_back(v);
    return v;
  }
  void write(const at::Tensor &t, Ref v) const { commit(t, std::move(v), read); }
  Ref keep(Ref fresh_v, lt_tensor *old) const {
    if (!skip) return fresh_v;
    return trace(LT_OP_where, {skip.get(), old, fresh_v.get()});
  }
  /* v cast to dt (the stored dtype of `old`), then kept if skipping */
  Ref store(const Ref &v, lt_tensor *old) const {
    return keep(cast(v.get(), lt_tensor_dtype(old)), old);
  }
};

Ctx make_ctx(const at::Tensor &param, const std::optional<at::Tensor> &found_inf) {
  Ctx c;
  c.core = lt_tensor_core(value_of(param));
  c.ct = opmath(lt_tensor_dtype(value_of(param)));
  if (found_inf && found_inf->defined()) {
    Ref f = as_ref(c.core, val_of(*found_inf), LT_F32);
    c.skip = op2(LT_OP_eq, f, num(c.core, 1.0, LT_F32));
  }
  return c;
}

/* The gradient as the update uses it (unscaled, negated for maximize), in
 * the compute dtype; writes the unscaled gradient back when scaled. */
Ref prepare_grad(Ctx &c, const at::Tensor &grad, const std::optional<at::Tensor> &grad_scale,
                 bool maximize) {
  lt_tensor *g0 = c.load(grad);
  Ref g = cast(g0, c.ct);
  if (grad_scale && grad_scale->defined()) {
    g = op2(LT_OP_div, g, as_ref(c.core, val_of(*grad_scale), c.ct));
    c.write(grad, c.store(g, g0));
  }
  if (maximize) g = trace(LT_OP_neg, {g.get()});
  return g;
}

void check_sizes(const char *op, const char *what, size_t got, size_t want) {
  TORCH_CHECK(got == want, "lazytpu: ", op, ": ", what, " has ", got,
              " tensors, expected ", want);
}

void check_no_grad(const char *op, at::TensorList ts) {
  if (!at::GradMode::is_enabled()) return;
  for (const at::Tensor &t : ts)
    TORCH_CHECK(!t.requires_grad(), "lazytpu: ", op, " updates its tensors in place and has no "
                "derivative: call it under torch.no_grad() (torch.optim's step does)");
}

/* ------------------------------------------------------------------ Adam */

struct AdamHyper {
  Val lr;
  double beta1, beta2, weight_decay, eps;
  bool amsgrad, maximize, adamw;
};

void adam_one(const char *op, const AdamHyper &h, const at::Tensor &param,
              const at::Tensor &grad, const at::Tensor &exp_avg, const at::Tensor &exp_avg_sq,
              const at::Tensor *max_exp_avg_sq, const at::Tensor &step,
              const std::optional<at::Tensor> &grad_scale,
              const std::optional<at::Tensor> &found_inf) {
  check_float(param, op);
  common_core({&param, &grad, &exp_avg, &exp_avg_sq, max_exp_avg_sq, &step});
  Ctx c = make_ctx(param, found_inf);
  const lt_dtype ct = c.ct, f64 = LT_F64;
  /* step size lr / (1 - beta1^step) and sqrt(1 - beta2^step), in f64 */
  Ref lr = as_ref(c.core, h.lr, f64), one = num(c.core, 1.0, f64);
  Ref s = as_ref(c.core, val_of(step), f64);
  Ref bc1 = op2(LT_OP_sub, one, op2(LT_OP_pow, num(c.core, h.beta1, f64), s));
  Ref bc2 = op2(LT_OP_sub, one, op2(LT_OP_pow, num(c.core, h.beta2, f64), s));
  Ref neg_step_size = cast(trace(LT_OP_neg, {op2(LT_OP_div, lr, bc1).get()}).get(), ct);
  Ref bc2_sqrt = cast(trace(LT_OP_sqrt, {bc2.get()}).get(), ct);

  lt_tensor *p0 = c.load(param);
  Ref p = cast(p0, ct);
  Ref g = prepare_grad(c, grad, grad_scale, h.maximize);
  if (h.weight_decay != 0) {
    if (h.adamw) {
      Ref decay = op2(LT_OP_sub, one, op2(LT_OP_mul, lr, num(c.core, h.weight_decay, f64)));
      p = op2(LT_OP_mul, p, cast(decay.get(), ct));
    } else {
      g = op2(LT_OP_add, g, op2(LT_OP_mul, p, num(c.core, h.weight_decay, ct)));
    }
  }
  /* exp_avg.lerp_(g, 1 - beta1); exp_avg_sq = exp_avg_sq*beta2 + (1-beta2) g^2 */
  lt_tensor *m0 = c.load(exp_avg), *v0 = c.load(exp_avg_sq), *x0 = nullptr;
  Ref m = trace(LT_OP_lerp, {cast(m0, ct).get(), g.get(), num(c.core, 1 - h.beta1, ct).get()});
  Ref v = op2(LT_OP_add, op2(LT_OP_mul, cast(v0, ct), num(c.core, h.beta2, ct)),
              op2(LT_OP_mul, op2(LT_OP_mul, num(c.core, 1 - h.beta2, ct), g), g));
  Ref vmax;
  if (h.amsgrad) {
    x0 = c.load(*max_exp_avg_sq);
    vmax = op2(LT_OP_maximum, cast(x0, ct), v);
  }
  Ref denom = op2(LT_OP_add, op2(LT_OP_div, trace(LT_OP_sqrt, {(h.amsgrad ? vmax : v).get()}),
                                 bc2_sqrt),
                  num(c.core, h.eps, ct));
  Ref upd = op2(LT_OP_div, op2(LT_OP_mul, neg_step_size, m), denom);
  p = op2(LT_OP_add, p, upd);

  /* stored values (cast before the writes: commit() replaces the inputs) */
  Ref new_m = c.store(m, m0), new_v = c.store(v, v0), new_p = c.store(p, p0);
  Ref new_x;
  if (h.amsgrad) new_x = c.store(vmax, x0);
  c.write(exp_avg, std::move(new_m));
  c.write(exp_avg_sq, std::move(new_v));
  if (h.amsgrad) c.write(*max_exp_avg_sq, std::move(new_x));
  c.write(param, std::move(new_p));
}

void adam_all(const char *op, const AdamHyper &h, at::TensorList self, at::TensorList grads,
              at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
              at::TensorList max_exp_avg_sqs, at::TensorList state_steps,
              const std::optional<at::Tensor> &grad_scale,
              const std::optional<at::Tensor> &found_inf) {
  size_t n = self.size();
  check_sizes(op, "grads", grads.size(), n);
  check_sizes(op, "exp_avgs", exp_avgs.size(), n);
  check_sizes(op, "exp_avg_sqs", exp_avg_sqs.size(), n);
  check_sizes(op, "max_exp_avg_sqs", max_exp_avg_sqs.size(), h.amsgrad ? n : 0);
  check_sizes(op, "state_steps", state_steps.size(), n);
  check_no_grad(op, self);
  for (size_t i = 0; i < n; i++)
    adam_one(op, h, self[i], grads[i], exp_avgs[i], exp_avg_sqs[i],
             h.amsgrad ? &max_exp_avg_sqs[i] : nullptr, state_steps[i], grad_scale, found_inf);
}

template <bool AdamW>
void lt_fused_adam(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,
                   at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                   at::TensorList state_steps, double lr, double beta1, double beta2,
                   double weight_decay, double eps, bool amsgrad, bool maximize,
                   const std::optional<at::Tensor> &grad_scale,
                   const std::optional<at::Tensor> &found_inf) {
  AdamHyper h{val_of(lr), beta1, beta2, weight_decay, eps, amsgrad, maximize, AdamW};
  adam_all(AdamW ? "_fused_adamw_" : "_fused_adam_", h, self, grads, exp_avgs, exp_avg_sqs,
           max_exp_avg_sqs, state_steps, grad_scale, found_inf);
}

template <bool AdamW>
void lt_fused_adam_tlr(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,
                       at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                       at::TensorList state_steps, const at::Tensor &lr, double beta1,
                       double beta2, double weight_decay, double eps, bool amsgrad,
                       bool maximize, const std::optional<at::Tensor> &grad_scale,
                       const std::optional<at::Tensor> &found_inf) {
  AdamHyper h{val_of(lr), beta1, beta2, weight_decay, eps, amsgrad, maximize, AdamW};
  adam_all(AdamW ? "_fused_adamw_" : "_fused_adam_", h, self, grads, exp_avgs, exp_avg_sqs,
           max_exp_avg_sqs, state_steps, grad_scale, found_inf);
}

/* ------------------------------------------------------------------- SGD */

void sgd_all(at::TensorList self, at::TensorList grads, at::TensorList momentum_buffer_list,
             double weight_decay, double momentum, const Val &lrv, double dampening,
             bool nesterov, bool maximize, bool is_first_step,
             const std::optional<at::Tensor> &grad_scale,
             const std::optional<at::Tensor> &found_inf) {
  const char *op = "_fused_sgd_";
  size_t n = self.size();
  check_sizes(op, "grads", grads.size(), n);
  check_sizes(op, "momentum_buffer_list", momentum_buffer_list.size(), momentum != 0 ? n : 0);
  check_no_grad(op, self);
  for (size_t i = 0; i < n; i++) {
    const at::Tensor &param = self[i], &grad = grads[i];
    const at::Tensor *buf = momentum != 0 ? &momentum_buffer_list[i] : nullptr;
    check_float(param, op);
    common_core({&param, &grad, buf});
    Ctx c = make_ctx(param, found_inf);
    const lt_dtype ct = c.ct;
    lt_tensor *p0 = c.load(param);
    Ref p = cast(p0, ct);
    Ref g = prepare_grad(c, grad, grad_scale, maximize);
    if (weight_decay != 0) g = op2(LT_OP_add, g, op2(LT_OP_mul, p, num(c.core, weight_decay, ct)));
    Ref new_b;
    if (buf) {
      lt_tensor *b0 = c.load(*buf);
      Ref b = is_first_step
                  ? Ref::borrow(g.get())
                  : op2(LT_OP_add, op2(LT_OP_mul, cast(b0, ct), num(c.core, momentum, ct)),
                        op2(LT_OP_mul, g, num(c.core, 1 - dampening, ct)));
      g = nesterov ? op2(LT_OP_add, g, op2(LT_OP_mul, b, num(c.core, momentum, ct)))
                   : Ref::borrow(b.get());
      new_b = c.store(b, b0);
    }
    /* p += g * (-lr), -lr in f64 then in the compute dtype */
    Ref neg_lr = cast(trace(LT_OP_neg, {as_ref(c.core, lrv, LT_F64).get()}).get(), ct);
    p = op2(LT_OP_add, p, op2(LT_OP_mul, g, neg_lr));
    Ref new_p = c.store(p, p0);
    if (buf) c.write(*buf, std::move(new_b));
    c.write(param, std::move(new_p));
  }
}

void lt_fused_sgd(at::TensorList self, at::TensorList grads, at::TensorList momentum_buffer_list,
                  double weight_decay, double momentum, double lr, double dampening,
                  bool nesterov, bool maximize, bool is_first_step,
                  const std::optional<at::Tensor> &grad_scale,
                  const std::optional<at::Tensor> &found_inf) {
  sgd_all(self, grads, momentum_buffer_list, weight_decay, momentum, val_of(lr), dampening,
          nesterov, maximize, is_first_step, grad_scale, found_inf);
}

void lt_fused_sgd_tlr(at::TensorList self, at::TensorList grads,
                      at::TensorList momentum_buffer_list, double weight_decay, double momentum,
                      const at::Tensor &lr, double dampening, bool nesterov, bool maximize,
                      bool is_first_step, const std::optional<at::Tensor> &grad_scale,
                      const std::optional<at::Tensor> &found_inf) {
  sgd_all(self, grads, momentum_buffer_list, weight_decay, momentum, val_of(lr), dampening,
          nesterov, maximize, is_first_step, grad_scale, found_inf);
}

/* --------------------------------------------------------------- Adagrad */

void adagrad_all(at::TensorList self, at::TensorList grads, at::TensorList state_sums,
                 at::TensorList state_steps, const Val &lrv, double lr_decay,
                 double weight_decay, double eps, bool maximize,
                 const std::optional<at::Tensor> &grad_scale,
                 const std::optional<at::Tensor> &found_inf) {
  const char *op = "_fused_adagrad_";
  size_t n = self.size();
  check_sizes(op, "grads", grads.size(), n);
  check_sizes(op, "state_sums", state_sums.size(), n);
  check_sizes(op, "state_steps", state_steps.size(), n);
  check_no_grad(op, self);
  for (size_t i = 0; i < n; i++) {
    const at::Tensor &param = self[i], &grad = grads[i], &sum = state_sums[i];
    check_float(param, op);
    common_core({&param, &grad, &sum, &state_steps[i]});
    Ctx c = make_ctx(param, found_inf);
    const lt_dtype ct = c.ct, f64 = LT_F64;
    /* clr = lr / (1 + (step - 1) * lr_decay), in f64 */
    Ref one = num(c.core, 1.0, f64);
    Ref s = as_ref(c.core, val_of(state_steps[i]), f64);
    Ref den = op2(LT_OP_add, one, op2(LT_OP_mul, op2(LT_OP_sub, s, one),
                                      num(c.core, lr_decay, f64)));
    Ref clr = cast(op2(LT_OP_div, as_ref(c.core, lrv, f64), den).get(), ct);
    lt_tensor *p0 = c.load(param);
    Ref p = cast(p0, ct);
    Ref g = prepare_grad(c, grad, grad_scale, maximize);
    if (weight_decay != 0) g = op2(LT_OP_add, g, op2(LT_OP_mul, p, num(c.core, weight_decay, ct)));
    lt_tensor *s0 = c.load(sum);
    Ref sm = op2(LT_OP_add, cast(s0, ct), op2(LT_OP_mul, g, g));
    Ref std_ = op2(LT_OP_add, trace(LT_OP_sqrt, {sm.get()}), num(c.core, eps, ct));
    p = op2(LT_OP_sub, p, op2(LT_OP_div, op2(LT_OP_mul, clr, g), std_));
    Ref new_s = c.store(sm, s0), new_p = c.store(p, p0);
    c.write(sum, std::move(new_s));
    c.write(param, std::move(new_p));
  }
}

void lt_fused_adagrad(at::TensorList self, at::TensorList grads, at::TensorList state_sums,
                      at::TensorList state_steps, double lr, double lr_decay, double weight_decay,
                      double eps, bool maximize, const std::optional<at::Tensor> &grad_scale,
                      const std::optional<at::Tensor> &found_inf) {
  adagrad_all(self, grads, state_sums, state_steps, val_of(lr), lr_decay, weight_decay, eps,
              maximize, grad_scale, found_inf);
}

void lt_fused_adagrad_tlr(at::TensorList self, at::TensorList grads, at::TensorList state_sums,
                          at::TensorList state_steps, const at::Tensor &lr, double lr_decay,
                          double weight_decay, double eps, bool maximize,
                          const std::optional<at::Tensor> &grad_scale,
                          const std::optional<at::Tensor> &found_inf) {
  adagrad_all(self, grads, state_sums, state_steps, val_of(lr), lr_decay, weight_decay, eps,
              maximize, grad_scale, found_inf);
}

}  // namespace

/* On the autograd key (and AutogradXLA in compatibility mode); not guarded:
 * the CPU fallback works below functionalization, not here. */
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  reg_autograd(m, "_fused_adam_", TORCH_FN(lt_fused_adam<false>));
  reg_autograd(m, "_fused_adam_.tensor_lr", TORCH_FN(lt_fused_adam_tlr<false>));
  reg_autograd(m, "_fused_adamw_", TORCH_FN(lt_fused_adam<true>));
  reg_autograd(m, "_fused_adamw_.tensor_lr", TORCH_FN(lt_fused_adam_tlr<true>));
  reg_autograd(m, "_fused_sgd_", TORCH_FN(lt_fused_sgd));
  reg_autograd(m, "_fused_sgd_.tensor_lr", TORCH_FN(lt_fused_sgd_tlr));
  reg_autograd(m, "_fused_adagrad_", TORCH_FN(lt_fused_adagrad));
  reg_autograd(m, "_fused_adagrad_.tensor_lr", TORCH_FN(lt_fused_adagrad_tlr));
}

}  // namespace lazytpu
