/*
 * lazy/pcache.h — the persistent compile cache: compiled programs stored in
 * a directory, found again by later processes.
 *
 * One file per program, named <graph key>-<config id>.ltp (16 hex digits
 * each). The config id hashes the build (the content of the loaded lazytpu
 * binary, the record format) and the compile options (lt_compile_opts), so a
 * rebuilt library or other options never read an older program. The file:
 * a header (magic, format, build id, config id, graph key, lengths), the
 * graph's signature (program_io.h), the program, and a checksum over all of
 * it. A load verifies all of these and that the signature equals the graph
 * being compiled: a file that fails any check is ignored (counter
 * PersistentCacheDeserializeFailure), removed unless read-only, and the
 * graph compiles again. Writes go to a temporary file of a unique name in
 * the same directory, then rename(2) it into place: a reader sees a whole
 * file or none, and processes writing the same key concurrently each
 * install a whole file.
 *
 * The directory is chosen with lt_compile_cache_set_dir (lazytpu.h) or
 * LAZYTPU_COMPILE_CACHE_DIR / torch_xla's XLA_PERSISTENT_CACHE_PATH (and
 * ..._READ_ONLY), read when the compile cache is first used. From then on
 * the choice is fixed ("initialised", as torch_xla's computation cache).
 * Counters as torch_xla: PersistentCacheHit, PersistentCacheMiss (no file),
 * PersistentCacheDeserializeFailure; metric PersistentCacheLoad (time).
 */
#ifndef LT_PCACHE_H
#define LT_PCACHE_H

#include "compile.h"

typedef struct lt_pcache lt_pcache;

/* An unconfigured, not yet initialised cache (NULL on malloc failure). */
lt_pcache *lt_pcache_new(void);
void lt_pcache_free(lt_pcache *pc);   /* NULL-safe */

/* Chooses the directory (NULL or "": no persistent cache) and read-only
 * mode. A writable directory is created (with its parents) now. Returns
 * LT_OK; LT_ERR_STATE once the cache is initialised (the first compile
 * cache lookup happened); LT_ERR_ARG naming the path when it cannot be
 * created or is not a directory. */
lt_status lt_pcache_configure(lt_pcache *pc, const char *dir, int readonly);

/* Initialises pc at the first compile cache lookup (idempotent, thread-safe):
 * without lt_pcache_configure, takes the directory from the environment.
 * Returns LT_OK, or LT_ERR_ARG when that directory cannot be created (every
 * later call returns the same error). */
lt_status lt_pcache_start(lt_pcache *pc);

/* 1 once lt_pcache_start ran. When dir is non-NULL, copies the directory
 * ("" for none) into dir[cap]; *readonly (if non-NULL) gets the mode. */
int lt_pcache_info(lt_pcache *pc, char *dir, size_t cap, int *readonly);

/* The program stored for g compiled with options o, or NULL (a miss, or a
 * failed load: counted). Only after lt_pcache_start; NULL when no directory
 * is set. Caller owns 1 reference. */
lt_program *lt_pcache_load(lt_pcache *pc, const lt_graph *g, const lt_compile_opts *o);

/* Stores p (compiled from g with options o) unless the cache is read-only,
 * off, or a file for the key exists. Failures to write (disk full, a
 * program the format cannot hold) only skip the store. */
void lt_pcache_store(lt_pcache *pc, const lt_graph *g, const lt_compile_opts *o,
                     const lt_program *p);

#endif
