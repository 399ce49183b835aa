/*
 * backend/lt_guard.h — when a device kernel cannot run natively.
 *
 * Unsupported: a kernel met a case the device does not compute (a dtype the
 * core's rules refuse, e.g. complex arithmetic; an option no lowering
 * covers). Thrown before the kernel changed anything. Every kernel
 * registered with reg() (lt_register.h) is wrapped by Guarded, which catches
 * it and runs the op on the counted CPU fallback instead, so such a case is
 * slower but never an error.
 *
 * Views of raw device tensors: aten::as_strided / view / _reshape_alias /
 * alias are only reached below functionalization, by CompositeExplicit-
 * Autograd kernels (composite.cpp) and by Python kernels of custom ops,
 * which get raw tensors. They return copies marked view_copy. Reading them
 * is right as long as their base is not written meanwhile; writes that
 * would break aliasing throw ViewWrite instead of going wrong silently: a
 * write into a view copy, and (inside a composite kernel) a write into a
 * tensor a view copy was taken of. composite.cpp then runs the op
 * functionalized (its views become *_copy ops, writes *_scatter ops), or as
 * a last resort on the CPU fallback.
 */
#ifndef LT_GUARD_H
#define LT_GUARD_H

#include "lazytpu.h"

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/CompileTimeFunctionPointer.h>
#include <c10/util/Exception.h>

#include <string>
#include <utility>

namespace lazytpu {

struct Unsupported : public c10::Error {
  using c10::Error::Error;
};
/* A write that a view copy cannot honour (see above). */
struct ViewWrite : public c10::Error {
  using c10::Error::Error;
};

/* composite.cpp: notes that a view copy of `base` was made (tracked while a
 * composite kernel runs on this thread), and whether `t` is such a base. */
void note_view_base(lt_tensor *base);
bool is_view_base(lt_tensor *t);

/* Throws Unsupported with a message (shown only if the fallback fails too). */
[[noreturn]] void throw_unsupported(const std::string &what);

/* fallback.cpp: the boxed CPU fallback (counted as aten::<op>). */
void cpu_fallback_boxed(const c10::OperatorHandle &op, torch::jit::Stack *stack);

/* > 0 while a Guarded kernel runs its op on the CPU fallback on this thread:
 * an Unsupported met there (moving operands) is an error, not a loop. */
extern thread_local int t_guard_fallback;

/* The kernel FnPtr (a TORCH_FN) that falls back to the CPU on Unsupported. */
template <class FnPtr, class Sig = typename FnPtr::FuncType>
struct Guarded;

template <class FnPtr, class Ret, class... Args>
struct Guarded<FnPtr, Ret(Args...)> {
  c10::OperatorHandle op;
  Ret operator()(Args... args) const {
    try {
      return (*FnPtr::func_ptr())(args...);
    } catch (const Unsupported &) {
      if (t_guard_fallback) throw;
      struct Depth {
        Depth() { t_guard_fallback++; }
        ~Depth() { t_guard_fallback--; }
      } depth;
      return c10::impl::BoxedKernelWrapper<Ret(Args...)>::call(
          c10::BoxedKernel::makeFromFunction<&cpu_fallback_boxed>(), op,
          c10::DispatchKeySet(), args...);
    }
  }
};

template <class T>
struct is_ctfp : std::false_type {};
template <class F, F *fn>
struct is_ctfp<c10::CompileTimeFunctionPointer<F, fn>> : std::true_type {};

/* f wrapped in Guarded when it is a TORCH_FN; other kernels unchanged.
 * `full` is "op" or "op.overload"; throws c10::Error for an unknown op. */
template <class F>
auto guarded(const std::string &full, F &&f) {
  using D = std::decay_t<F>;
  if constexpr (is_ctfp<D>::value) {
    auto dot = full.find('.');
    std::string name = "aten::" + full.substr(0, dot);
    std::string ov = dot == std::string::npos ? "" : full.substr(dot + 1);
    return Guarded<D>{c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), ov.c_str())};
  } else {
    return std::forward<F>(f);
  }
}

}  // namespace lazytpu

#endif
