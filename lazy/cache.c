/*
 * lazy/cache.c — bounded LRU map (see cache.h): a chained hash table over the
 * keys plus a doubly linked recency list, under one mutex. Values are
 * released outside the lock.
 */
#include <pthread.h>
#include <stdlib.h>
#include "cache.h"

typedef struct entry {
    uint64_t key;
    void *value;
    struct entry *hnext;           /* bucket chain */
    struct entry *prev, *next;     /* recency list: head = most recent */
} entry;

struct lt_cache {
    pthread_mutex_t mu;
    int64_t capacity, count;
    size_t nbuckets;               /* power of two */
    entry **buckets;
    entry *head, *tail;
    lt_cache_retain_fn retain;
    lt_cache_release_fn release;
};

static size_t bucket_of(const lt_cache *c, uint64_t key)
{
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ULL;
    key ^= key >> 32;
    return (size_t)key & (c->nbuckets - 1);
}

lt_cache *lt_cache_new(int64_t capacity, lt_cache_retain_fn retain,
                       lt_cache_release_fn release)
{
    if (capacity < 1) capacity = 1;
    lt_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    size_t nb = 16;
    while ((int64_t)nb < capacity * 2 && nb < ((size_t)1 << 20)) nb <<= 1;
    c->buckets = calloc(nb, sizeof *c->buckets);
    if (!c->buckets) { free(c); return NULL; }
    c->nbuckets = nb;
    c->capacity = capacity;
    c->retain = retain;
    c->release = release;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void list_unlink(lt_cache *c, entry *e)
{
    if (e->prev) e->prev->next = e->next; else c->head = e->next;
    if (e->next) e->next->prev = e->prev; else c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void list_push_front(lt_cache *c, entry *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e; else c->tail = e;
    c->head = e;
}

static entry *find(lt_cache *c, uint64_t key, entry ***slot)
{
    entry **p = &c->buckets[bucket_of(c, key)];
    while (*p && (*p)->key != key) p = &(*p)->hnext;
    if (slot) *slot = p;
    return *p;
}

/* Removes e from table and list (lock held). */
static void remove_entry(lt_cache *c, entry *e)
{
    entry **p;
    find(c, e->key, &p);
    *p = e->hnext;
    list_unlink(c, e);
    c->count--;
}

void *lt_cache_get(lt_cache *c, uint64_t key)
{
    pthread_mutex_lock(&c->mu);
    entry *e = find(c, key, NULL);
    void *v = NULL;
    if (e) {
        list_unlink(c, e);
        list_push_front(c, e);
        v = c->retain ? c->retain(e->value) : e->value;
    }
    pthread_mutex_unlock(&c->mu);
    return v;
}

int lt_cache_put(lt_cache *c, uint64_t key, void *value)
{
    void *old = NULL, *evicted = NULL;
    int ev = 0;
    pthread_mutex_lock(&c->mu);
    entry **slot;
    entry *e = find(c, key, &slot);
    if (e) {
        old = e->value;
        e->value = c->retain ? c->retain(value) : value;
        list_unlink(c, e);
        list_push_front(c, e);
    } else {
        entry *victim = NULL;
        if (c->count >= c->capacity && c->tail) {
            victim = c->tail;
            remove_entry(c, victim);
            evicted = victim->value;
            ev = 1;
        }
        e = victim ? victim : malloc(sizeof *e);
        if (!e) {
            pthread_mutex_unlock(&c->mu);
            return -1;
        }
        find(c, key, &slot);   /* the table may have changed by the removal */
        e->key = key;
        e->value = c->retain ? c->retain(value) : value;
        e->hnext = NULL;
        *slot = e;
        list_push_front(c, e);
        c->count++;
    }
    pthread_mutex_unlock(&c->mu);
    if (c->release) {
        if (old) c->release(old);
        if (evicted) c->release(evicted);
    }
    return ev;
}

void lt_cache_clear(lt_cache *c)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    entry *e = c->head;
    c->head = c->tail = NULL;
    c->count = 0;
    for (size_t i = 0; i < c->nbuckets; i++) c->buckets[i] = NULL;
    pthread_mutex_unlock(&c->mu);
    while (e) {
        entry *nx = e->next;
        if (c->release) c->release(e->value);
        free(e);
        e = nx;
    }
}

void lt_cache_free(lt_cache *c)
{
    if (!c) return;
    lt_cache_clear(c);
    pthread_mutex_destroy(&c->mu);
    free(c->buckets);
    free(c);
}

int64_t lt_cache_count(lt_cache *c)
{
    pthread_mutex_lock(&c->mu);
    int64_t n = c->count;
    pthread_mutex_unlock(&c->mu);
    return n;
}

int64_t lt_cache_capacity(const lt_cache *c) { return c->capacity; }
