/*
 * backend/ops_amp.cpp — the two ops of mixed-precision loss scaling
 * (torch.amp.GradScaler), on the device so scaling never reads the host:
 *
 *   _amp_foreach_non_finite_check_and_unscale(grads, found_inf, inv_scale)
 *       -> (grads * inv_scale, max(found_inf, any grad * inv_scale non-finite))
 *   _amp_update_scale(scale, growth_tracker, found_inf, growth, backoff, interval)
 *       -> (new scale, new growth tracker): on an overflow the scale is
 *          multiplied by backoff and the tracker reset; otherwise the tracker
 *          counts up and every `interval` clean steps the scale grows (if the
 *          grown scale is finite).
 *
 * The in-place forms GradScaler calls reach these through functionalization.
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <tuple>
#include <vector>

namespace lazytpu {
namespace {

/* 1.0 where some element of x is inf or NaN, else 0.0 (0-dim f32):
 * x - x is NaN exactly for the non-finite elements. */
Ref any_nonfinite(lt_tensor *x) {
  Ref d = trace(LT_OP_sub, {x, x});
  Ref bad = trace(LT_OP_ne, {d.get(), d.get()});
  Ref any = reduce(LT_OP_any, bad.get(), {}, false);
  return cast(any.get(), LT_F32);
}

std::tuple<std::vector<at::Tensor>, at::Tensor> lt_amp_unscale(
    at::TensorList grads, const at::Tensor &found_inf, const at::Tensor &inv_scale) {
  int core = common_core({&found_inf, &inv_scale});
  Ref inv = operand(inv_scale, core);
  Ref found = cast(operand(found_inf, core).get(), LT_F32);
  std::vector<at::Tensor> out;
  out.reserve(grads.size());
  for (const at::Tensor &g : grads) {
    common_core({&g, &found_inf});
    lt_tensor *h = handle_of(g);
    Ref u = trace(LT_OP_mul, {h, cast(inv.get(), lt_tensor_dtype(h)).get()});
    found = trace(LT_OP_maximum, {found.get(), any_nonfinite(u.get()).get()});
    out.push_back(wrap(fresh(std::move(u), {h})));
  }
  Ref f = cast(found.get(), lt_tensor_dtype(handle_of(found_inf)));
  return std::make_tuple(out, wrap(fresh(std::move(f), {handle_of(found_inf)})));
}

std::tuple<at::Tensor, at::Tensor> lt_amp_update_scale(
    const at::Tensor &scale, const at::Tensor &growth_tracker, const at::Tensor &found_inf,
    double growth, double backoff, int64_t interval) {
  int core = common_core({&scale, &growth_tracker, &found_inf});
  Ref s = operand(scale, core), gt = operand(growth_tracker, core), f = operand(found_inf, core);
  Ref zero = scalar(core, 0), one = scalar(core, 1);
  Ref overflow = trace(LT_OP_gt, {f.get(), zero.get()});
  Ref counted = trace(LT_OP_add, {gt.get(), cast(one.get(), gt.dtype()).get()});
  Ref lim = scalar_typed(core, (double)interval, gt.dtype());
  Ref grow = trace(LT_OP_ge, {counted.get(), lim.get()});
  Ref grown = mul_scalar(s.get(), growth);
  Ref grown_ok = trace(LT_OP_eq, {trace(LT_OP_sub, {grown.get(), grown.get()}).get(), zero.get()});
  Ref grown_s = trace(LT_OP_where, {grown_ok.get(), grown.get(), s.get()});
  Ref clean_s = trace(LT_OP_where, {grow.get(), grown_s.get(), s.get()});
  Ref new_s = trace(LT_OP_where, {overflow.get(), mul_scalar(s.get(), backoff).get(), clean_s.get()});
  Ref zgt = zeros(core, dims_of(gt.shape()), gt.dtype());
  Ref clean_gt = trace(LT_OP_where, {grow.get(), zgt.get(), counted.get()});
  Ref new_gt = trace(LT_OP_where, {overflow.get(), zgt.get(), clean_gt.get()});
  return std::make_tuple(wrap(cast(new_s.get(), s.dtype())), wrap(cast(new_gt.get(), gt.dtype())));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  reg(m, "_amp_foreach_non_finite_check_and_unscale", TORCH_FN(lt_amp_unscale));
  reg(m, "_amp_update_scale", TORCH_FN(lt_amp_update_scale));
}

}  // namespace lazytpu
