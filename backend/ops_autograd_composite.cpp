/*
 * backend/ops_autograd_composite.cpp — ops whose eager kernels have no
 * lazytpu kernel (they ran on the counted CPU fallback), written as
 * composites of differentiable native ops and registered on the autograd
 * key (AutogradXLA too in compatibility mode): functionalization places
 * their views, autograd differentiates them, and the gradients equal eager's
 * hand-written backward formulas (checked in test_ops_round3.py):
 *   glu(x, dim)          a * sigmoid(b), a, b the halves of x along dim
 *   _prelu_kernel(x, w)  x > 0 ? x : w * x
 *   smooth_l1_loss       d = |x - y|: d < beta ? d^2 / (2 beta) : d - beta / 2
 *                        (beta 0: d)
 *   huber_loss           d < delta ? d^2 / 2 : delta * (d - delta / 2)
 *   pixel_shuffle(x, r), pixel_unshuffle(x, r): a reshape, a permute, a
 *                        reshape (eager's layout)
 *   _weight_norm_interface(v, g, dim): (v * g / n, n), n = norm_except_dim(v, 2,
 *                        dim) (nn.utils.weight_norm: wav2vec2's positional
 *                        convolution, vocoders)
 * Autocast's f32 list (the losses) still applies: it sits above this key.
 * hardswish(x) = x * clamp(x + 3, 0, 6) / 6 and hardswish_backward (eager's
 * formula: 0 up to -3, x/3 + 1/2 below 3, 1 from 3) are PrivateUse1 kernels
 * of native ops (no views), under autograd's own formula: the in-place
 * hardswish_ (nn.Hardswish(inplace=True)) reaches them too.
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <ATen/ops/clamp.h>
#include <ATen/ops/norm_except_dim.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

#include <vector>

namespace lazytpu {
namespace {

at::Tensor reduced(const at::Tensor &loss, int64_t reduction) {
  if (reduction == at::Reduction::Mean) return loss.mean();
  if (reduction == at::Reduction::Sum) return loss.sum();
  return loss;
}

at::Tensor lt_hardswish(const at::Tensor &x) {
  return x.mul(at::clamp(x.add(3), 0, 6)).div(6);
}

at::Tensor lt_glu(const at::Tensor &x, int64_t dim) {
  TORCH_CHECK(x.dim() > 0, "glu does not support scalars because halving size must be even");
  int64_t d = c10::maybe_wrap_dim(dim, x.dim());
  TORCH_CHECK(x.size(d) % 2 == 0, "Halving dimension must be even, but dimension ", d,
              " is size ", x.size(d));
  auto halves = x.chunk(2, d);
  return halves[0].mul(halves[1].sigmoid());
}

at::Tensor lt_prelu_kernel(const at::Tensor &x, const at::Tensor &w) {
  return at::where(x.gt(0), x, w.mul(x));
}

at::Tensor lt_smooth_l1_loss(const at::Tensor &x, const at::Tensor &y, int64_t reduction,
                             double beta) {
  TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
  at::Tensor d = x.sub(y).abs();
  if (beta == 0) return reduced(d, reduction);
  return reduced(at::where(d.lt(beta), d.mul(d).div(2 * beta), d.sub(beta / 2)), reduction);
}

at::Tensor lt_huber_loss(const at::Tensor &x, const at::Tensor &y, int64_t reduction,
                         double delta) {
  TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
  at::Tensor d = x.sub(y).abs();
  return reduced(at::where(d.lt(delta), d.mul(d).div(2), d.sub(delta / 2).mul(delta)),
                 reduction);
}

at::Tensor lt_pixel_shuffle(const at::Tensor &x, int64_t r) {
  TORCH_CHECK(x.dim() >= 3, "pixel_shuffle expects input to have at least 3 dimensions, but "
              "got input with ", x.dim(), " dimension(s)");
  TORCH_CHECK(r > 0, "pixel_shuffle expects a positive upscale_factor, but got ", r);
  int64_t n = x.dim(), c = x.size(n - 3), h = x.size(n - 2), w = x.size(n - 1);
  TORCH_CHECK(c % (r * r) == 0, "pixel_shuffle expects its input's 'channel' dimension to be "
              "divisible by the square of upscale_factor, but input.size(-3)=", c,
              " is not divisible by ", r * r);
  std::vector<int64_t> lead(x.sizes().begin(), x.sizes().end() - 3);
  std::vector<int64_t> s = lead;
  s.insert(s.end(), {c / (r * r), r, r, h, w});
  std::vector<int64_t> perm;
  int64_t b = (int64_t)lead.size();
  for (int64_t i = 0; i < b; i++) perm.push_back(i);
  perm.insert(perm.end(), {b, b + 3, b + 1, b + 4, b + 2});
  std::vector<int64_t> o = lead;
  o.insert(o.end(), {c / (r * r), h * r, w * r});
  return x.reshape(s).permute(perm).reshape(o);
}

at::Tensor lt_pixel_unshuffle(const at::Tensor &x, int64_t r) {
  TORCH_CHECK(x.dim() >= 3, "pixel_unshuffle expects input to have at least 3 dimensions, but "
              "got input with ", x.dim(), " dimension(s)");
  TORCH_CHECK(r > 0, "pixel_unshuffle expects a positive downscale_factor, but got ", r);
  int64_t n = x.dim(), c = x.size(n - 3), h = x.size(n - 2), w = x.size(n - 1);
  TORCH_CHECK(h % r == 0 && w % r == 0, "pixel_unshuffle expects height and width to be "
              "divisible by downscale_factor, but got ", h, " x ", w, " and ", r);
  std::vector<int64_t> lead(x.sizes().begin(), x.sizes().end() - 3);
  std::vector<int64_t> s = lead;
  s.insert(s.end(), {c, h / r, r, w / r, r});
  std::vector<int64_t> perm;
  int64_t b = (int64_t)lead.size();
  for (int64_t i = 0; i < b; i++) perm.push_back(i);
  perm.insert(perm.end(), {b, b + 2, b + 4, b + 1, b + 3});
  std::vector<int64_t> o = lead;
  o.insert(o.end(), {c * r * r, h / r, w / r});
  return x.reshape(s).permute(perm).reshape(o);
}

at::Tensor lt_hardswish_backward(const at::Tensor &g, const at::Tensor &x) {
  at::Tensor mid = g.mul(x.div(3).add(0.5));
  return at::where(x.le(-3), at::zeros_like(g), at::where(x.lt(3), mid, g));
}

std::tuple<at::Tensor, at::Tensor> lt_weight_norm_interface(const at::Tensor &v,
                                                             const at::Tensor &g, int64_t dim) {
  at::Tensor n = at::norm_except_dim(v, 2, dim);
  return std::make_tuple(v.mul(g.div(n)), n);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  reg_autograd(m, "glu", TORCH_FN(lt_glu));
  reg_autograd(m, "_prelu_kernel", TORCH_FN(lt_prelu_kernel));
  reg_autograd(m, "smooth_l1_loss", TORCH_FN(lt_smooth_l1_loss));
  reg_autograd(m, "huber_loss", TORCH_FN(lt_huber_loss));
  reg_autograd(m, "pixel_shuffle", TORCH_FN(lt_pixel_shuffle));
  reg_autograd(m, "pixel_unshuffle", TORCH_FN(lt_pixel_unshuffle));
  reg_autograd(m, "_weight_norm_interface", TORCH_FN(lt_weight_norm_interface));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "hardswish", TORCH_FN(lt_hardswish));
  reg(m, "hardswish_backward", TORCH_FN(lt_hardswish_backward));
}

}  // namespace lazytpu
