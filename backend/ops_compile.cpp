/*
 * backend/ops_compile.cpp — aten ops that reach the device through
 * torch.compile graphs (AOTAutograd's functional forms) rather than eager
 * calls, composed from the native kernels so that those graphs trace (and
 * replay) without a CPU fallback:
 *   _native_batch_norm_legit_functional   batch norm returning the new
 *                                         running stats instead of writing
 *   _native_batch_norm_legit (+ .no_stats), _native_batch_norm_legit_no_training
 *   _safe_softmax                         softmax whose all -inf rows are 0
 *                                         (scaled_dot_product_attention's)
 * Each goes through native_batch_norm / _softmax / eq / all / where, which
 * the op table and ops_nn.cpp implement.
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <ATen/ops/_softmax.h>
#include <ATen/ops/all.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/native_batch_norm.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include <limits>
#include <tuple>

namespace lazytpu {
namespace {

/* A new device tensor holding t's current value (so that native_batch_norm
 * writes its running-stat update there, not into t). */
at::Tensor copy_of(const at::Tensor &t) {
  lt_tensor *h = handle_of(t);
  return wrap(fresh(Ref::borrow(h), {h}));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_legit_functional(
    const at::Tensor &input, const c10::optional<at::Tensor> &weight,
    const c10::optional<at::Tensor> &bias, const at::Tensor &running_mean,
    const at::Tensor &running_var, bool training, double momentum, double eps) {
  at::Tensor rm = copy_of(running_mean), rv = copy_of(running_var);
  auto r = at::native_batch_norm(input, weight, bias, rm, rv, training, momentum, eps);
  return std::make_tuple(std::get<0>(r), std::get<1>(r), std::get<2>(r), rm, rv);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_legit(
    const at::Tensor &input, const c10::optional<at::Tensor> &weight,
    const c10::optional<at::Tensor> &bias, at::Tensor &running_mean, at::Tensor &running_var,
    bool training, double momentum, double eps) {
  return at::native_batch_norm(input, weight, bias, running_mean, running_var, training,
                               momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_legit_no_stats(
    const at::Tensor &input, const c10::optional<at::Tensor> &weight,
    const c10::optional<at::Tensor> &bias, bool training, double momentum, double eps) {
  return at::native_batch_norm(input, weight, bias, c10::nullopt, c10::nullopt, training,
                               momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_legit_no_training(
    const at::Tensor &input, const c10::optional<at::Tensor> &weight,
    const c10::optional<at::Tensor> &bias, const at::Tensor &running_mean,
    const at::Tensor &running_var, double momentum, double eps) {
  return at::native_batch_norm(input, weight, bias, running_mean, running_var, false,
                               momentum, eps);
}

at::Tensor safe_softmax(const at::Tensor &self, int64_t dim,
                        c10::optional<c10::ScalarType> dtype) {
  at::Tensor x = dtype ? self.to(*dtype) : self;
  at::Tensor out = at::_softmax(x, dim, false);
  at::Tensor masked = at::all(at::eq(x, -std::numeric_limits<double>::infinity()), dim, true);
  return at::where(masked, c10::Scalar(0.0), out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "_native_batch_norm_legit_functional", TORCH_FN(bn_legit_functional));
  reg(m, "_native_batch_norm_legit", TORCH_FN(bn_legit));
  reg(m, "_native_batch_norm_legit.no_stats", TORCH_FN(bn_legit_no_stats));
  reg(m, "_native_batch_norm_legit_no_training", TORCH_FN(bn_legit_no_training));
  reg(m, "_safe_softmax", TORCH_FN(safe_softmax));
}

}  // namespace lazytpu
