/*
 * lazy/pcache.c — the persistent compile cache (see pcache.h): directory,
 * keys, file records, atomic writes, checked loads, counters.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "pcache.h"
#include "program_io.h"
#include "options.h"

#define FORMAT 1u
#define HEADER_BYTES 56
#define MAX_FILE ((size_t)1 << 31)
static const char MAGIC[8] = {'L', 'T', 'P', 'C', 'A', 'C', 'H', 'E'};

struct lt_pcache {
    pthread_mutex_t mu;
    atomic_int started;
    int configured;           /* lt_pcache_configure ran */
    char *dir;                /* NULL: off */
    int readonly;
    uint64_t build_id;
    lt_status start_st;       /* a failed start, repeated to every caller */
    char start_msg[512];
    atomic_uint_fast64_t tmp_seq;
};

/* ------------------------------------------------------------ helpers */

/* mkdir -p; 0 or -1 with errno. */
static int mkdir_p(const char *path)
{
    char *p = strdup(path);
    if (!p) return -1;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    for (char *q = p + 1; *q; q++) {
        if (*q != '/') continue;
        *q = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            free(p);
            return -1;
        }
        *q = '/';
    }
    int rc = mkdir(p, 0777);
    int e = errno;
    struct stat sb;
    if (rc != 0 && e == EEXIST) rc = stat(p, &sb) == 0 && S_ISDIR(sb.st_mode) ? 0 : (e = ENOTDIR, -1);
    free(p);
    errno = e;
    return rc;
}

/* The build: the content of the binary this code was loaded from (the
 * shared library, or a test executable linking the core), the record
 * format and the pointer size. */
static uint64_t build_id_compute(void)
{
    uint64_t h = lt_hash_mix(0x4C5450434143ull, FORMAT);
    h = lt_hash_mix(h, sizeof(void *));
    h = lt_hash_mix(h, LT_NUM_OPS);
    Dl_info info;
    if (!dladdr((void *)build_id_compute, &info) || !info.dli_fname) return h;
    int fd = open(info.dli_fname, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return h;
    static uint8_t chunk[1 << 16];    /* under the cache's mutex only */
    ssize_t got;
    while ((got = read(fd, chunk, sizeof chunk)) > 0) h = lt_hash_bytes(h, chunk, (size_t)got);
    close(fd);
    return h;
}

static uint64_t config_id(const lt_pcache *pc, const lt_compile_opts *o)
{
    uint64_t h = lt_hash_mix(pc->build_id, 0x4F505453u);
    h = lt_hash_mix(h, (uint64_t)o->check_finite);
    h = lt_hash_mix(h, (uint64_t)o->no_hfuse);
    h = lt_hash_mix(h, (uint64_t)o->no_epilogue);
    return h;
}

static char *file_path(const lt_pcache *pc, uint64_t key, uint64_t cfg)
{
    size_t n = strlen(pc->dir) + 48;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%016llx-%016llx.ltp", pc->dir, (unsigned long long)key,
                 (unsigned long long)cfg);
    return p;
}

static void count(const char *name) { lt_counter_add(lt_counter_get(name), 1); }

/* ------------------------------------------------------------ lifecycle */

lt_pcache *lt_pcache_new(void)
{
    lt_pcache *pc = calloc(1, sizeof *pc);
    if (!pc) return NULL;
    pthread_mutex_init(&pc->mu, NULL);
    atomic_init(&pc->started, 0);
    atomic_init(&pc->tmp_seq, 0);
    return pc;
}

void lt_pcache_free(lt_pcache *pc)
{
    if (!pc) return;
    pthread_mutex_destroy(&pc->mu);
    free(pc->dir);
    free(pc);
}

/* Sets dir/readonly (lock held); creates a writable directory. */
static lt_status set_dir(lt_pcache *pc, const char *dir, int readonly, const char *what)
{
    free(pc->dir);
    pc->dir = NULL;
    pc->readonly = readonly != 0;
    if (!dir || !*dir) return LT_OK;
    if (!readonly && mkdir_p(dir) != 0)
        return lt_set_error(LT_ERR_ARG, "%s%s: cannot create the compile cache directory: %s",
                            what, dir, strerror(errno));
    pc->dir = strdup(dir);
    if (!pc->dir) return lt_set_error(LT_ERR_OOM, "compile cache: out of host memory");
    size_t n = strlen(pc->dir);
    while (n > 1 && pc->dir[n - 1] == '/') pc->dir[--n] = 0;
    return LT_OK;
}

