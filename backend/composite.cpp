/*
 * backend/composite.cpp — aten's CompositeExplicitAutograd kernels on the
 * device.
 *
 * Functionalization unwraps device tensors before our PrivateUse1 kernels,
 * so an aten op without a lazytpu kernel runs its CompositeExplicitAutograd
 * kernel on raw device tensors. Those kernels may use views and in-place
 * writes through views internally (constant_pad_nd: empty + fill_ + narrow +
 * copy_; block_diag, diag_embed, masked_scatter, ...), which a storage-less
 * device cannot alias: its views are copies, and writes that need aliasing
 * throw ViewWrite (lt_guard.h).
 *
 * For every such op (functional: no alias annotations; at least one tensor
 * argument) a boxed kernel is registered at module load that runs the
 * composite kernel directly first and, once it has reached a view, every
 * later call (once it threw ViewWrite) the way torch_xla does it (functionalize_aten_op): inputs
 * wrapped into FunctionalTensorWrappers, the composite kernel called with
 * the Functionalize key re-enabled (its views become *_copy ops, its writes
 * through views *_scatter ops), outputs synced and unwrapped. The decision
 * is remembered per op: ops that never write through a view pay nothing.
 * An op whose functionalized run still throws ViewWrite (CompositeImplicit-
 * Autograd ops decompose on raw tensors below the Functionalize fallback)
 * or reaches itself again runs on the counted CPU fallback.
 */
#include "lt_aten.h"
#include "lt_guard.h"
#include "lt_register.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>

namespace lazytpu {
namespace {

/* per op: 1 once the direct composite kernel reached a view */
std::mutex g_mu;
std::unordered_map<std::string, std::atomic<int> *> g_needs_wrap;

std::atomic<int> *flag_of(const c10::OperatorHandle &op) {
  const c10::OperatorName &n = op.operator_name();
  std::string key = n.name + "." + n.overload_name;
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_needs_wrap.find(key);
  if (it != g_needs_wrap.end()) return it->second;
  auto *f = new std::atomic<int>(0);
  g_needs_wrap.emplace(key, f);
  return f;
}

void call_composite(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  op.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd, *stack);
}

at::Tensor wrap_arg(const at::Tensor &t) {
  if (!t.defined() || at::functionalization::impl::isFunctionalTensor(t)) return t;
  return at::functionalization::impl::to_functional_tensor(t);
}

/* The unwrapped value of output t; a new device tensor when it is the same
 * lt_tensor as one of the inputs (a functional op must not alias them). */
at::Tensor unwrap_out(const at::Tensor &t, const std::vector<lt_tensor *> &inputs) {
  if (!t.defined() || !at::functionalization::impl::isFunctionalTensor(t)) return t;
  at::functionalization::impl::sync(t);
  at::Tensor v = at::functionalization::impl::from_functional_tensor(t);
  LtTensorImpl *vi = impl_of(v);
  if (!vi) return v;
  for (lt_tensor *x : inputs)
    if (x == vi->handle()) return wrap(fresh(Ref::borrow(x), {x}));
  return v;
}

/* bases of the view copies made by the composite kernels running on this
 * thread (truncated when each returns) */
thread_local std::vector<lt_tensor *> t_view_bases;
thread_local int t_active_kernels = 0;

struct ViewScope {
  size_t mark;
  ViewScope() : mark(t_view_bases.size()) { t_active_kernels++; }
  ~ViewScope() { t_view_bases.resize(mark); t_active_kernels--; }
};

void call_functionalized(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const auto &schema = op.schema();
  size_t nargs = schema.arguments().size();
  size_t base = stack->size() - nargs;
  std::vector<lt_tensor *> inputs;
  auto note = [&](const at::Tensor &t) {
    LtTensorImpl *i = impl_of(t);
    if (i) inputs.push_back(i->handle());
  };
  for (size_t i = base; i < stack->size(); i++) {
    c10::IValue &v = (*stack)[i];
    if (v.isTensor()) {
      note(v.toTensor());
      v = c10::IValue(wrap_arg(v.toTensor()));
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> ts;
      for (const at::Tensor &t : v.toTensorList()) { note(t); ts.push_back(wrap_arg(t)); }
      v = c10::IValue(c10::List<at::Tensor>(ts));
    } else if (v.isOptionalTensorList()) {
      c10::List<c10::optional<at::Tensor>> out;
      for (const c10::optional<at::Tensor> &t : v.toOptionalTensorList()) {
        if (t && t->defined()) { note(*t); out.push_back(wrap_arg(*t)); }
        else out.push_back(t);
      }
      v = c10::IValue(out);
    }
  }
  {
    /* re-enter functionalization (we run below it: the key is excluded) */
    auto cur = c10::impl::tls_local_dispatch_key_set();
    c10::impl::PODLocalDispatchKeySet tls;
    tls.set_included(cur.included_);
    tls.set_excluded(cur.excluded_.remove(c10::DispatchKey::Functionalize));
    c10::impl::ForceDispatchKeyGuard guard(tls);
    ViewScope views;
    call_composite(op, stack);
  }
  size_t nret = schema.returns().size();
  size_t rbase = stack->size() - nret;
  for (size_t i = rbase; i < stack->size(); i++) {
    c10::IValue &v = (*stack)[i];
    if (v.isTensor()) {
      v = c10::IValue(unwrap_out(v.toTensor(), inputs));
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> ts;
      for (const at::Tensor &t : v.toTensorList()) ts.push_back(unwrap_out(t, inputs));
      v = c10::IValue(c10::List<at::Tensor>(ts));
    }
  }
}

/* Ops being run functionalized on this thread (a composite kernel that
 * reaches its own op again, e.g. masked_scatter = clone + masked_scatter_,
 * whose functionalization calls masked_scatter: the inner call falls back). */
thread_local std::vector<const c10::FunctionSchema *> t_active;

struct Active {
  explicit Active(const c10::FunctionSchema *s) { t_active.push_back(s); }
  ~Active() { t_active.pop_back(); }
};

enum { DIRECT = 0, FUNCTIONALIZED = 1, CPU = 2 };

void composite_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const c10::FunctionSchema *sch = &op.schema();
  for (const c10::FunctionSchema *a : t_active)
    if (a == sch) { cpu_fallback_boxed(op, stack); return; }
  std::atomic<int> *state = flag_of(op);
  size_t nargs = sch->arguments().size();
  size_t base = stack->size() - nargs;
  std::vector<c10::IValue> saved(stack->begin() + base, stack->end());
  auto restore = [&]() {
    stack->resize(base);
    stack->insert(stack->end(), saved.begin(), saved.end());
  };
  int s = state->load(std::memory_order_relaxed);
  if (s == DIRECT) {
    try {
      ViewScope views;
      call_composite(op, stack);
      return;
    } catch (const ViewWrite &) {
      state->store(s = FUNCTIONALIZED, std::memory_order_relaxed);
      restore();
    }
  }
  if (s == FUNCTIONALIZED) {
    try {
      Active a(sch);
      call_functionalized(op, stack);
      return;
    } catch (const ViewWrite &) {
      state->store(s = CPU, std::memory_order_relaxed);
      restore();
    }
  }
  cpu_fallback_boxed(op, stack);
}

