/*
 * backend/autocast.cpp — torch.autocast("lazytpu", dtype=torch.bfloat16).
 *
 * The AutocastPrivateUse1 key gets PyTorch's shared op lists (the ones CUDA
 * and XPU use): matmul, convolution, linear and the RNN cells run in the
 * autocast dtype (bf16: on the device that means bf16 inputs and f32
 * accumulation, the TPU MXU's numerics); pointwise transcendentals, norms,
 * reductions, softmax and the losses (cross_entropy_loss too, as in torch_xla
 * and CPU autocast) run in f32; mixed-input ops promote.
 * Every other op falls through (runs in its inputs' dtype).
 */
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include "lt_register.h"

/* The shared op lists name types unqualified (Tensor, Scalar, ...): register
 * from inside at::autocast, as PyTorch's own backends do. */
namespace at::autocast {
namespace {

Tensor lt_binary_cross_entropy_banned(const Tensor &, const Tensor &,
                                      const std::optional<Tensor> &, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast (their gradients lose precision in bf16). Inside torch.autocast(\"lazytpu\") "
              "use torch.nn.functional.binary_cross_entropy_with_logits or "
              "torch.nn.BCEWithLogitsLoss, which combine the sigmoid and the loss safely.");
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

/* The op lists on one autocast key (AutocastPrivateUse1; AutocastXLA too in
 * torch_xla compatibility mode, where torch_xla.amp.autocast and
 * torch.autocast("xla") use it). */
template <c10::DeviceType DT>
void register_lists(torch::Library &m) {
#define LT_AUTOCAST_LOWP(...) KERNEL(DT, __VA_ARGS__, lower_precision_fp)
#define LT_AUTOCAST_FP32(...) KERNEL(DT, __VA_ARGS__, fp32)
#define LT_AUTOCAST_FP32_OPT(...) KERNEL(DT, __VA_ARGS__, fp32_set_opt_dtype)
#define LT_AUTOCAST_PROMOTE(...) KERNEL(DT, __VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(LT_AUTOCAST_LOWP)
  AT_FORALL_FP32(LT_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(LT_AUTOCAST_FP32_OPT)
#define LT_AUTOCAST_REDISPATCH(FN, NAME, SIG, RSIG, POLICY) \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE(DT, FN, NAME, SIG, RSIG, POLICY)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(LT_AUTOCAST_REDISPATCH)
  AT_FORALL_PROMOTE(LT_AUTOCAST_PROMOTE)
  /* Not in the shared lists: cross_entropy_loss is composite and passes its
   * input's dtype to log_softmax explicitly, so without this the log-probs
   * would be rounded to bf16 before nll_loss. torch_xla 2.9 and CPU autocast
   * list it as fp32. */
  KERNEL(DT, cross_entropy_loss, fp32)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN((&lt_binary_cross_entropy_banned)));
#undef LT_AUTOCAST_LOWP
#undef LT_AUTOCAST_FP32
#undef LT_AUTOCAST_FP32_OPT
#undef LT_AUTOCAST_PROMOTE
#undef LT_AUTOCAST_REDISPATCH
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  register_lists<c10::DeviceType::PrivateUse1>(m);
  if (lazytpu::xla_compat()) {
    register_lists<c10::DeviceType::XLA>(lazytpu::mirror_library("aten", c10::DispatchKey::AutocastXLA));
    lazytpu::mirror_library("_", c10::DispatchKey::AutocastXLA)
        .fallback(torch::CppFunction::makeFallthrough());
  }
}

}  // namespace
}  // namespace at::autocast
