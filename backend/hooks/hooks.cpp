/*
 * backend/hooks/hooks.cpp — the PrivateUse1HooksInterface, the pinned-memory
 * allocator and the device guard, registered when the library loads (see
 * lt_hooks.h for why this is a library of its own).
 *
 * Before the engine attaches, nothing here touches it: the core count comes
 * from LAZYTPU_NUM_CORES, init() does nothing, isAvailable() is false (the
 * Python device module answers the same: lazytpu becomes the available
 * accelerator of a process once the process uses it).
 */
#include "lt_hooks.h"
#include "rng.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_set>

extern "C" int lt_hooks_env_num_cores(void);   /* hooks_options.c */

namespace lazytpu {

/* ------------------------------------------------------------ core count */

namespace {
std::atomic<const hooks_engine *> g_engine{nullptr};

/* LAZYTPU_NUM_CORES through the options table (hooks_options.c) */
int env_num_cores() { return lt_hooks_env_num_cores(); }
}  // namespace

void hooks_attach_engine(const hooks_engine *e) { g_engine.store(e); }

bool hooks_engine_attached(void) { return g_engine.load() != nullptr; }

int hooks_num_cores(void) {
  const hooks_engine *e = g_engine.load();
  if (e) {
    int n = e->num_cores();
    if (n > 0) return n;
  }
  return env_num_cores();
}

/* ---------------------------------------------------------- current core */

namespace {
thread_local c10::DeviceIndex tls_device = 0;
}

int current_core(void) { return tls_device; }

void set_current_core(int idx) {
  if (idx < 0) return;
  int n = hooks_num_cores();
  TORCH_CHECK(idx < n, "lazytpu: device index ", idx, " out of range: there are ", n,
              " cores (lazytpu:0..", n - 1, ")");
  tls_device = (c10::DeviceIndex)idx;
}

/* --------------------------------------------------------- pinned memory */

namespace {

/* Host memory from c10's CPU allocator, remembered so that isPinnedPtr says
 * yes exactly for these blocks (Tensor.is_pinned() asks with the storage's
 * base pointer). */
std::mutex g_pinned_mu;
std::unordered_set<void *> *g_pinned = new std::unordered_set<void *>;  /* never freed: used at exit */

void pinned_free(void *p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> g(g_pinned_mu);
    g_pinned->erase(p);
  }
  c10::free_cpu(p);
}

bool is_pinned(const void *p) {
  std::lock_guard<std::mutex> g(g_pinned_mu);
  return g_pinned->count(const_cast<void *>(p)) != 0;
}

struct PinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void *p = n ? c10::alloc_cpu(n) : nullptr;
    if (p) {
      std::lock_guard<std::mutex> g(g_pinned_mu);
      g_pinned->insert(p);
    }
    return {p, p, &pinned_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_free; }
  void copy_data(void *dest, const void *src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

PinnedAllocator g_pinned_allocator;

/* ----------------------------------------------------------------- hooks */

struct LtHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  /* available once the process uses the device (the engine attached) */
  bool isAvailable() const override { return hooks_engine_attached(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override {
    const hooks_engine *e = g_engine.load();
    if (e) e->init();
  }
  c10::DeviceIndex deviceCount() const override {
    return (c10::DeviceIndex)hooks_num_cores();
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_core(); }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_current_core(d); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    c10::DeviceIndex old = current_core();
    set_current_core(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  bool isPinnedPtr(const void *p) const override { return is_pinned(p); }
  c10::Allocator *getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  const at::Generator &getDefaultGenerator(c10::DeviceIndex idx) const override {
    int i = idx < 0 ? current_core() : idx;
    int n = hooks_num_cores();
    TORCH_CHECK(i < n, "lazytpu: device index ", i, " out of range: there are ", n, " cores");
    return default_generator(i);
  }
  at::Generator getNewGenerator(c10::DeviceIndex idx) const override {
    return new_generator(idx < 0 ? current_core() : idx);
  }
  at::Device getDeviceFromPtr(void *) const override {
    TORCH_CHECK(false, "lazytpu: device tensors have no host pointer");
  }
};

/* ---------------------------------------------------------- device guard */

/* The guard of a device type that names lazytpu's cores (PrivateUse1; XLA in
 * compatibility mode). Both share the thread's current core. */
struct LtGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  explicit LtGuardImpl(c10::DeviceType t) : type_(t) {}
  c10::DeviceType type() const override { return type_; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old(type_, tls_device);
    if (d.index() >= 0) tls_device = d.index();
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(type_, tls_device); }
  void setDevice(c10::Device d) const override { set_current_core(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) tls_device = d.index();
  }
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  /* Autograd asks this at its first backward (even a CPU-only one) to size
   * its device threads, so it must be right before the engine loads. */
  c10::DeviceIndex deviceCount() const noexcept override {
    return (c10::DeviceIndex)hooks_num_cores();
  }

 private:
  c10::DeviceType type_;
};

void register_guard(c10::DeviceType t) {
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  if (c10::impl::hasDeviceGuardImpl(t)) return;
  /* the registrar stores the pointer: the guard lives for the process */
  c10::impl::DeviceGuardImplRegistrar reg(t, new LtGuardImpl(t));
}

/* Once per process, when the library loads. If another library already took
 * the PrivateUse1 hooks (it would also have taken the device name, which
 * _lazytpu_device checks before loading this library), leave them: throwing
 * from a static initialiser would abort the process. */
struct Register {
  Register() {
    if (!at::isPrivateUse1HooksRegistered()) {
      static LtHooks hooks;
      at::RegisterPrivateUse1HooksInterface(&hooks);
    }
    register_guard(c10::DeviceType::PrivateUse1);
  }
} g_register;

}  // namespace

void hooks_register_xla_guard(void) { register_guard(c10::DeviceType::XLA); }

}  // namespace lazytpu
