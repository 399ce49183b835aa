/*
 * backend/functionalize_fast.cpp — unboxed Functionalize kernels for the
 * functional (non-view, non-mutating) ops a training step traces most.
 *
 * Why: every op on a lazytpu tensor passes the Functionalize key. For a
 * functional op PyTorch has no kernel there, only its boxed fallback
 * (FunctionalizeFallbackKernel.cpp): the arguments are boxed onto an IValue
 * stack, the op is dispatched again from the stack (boxed -> our unboxed
 * kernel) and the results unboxed again. That was ~0.5 us of a ~1.8 us
 * traced mul. The kernels here do exactly what the fallback does (sync and
 * unwrap functional tensor arguments, run the op with Functionalize skipped,
 * wrap tensor results when an input was functional or when there was no
 * tensor input at all) without boxing: one template, instantiated per op
 * from its at::_ops signature.
 *
 * Only ops that (checked at registration) have no alias annotations, are not
 * CompositeImplicitAutograd (those decompose above this key) and have no
 * Functionalize kernel of their own are registered; everything else keeps
 * PyTorch's fallback. The registrations are process-wide, like those of
 * functionalize.cpp, and behave as the fallback for every device.
 */
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <ATen/ops/abs_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/argmax_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/clamp_ops.h>
#include <ATen/ops/clone_ops.h>
#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_ops.h>
#include <ATen/ops/cumsum_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/embedding_dense_backward_ops.h>
#include <ATen/ops/eq_ops.h>
#include <ATen/ops/erf_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/gather_ops.h>
#include <ATen/ops/ge_ops.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/gt_ops.h>
#include <ATen/ops/index_select_ops.h>
#include <ATen/ops/le_ops.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/log1p_ops.h>
#include <ATen/ops/log_ops.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/lt_ops.h>
#include <ATen/ops/masked_fill_ops.h>
#include <ATen/ops/max_ops.h>
#include <ATen/ops/max_pool2d_with_indices_backward_ops.h>
#include <ATen/ops/max_pool2d_with_indices_ops.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/minimum_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mse_loss_backward_ops.h>
#include <ATen/ops/mse_loss_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/_native_batch_norm_legit_ops.h>
#include <ATen/ops/native_batch_norm_backward_ops.h>
#include <ATen/ops/native_dropout_backward_ops.h>
#include <ATen/ops/native_dropout_ops.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/ne_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/reciprocal_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/rsub_ops.h>
#include <ATen/ops/sigmoid_backward_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/silu_backward_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/tanh_backward_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/where_ops.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "lt_register.h"
#include "../base/options.h"
#include "functionalize_util.h"

namespace lazytpu {
namespace {

/* What the fallback learns from the arguments: a tensor argument (an
 * undefined tensor or an absent optional is none, as in an IValue) and a
 * functional one. */
struct Seen {
  bool tensor = false;
  bool functional = false;
};

/* The argument as the op below functionalization gets it. */
template <class T>
struct Unwrap {
  static T get(T v, Seen &) { return std::forward<T>(v); }
};

template <>
struct Unwrap<const at::Tensor &> {
  static const at::Tensor &get(const at::Tensor &t, Seen &s) {
    if (!t.defined()) return t;
    s.tensor = true;
    if (!is_functional(t)) return t;
    s.functional = true;
    return synced_value(t);
  }
};

template <>
struct Unwrap<const std::optional<at::Tensor> &> {
  static std::optional<at::Tensor> get(const std::optional<at::Tensor> &t, Seen &s) {
    if (!t.has_value() || !t->defined()) return t;
    return Unwrap<const at::Tensor &>::get(*t, s);
  }
};

/* The result as the caller above functionalization gets it. */
template <class R>
struct Wrap;

template <>
struct Wrap<at::Tensor> {
  static at::Tensor get(at::Tensor t) {
    if (!t.defined()) return t;
    return at::functionalization::impl::to_functional_tensor(t);
  }
};

template <class... Ts>
struct Wrap<std::tuple<Ts...>> {
  static std::tuple<Ts...> get(std::tuple<Ts...> t) {
    return std::apply([](auto &&...x) { return std::tuple<Ts...>(Wrap<Ts>::get(std::move(x))...); },
                      std::move(t));
  }
};

template <class Op, class Sig = typename Op::schema>
struct Fast;

template <class Op, class R, class... A>
struct Fast<Op, R(A...)> {
  static R fn(A... a) {
    Seen s;
    R out = call(s, std::forward<A>(a)...);
    /* wrap when an input was functional, or for a factory (no tensor input) */
    if (s.tensor && !s.functional) return out;
    return Wrap<R>::get(std::move(out));
  }

 private:
  static R call(Seen &s, A... a) {
    /* arguments are unwrapped (and their wrappers synced) before the guard,
     * as the fallback does */
    return call_unwrapped(Unwrap<A>::get(std::forward<A>(a), s)...);
  }
  template <class... U>
  static R call_unwrapped(U &&...u) {
    at::AutoDispatchSkipFunctionalize guard;
    return Op::call(std::forward<U>(u)...);
  }
};

/* Registers Fast<Op> on lib when the op qualifies (see the file comment). */
template <class Op>
void fast(torch::Library &lib) {
  std::string name = Op::name;
  std::string full = name.substr(6);   /* drop "aten::" */
  if (*Op::overload_name) full += std::string(".") + Op::overload_name;
  auto op = c10::Dispatcher::singleton().findOp({name, Op::overload_name});
  if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::Functionalize)) return;
  if (op->schema().hasAnyAliasInfo() || is_composite_implicit(full)) return;
  lib.impl(full.c_str(), TORCH_FN(Fast<Op>::fn));
}

}  // namespace

