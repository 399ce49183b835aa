/*
 * backend/hooks/hooks_options.c — the options table inside liblazytpu_hooks,
 * which PyTorch loads without the C core (backend autoloading): a private
 * copy of base/options.c (every function static) behind one hidden entry.
 */
#define LT_OPTIONS_LINKAGE static __attribute__((unused))
#define LT_OPTIONS_STANDALONE 1
#include "../../base/options.c"

int lt_hooks_env_num_cores(void) __attribute__((visibility("hidden")));

/* LAZYTPU_NUM_CORES as lt_devices_init reads it (8 when unset or
 * malformed; lt_init refuses a malformed value). */
int lt_hooks_env_num_cores(void)
{
    return (int)lt_opt_int(LT_OPT_NUM_CORES);
}
