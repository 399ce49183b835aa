/*
 * backend/lt_shim.h — the few shim functions module.cpp needs, without any
 * torch header (module.cpp is plain CPython). Implemented in tensor_impl.cpp.
 */
#ifndef LT_SHIM_H
#define LT_SHIM_H

#include <cstdint>
#include <string>

/* Bit i set when core i has (had) device tensors: mark_step syncs these. */
uint32_t lazytpu_used_cores_mask(void);
/* Per-core random state used by dropout/bernoulli/rand (see rng_next_seed). */
void lazytpu_rng_set_state(int core, uint64_t seed);
uint64_t lazytpu_rng_get_state(int core);
uint64_t lazytpu_rng_get_seed(int core);
void lazytpu_rng_restore(int core, uint64_t seed, uint64_t state);
/* Installs the function describing the user's Python frame (rare events). */
void lazytpu_set_caller_hook(std::string (*fn)(void));

/* Registrations that need every static registration done first (called
 * once from the module init): see fallback.cpp. */
void lazytpu_register_late(void);
/* Kernels that could not be registered (signature mismatches), one per
 * line; "" when all registered. Implemented in fallback.cpp. */
std::string lazytpu_registration_errors(void);

#endif
