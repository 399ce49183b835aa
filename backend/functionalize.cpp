/*
 * backend/functionalize.cpp — our Functionalize-key kernels for the in-place
 * ops a training step runs (optimizer updates, gradient accumulation,
 * zero_grad, ...).
 *
 * Why: in PyTorch 1.13 every in-place op on a functional tensor appends its
 * new value to the tensor's FunctionalStorageImpl update list, and the list is
 * only flushed when an *alias* of the storage needs syncing. A parameter
 * updated with p.add_() every step, but never mutated through a view, keeps
 * every past value alive: device memory and the core's live-tensor list grow
 * each step. These kernels do what the generated ones do (unwrap, run the
 * functional variant, replace + commit the wrapper's value) and then apply
 * the storage's pending updates, which drops the old values.
 *
 * Also _to_copy (see to_copy_functionalize). These registrations replace
 * PyTorch's Functionalize kernels process-wide; for devices other than
 * lazytpu they behave as PyTorch's own.
 */
#include "lt_aten.h"

#include <ATen/FunctionalStorageImpl.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/ops/_to_copy_ops.h>
#include <ATen/ops/polygamma.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>
#include "lt_register.h"
#include "functionalize_util.h"

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lazytpu {

void check_inplace_result(const at::Tensor &self, const at::Tensor &out);  /* functionalize_inplace.cpp */

namespace {

/* in-place op -> its functional variant ("add_.Tensor" -> "add.Tensor"),
 * keyed by the in-place op's schema (a stable address). Filled once at
 * registration, read-only afterwards: no lock and no string per call. */
std::unordered_map<const c10::FunctionSchema *, c10::OperatorHandle> g_functional;

c10::OperatorHandle functional_of(const c10::OperatorHandle &op) {
  auto it = g_functional.find(&op.schema());
  TORCH_CHECK(it != g_functional.end(), "lazytpu: internal: no functional variant of ",
              op.operator_name());
  return it->second;
}

void inplace_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  size_t n = op.schema().arguments().size();
  size_t base = stack->size() - n;
  at::Tensor self = (*stack)[base].toTensor();
  if (!at::functionalization::impl::isFunctionalTensor(self)) {
    /* a plain tensor (e.g. CPU) mutated with functional arguments: unwrap
     * them and run the in-place op below functionalization */
    for (size_t i = base; i < stack->size(); i++) {
      c10::IValue &v = (*stack)[i];
      if (v.isTensor() && at::functionalization::impl::isFunctionalTensor(v.toTensor())) {
        at::functionalization::impl::sync(v.toTensor());
        v = at::functionalization::impl::from_functional_tensor(v.toTensor());
      }
    }
    c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKey::Functionalize);
    op.callBoxed(stack);
    return;
  }
  sync_for_mutation(self);
  for (size_t i = base; i < stack->size(); i++) {
    c10::IValue &v = (*stack)[i];
    if (v.isTensor() && at::functionalization::impl::isFunctionalTensor(v.toTensor())) {
      at::functionalization::impl::sync(v.toTensor());
      v = at::functionalization::impl::from_functional_tensor(v.toTensor());
    }
  }
  at::Tensor self_value = (*stack)[base].toTensor();
  c10::OperatorHandle fop = functional_of(op);
  {
    c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKey::Functionalize);
    fop.callBoxed(stack);
  }
  at::Tensor out = stack->back().toTensor();
  stack->pop_back();
  check_inplace_result(self, out);   /* eager's shape and type errors */
  /* the new value keeps self's sharding (torch_xla's _propagate_xla_data,
   * which PyTorch's generated kernels call for the XLA device only) */
  keep_sharding(out, self_value);
  finish_mutation(self, out);
  stack->push_back(self);
}

/* In-place foreach ops (the optimizers' _foreach_add_, _foreach_mul_, ...)
 * as the loop over their single-tensor in-place op, element by element:
 * the semantics of PyTorch's own slow path for foreach ops. PyTorch's
 * generated Functionalize kernel for them first runs the op on meta tensors
 * (a shape check through Python meta functions: ~65 us per call, more than
 * the whole optimizer step of a small model); the single-tensor kernels
 * above check shapes when they trace. */
struct ForeachInfo {
  c10::OperatorHandle single;   /* the in-place op run per element */
  size_t n_args;                /* its argument count */
};
std::unordered_map<const c10::FunctionSchema *, ForeachInfo> g_foreach;

void foreach_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  auto it = g_foreach.find(&op.schema());
  TORCH_CHECK(it != g_foreach.end(), "lazytpu: internal: no single op for ", op.operator_name());
  const ForeachInfo &fi = it->second;
  size_t n = op.schema().arguments().size();
  std::vector<c10::IValue> args(stack->end() - n, stack->end());
  torch::jit::drop(*stack, n);
  size_t len = args[0].toListRef().size();
  for (size_t j = 1; j < n; j++)
    if (args[j].isList())
      TORCH_CHECK(args[j].toListRef().size() == len,
                  "Tensor lists must have the same number of tensors, got ", len, " and ",
                  args[j].toListRef().size());
  const auto &sargs = fi.single.schema().arguments();
  for (size_t i = 0; i < len; i++) {
    torch::jit::Stack st;
    st.reserve(fi.n_args);
    for (size_t j = 0; j < n; j++)
      st.push_back(args[j].isList() ? args[j].toListRef()[i] : args[j]);
    for (size_t j = n; j < fi.n_args; j++) st.push_back(*sargs[j].default_value());
    inplace_kernel(fi.single, &st);
  }
}

