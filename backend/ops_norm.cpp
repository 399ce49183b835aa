/*
 * backend/ops_norm.cpp — group norm (forward and backward) and the 2-d
 * negative log likelihood (per-pixel classes), composed from table ops.
 *
 *   native_group_norm(x[N, C, *], w?, b?, N, C, HxW, G, eps)
 *     -> (y, mean[N, G], rstd[N, G]); statistics over each group's
 *        C/G channels x HxW values (biased variance).
 *   native_group_norm_backward(dy, x, mean, rstd, w?, N, C, HxW, G, mask)
 *     -> (dx, dw, db): with xhat = (x - mean) rstd and g = dy w,
 *        dx = rstd (g - mean_group(g) - xhat mean_group(g xhat)),
 *        dw = sum_{N, HxW}(dy xhat), db = sum_{N, HxW}(dy).
 *   nll_loss2d_forward / _backward: [N, C, *] scores and [N, *] targets as
 *     the 1-d loss of [N*prod(*), C] rows (permute + reshape).
 */
#include "lt_aten.h"
#include "lt_register.h"

namespace lazytpu {
namespace {

Ref opt_ref(const c10::optional<at::Tensor> &t, int core) {
  if (!t || !t->defined()) return Ref();
  return operand(*t, core);
}

/* x as [N, G, C/G * HxW] */
Ref grouped(lt_tensor *x, int64_t N, int64_t G) {
  int64_t n = lt_shape_numel(lt_tensor_shape(x));
  return reshape(x, {N, G, (N * G) ? n / (N * G) : 0});
}

/* per-channel vector c[C] as [1, C, 1, ...] broadcasting over x's rank */
Ref chan(lt_tensor *c, int64_t C, int nd) {
  std::vector<int64_t> s(nd, 1);
  s[1] = C;
  return reshape(c, s);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lt_native_group_norm(
    const at::Tensor &input, const c10::optional<at::Tensor> &weight,
    const c10::optional<at::Tensor> &bias, c10::SymInt N_, c10::SymInt C_, c10::SymInt HxW_,
    int64_t G, double eps) {
  int64_t N = N_.expect_int(), C = C_.expect_int();
  TORCH_CHECK(input.dim() >= 2 && input.size(0) == N && input.size(1) == C,
              "native_group_norm: input of sizes ", input.sizes(), " for N=", N, ", C=", C);
  TORCH_CHECK(G > 0 && C % G == 0, "Expected number of channels in input to be divisible by "
              "num_groups, but got input of shape ", input.sizes(), " and num_groups=", G);
  int core = common_core({&input});
  Ref x = operand(input, core);
  if (!lt_dtype_is_float(x.dtype())) throw_unsupported("group_norm of ints");
  Ref xg = grouped(x.get(), N, G);
  Ref mean = reduce(LT_OP_mean, xg.get(), {2}, true);
  Ref xc = trace(LT_OP_sub, {xg.get(), mean.get()});
  Ref var = reduce(LT_OP_mean, trace(LT_OP_mul, {xc.get(), xc.get()}).get(), {2}, true);
  Ref e = scalar(core, eps);
  Ref rstd = trace(LT_OP_rsqrt, {trace(LT_OP_add, {var.get(), e.get()}).get()});
  Ref y = reshape(trace(LT_OP_mul, {xc.get(), rstd.get()}).get(), input.sizes().vec());
  int nd = (int)input.dim();
  Ref w = opt_ref(weight, core), b = opt_ref(bias, core);
  if (w) y = trace(LT_OP_mul, {y.get(), chan(w.get(), C, nd).get()});
  if (b) y = trace(LT_OP_add, {y.get(), chan(b.get(), C, nd).get()});
  return std::make_tuple(wrap(std::move(y)), wrap(reshape(mean.get(), {N, G})),
                         wrap(reshape(rstd.get(), {N, G})));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lt_native_group_norm_backward(
    const at::Tensor &grad_out, const at::Tensor &input, const at::Tensor &mean_t,
    const at::Tensor &rstd_t, const c10::optional<at::Tensor> &weight, c10::SymInt N_,
    c10::SymInt C_, c10::SymInt HxW_, int64_t G, std::array<bool, 3> mask) {
  int64_t N = N_.expect_int(), C = C_.expect_int();
  int core = common_core({&grad_out, &input, &mean_t, &rstd_t});
  Ref dy = operand(grad_out, core), x = operand(input, core);
  Ref mean = reshape(operand(mean_t, core).get(), {N, G, 1});
  Ref rstd = reshape(operand(rstd_t, core).get(), {N, G, 1});
  Ref w = opt_ref(weight, core);
  int nd = (int)input.dim();
  std::vector<int64_t> xs = input.sizes().vec();
  Ref xhat_g = trace(LT_OP_mul, {trace(LT_OP_sub, {grouped(x.get(), N, G).get(),
                                                   mean.get()}).get(), rstd.get()});
  Ref xhat = reshape(xhat_g.get(), xs);
  at::Tensor dx, dw, db;
  if (mask[0]) {
    Ref g = w ? trace(LT_OP_mul, {dy.get(), chan(w.get(), C, nd).get()}) : Ref::borrow(dy.get());
    Ref gg = grouped(g.get(), N, G);
    Ref m1 = reduce(LT_OP_mean, gg.get(), {2}, true);
    Ref m2 = reduce(LT_OP_mean, trace(LT_OP_mul, {gg.get(), xhat_g.get()}).get(), {2}, true);
    Ref d = trace(LT_OP_sub, {trace(LT_OP_sub, {gg.get(), m1.get()}).get(),
                              trace(LT_OP_mul, {xhat_g.get(), m2.get()}).get()});
    dx = wrap(reshape(trace(LT_OP_mul, {d.get(), rstd.get()}).get(), xs));
  }
  std::vector<int64_t> red{0};
  for (int i = 2; i < nd; i++) red.push_back(i);
  if (mask[1]) dw = wrap(reduce(LT_OP_sum, trace(LT_OP_mul, {dy.get(), xhat.get()}).get(), red,
                                false));
  if (mask[2]) db = wrap(reduce(LT_OP_sum, dy.get(), red, false));
  return std::make_tuple(dx, dw, db);
}

/* ----------------------------------------------------------- nll_loss2d */

/* [N, C, d1, ...] -> [N * d1 * ..., C] */
Ref rows_of(lt_tensor *x) {
  const lt_shape *s = lt_tensor_shape(x);
  std::vector<int64_t> perm{0};
  for (int i = 2; i < s->ndim; i++) perm.push_back(i);
  perm.push_back(1);
  int64_t C = s->dims[1], n = lt_shape_numel(s);
  return reshape(permute(x, perm).get(), {C ? n / C : 0, C});
}

std::tuple<at::Tensor, at::Tensor> lt_nll_loss2d_forward(
    const at::Tensor &self, const at::Tensor &target, const c10::optional<at::Tensor> &weight,
    int64_t reduction, int64_t ignore_index) {
  TORCH_CHECK(self.dim() == 4 && target.dim() == 3, "nll_loss2d: expected input [N, C, H, W] "
              "and target [N, H, W], got ", self.sizes(), " and ", target.sizes());
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) &&
              self.size(3) == target.size(2), "nll_loss2d: input and target batch or spatial "
              "sizes don't match: target ", target.sizes(), ", input ", self.sizes());
  bool hw = weight && weight->defined();
  int core = common_core({&self, &target, hw ? &*weight : nullptr});
  Ref x = rows_of(operand(self, core).get());
  Ref t = nll_target(reshape(operand(target, core).get(), {target.numel()}).get(),
                     self.size(1), ignore_index, false);
  Ref w = opt_ref(weight, core);
  lt_attrs a = attrs_of({reduction, ignore_index});
  std::vector<lt_tensor *> in{x.get(), t.get()};
  if (w) in.push_back(w.get());
  Ref out = trace_n(LT_OP_nll_loss, in, &a);
  if (reduction == 0) out = reshape(out.get(), target.sizes().vec());
  /* total weight: the weights of the non-ignored targets */
  Ref ig = scalar(core, ignore_index);
  Ref valid = trace(LT_OP_ne, {t.get(), ig.get()});
  Ref tw = cast(valid.get(), x.dtype());
  if (w) {
    Ref zero = scalar(core, 0);
    Ref safe = trace(LT_OP_where, {valid.get(), t.get(), zero.get()});
    lt_attrs ia = attrs_of({0});
    Ref wt = trace(LT_OP_index_select, {w.get(), safe.get()}, &ia);
    tw = trace(LT_OP_mul, {tw.get(), wt.get()});
  }
  return std::make_tuple(wrap(std::move(out)), wrap(reduce(LT_OP_sum, tw.get(), {}, false)));
}

at::Tensor lt_nll_loss2d_backward(const at::Tensor &grad, const at::Tensor &self,
                                  const at::Tensor &target,
                                  const c10::optional<at::Tensor> &weight, int64_t reduction,
                                  int64_t ignore_index, const at::Tensor &total_weight) {
  bool hw = weight && weight->defined();
  int core = common_core({&grad, &self, &target, hw ? &*weight : nullptr});
  Ref g = operand(grad, core);
  if (reduction == 0) g = reshape(g.get(), {target.numel()});
  Ref x = rows_of(operand(self, core).get());
  Ref t = nll_target(reshape(operand(target, core).get(), {target.numel()}).get(),
                     self.size(1), ignore_index, false);
  Ref w = opt_ref(weight, core);
  lt_attrs a = attrs_of({reduction, ignore_index});
  std::vector<lt_tensor *> in{g.get(), x.get(), t.get()};
  if (w) in.push_back(w.get());
  Ref r = trace_n(LT_OP_nll_loss_backward, in, &a);   /* [rows, C] */
  int64_t N = self.size(0), C = self.size(1), H = self.size(2), W = self.size(3);
  Ref r4 = reshape(r.get(), {N, H, W, C});
  return wrap(permute(r4.get(), {0, 3, 1, 2}));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "native_group_norm", TORCH_FN(lt_native_group_norm));
  reg(m, "native_group_norm_backward", TORCH_FN(lt_native_group_norm_backward));
  reg(m, "nll_loss2d_forward", TORCH_FN(lt_nll_loss2d_forward));
  reg(m, "nll_loss2d_backward", TORCH_FN(lt_nll_loss2d_backward));
}

}  // namespace lazytpu