/* Called once from the module init (lazytpu_register_late). */
void register_functional_fast() {
  static torch::Library *lib = nullptr;
  if (lib) return;
  /* LAZYTPU_FUNCTIONALIZE_FAST=0: PyTorch's boxed fallback only (A/B
   * measurements, bench/bench_trace.py --ab) */
  if (!lt_opt_int(LT_OPT_FUNCTIONALIZE_FAST)) return;
  lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize,
                           __FILE__, __LINE__);
  torch::Library &m = *lib;
  /* elementwise */
  fast<at::_ops::add_Tensor>(m); fast<at::_ops::add_Scalar>(m); fast<at::_ops::sub_Tensor>(m); fast<at::_ops::sub_Scalar>(m);
  fast<at::_ops::rsub_Scalar>(m); fast<at::_ops::rsub_Tensor>(m);
  fast<at::_ops::mul_Tensor>(m); fast<at::_ops::mul_Scalar>(m); fast<at::_ops::div_Tensor>(m); fast<at::_ops::div_Scalar>(m);
  fast<at::_ops::div_Tensor_mode>(m); fast<at::_ops::neg>(m); fast<at::_ops::exp>(m); fast<at::_ops::log>(m); fast<at::_ops::log1p>(m);
  fast<at::_ops::sqrt>(m); fast<at::_ops::rsqrt>(m); fast<at::_ops::reciprocal>(m); fast<at::_ops::abs>(m); fast<at::_ops::erf>(m);
  fast<at::_ops::tanh>(m); fast<at::_ops::sigmoid>(m); fast<at::_ops::relu>(m); fast<at::_ops::gelu>(m); fast<at::_ops::silu>(m);
  fast<at::_ops::pow_Tensor_Scalar>(m); fast<at::_ops::pow_Tensor_Tensor>(m); fast<at::_ops::clamp>(m); fast<at::_ops::clamp_min>(m);
  fast<at::_ops::maximum>(m); fast<at::_ops::minimum>(m); fast<at::_ops::where_self>(m); fast<at::_ops::masked_fill_Scalar>(m);
  fast<at::_ops::lerp_Scalar>(m); fast<at::_ops::addcmul>(m); fast<at::_ops::addcdiv>(m);
  fast<at::_ops::eq_Tensor>(m); fast<at::_ops::eq_Scalar>(m); fast<at::_ops::ne_Tensor>(m); fast<at::_ops::ne_Scalar>(m);
  fast<at::_ops::gt_Tensor>(m); fast<at::_ops::gt_Scalar>(m); fast<at::_ops::lt_Tensor>(m); fast<at::_ops::lt_Scalar>(m);
  fast<at::_ops::ge_Tensor>(m); fast<at::_ops::ge_Scalar>(m); fast<at::_ops::le_Tensor>(m); fast<at::_ops::le_Scalar>(m);
  fast<at::_ops::clone>(m);
  /* backward of elementwise */
  fast<at::_ops::threshold_backward>(m); fast<at::_ops::sigmoid_backward>(m); fast<at::_ops::tanh_backward>(m);
  fast<at::_ops::gelu_backward>(m); fast<at::_ops::silu_backward>(m);
  /* matmul, reductions, softmax, losses */
  fast<at::_ops::mm>(m); fast<at::_ops::bmm>(m); fast<at::_ops::addmm>(m);
  fast<at::_ops::sum>(m); fast<at::_ops::sum_dim_IntList>(m); fast<at::_ops::mean_dim>(m); fast<at::_ops::amax>(m); fast<at::_ops::max_dim>(m);
  fast<at::_ops::argmax>(m); fast<at::_ops::cumsum>(m);
  fast<at::_ops::_softmax>(m); fast<at::_ops::_log_softmax>(m); fast<at::_ops::_softmax_backward_data>(m);
  fast<at::_ops::_log_softmax_backward_data>(m);
  fast<at::_ops::nll_loss_forward>(m); fast<at::_ops::nll_loss_backward>(m); fast<at::_ops::mse_loss>(m);
  fast<at::_ops::mse_loss_backward>(m);
  /* layers */
  fast<at::_ops::native_layer_norm>(m); fast<at::_ops::native_layer_norm_backward>(m);
  fast<at::_ops::convolution>(m); fast<at::_ops::convolution_backward>(m);
  fast<at::_ops::_native_batch_norm_legit_functional>(m); fast<at::_ops::native_batch_norm_backward>(m);
  fast<at::_ops::max_pool2d_with_indices>(m); fast<at::_ops::max_pool2d_with_indices_backward>(m);
  fast<at::_ops::native_dropout>(m); fast<at::_ops::native_dropout_backward>(m);
  fast<at::_ops::embedding_dense_backward>(m); fast<at::_ops::gather>(m); fast<at::_ops::index_select>(m);
}

}  // namespace lazytpu