/* foreach op -> single-tensor in-place op (both must exist; the single op
 * must be one of kInplace and take the foreach op's arguments, element-wise,
 * plus trailing defaults) */
const char *const kForeach[][2] = {
    {"_foreach_add_.Scalar", "add_.Scalar"}, {"_foreach_add_.List", "add_.Tensor"},
    {"_foreach_add_.ScalarList", "add_.Scalar"}, {"_foreach_add_.Tensor", "add_.Tensor"},
    {"_foreach_sub_.Scalar", "sub_.Scalar"}, {"_foreach_sub_.List", "sub_.Tensor"},
    {"_foreach_sub_.ScalarList", "sub_.Scalar"},
    {"_foreach_mul_.Scalar", "mul_.Scalar"}, {"_foreach_mul_.List", "mul_.Tensor"},
    {"_foreach_mul_.ScalarList", "mul_.Scalar"}, {"_foreach_mul_.Tensor", "mul_.Tensor"},
    {"_foreach_div_.Scalar", "div_.Scalar"}, {"_foreach_div_.List", "div_.Tensor"},
    {"_foreach_div_.ScalarList", "div_.Scalar"}, {"_foreach_div_.Tensor", "div_.Tensor"},
    {"_foreach_addcmul_.Scalar", "addcmul_"}, {"_foreach_addcmul_.ScalarList", "addcmul_"},
    {"_foreach_addcdiv_.Scalar", "addcdiv_"}, {"_foreach_addcdiv_.ScalarList", "addcdiv_"},
    {"_foreach_lerp_.List", "lerp_.Tensor"}, {"_foreach_lerp_.Scalar", "lerp_.Scalar"},
    {"_foreach_lerp_.ScalarList", "lerp_.Scalar"},
    {"_foreach_zero_", "zero_"}, {"_foreach_copy_", "copy_"}, {"_foreach_sqrt_", "sqrt_"},
};

std::pair<std::string, std::string> split_name(const std::string &s) {
  auto dot = s.find('.');
  return {"aten::" + s.substr(0, dot), dot == std::string::npos ? "" : s.substr(dot + 1)};
}

/* The foreach op's arguments map onto the single op's: a list onto its
 * element type, anything else onto the same type; the single op's extra
 * trailing arguments have defaults. */
bool foreach_matches(const c10::FunctionSchema &f, const c10::FunctionSchema &s) {
  const auto &fa = f.arguments(), &sa = s.arguments();
  if (fa.size() > sa.size()) return false;
  for (size_t j = 0; j < fa.size(); j++) {
    c10::TypePtr ft = fa[j].type(), st = sa[j].type();
    if (auto l = ft->cast<c10::ListType>()) ft = l->getElementType();
    if (ft->kind() != st->kind()) return false;
  }
  for (size_t j = fa.size(); j < sa.size(); j++)
    if (!sa[j].default_value()) return false;
  return true;
}

/* _to_copy on the Functionalize key. PyTorch's kernel wraps the result in a
 * FunctionalTensorWrapper only for the XLA and Lazy devices when the
 * Functionalize key is not in TLS (device_opted_into_functionalization), so
 * t.to(torch.bfloat16) of a lazytpu tensor came back unwrapped and its first
 * view reached the device. Same logic, with lazytpu's device opted in. */
at::Tensor to_copy_functionalize(const at::Tensor &self, std::optional<at::ScalarType> dtype,
                                 std::optional<at::Layout> layout,
                                 std::optional<at::Device> device,
                                 std::optional<bool> pin_memory, bool non_blocking,
                                 std::optional<at::MemoryFormat> memory_format) {
  at::Tensor self_ = self;
  if (at::functionalization::impl::isFunctionalTensor(self)) {
    at::functionalization::impl::sync(self);
    self_ = at::functionalization::impl::from_functional_tensor(self);
  }
  at::Tensor out;
  {
    at::AutoDispatchSkipFunctionalize guard;
    out = at::_ops::_to_copy::call(self_, dtype, layout, device, pin_memory, non_blocking,
                                   memory_format);
  }
  if (!c10::impl::tls_local_dispatch_key_set().included_.has(c10::DispatchKey::Functionalize)) {
    c10::DeviceType t = device ? device->type() : self.device().type();
    if (t != c10::DeviceType::XLA && t != c10::DeviceType::Lazy &&
        t != c10::DeviceType::PrivateUse1)
      return out;
  }
  return at::functionalization::impl::to_functional_tensor(out);
}

