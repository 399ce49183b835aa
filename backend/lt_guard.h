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
 * ViewReached: aten::as_strided / view / _reshape_alias / alias met a raw
 * device tensor (only CompositeExplicitAutograd kernels do that; see
 * composite.cpp, which catches it and functionalizes the op). Inside such a
 * functionalized composite, CompositeImplicitAutograd ops still decompose
 * on raw tensors (the Functionalize fallback unwraps first): their views are
 * then copies, and a write into one throws ViewWrite (the op then runs on
 * the CPU fallback), so no write is ever lost.
 */
#ifndef LT_GUARD_H
#define LT_GUARD_H

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
struct ViewReached : public c10::Error {
  using c10::Error::Error;
};
/* An in-place write into a copy that stands in for a view (composite.cpp
 * then runs the op on the CPU fallback). */
struct ViewWrite : public c10::Error {
  using c10::Error::Error;
};

/* composite.cpp: > 0 while a composite kernel runs functionalized on this
 * thread; view ops on raw tensors then return copies (marked view_copy). */
int composite_depth();

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
