/*
 * backend/runtime.cpp — what PyTorch asks of a PrivateUse1 device besides
 * kernels: the device guard (current core per thread), the
 * PrivateUse1HooksInterface (availability, device count, default generators:
 * autograd's engine and torch.Generator need them) and the per-core random
 * state the random kernels draw their seeds from.
 *
 * Random state: each core has a seed (what manual_seed set) and a running
 * state; every random op takes the next seed from its core's state
 * (rng_next_seed), so a step's random ops are graph parameters and replaying
 * a cached graph with a new seed does not recompile. A core's default
 * at::Generator reads and writes the same state; other generators made with
 * torch.Generator("lazytpu") keep their own seed but the kernels always draw
 * from the core's state (the generator argument of random ops is not
 * honoured: lazytpu's random streams differ from the CPU's anyway).
 *
 * torch_xla compatibility mode (LAZYTPU_XLA_COMPAT=1): device tensors are
 * XLA tensors (DeviceType::XLA, DispatchKey::XLA) so that libraries written
 * for torch_xla, which build torch.device("xla", i) and test
 * device.type == "xla", get lazytpu tensors; every registration is mirrored
 * onto the XLA keys (lt_register.h) and the device guard serves XLA too.
 */
#include "lt_aten.h"

#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <ATen/ops/empty.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <random>

#include "lt_register.h"
#include "lt_shim.h"

#include <cstdlib>
#include <map>

namespace lazytpu {

/* "lazytpu:N" ("xla:N" in compatibility mode) for messages; tensor_impl.cpp */
std::string core_name(int core);


/* --------------------------------------------------------- device identity */

bool xla_compat() {
  static const bool on = [] {
    const char *e = std::getenv("LAZYTPU_XLA_COMPAT");
    return e && e[0] == '1';
  }();
  return on;
}

c10::DeviceType lt_device_type(void) {
  return xla_compat() ? c10::DeviceType::XLA : c10::DeviceType::PrivateUse1;
}

c10::DispatchKey lt_dispatch_key(void) {
  return xla_compat() ? c10::DispatchKey::XLA : c10::DispatchKey::PrivateUse1;
}

bool is_lt_device_type(c10::DeviceType t) {
  return t == c10::DeviceType::PrivateUse1 || (t == c10::DeviceType::XLA && xla_compat());
}

torch::Library &mirror_library(const char *ns, c10::DispatchKey k) {
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, torch::Library *> libs;
  std::lock_guard<std::mutex> g(mu);
  auto key = std::make_pair(std::string(ns), (int)k);
  auto it = libs.find(key);
  if (it != libs.end()) return *it->second;
  auto *lib = new torch::Library(torch::Library::IMPL, std::string(ns), k, __FILE__, __LINE__);
  libs.emplace(key, lib);
  return *lib;
}

/* ------------------------------------------------------------ rng state */

namespace {
constexpr int kMaxCores = 64;
constexpr uint64_t kDefaultSeed = 101;
std::mutex g_rng_mu;
uint64_t g_rng_seed[kMaxCores];
uint64_t g_rng_state[kMaxCores];
bool g_rng_init[kMaxCores];

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int slot(int core) { return core & (kMaxCores - 1); }

void ensure_init(int c) {
  if (!g_rng_init[c]) {
    g_rng_seed[c] = g_rng_state[c] = kDefaultSeed;
    g_rng_init[c] = true;
  }
}
}  // namespace

int64_t rng_next_seed(int core) {
  std::lock_guard<std::mutex> g(g_rng_mu);
  int c = slot(core);
  ensure_init(c);
  uint64_t seed = splitmix(g_rng_state[c] * 1000003ull + (uint64_t)c);
  g_rng_state[c] = splitmix(g_rng_state[c]);
  /* a graph parameter: keep it exact in a double and away from 0/+-1 */
  return (int64_t)(seed & ((1ull << 52) - 1)) + 2;
}

void rng_set_state(int core, uint64_t seed) {
  std::lock_guard<std::mutex> g(g_rng_mu);
  int c = slot(core);
  g_rng_seed[c] = g_rng_state[c] = seed;
  g_rng_init[c] = true;
}

uint64_t rng_get_seed(int core) {
  std::lock_guard<std::mutex> g(g_rng_mu);
  int c = slot(core);
  ensure_init(c);
  return g_rng_seed[c];
}

void rng_restore(int core, uint64_t seed, uint64_t state) {
  std::lock_guard<std::mutex> g(g_rng_mu);
  int c = slot(core);
  g_rng_seed[c] = seed;
  g_rng_state[c] = state;
  g_rng_init[c] = true;
}

uint64_t rng_get_state(int core) {
  std::lock_guard<std::mutex> g(g_rng_mu);
  int c = slot(core);
  ensure_init(c);
  return g_rng_state[c];
}

/* ------------------------------------------------------------ generator */

namespace {

/* A core's generator. The default generator of core i (`is_default`) is a
 * view of the core's state above; others hold their own. State as a tensor:
 * 16 uint8 bytes, the seed then the running state (little endian). */
class LtGenerator final : public c10::GeneratorImpl {
 public:
  LtGenerator(c10::DeviceIndex idx, bool is_default)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, idx),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        is_default_(is_default), seed_(kDefaultSeed), state_(kDefaultSeed) {}

