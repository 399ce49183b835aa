/*
 * backend/functionalize_util.h — what the unboxed Functionalize kernels
 * (functionalize_fast.cpp, functionalize_inplace.cpp) do with a functional
 * tensor argument, as PyTorch's boxed fallback does it.
 */
#ifndef LT_FUNCTIONALIZE_UTIL_H
#define LT_FUNCTIONALIZE_UTIL_H

#include <ATen/FunctionalTensorWrapper.h>

namespace lazytpu {

/* t is a functional wrapper (has the Functionalize key). */
inline bool is_functional(const at::Tensor &t) {
  return t.defined() && t.unsafeGetTensorImpl()->key_set().has(c10::DispatchKey::Functionalize);
}

/* The value below functionalization of a functional tensor t, its wrapper
 * synced first (pending updates of its storage applied). */
inline const at::Tensor &synced_value(const at::Tensor &t) {
  auto *w = at::functionalization::impl::unsafeGetFunctionalWrapper(t);
  w->sync_();
  return w->value();
}

}  // namespace lazytpu

#endif
