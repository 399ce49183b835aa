/*
 * lazy/cache.h — the compile cache: a bounded, thread-safe LRU map from a
 * 64-bit graph key to a refcounted value (a compiled lt_program in the sync
 * pipeline). The cache holds one reference to each value it stores, taken
 * with the retain function given at creation and dropped with the release
 * function on eviction, replacement, clear and free.
 */
#ifndef LT_CACHE_H
#define LT_CACHE_H

#include <stdint.h>

typedef struct lt_cache lt_cache;
typedef void *(*lt_cache_retain_fn)(void *value);
typedef void (*lt_cache_release_fn)(void *value);

/* A cache of at most `capacity` (>= 1) entries. Returns NULL on malloc
 * failure. retain/release may be NULL (values are then not refcounted). */
lt_cache *lt_cache_new(int64_t capacity, lt_cache_retain_fn retain,
                       lt_cache_release_fn release);
/* Releases every value and frees the cache. NULL-safe. */
void lt_cache_free(lt_cache *c);
/* The value stored under key, retained for the caller (NULL if absent).
 * A hit makes the entry most recently used. */
void *lt_cache_get(lt_cache *c, uint64_t key);
/* Stores value under key (the cache retains it), replacing and releasing a
 * previous value of the same key; evicts the least recently used entry when
 * full. Returns 1 if an entry was evicted, 0 otherwise, -1 on malloc failure
 * (nothing stored). */
int lt_cache_put(lt_cache *c, uint64_t key, void *value);
/* Drops every entry (releasing values). */
void lt_cache_clear(lt_cache *c);
int64_t lt_cache_count(lt_cache *c);
int64_t lt_cache_capacity(const lt_cache *c);

#endif