bool has_tensor_arg(const c10::FunctionSchema &s) {
  for (const auto &a : s.arguments()) {
    auto k = a.type()->kind();
    if (k == c10::TypeKind::TensorType) return true;
    if (k == c10::TypeKind::ListType || k == c10::TypeKind::OptionalType) {
      std::string t = a.type()->str();
      if (t.find("Tensor") != std::string::npos) return true;
    }
  }
  return false;
}

}  // namespace

void note_view_base(lt_tensor *base) {
  if (t_active_kernels > 0) t_view_bases.push_back(base);
}

bool is_view_base(lt_tensor *t) {
  for (lt_tensor *b : t_view_bases)
    if (b == t) return true;
  return false;
}

/* Registers composite_kernel for every functional aten op that would run its
 * CompositeExplicitAutograd kernel on the device. Called once, after every
 * static registration (lazytpu_register_late). */
void register_composite_functionalized() {
  static torch::Library *lib = nullptr;
  if (lib) return;
  lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                           __FILE__, __LINE__);
  auto &d = c10::Dispatcher::singleton();
  for (const c10::OperatorName &name : d.getAllOpNames()) {
    if (name.name.compare(0, 6, "aten::") != 0) continue;
    auto op = d.findOp(name);
    if (!op || !op->hasSchema()) continue;
    if (op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) continue;
    if (op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional))
      continue;
    const c10::FunctionSchema &s = op->schema();
    if (s.is_mutable() || !has_tensor_arg(s)) continue;
    bool alias = false;
    for (const auto &r : s.returns()) alias |= r.alias_info() != nullptr;
    for (const auto &a : s.arguments()) alias |= a.alias_info() != nullptr;
    if (alias) continue;
    std::string full = name.name.substr(6);
    if (!name.overload_name.empty()) full += "." + name.overload_name;
    /* xla tensors (compat mode) reach the same composite kernels on XLA */
    if (xla_compat())
      mirror_library("aten", c10::DispatchKey::XLA)
          .impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&composite_kernel>());
    lib->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&composite_kernel>());
  }
}

}  // namespace lazytpu
