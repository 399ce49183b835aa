/*
 * backend/functionalize_inplace.cpp — unboxed Functionalize kernels for the
 * in-place ops and in-place foreach ops an optimizer step runs most
 * (add_, mul_, addcmul_, lerp_, ...; _foreach_add_, _foreach_mul_, ...).
 *
 * Why: functionalize.cpp's kernels for in-place ops are boxed (one kernel
 * for ~50 ops): the arguments go onto an IValue stack, the functional op is
 * called boxed and unboxed again, and a foreach op copies its lists into
 * IValues and builds a stack per element. For SGD with momentum on the MLP
 * that was ~2.5 us per foreach call on top of its elements' work. The
 * kernels here do exactly what functionalize.cpp's inplace_kernel does
 * (unwrap and sync the functional arguments, run the functional variant
 * below functionalization, check the shape, keep the sharding, replace and
 * commit self's value, flush its storage's updates), one template
 * instantiated per op from its at::_ops signatures; a foreach kernel loops
 * over the same function. Everything else keeps functionalize.cpp's boxed
 * kernels. Off with LAZYTPU_FUNCTIONALIZE_FAST=0, like functionalize_fast.cpp.
 */
#include "lt_aten.h"

#include <ATen/FunctionalStorageImpl.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <ATen/ops/_foreach_add_ops.h>
#include <ATen/ops/_foreach_addcdiv_ops.h>
#include <ATen/ops/_foreach_addcmul_ops.h>
#include <ATen/ops/_foreach_div_ops.h>
#include <ATen/ops/_foreach_lerp_ops.h>
#include <ATen/ops/_foreach_mul_ops.h>
#include <ATen/ops/_foreach_sub_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/sub_ops.h>

#include <string>
#include <utility>
#include <vector>

#include "../base/options.h"
#include "functionalize_util.h"

namespace lazytpu {

/* An in-place op's functional result out may replace self's value: eager's
 * errors when it has another shape (the operands broadcast to a larger one)
 * or a type self cannot hold (an integer tensor times 0.5, a bool tensor
 * plus 2: eager refuses, replace_ would silently cast). */
void check_inplace_result(const at::Tensor &self, const at::Tensor &out) {
  TORCH_CHECK(out.sizes() == self.sizes(), "output with shape ", self.sizes(),
              " doesn't match the broadcast shape ", out.sizes());
  TORCH_CHECK(c10::canCast(out.scalar_type(), self.scalar_type()), "result type ",
              out.scalar_type(), " can't be cast to the desired output type ",
              self.scalar_type());
}

namespace {

/* An argument as the op below functionalization gets it: a functional
 * tensor synced and unwrapped, anything else as is. */
template <class T>
struct Arg {
  static T get(T v) { return std::forward<T>(v); }
};

template <>
struct Arg<const at::Tensor &> {
  static const at::Tensor &get(const at::Tensor &t) {
    return is_functional(t) ? synced_value(t) : t;
  }
};

template <class IOp, class FOp, class ISig = typename IOp::schema,
          class FSig = typename FOp::schema>
struct Inplace;

/* IOp: the in-place op (self first), FOp: its functional variant taking the
 * same arguments. */
template <class IOp, class FOp, class... A, class... B>
struct Inplace<IOp, FOp, at::Tensor &(at::Tensor &, A...), at::Tensor(const at::Tensor &, B...)> {
  static at::Tensor &fn(at::Tensor &self, A... a) {
    if (!is_functional(self)) {
      /* a plain tensor (e.g. CPU) mutated with functional arguments */
      c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKey::Functionalize);
      IOp::call(self, Arg<A>::get(std::forward<A>(a))...);
      return self;
    }
    auto *w = at::functionalization::impl::unsafeGetFunctionalWrapper(self);
    sync_for_mutation(self);
    at::Tensor self_value = w->value();
    at::Tensor out;
    {
      c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKey::Functionalize);
      out = FOp::call(self_value, Arg<A>::get(std::forward<A>(a))...);
    }
    check_inplace_result(self, out);
    keep_sharding(out, self_value);
    finish_mutation(self, out);
    return self;
  }
};

/* A foreach argument's element i: a list's i-th entry, anything else as is. */
template <class T>
struct Elem {
  static T get(T v, size_t) { return v; }
  static void check(T, size_t) {}
};

template <>
struct Elem<at::TensorList> {
  static const at::Tensor &get(at::TensorList l, size_t i) { return l[i]; }
  static void check(at::TensorList l, size_t n) {
    TORCH_CHECK(l.size() == n, "Tensor lists must have the same number of tensors, got ", n,
                " and ", l.size());
  }
};

template <>
struct Elem<at::ArrayRef<at::Scalar>> {
  static const at::Scalar &get(at::ArrayRef<at::Scalar> l, size_t i) { return l[i]; }
  static void check(at::ArrayRef<at::Scalar> l, size_t n) {
    TORCH_CHECK(l.size() == n, "Tensor lists must have the same number of tensors, got ", n,
                " and ", l.size());
  }
};

/* A foreach op as the loop over One::fn, element by element (PyTorch's own
 * slow path for foreach ops). */
template <class FOp, class One, class Sig = typename FOp::schema>
struct Foreach;

template <class FOp, class One, class... A>
struct Foreach<FOp, One, void(at::TensorList, A...)> {
  static void fn(at::TensorList self, A... a) {
    size_t n = self.size();
    (Elem<A>::check(a, n), ...);
    for (size_t i = 0; i < n; i++) {
      at::Tensor t = self[i];
      One::fn(t, Elem<A>::get(a, i)...);
    }
  }
};

