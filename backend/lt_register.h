/*
 * backend/lt_register.h — registering shim kernels on PrivateUse1.
 *
 * reg() skips aten ops that are CompositeImplicitAutograd (square, matmul,
 * where.ScalarOther, ...): a direct PrivateUse1 kernel would stop autograd
 * from decomposing them, and their outputs would silently lose grad_fn. Such
 * ops reach us through their decomposition instead. `force` registers anyway,
 * for ops only functionalization calls below autograd (copy, bernoulli.p).
 */
#ifndef LT_REGISTER_H
#define LT_REGISTER_H

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>
#include <utility>

namespace lazytpu {

/* 1 when aten::<name> (name may be "op.overload") is CompositeImplicitAutograd. */
inline bool is_composite_implicit(const std::string &full) {
  auto dot = full.find('.');
  std::string name = "aten::" + full.substr(0, dot);
  std::string ov = dot == std::string::npos ? "" : full.substr(dot + 1);
  auto op = c10::Dispatcher::singleton().findOp({name, ov});
  return op && op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
}

template <class F>
void reg(torch::Library &m, const std::string &name, F &&f, bool force = false) {
  if (!force && is_composite_implicit(name)) return;
  m.impl(name.c_str(), std::forward<F>(f));
}

}  // namespace lazytpu

#endif