  void set_current_seed(uint64_t seed) override {
    if (is_default_) { rng_set_state(device().index(), seed); return; }
    seed_ = state_ = seed;
  }
  void set_offset(uint64_t offset) override {
    TORCH_CHECK(false, "lazytpu: generator offsets (philox) are not supported");
  }
  uint64_t get_offset() const override {
    TORCH_CHECK(false, "lazytpu: generator offsets (philox) are not supported");
  }
  uint64_t current_seed() const override {
    if (is_default_) {
      std::lock_guard<std::mutex> g(g_rng_mu);
      int c = slot(device().index());
      ensure_init(c);
      return g_rng_seed[c];
    }
    return seed_;
  }
  uint64_t seed() override {
    uint64_t s = std::random_device{}() ^
                 (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
    set_current_seed(s);
    return s;
  }
  void set_state(const c10::TensorImpl &new_state) override {
    TORCH_CHECK(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
                    new_state.numel() == 16 && new_state.device().is_cpu(),
                "lazytpu: a generator state is a CPU uint8 tensor of 16 bytes, got ",
                new_state.numel(), " elements of ", new_state.dtype().name());
    uint64_t v[2];
    std::memcpy(v, new_state.data(), sizeof v);
    if (is_default_) {
      std::lock_guard<std::mutex> g(g_rng_mu);
      int c = slot(device().index());
      g_rng_seed[c] = v[0];
      g_rng_state[c] = v[1];
      g_rng_init[c] = true;
    } else {
      seed_ = v[0];
      state_ = v[1];
    }
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    uint64_t v[2];
    if (is_default_) {
      std::lock_guard<std::mutex> g(g_rng_mu);
      int c = slot(device().index());
      ensure_init(c);
      v[0] = g_rng_seed[c];
      v[1] = g_rng_state[c];
    } else {
      v[0] = seed_;
      v[1] = state_;
    }
    at::Tensor t = at::empty({16}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(t.data_ptr(), v, sizeof v);
    return t.getIntrusivePtr();
  }

 private:
  LtGenerator *clone_impl() const override {
    auto *g = new LtGenerator(device().index(), false);
    g->seed_ = current_seed();
    auto st = get_state();
    std::memcpy(&g->state_, (const char *)st->data() + 8, 8);
    return g;
  }
  bool is_default_;
  uint64_t seed_, state_;
};

at::Generator make_generator(c10::DeviceIndex idx) {
  return at::make_generator<LtGenerator>(idx < 0 ? current_core() : idx, false);
}

/* ----------------------------------------------------------------- hooks */

struct LtHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override { lt_init(); }
  c10::DeviceIndex deviceCount() const override {
    lt_init();
    return (c10::DeviceIndex)lt_num_cores();
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
  bool isPinnedPtr(const void *) const override { return false; }
  const at::Generator &getDefaultGenerator(c10::DeviceIndex idx) const override {
    static std::once_flag once;
    static std::vector<at::Generator> gens;
    std::call_once(once, [] {
      lt_init();
      for (int i = 0; i < lt_num_cores(); i++)
        gens.push_back(at::make_generator<LtGenerator>((c10::DeviceIndex)i, true));
    });
    int i = idx < 0 ? current_core() : idx;
    TORCH_CHECK(i < (int)gens.size(), "lazytpu: device index ", i,
                " out of range: there are ", gens.size(), " cores");
    return gens[i];
  }
  at::Generator getNewGenerator(c10::DeviceIndex idx) const override {
    return make_generator(idx);
  }
  at::Device getDeviceFromPtr(void *) const override {
    TORCH_CHECK(false, "lazytpu: device tensors have no host pointer");
  }
};

/* ---------------------------------------------------------- device guard */

thread_local c10::DeviceIndex tls_device = 0;

/* The guard of a device type that names lazytpu's cores (PrivateUse1; XLA in
 * compatibility mode). Both share the thread's current core. */
struct LtGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  explicit LtGuardImpl(c10::DeviceType t = c10::DeviceType::PrivateUse1) : type_(t) {}
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
  c10::DeviceIndex deviceCount() const noexcept override {
    lt_init();
    return (c10::DeviceIndex)lt_num_cores();
  }

 private:
  c10::DeviceType type_;
};

struct RegisterHooks {
  RegisterHooks() {
    static LtHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
    if (xla_compat()) {
      static LtGuardImpl xla_guard(c10::DeviceType::XLA);
      static c10::impl::DeviceGuardImplRegistrar reg(c10::DeviceType::XLA, &xla_guard);
    }
  }
} register_hooks;

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, LtGuardImpl);

int current_core(void) { return tls_device; }

void set_current_core(int idx) {
  if (idx < 0) return;
  lt_init();
  TORCH_CHECK(idx < lt_num_cores(), "lazytpu: device index ", idx,
              " out of range: there are ", lt_num_cores(), " cores (", core_name(0), "..",
              lt_num_cores() - 1, ")");
  tls_device = (c10::DeviceIndex)idx;
}

}  // namespace lazytpu

void lazytpu_rng_set_state(int core, uint64_t seed) { lazytpu::rng_set_state(core, seed); }
uint64_t lazytpu_rng_get_state(int core) { return lazytpu::rng_get_state(core); }
uint64_t lazytpu_rng_get_seed(int core) { return lazytpu::rng_get_seed(core); }
void lazytpu_rng_restore(int core, uint64_t seed, uint64_t state) {
  lazytpu::rng_restore(core, seed, state);
}
