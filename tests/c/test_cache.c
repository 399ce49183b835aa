/* tests/c/test_cache.c — compile cache: LRU order, eviction releases,
 * replacement, thread safety. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "cache.h"

typedef struct obj { atomic_int refs; int id; } obj;
static atomic_int freed;

static void *oretain(void *p) { atomic_fetch_add(&((obj *)p)->refs, 1); return p; }
static void orelease(void *p)
{
    obj *o = p;
    if (atomic_fetch_sub(&o->refs, 1) == 1) { atomic_fetch_add(&freed, 1); free(o); }
}
static obj *mk(int id) { obj *o = malloc(sizeof *o); atomic_init(&o->refs, 1); o->id = id; return o; }

static void test_lru_eviction(void **st)
{
    (void)st;
    atomic_store(&freed, 0);
    lt_cache *c = lt_cache_new(3, oretain, orelease);
    for (int i = 1; i <= 3; i++) {
        obj *o = mk(i);
        assert_int_equal(lt_cache_put(c, (uint64_t)i * 1000, o), 0);
        orelease(o);              /* the cache now owns the only reference */
    }
    assert_int_equal(lt_cache_count(c), 3);
    /* touch key 1000: key 2000 becomes least recently used */
    obj *g = lt_cache_get(c, 1000);
    assert_non_null(g);
    assert_int_equal(g->id, 1);
    assert_int_equal(atomic_load(&g->refs), 2);
    orelease(g);
    obj *o4 = mk(4);
    assert_int_equal(lt_cache_put(c, 4000, o4), 1);
    orelease(o4);
    assert_int_equal(atomic_load(&freed), 1);      /* 2 was released */
    assert_null(lt_cache_get(c, 2000));
    obj *h;
    assert_non_null(h = lt_cache_get(c, 1000)); orelease(h);
    assert_non_null(h = lt_cache_get(c, 3000)); orelease(h);
    assert_non_null(h = lt_cache_get(c, 4000)); orelease(h);
    /* touched 1000, 3000, 4000 in that order: 1000 is least recent */
    obj *o5 = mk(5);
    assert_int_equal(lt_cache_put(c, 5000, o5), 1);
    orelease(o5);
    assert_null(lt_cache_get(c, 1000));
    assert_int_equal(atomic_load(&freed), 2);
    /* a held value survives eviction until its holder releases it */
    obj *held = lt_cache_get(c, 3000);
    for (int i = 6; i <= 8; i++) { obj *o = mk(i); lt_cache_put(c, (uint64_t)i * 1000, o); orelease(o); }
    assert_null(lt_cache_get(c, 3000));
    assert_int_equal(held->id, 3);
    int before = atomic_load(&freed);
    orelease(held);
    assert_int_equal(atomic_load(&freed), before + 1);
    lt_cache_free(c);
    assert_int_equal(atomic_load(&freed), 8);
}

static void test_replace_and_clear(void **st)
{
    (void)st;
    atomic_store(&freed, 0);
    lt_cache *c = lt_cache_new(0, oretain, orelease);   /* clamps to 1 */
    assert_int_equal(lt_cache_capacity(c), 1);
    obj *a = mk(1), *b = mk(2);
    lt_cache_put(c, 7, a);
    lt_cache_put(c, 7, b);                /* replaces: a back to our ref only */
    assert_int_equal(atomic_load(&a->refs), 1);
    obj *g = lt_cache_get(c, 7);
    assert_ptr_equal(g, b);
    orelease(g);
    lt_cache_clear(c);
    assert_int_equal(lt_cache_count(c), 0);
    assert_int_equal(atomic_load(&b->refs), 1);
    orelease(a); orelease(b);
    lt_cache_free(c);
    assert_int_equal(atomic_load(&freed), 2);
}

static lt_cache *shared;
static void *worker(void *arg)
{
    intptr_t t = (intptr_t)arg;
    for (int i = 0; i < 20000; i++) {
        uint64_t key = (uint64_t)((i * 7 + t) % 64);
        obj *o = lt_cache_get(shared, key);
        if (o) { orelease(o); continue; }
        o = mk((int)key);
        lt_cache_put(shared, key, o);
        orelease(o);
    }
    return NULL;
}

static void test_threads(void **st)
{
    (void)st;
    atomic_store(&freed, 0);
    shared = lt_cache_new(16, oretain, orelease);
    pthread_t th[4];
    for (intptr_t i = 0; i < 4; i++) pthread_create(&th[i], NULL, worker, (void *)i);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    assert_true(lt_cache_count(shared) <= 16);
    assert_true(lt_cache_count(shared) > 0);
    int64_t n = lt_cache_count(shared);
    int f = atomic_load(&freed);
    lt_cache_free(shared);
    assert_int_equal(atomic_load(&freed), f + (int)n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_replace_and_clear),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
