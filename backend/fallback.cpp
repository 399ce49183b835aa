/*
 * backend/fallback.cpp — the boxed CPU fallback for every aten op without a
 * native lazytpu kernel.
 *
 * The op's device inputs are read back to the host (a value-read sync), the
 * op runs on the CPU and results are copied back to the device. Each call
 * counts `aten::<op>` and is recorded with its time and the user's Python
 * frame by lt_fallback_record (the report's "fallback" section: calls, total
 * time, first frames, a hint), and, with LAZYTPU_TRACE, as a trace event of
 * category "fallback" on the host thread. Under the execution guard
 * (lt_set_no_execution: a step function compiled with full_graph=True) it
 * raises instead, naming the op and the frame.
 */
#include "lt_aten.h"

#include <ATen/native/CPUFallback.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "lt_shim.h"
#include "lt_register.h"

#include <string>

namespace lazytpu {
namespace {

void lt_fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const c10::OperatorName &name = op.schema().operator_name();
  std::string frame = current_caller();   /* rare event: the Python frame */
  lt_set_caller(frame.empty() ? nullptr : frame.c_str());
  struct ClearCaller {
    ~ClearCaller() { lt_set_caller(nullptr); }  /* also when the op throws */
  } clear_caller;
  /* a function traced as one graph (full_graph=True) may not run anything */
  check(lt_execution_check((name.name + " has no lazytpu kernel and would run on the "
                            "CPU, its device inputs read back to the host").c_str()));
  lt_counter_inc_name(name.name.c_str(), 1);  /* "aten::add" */
  int64_t t0 = lt_now_ns();
  /* cpu_fallback moves Tensor and Tensor[] arguments to the CPU but not
   * Tensor?[] (index, index_put indices): do those here. */
  size_t nargs = op.schema().arguments().size();
  for (size_t i = stack->size() - nargs; i < stack->size(); i++) {
    c10::IValue &iv = (*stack)[i];
    if (!iv.isOptionalTensorList()) continue;
    c10::List<c10::optional<at::Tensor>> in = iv.toOptionalTensorList(), out;
    for (size_t k = 0; k < in.size(); k++) {
      c10::optional<at::Tensor> t = in.get(k);
      if (t && t->defined() && is_lt_device_type(t->device().type()))
        t = t->to(c10::Device(c10::DeviceType::CPU));
      out.push_back(t);
    }
    iv = c10::IValue(out);
  }
  at::native::cpu_fallback(op, stack);
  int64_t ns = lt_now_ns() - t0;
  lt_fallback_record(name.name.c_str(), ns, frame.empty() ? nullptr : frame.c_str());
  if (lt_trace_enabled()) lt_trace_event(name.name.c_str(), "fallback", t0, ns, LT_TRACE_TID_HOST);
}

}  // namespace

/* The same fallback in the form at::native::call_fallback_fn expects, for
 * kernels that handle only some cases natively (e.g. transposed conv). */
void cpu_fallback_boxed(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  lt_fallback(op, stack);
}

/* Structured aten ops without a lazytpu kernel do not reach the boxed
 * fallback by themselves: PrivateUse1 gets their CompositeExplicitAutograd-
 * NonFunctional kernel, which runs the op's meta function on device tensors
 * (TensorIterator restrides them with as_strided, which device tensors
 * refuse) and then calls the .out variant. Route them straight to the CPU
 * fallback instead. Runs once, after every static registration is done. */
void register_late_fallbacks_on(c10::DispatchKey key) {
  torch::Library &lib = mirror_library("aten", key);
  auto &d = c10::Dispatcher::singleton();
  for (const c10::OperatorName &name : d.getAllOpNames()) {
    if (name.name.compare(0, 6, "aten::") != 0) continue;
    auto op = d.findOp(name);
    if (!op || !op->hasSchema()) continue;
    if (op->hasKernelForDispatchKey(key)) continue;
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional))
      continue;
    std::string full = name.name.substr(6);
    if (!name.overload_name.empty()) full += "." + name.overload_name;
    lib.impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&lt_fallback>());
  }
}

void register_late_fallbacks() {
  static bool done = false;
  if (done) return;
  done = true;
  register_late_fallbacks_on(c10::DispatchKey::PrivateUse1);
  if (xla_compat()) {
    mirror_library("_", c10::DispatchKey::XLA)
        .fallback(torch::CppFunction::makeFromBoxedFunction<&lt_fallback>());
    register_late_fallbacks_on(c10::DispatchKey::XLA);
  }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&lt_fallback>());
}

}  // namespace lazytpu

namespace lazytpu {
void register_functional_inplace();  /* functionalize.cpp */
void register_functional_fast();  /* functionalize_fast.cpp */
void register_composite_functionalized();  /* composite.cpp */
void register_out_variants();  /* out_ops.cpp */

static std::string &registration_log() {
  static std::string log;
  return log;
}
void note_registration_error(const std::string &msg) {
  registration_log() += msg;
  registration_log() += "\n";
}
std::string registration_errors() { return registration_log(); }
}  // namespace lazytpu

std::string lazytpu_registration_errors(void) { return lazytpu::registration_errors(); }

void lazytpu_register_late(void) {
  /* first: a functional kernel it forwards to must be a device kernel, not
   * one of the composite or fallback kernels registered below (a composite
   * kernel may call the out= form again: endless recursion) */
  lazytpu::register_out_variants();
  lazytpu::register_late_fallbacks();
  lazytpu::register_functional_inplace();
  lazytpu::register_functional_fast();
  lazytpu::register_composite_functionalized();
}