lt_status lt_pcache_configure(lt_pcache *pc, const char *dir, int readonly)
{
    pthread_mutex_lock(&pc->mu);
    lt_status st;
    if (atomic_load(&pc->started)) {
        st = lt_set_error(LT_ERR_STATE, "the compile cache has already been initialized "
                          "(a graph ran): choose its directory before the first step");
    } else {
        st = set_dir(pc, dir, readonly, "");
        pc->configured = st == LT_OK;
    }
    pthread_mutex_unlock(&pc->mu);
    return st;
}

lt_status lt_pcache_start(lt_pcache *pc)
{
    if (atomic_load_explicit(&pc->started, memory_order_acquire)) {
        if (pc->start_st == LT_OK) return LT_OK;
        return lt_set_error(pc->start_st, "%s", pc->start_msg);
    }
    pthread_mutex_lock(&pc->mu);
    if (!atomic_load(&pc->started)) {
        lt_status st = LT_OK;
        if (!pc->configured) {
            const char *d = lt_opt_str(LT_OPT_COMPILE_CACHE_DIR);
            int ro = (int)lt_opt_int(LT_OPT_COMPILE_CACHE_READONLY);
            st = set_dir(pc, d, ro, "LAZYTPU_COMPILE_CACHE_DIR=");
        }
        if (st == LT_OK && pc->dir) pc->build_id = build_id_compute();
        pc->start_st = st;
        if (st != LT_OK) snprintf(pc->start_msg, sizeof pc->start_msg, "%s", lt_last_error());
        atomic_store_explicit(&pc->started, 1, memory_order_release);
    }
    pthread_mutex_unlock(&pc->mu);
    if (pc->start_st == LT_OK) return LT_OK;
    return lt_set_error(pc->start_st, "%s", pc->start_msg);
}

int lt_pcache_info(lt_pcache *pc, char *dir, size_t cap, int *readonly)
{
    pthread_mutex_lock(&pc->mu);
    int started = atomic_load(&pc->started);
    if (dir && cap) snprintf(dir, cap, "%s", pc->dir ? pc->dir : "");
    if (readonly) *readonly = pc->readonly;
    pthread_mutex_unlock(&pc->mu);
    return started;
}

/* ------------------------------------------------------------ records */

typedef struct header {
    char magic[8];
    uint32_t format, zero;
    uint64_t build_id, config_id, key, sig_len, prog_len;
} header;
_Static_assert(sizeof(header) == HEADER_BYTES, "header layout");

/* Reads the whole file at fd into *out (malloc'd). 0, or -1. */
static int read_all(int fd, uint8_t **out, size_t *n)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < 0 || (size_t)sb.st_size > MAX_FILE) return -1;
    size_t len = (size_t)sb.st_size;
    uint8_t *p = malloc(len ? len : 1);
    if (!p) return -1;
    size_t at = 0;
    while (at < len) {
        ssize_t got = read(fd, p + at, len - at);
        if (got <= 0) {
            if (got < 0 && errno == EINTR) continue;
            break;
        }
        at += (size_t)got;
    }
    *out = p;
    *n = at;
    return 0;
}

/* The program in the record (data, n) if it is whole, of this build and
 * options, and of graph g; else NULL. */
static lt_program *check_record(const lt_pcache *pc, const uint8_t *data, size_t n,
                                const lt_graph *g, uint64_t cfg)
{
    header h;
    if (n < HEADER_BYTES + 8) return NULL;
    memcpy(&h, data, sizeof h);
    if (memcmp(h.magic, MAGIC, sizeof MAGIC) != 0 || h.format != FORMAT || h.zero != 0 ||
        h.build_id != pc->build_id || h.config_id != cfg || h.key != g->key)
        return NULL;
    if (h.sig_len > n || h.prog_len > n || HEADER_BYTES + h.sig_len + h.prog_len + 8 != n)
        return NULL;
    uint64_t sum;
    memcpy(&sum, data + n - 8, 8);
    if (lt_hash_bytes(0x53554Dull, data, n - 8) != sum) return NULL;
    lt_bytes sig = {0};
    lt_graph_signature(g, &sig);
    int same = !sig.oom && sig.n == h.sig_len &&
               memcmp(sig.p, data + HEADER_BYTES, sig.n) == 0;
    free(sig.p);
    if (!same) return NULL;
    lt_program *p = lt_program_read(data + HEADER_BYTES + h.sig_len, (size_t)h.prog_len);
    if (p && (lt_program_n_params(p) != g->n_params || lt_program_n_outputs(p) != g->n_outputs)) {
        lt_program_release(p);
        p = NULL;
    }
    return p;
}

