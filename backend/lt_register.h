/*
 * backend/lt_register.h — registering shim kernels on PrivateUse1 (and, in
 * torch_xla compatibility mode, on XLA: see xla_compat()).
 *
 * reg() skips aten ops that are CompositeImplicitAutograd (square, matmul,
 * where.ScalarOther, ...): a direct PrivateUse1 kernel would stop autograd
 * from decomposing them, and their outputs would silently lose grad_fn. Such
 * ops reach us through their decomposition instead. `force` registers anyway,
 * for ops only functionalization calls below autograd (copy, bernoulli.p).
 * Kernels given as TORCH_FN run on the CPU fallback when they throw
 * Unsupported (lt_guard.h).
 */
#ifndef LT_REGISTER_H
#define LT_REGISTER_H

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>
#include <utility>

#include "lt_guard.h"

namespace lazytpu {

/* 1 when aten::<name> (name may be "op.overload") decomposes for every
 * backend (CompositeImplicitAutograd only). */
inline bool is_composite_implicit(const std::string &full) {
  auto dot = full.find('.');
  std::string name = "aten::" + full.substr(0, dot);
  std::string ov = dot == std::string::npos ? "" : full.substr(dot + 1);
  auto op = c10::Dispatcher::singleton().findOp({name, ov});
  if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd))
    return false;
  /* An op with an explicit kernel too (silu_backward since 2.x) never
   * decomposes for a backend: it would reach the CPU fallback instead. */
  return !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
         !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
}

/* 1 when this process also serves torch_xla's "xla" device
 * (LAZYTPU_XLA_COMPAT=1, set by lazytpu-run / python -m lazytpu for torch_xla
 * scripts): device tensors are then XLA tensors and every kernel is
 * registered on the XLA keys too. Read once (runtime.cpp). */
bool xla_compat();
/* The IMPL library of namespace ns ("aten", "lazytpu", "_" for fallbacks) on
 * dispatch key k, created on first use and kept for the process. Used to
 * mirror PrivateUse1 registrations onto the XLA keys in compat mode. */
torch::Library &mirror_library(const char *ns, c10::DispatchKey k);

/* Registration failures (a kernel whose C++ signature no longer matches the
 * aten schema, an op that was renamed) are collected instead of aborting the
 * process during static initialisation; the module init raises them all at
 * once as an ImportError (see registration_errors()). */
void note_registration_error(const std::string &msg);
/* Every failure noted so far, one per line ("" when none). */
std::string registration_errors();

template <class F>
void reg(torch::Library &m, const std::string &name, F &&f, bool force = false) {
  if (!force && is_composite_implicit(name)) return;
  try {
    auto g = guarded(name, std::forward<F>(f));
    if (xla_compat()) mirror_library("aten", c10::DispatchKey::XLA).impl(name.c_str(), g);
    m.impl(name.c_str(), std::move(g));
  } catch (const c10::Error &e) {
    note_registration_error("aten::" + name + ": " + e.what_without_backtrace());
  }
}

/* reg() for lazytpu's own ops (namespace lazytpu) on PrivateUse1 (+ XLA). */
template <class F>
void reg_own(torch::Library &m, const char *name, F f) {
  if (xla_compat()) mirror_library("lazytpu", c10::DispatchKey::XLA).impl(name, f);
  m.impl(name, f);
}
/* An aten kernel on the autograd key of m (AutogradPrivateUse1, + AutogradXLA
 * in compatibility mode): a composite of differentiable ops, or a kernel that
 * handles autograd itself. A registration error is noted, not thrown. */
template <class F>
void reg_autograd(torch::Library &m, const char *name, F f) {
  try {
    if (xla_compat()) mirror_library("aten", c10::DispatchKey::AutogradXLA).impl(name, f);
    m.impl(name, f);
  } catch (const c10::Error &e) {
    note_registration_error(std::string("aten::") + name + ": " + e.what_without_backtrace());
  }
}
/* A fallthrough for op `name` on the autograd key of m (+ AutogradXLA). */
inline void reg_autograd_fallthrough(torch::Library &m, const char *name) {
  if (xla_compat())
    mirror_library("lazytpu", c10::DispatchKey::AutogradXLA)
        .impl(name, torch::CppFunction::makeFallthrough());
  m.impl(name, torch::CppFunction::makeFallthrough());
}

/* A warning handler that drops everything: registrations that override a
 * kernel on purpose install it around themselves ("overriding a previously
 * registered kernel" would otherwise print at every import). */
struct SilentWarnings : c10::WarningHandler {
  void process(const c10::Warning &) override {}
};

}  // namespace lazytpu

#endif