/* add_.Scalar / sub_.Scalar with their default alpha (the foreach forms
 * take no alpha) */
template <class One>
struct AlphaOne {
  static at::Tensor &fn(at::Tensor &self, const at::Scalar &other) {
    return One::fn(self, other, at::Scalar(1));
  }
};

std::string full_name(const char *name, const char *overload) {
  std::string full = std::string(name).substr(6);   /* drop "aten::" */
  if (*overload) full += std::string(".") + overload;
  return full;
}

template <class IOp, class FOp>
void inplace(torch::Library &lib, std::vector<std::string> &done) {
  std::string full = full_name(IOp::name, IOp::overload_name);
  lib.impl(full.c_str(), TORCH_FN((Inplace<IOp, FOp>::fn)));
  done.push_back(full);
}

template <class FOp, class IOp, class Fn, bool kAlpha = false>
void foreach_(torch::Library &lib, std::vector<std::string> &done) {
  std::string full = full_name(FOp::name, FOp::overload_name);
  if constexpr (kAlpha)
    lib.impl(full.c_str(), TORCH_FN((Foreach<FOp, AlphaOne<Inplace<IOp, Fn>>>::fn)));
  else
    lib.impl(full.c_str(), TORCH_FN((Foreach<FOp, Inplace<IOp, Fn>>::fn)));
  done.push_back(full);
}

}  // namespace

/* Registers the unboxed kernels on lib (the Functionalize key of aten) and
 * returns the "op.overload" names registered, which functionalize.cpp then
 * leaves alone; none with LAZYTPU_FUNCTIONALIZE_FAST=0. */
std::vector<std::string> register_inplace_unboxed(torch::Library &lib) {
  std::vector<std::string> d;
  if (!lt_opt_int(LT_OPT_FUNCTIONALIZE_FAST)) return d;
  namespace o = at::_ops;
  inplace<o::add__Tensor, o::add_Tensor>(lib, d);
  inplace<o::add__Scalar, o::add_Scalar>(lib, d);
  inplace<o::sub__Tensor, o::sub_Tensor>(lib, d);
  inplace<o::sub__Scalar, o::sub_Scalar>(lib, d);
  inplace<o::mul__Tensor, o::mul_Tensor>(lib, d);
  inplace<o::mul__Scalar, o::mul_Scalar>(lib, d);
  inplace<o::div__Tensor, o::div_Tensor>(lib, d);
  inplace<o::div__Scalar, o::div_Scalar>(lib, d);
  inplace<o::addcmul_, o::addcmul>(lib, d);
  inplace<o::addcdiv_, o::addcdiv>(lib, d);
  inplace<o::lerp__Scalar, o::lerp_Scalar>(lib, d);
  inplace<o::lerp__Tensor, o::lerp_Tensor>(lib, d);
  foreach_<o::_foreach_add__Scalar, o::add__Scalar, o::add_Scalar, true>(lib, d);
  foreach_<o::_foreach_add__List, o::add__Tensor, o::add_Tensor>(lib, d);
  foreach_<o::_foreach_add__ScalarList, o::add__Scalar, o::add_Scalar, true>(lib, d);
  foreach_<o::_foreach_add__Tensor, o::add__Tensor, o::add_Tensor>(lib, d);
  foreach_<o::_foreach_sub__Scalar, o::sub__Scalar, o::sub_Scalar, true>(lib, d);
  foreach_<o::_foreach_sub__List, o::sub__Tensor, o::sub_Tensor>(lib, d);
  foreach_<o::_foreach_sub__ScalarList, o::sub__Scalar, o::sub_Scalar, true>(lib, d);
  foreach_<o::_foreach_mul__Scalar, o::mul__Scalar, o::mul_Scalar>(lib, d);
  foreach_<o::_foreach_mul__List, o::mul__Tensor, o::mul_Tensor>(lib, d);
  foreach_<o::_foreach_mul__ScalarList, o::mul__Scalar, o::mul_Scalar>(lib, d);
  foreach_<o::_foreach_mul__Tensor, o::mul__Tensor, o::mul_Tensor>(lib, d);
  foreach_<o::_foreach_div__Scalar, o::div__Scalar, o::div_Scalar>(lib, d);
  foreach_<o::_foreach_div__List, o::div__Tensor, o::div_Tensor>(lib, d);
  foreach_<o::_foreach_div__ScalarList, o::div__Scalar, o::div_Scalar>(lib, d);
  foreach_<o::_foreach_div__Tensor, o::div__Tensor, o::div_Tensor>(lib, d);
  foreach_<o::_foreach_addcmul__Scalar, o::addcmul_, o::addcmul>(lib, d);
  foreach_<o::_foreach_addcmul__ScalarList, o::addcmul_, o::addcmul>(lib, d);
  foreach_<o::_foreach_addcdiv__Scalar, o::addcdiv_, o::addcdiv>(lib, d);
  foreach_<o::_foreach_addcdiv__ScalarList, o::addcdiv_, o::addcdiv>(lib, d);
  foreach_<o::_foreach_lerp__List, o::lerp__Tensor, o::lerp_Tensor>(lib, d);
  foreach_<o::_foreach_lerp__Scalar, o::lerp__Scalar, o::lerp_Scalar>(lib, d);
  foreach_<o::_foreach_lerp__ScalarList, o::lerp__Scalar, o::lerp_Scalar>(lib, d);
  return d;
}

}  // namespace lazytpu