lt_program *lt_pcache_load(lt_pcache *pc, const lt_graph *g, const lt_compile_opts *o)
{
    if (!atomic_load_explicit(&pc->started, memory_order_acquire) || !pc->dir) return NULL;
    lt_compile_opts zero = {0};
    uint64_t cfg = config_id(pc, o ? o : &zero);
    char *path = file_path(pc, g->key, cfg);
    if (!path) return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        count("PersistentCacheMiss");
        free(path);
        return NULL;
    }
    int64_t t0 = lt_now_ns();
    uint8_t *data = NULL;
    size_t n = 0;
    lt_program *p = NULL;
    if (read_all(fd, &data, &n) == 0) p = check_record(pc, data, n, g, cfg);
    close(fd);
    free(data);
    if (p) {
        lt_metric_add(lt_metric_get("PersistentCacheLoad", LT_UNIT_NS),
                      (double)(lt_now_ns() - t0));
        count("PersistentCacheHit");
    } else {
        count("PersistentCacheDeserializeFailure");
        if (!pc->readonly) unlink(path);   /* a new program is stored in its place */
    }
    free(path);
    return p;
}

/* Writes all n bytes; 0 or -1. */
static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

void lt_pcache_store(lt_pcache *pc, const lt_graph *g, const lt_compile_opts *o,
                     const lt_program *p)
{
    if (!atomic_load_explicit(&pc->started, memory_order_acquire) || !pc->dir || pc->readonly)
        return;
    lt_compile_opts zero = {0};
    uint64_t cfg = config_id(pc, o ? o : &zero);
    char *path = file_path(pc, g->key, cfg);
    if (!path) return;
    if (access(path, F_OK) == 0) {   /* stored already (maybe by another process) */
        free(path);
        return;
    }
    lt_bytes b = {0};
    header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, MAGIC, sizeof MAGIC);
    h.format = FORMAT;
    h.build_id = pc->build_id;
    h.config_id = cfg;
    h.key = g->key;
    lt_bytes_put(&b, &h, sizeof h);
    lt_graph_signature(g, &b);
    size_t sig_end = b.n;
    lt_status st = lt_program_write(p, &b);
    if (st != LT_OK || b.oom) {
        free(b.p);
        free(path);
        return;
    }
    h.sig_len = sig_end - HEADER_BYTES;
    h.prog_len = b.n - sig_end;
    memcpy(b.p, &h, sizeof h);
    uint64_t sum = lt_hash_bytes(0x53554Dull, b.p, b.n);
    lt_bytes_put(&b, &sum, sizeof sum);
    size_t tn = strlen(path) + 64;
    char *tmp = b.oom ? NULL : malloc(tn);
    if (tmp) {
        snprintf(tmp, tn, "%s.%ld.%llu.tmp", path, (long)getpid(),
                 (unsigned long long)atomic_fetch_add(&pc->tmp_seq, 1));
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) {
            int ok = write_all(fd, b.p, b.n) == 0;
            ok = close(fd) == 0 && ok;
            if (!ok || rename(tmp, path) != 0) unlink(tmp);
        }
    }
    free(tmp);
    free(b.p);
    free(path);
}

/* ------------------------------------------------------------ public API */

#include "cache.h"
#include "lazytpu_cache.h"
#include "tensor.h"

lt_status lt_compile_cache_set_dir(const char *dir, int readonly)
{
    lt_runtime *r = lt_rt();
    if (!r) return LT_ERR_DEVICE;
    return lt_pcache_configure(r->pcache, dir, readonly);
}

int lt_compile_cache_info(char *dir, size_t cap, int *readonly, int64_t *n_programs)
{
    lt_runtime *r = lt_rt();
    if (!r) {
        if (dir && cap) dir[0] = 0;
        if (readonly) *readonly = 0;
        if (n_programs) *n_programs = 0;
        return 0;
    }
    if (n_programs) *n_programs = lt_cache_count(r->cache);
    return lt_pcache_info(r->pcache, dir, cap, readonly);
}
