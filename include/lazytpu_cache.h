/*
 * lazytpu_cache.h — the persistent compile cache part of lazytpu's public C
 * API (lazy/pcache.h has the file layout, keys and checks; docs/api.md the
 * user's view). Kept beside lazytpu.h (which it includes) so that the
 * shim's files that do not use it do not depend on it.
 */
#ifndef LAZYTPU_CACHE_H
#define LAZYTPU_CACHE_H

#include "lazytpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Stores compiled programs in directory `dir` (created with its parents
 * unless readonly) and loads them in later processes instead of compiling.
 * NULL or "" turns it off; readonly = 1 reads only. Must come before the
 * first compile cache lookup (the first step that runs a graph):
 * LT_ERR_STATE afterwards, as torch_xla's initialize_cache. Without a call
 * the directory is taken from LAZYTPU_COMPILE_CACHE_DIR /
 * XLA_PERSISTENT_CACHE_PATH at that lookup. LT_ERR_ARG naming dir when it
 * cannot be created. Initialises the library. */
LT_API lt_status lt_compile_cache_set_dir(const char *dir, int readonly);

/* 1 once the compile cache was first used (the directory is then fixed),
 * else 0. Copies the directory ("" for none) into dir[cap] when dir is
 * non-NULL; *readonly and *n_programs (programs in the in-memory cache)
 * when non-NULL. Initialises the library. */
LT_API int lt_compile_cache_info(char *dir, size_t cap, int *readonly, int64_t *n_programs);

#ifdef __cplusplus
}
#endif

#endif