/* in-place ops whose functional variant we run natively */
const char *const kInplace[] = {
    "add_.Tensor", "add_.Scalar", "sub_.Tensor", "sub_.Scalar", "mul_.Tensor", "mul_.Scalar",
    "div_.Tensor", "div_.Scalar", "addcmul_", "addcdiv_", "lerp_.Scalar", "lerp_.Tensor",
    "zero_", "fill_.Scalar", "fill_.Tensor", "clamp_", "clamp_min_", "clamp_max_", "relu_",
    "sqrt_", "neg_", "exp_", "sigmoid_", "tanh_", "masked_fill_.Scalar", "threshold_",
    "leaky_relu_", "hardtanh_", "pow_.Scalar=Tensor_Scalar", "pow_.Tensor=Tensor_Tensor",
    "abs_", "reciprocal_", "rsqrt_",
    "bernoulli_.float", "uniform_", "index_put_", "copy_",
    /* random fills: here so that an SPMD tensor keeps its sharding (keep_sharding) */
    "normal_>normal_functional", "random_", "random_.from", "random_.to", "exponential_",
    "log_normal_", "cauchy_", "geometric_", "bernoulli_.Tensor",
};

/* The functional op takes the in-place op's arguments in the same order and
 * of the same types (pow.Scalar is (Scalar self, Tensor exponent): not the
 * twin of pow_.Scalar, whose functional op is pow.Tensor_Scalar). */
bool same_arguments(const c10::FunctionSchema &ip, const c10::FunctionSchema &fn) {
  const auto &a = ip.arguments(), &b = fn.arguments();
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++)
    if (a[i].type()->str() != b[i].type()->str()) return false;
  return true;
}

/* polygamma_(self, n) has no functional twin with its argument order
 * (polygamma(n, self)), so PyTorch's functionalization refuses it. */
at::Tensor &polygamma_functionalize(at::Tensor &self, int64_t n) {
  at::Tensor r = at::polygamma(n, self);
  self.copy_(r);
  return self;
}

}  // namespace

std::vector<std::string> register_inplace_unboxed(torch::Library &lib);  /* functionalize_inplace.cpp */

/* Called once from the module init (after every static registration). */
void register_functional_inplace() {
  static torch::Library *lib = nullptr;
  if (lib) return;
  SilentWarnings silent;
  c10::WarningUtils::WarningHandlerGuard guard(&silent);  /* "overriding a kernel" */
  lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize,
                           __FILE__, __LINE__);
  auto &d = c10::Dispatcher::singleton();
  /* the hottest ones unboxed (functionalize_inplace.cpp); the loops below
   * still record every pair, for the boxed foreach kernels */
  std::vector<std::string> unboxed = register_inplace_unboxed(*lib);
  auto is_unboxed = [&](const std::string &full) {
    for (const auto &u : unboxed)
      if (u == full) return true;
    return false;
  };
  for (const char *entry : kInplace) {
    /* "op_.overload", "op_.overload=functional_overload" or
     * "op_.overload>functional_op.overload" (another name) */
    std::string s(entry), fov, fop;
    auto eq = s.find('=');
    if (eq != std::string::npos) {
      fov = s.substr(eq + 1);
      s = s.substr(0, eq);
    }
    auto gt = s.find('>');
    if (gt != std::string::npos) {
      fop = s.substr(gt + 1);
      s = s.substr(0, gt);
    }
    auto dot = s.find('.');
    std::string name = "aten::" + s.substr(0, dot);
    std::string ov = dot == std::string::npos ? "" : s.substr(dot + 1);
    std::string fname = name.substr(0, name.size() - 1);
    if (gt != std::string::npos) {
      auto fdot = fop.find('.');
      fname = "aten::" + fop.substr(0, fdot);
      fov = fdot == std::string::npos ? "" : fop.substr(fdot + 1);
    }
    auto ip = d.findSchema({name, ov});
    auto fn = d.findSchema({fname, eq == std::string::npos && gt == std::string::npos ? ov : fov});
    if (!ip || !fn || !same_arguments(ip->schema(), fn->schema())) continue;
    const char *full = s.c_str();
    g_functional.emplace(&ip->schema(), *fn);
    if (!is_unboxed(s))
      lib->impl(full, torch::CppFunction::makeFromBoxedFunction<&inplace_kernel>());
  }
  for (const auto &pair : kForeach) {
    auto f = split_name(pair[0]), one = split_name(pair[1]);
    auto fop = d.findSchema({f.first, f.second});
    auto sop = d.findSchema({one.first, one.second});
    if (!fop || !sop || !g_functional.count(&sop->schema())) continue;
    if (!foreach_matches(fop->schema(), sop->schema())) continue;
    g_foreach.emplace(&fop->schema(), ForeachInfo{*sop, sop->schema().arguments().size()});
    if (!is_unboxed(pair[0]))
      lib->impl(pair[0], torch::CppFunction::makeFromBoxedFunction<&foreach_kernel>());
  }
  lib->impl("_to_copy", TORCH_FN(to_copy_functionalize));
  lib->impl("polygamma_", TORCH_FN(polygamma_functionalize));
}

}  // namespace lazytpu
