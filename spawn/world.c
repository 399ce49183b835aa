/*
 * spawn/world.c — the shared-memory world: segment creation and attach,
 * the process-shared barrier (atomics + futex, with timeout, abort flag and
 * peer-death detection) and the descriptor agreement check.
 * The data movement of collectives lives in collectives.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "world_int.h"
#include "options.h"

#define LT_WORLD_POLL_NS 50000000L   /* liveness/abort poll period: 50 ms */

/* ----------------------------------------------------------- small helpers */

int64_t lt_world_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void lt_world_futex_wait(atomic_uint *addr, unsigned val, long ns)
{
    struct timespec ts = { ns / 1000000000L, ns % 1000000000L };
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

void lt_world_futex_wake(atomic_uint *addr)
{
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static double env_timeout(void)
{
    return lt_opt_seconds(LT_OPT_COLLECTIVE_TIMEOUT);  /* LT_WORLD_DEFAULT_TIMEOUT_S */
}

const char *lt_reduce_type_name(int reduce)
{
    static const char *names[] = { "sum", "mul", "min", "max", "and", "or" };
    return (reduce >= 0 && reduce < 6) ? names[reduce] : "?";
}

/* ------------------------------------------------------------ create/attach */

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

lt_status lt_world_create(int size, size_t bytes, lt_world **out)
{
    return lt_world_create_host(size, bytes, 0, 1, out);
}

lt_status lt_world_create_host(int size, size_t bytes, int host_index,
                               int num_hosts, lt_world **out)
{
    *out = NULL;
    if (size < 1 || size > LT_WORLD_MAX_RANKS)
        return lt_set_error(LT_ERR_ARG, "world: size %d out of range 1..%d",
                            size, LT_WORLD_MAX_RANKS);
    if (num_hosts < 1 || num_hosts > LT_WORLD_MAX_HOSTS || host_index < 0 ||
        host_index >= num_hosts)
        return lt_set_error(LT_ERR_ARG, "world: host %d of %d out of range "
                            "(1..%d hosts)", host_index, num_hosts,
                            LT_WORLD_MAX_HOSTS);
    if (bytes == 0) {
        bytes = (size_t)lt_opt_int(LT_OPT_SHM_BYTES);   /* LT_WORLD_DEFAULT_SHM_BYTES */
    }
    size_t data_off = round_up(sizeof(lt_whdr), 4096);
    size_t min_bytes = data_off + (size_t)(size + 1) * 4096;
    if (bytes < min_bytes) bytes = min_bytes;
    size_t slot = ((bytes - data_off) / (size_t)(size + 1)) & ~(size_t)4095;
    bytes = data_off + slot * (size_t)(size + 1);

    lt_world *w = calloc(1, sizeof *w);
    if (!w) return lt_set_error(LT_ERR_OOM, "world: out of host memory");
    unsigned rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
        rnd = (unsigned)lt_world_now_ns() ^ ((unsigned)getpid() << 16);
    snprintf(w->name, sizeof w->name, "/lazytpu-%d-%08x", (int)getpid(), rnd);
    int fd = shm_open(w->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        int e = errno;
        char name[64];
        snprintf(name, sizeof name, "%s", w->name);
        free(w);
        return lt_set_error(LT_ERR_INTERNAL, "world: shm_open(%s): %s",
                            name, strerror(e));
    }
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(w->name);
        free(w);
        return lt_set_error(LT_ERR_INTERNAL, "world: ftruncate(%zu): %s",
                            bytes, strerror(e));
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        int e = errno;
        shm_unlink(w->name);
        free(w);
        return lt_set_error(LT_ERR_INTERNAL, "world: mmap(%zu): %s", bytes,
                            strerror(e));
    }
    w->base = p;
    w->hdr = p;
    w->bytes = bytes;
    w->rank = -1;
    w->size = size;
    w->host = host_index;
    w->hosts = num_hosts;
    w->creator = 1;
    w->timeout_s = env_timeout();
    lt_whdr *h = w->hdr;
    h->size = size;
    h->host_index = host_index;
    h->num_hosts = num_hosts;
    /* on several hosts the creator (the launcher) is the host's proxy */
    if (num_hosts > 1) atomic_store(&h->proxy_pid, (int)getpid());
    h->total_bytes = bytes;
    h->slot_bytes = slot;
    h->chunk_bytes = slot;
    size_t chunk = (size_t)lt_opt_int(LT_OPT_COLLECTIVE_CHUNK_BYTES);
    chunk &= ~(size_t)63;
    if (chunk >= 4096 && chunk < slot) h->chunk_bytes = chunk;
    h->data_off = data_off;
    atomic_store(&h->bar_count, 0);
    atomic_store(&h->bar_gen, 0);
    atomic_store(&h->aborted, 0);
    atomic_store(&h->abort_claim, 0);
    __atomic_store_n(&h->magic, LT_WORLD_MAGIC, __ATOMIC_RELEASE);
    *out = w;
    return LT_OK;
}

lt_status lt_world_attach(const char *shm_name, int rank, int size,
                          lt_world **out)
{
    *out = NULL;
    if (!shm_name || !*shm_name)
        return lt_set_error(LT_ERR_ARG, "world: empty shm name");
    if (size < 1 || size > LT_WORLD_MAX_RANKS || rank < 0 || rank >= size)
        return lt_set_error(LT_ERR_ARG, "world: rank %d / size %d invalid",
                            rank, size);
    int fd = shm_open(shm_name, O_RDWR, 0600);
    if (fd < 0)
        return lt_set_error(LT_ERR_INTERNAL, "world: shm_open(%s): %s",
                            shm_name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(lt_whdr)) {
        close(fd);
        return lt_set_error(LT_ERR_ARG, "world: %s is not a lazytpu segment",
                            shm_name);
    }
    size_t bytes = (size_t)st.st_size;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return lt_set_error(LT_ERR_INTERNAL, "world: mmap(%s): %s", shm_name,
                            strerror(errno));
    lt_whdr *h = p;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != LT_WORLD_MAGIC ||
        h->total_bytes != bytes) {
        munmap(p, bytes);
        return lt_set_error(LT_ERR_ARG, "world: %s is not a lazytpu segment",
                            shm_name);
    }
    if (h->size != size) {
        int hs = h->size;
        munmap(p, bytes);
        return lt_set_error(LT_ERR_ARG,
                            "world: %s was created for %d ranks, not %d",
                            shm_name, hs, size);
    }
    lt_world *w = calloc(1, sizeof *w);
    if (!w) {
        munmap(p, bytes);
        return lt_set_error(LT_ERR_OOM, "world: out of host memory");
    }
    w->base = p;
    w->hdr = h;
    w->bytes = bytes;
    w->rank = rank;
    w->size = size;
    w->host = h->host_index;
    w->hosts = h->num_hosts;
    w->timeout_s = env_timeout();
    w->spin = sysconf(_SC_NPROCESSORS_ONLN) >= size ? 256 : 0;
    snprintf(w->name, sizeof w->name, "%s", shm_name);
    atomic_store(&h->pid[rank], (int)getpid());
    *out = w;
    return LT_OK;
}

/* 1 and *v when option o is set and valid, 0 when unset, -1 when
 * malformed (base/options.def gives each its range). */
static int env_int(lt_opt o, int *v)
{
    int st = lt_opt_state(o);
    if (st == 1) *v = (int)lt_opt_int(o);
    return st;
}

lt_status lt_world_attach_from_env(lt_world **out)
{
    *out = NULL;
    const char *name = lt_opt_str(LT_OPT_SHM_NAME);
    if (!name || !*name) return LT_OK;
    int grank = 0, gsize = 1, lrank = 0, lsize = 1, host = 0, hosts = 1;
    if (env_int(LT_OPT_ORDINAL, &grank) != 1 ||
        env_int(LT_OPT_WORLD_SIZE, &gsize) != 1)
        return lt_set_error(LT_ERR_ARG,
                            "world: LAZYTPU_SHM_NAME is set but "
                            "LAZYTPU_ORDINAL / LAZYTPU_WORLD_SIZE are missing "
                            "or malformed");
    int hl = env_int(LT_OPT_LOCAL_ORDINAL, &lrank);
    int hs = env_int(LT_OPT_LOCAL_WORLD_SIZE, &lsize);
    int hh = env_int(LT_OPT_HOST_INDEX, &host);
    int hn = env_int(LT_OPT_NUM_HOSTS, &hosts);
    if (hl < 0 || hs < 0 || hh < 0 || hn < 0)
        return lt_set_error(LT_ERR_ARG, "world: malformed LAZYTPU_LOCAL_ORDINAL / "
                            "LAZYTPU_LOCAL_WORLD_SIZE / LAZYTPU_HOST_INDEX / "
                            "LAZYTPU_NUM_HOSTS");
    if (!hl) lrank = grank;
    if (!hs) lsize = gsize;
    if (!hh) host = 0;
    if (!hn) hosts = 1;
    if (hosts < 1 || host < 0 || host >= hosts || lsize < 1 ||
        (long)hosts * lsize != gsize || grank != host * lsize + lrank)
        return lt_set_error(LT_ERR_ARG,
                            "world: inconsistent environment: "
                            "LAZYTPU_ORDINAL=%d LAZYTPU_WORLD_SIZE=%d "
                            "LAZYTPU_LOCAL_ORDINAL=%d "
                            "LAZYTPU_LOCAL_WORLD_SIZE=%d "
                            "LAZYTPU_HOST_INDEX=%d LAZYTPU_NUM_HOSTS=%d "
                            "(want ORDINAL = HOST_INDEX * LOCAL_WORLD_SIZE + "
                            "LOCAL_ORDINAL, WORLD_SIZE = NUM_HOSTS * "
                            "LOCAL_WORLD_SIZE)",
                            grank, gsize, lrank, lsize, host, hosts);
    lt_status st = lt_world_attach(name, lrank, lsize, out);
    if (st != LT_OK) return st;
    if ((*out)->host != host || (*out)->hosts != hosts) {
        int sh = (*out)->host, sn = (*out)->hosts;
        lt_world_close(*out);
        *out = NULL;
        return lt_set_error(LT_ERR_ARG,
                            "world: %s belongs to host %d of %d, but "
                            "LAZYTPU_HOST_INDEX=%d LAZYTPU_NUM_HOSTS=%d",
                            name, sh, sn, host, hosts);
    }
    return LT_OK;
}

/* The process's world: attached once, kept until exit (like the core
 * table, this is process state by nature). */
static pthread_once_t world_once = PTHREAD_ONCE_INIT;
static lt_world *world_default;
static lt_status world_default_st;
static char world_default_err[256];
static pid_t world_default_pid;     /* the process that attached */

static void world_default_init(void)
{
    world_default_st = lt_world_attach_from_env(&world_default);
    world_default_pid = getpid();
    if (world_default_st != LT_OK)
        snprintf(world_default_err, sizeof world_default_err, "%s",
                 lt_last_error());
}

lt_status lt_world_default(lt_world **out)
{
    pthread_once(&world_once, world_default_init);
    *out = world_default;
    if (world_default_st != LT_OK)
        return lt_set_error(world_default_st, "%s", world_default_err);
    if (world_default && world_default_pid != getpid()) {
        /* a fork child of a rank (a DataLoader worker...): the rank is its
         * parent; two processes in one rank's place would corrupt every
         * collective */
        *out = NULL;
        return lt_set_error(LT_ERR_COLLECTIVE, "world: process %d is a fork of "
                            "rank %d (pid %d): only the launcher's workers take "
                            "part in collectives", (int)getpid(),
                            lt_world_rank(world_default), (int)world_default_pid);
    }
    return LT_OK;
}

int lt_world_default_size(void)
{
    int v = 1;
    if (!lt_opt_str(LT_OPT_SHM_NAME)) return 1;
    if (env_int(LT_OPT_WORLD_SIZE, &v) != 1 || v < 1) return 1;
    return v;
}

int lt_world_default_rank(void)
{
    int v = 0;
    if (env_int(LT_OPT_ORDINAL, &v) != 1 || v < 0) return 0;
    return v;
}

void lt_world_close(lt_world *w)
{
    if (!w) return;
    if (w->rank >= 0) {
        int me = (int)getpid();
        atomic_compare_exchange_strong(&w->hdr->pid[w->rank], &me, 0);
    }
    munmap(w->base, w->bytes);
    free(w);
}

void lt_world_unlink(lt_world *w)
{
    if (!w || !w->creator || w->unlinked) return;
    shm_unlink(w->name);
    w->unlinked = 1;
}

const char *lt_world_name(const lt_world *w) { return w->name; }

int lt_world_rank(const lt_world *w)
{
    if (!w) return 0;
    return w->rank < 0 ? -1 : lt_world_grank(w, w->rank);
}

int lt_world_size(const lt_world *w) { return w ? w->size * w->hosts : 1; }
int lt_world_local_rank(const lt_world *w) { return w ? w->rank : 0; }
int lt_world_local_size(const lt_world *w) { return w ? w->size : 1; }
int lt_world_host_index(const lt_world *w) { return w ? w->host : 0; }
int lt_world_num_hosts(const lt_world *w) { return w ? w->hosts : 1; }
int64_t lt_world_inter_ns(const lt_world *w) { return w ? w->inter_ns : 0; }

void lt_world_rank_name(const lt_world *w, int local_rank, char *buf,
                        size_t cap)
{
    if (w->hosts > 1)
        snprintf(buf, cap, "rank %d (host %d)", lt_world_grank(w, local_rank),
                 w->host);
    else
        snprintf(buf, cap, "rank %d", local_rank);
}
size_t lt_world_slot_bytes(const lt_world *w) { return w->hdr->slot_bytes; }

void lt_world_set_timeout(lt_world *w, double seconds)
{
    w->timeout_s = seconds > 0 ? seconds : env_timeout();
}

/* -------------------------------------------------------------------- abort */

void lt_world_abort(lt_world *w, const char *msg)
{
    lt_whdr *h = w->hdr;
    if (atomic_exchange(&h->abort_claim, 1) == 0) {
        snprintf(h->abort_msg, sizeof h->abort_msg, "%s", msg ? msg : "aborted");
        atomic_store(&h->aborted, 1);
    }
    lt_world_futex_wake(&h->bar_gen);
    lt_world_futex_wake(&h->done_seq);
    lt_world_futex_wake(&h->req_seq);
    lt_world_futex_wake(&h->proxy_ready);
}

int lt_world_aborted(const lt_world *w, char *buf, size_t cap)
{
    if (!atomic_load(&w->hdr->aborted)) {
        if (buf && cap) buf[0] = 0;
        return 0;
    }
    if (buf && cap) snprintf(buf, cap, "%s", w->hdr->abort_msg);
    return 1;
}

lt_status lt_world_check(lt_world *w, const char *what)
{
    if (!atomic_load(&w->hdr->aborted)) return LT_OK;
    return lt_set_error(LT_ERR_COLLECTIVE, "%s: world aborted: %s", what,
                        w->hdr->abort_msg);
}

/* ------------------------------------------------------------------ barrier */

int lt_world_pid_dead(int pid)
{
    if (pid <= 0) return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return errno == ENOENT;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *rp = strrchr(buf, ')');
    if (!rp || rp[1] != ' ') return 0;
    return rp[2] == 'Z' || rp[2] == 'X';
}

/* First rank that has not arrived at barrier `gen` and whose process is
 * gone, or -1. */
static int find_dead_peer(lt_world *w, unsigned gen, int *pid_out)
{
    lt_whdr *h = w->hdr;
    for (int k = 0; k < w->size; k++) {
        if (k == w->rank || atomic_load(&h->arrived[k]) == gen + 1) continue;
        int pid = atomic_load(&h->pid[k]);
        if (lt_world_pid_dead(pid)) {
            *pid_out = pid;
            return k;
        }
    }
    return -1;
}

static void list_missing(lt_world *w, unsigned gen, char *buf, size_t cap)
{
    size_t len = 0;
    int count = 0;
    buf[0] = 0;
    for (int k = 0; k < w->size && len + 16 < cap; k++) {
        if (atomic_load(&w->hdr->arrived[k]) == gen + 1) continue;
        len += (size_t)snprintf(buf + len, cap - len, "%s%d",
                                count ? ", " : "", lt_world_grank(w, k));
        count++;
    }
}

lt_status lt_world_wait_all(lt_world *w, const char *what)
{
    lt_whdr *h = w->hdr;
    if (w->rank < 0)
        return lt_set_error(LT_ERR_ARG, "%s: the world's creator is not a rank",
                            what);
    lt_status st = lt_world_check(w, what);
    if (st != LT_OK) return st;
    unsigned gen = atomic_load(&h->bar_gen);
    atomic_store(&h->arrived[w->rank], gen + 1);
    if (atomic_fetch_add(&h->bar_count, 1) == (unsigned)w->size - 1) {
        atomic_store(&h->bar_count, 0);
        atomic_fetch_add(&h->bar_gen, 1);
        lt_world_futex_wake(&h->bar_gen);
        return LT_OK;
    }
    /* Spin only when every rank can have a CPU; oversubscribed (8 ranks on
     * 2 cores) the waiters must sleep at once to let the others run. */
    for (int i = 0; i < w->spin; i++) {
        if (atomic_load(&h->bar_gen) != gen) return LT_OK;
        __builtin_ia32_pause();
    }
    int64_t start = lt_world_now_ns();
    int64_t next_check = start + LT_WORLD_POLL_NS;
    int64_t limit = (int64_t)(w->timeout_s * 1e9);
    while (atomic_load(&h->bar_gen) == gen) {
        if (atomic_load(&h->aborted)) return lt_world_check(w, what);
        lt_world_futex_wait(&h->bar_gen, gen, LT_WORLD_POLL_NS);
        int64_t t = lt_world_now_ns();
        if (t < next_check) continue;
        next_check = t + LT_WORLD_POLL_NS;
        int pid = 0;
        int dead = find_dead_peer(w, gen, &pid);
        char msg[400];
        if (dead >= 0 && atomic_load(&h->bar_gen) == gen) {
            if (w->hosts > 1)
                snprintf(msg, sizeof msg,
                         "rank %d (host %d, local %d, pid %d) exited or died "
                         "during %s", lt_world_grank(w, dead), w->host, dead,
                         pid, what);
            else
                snprintf(msg, sizeof msg,
                         "rank %d (pid %d) exited or died during %s", dead,
                         pid, what);
            lt_world_abort(w, msg);
            return lt_world_check(w, what);
        }
        if (t - start > limit && atomic_load(&h->bar_gen) == gen) {
            char missing[200];
            list_missing(w, gen, missing, sizeof missing);
            snprintf(msg, sizeof msg,
                     "%s timed out after %g s: rank %d waited for rank(s) %s%s",
                     what, w->timeout_s, lt_world_grank(w, w->rank), missing,
                     w->hosts > 1 ? " of its host" : "");
            lt_world_abort(w, msg);
            return lt_world_check(w, what);
        }
    }
    return LT_OK;
}

/* ---------------------------------------------------------------- agreement */

const char *lt_wop_name(int op)
{
    switch (op) {
    case LT_WOP_BARRIER: return "barrier";
    case LT_WOP_ALL_REDUCE: return "all_reduce";
    case LT_WOP_ALL_GATHER: return "all_gather";
    case LT_WOP_REDUCE_SCATTER: return "reduce_scatter";
    case LT_WOP_BROADCAST: return "broadcast";
    case LT_WOP_EXCHANGE: return "rendezvous";
    default: return "?";
    }
}

static void shape_str(const lt_shape *s, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < s->ndim && len + 24 < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", d ? ", " : "",
                                (long long)s->dims[d]);
    snprintf(buf + len, cap - len, "]");
}

static int shape_eq(const lt_shape *a, const lt_shape *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return 1;
}

/* "f32 [2, 3]" */
void lt_wdesc_str(const lt_wdesc *d, char *buf, size_t cap)
{
    char s[160];
    shape_str(&d->shape, s, sizeof s);
    if (d->op == LT_WOP_BARRIER)
        snprintf(buf, cap, "(no data)");
    else if (d->op == LT_WOP_EXCHANGE)
        snprintf(buf, cap, "tag '%s'", d->tag);
    else
        snprintf(buf, cap, "%s %s", lt_dtype_name((lt_dtype)d->dtype), s);
}

void lt_world_publish(lt_world *w, lt_wdesc *d)
{
    d->seq = ++w->seq;
    w->hdr->desc[w->rank] = *d;
}

int lt_wdesc_compare(const lt_wdesc *d, const char *dname, const lt_wdesc *r,
                     const char *rname, char *msg, size_t cap)
{
    char a[200], b[200];
    lt_wdesc_str(d, a, sizeof a);
    lt_wdesc_str(r, b, sizeof b);
    msg[0] = 0;
    if (d->op != r->op) {
        snprintf(msg, cap, "collective mismatch: %s called %s %s but %s "
                 "called %s %s", dname, lt_wop_name(d->op), a, rname,
                 lt_wop_name(r->op), b);
        return 1;
    }
    const char *name = lt_wop_name(r->op);
    if (d->seq != r->seq)
        snprintf(msg, cap, "%s: %s is at collective #%llu but %s at #%llu",
                 name, dname, (unsigned long long)d->seq, rname,
                 (unsigned long long)r->seq);
    else if (strncmp(d->tag, r->tag, LT_WORLD_TAG_MAX) != 0)
        snprintf(msg, cap, "%s: %s used tag '%s' but %s used tag '%s'", name,
                 dname, d->tag, rname, r->tag);
    else if (r->op != LT_WOP_EXCHANGE && r->op != LT_WOP_BARRIER &&
             (d->dtype != r->dtype || d->count != r->count ||
              d->outer != r->outer || d->block != r->block ||
              !shape_eq(&d->shape, &r->shape)))
        snprintf(msg, cap, "%s: %s sent %s but %s sent %s", name, dname, a,
                 rname, b);
    else if (d->reduce != r->reduce)
        snprintf(msg, cap, "%s: %s asked for reduce type %s but %s for %s",
                 name, dname, lt_reduce_type_name(d->reduce), rname,
                 lt_reduce_type_name(r->reduce));
    else if (d->arg != r->arg)
        snprintf(msg, cap, "%s: %s named root %d but %s root %d", name, dname,
                 d->arg, rname, r->arg);
    return msg[0] != 0;
}

lt_status lt_world_verify_local(lt_world *w)
{
    const lt_wdesc *ds = w->hdr->desc;
    char dn[64], rn[64], msg[1024];
    for (int k = 0; k < w->size; k++)
        if (ds[k].bad[0]) {
            lt_world_rank_name(w, k, dn, sizeof dn);
            return lt_set_error(LT_ERR_COLLECTIVE, ds[k].abstain
                                ? "%s: %s could not take part: %s"
                                : "%s: %s passed invalid arguments: %s",
                                lt_wop_name(ds[k].op), dn, ds[k].bad);
        }
    lt_world_rank_name(w, 0, rn, sizeof rn);
    for (int k = 1; k < w->size; k++) {
        lt_world_rank_name(w, k, dn, sizeof dn);
        if (lt_wdesc_compare(&ds[k], dn, &ds[0], rn, msg, sizeof msg))
            return lt_set_error(LT_ERR_COLLECTIVE, "%s", msg);
    }
    return LT_OK;
}

lt_status lt_world_verify(lt_world *w, const char *what)
{
    lt_status st = lt_world_verify_local(w);
    if (st == LT_OK) return LT_OK;
    /* Every rank found the same disagreement. Wait until all have read the
     * descriptors before anyone may publish the next ones. */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    lt_status st2 = lt_world_wait_all(w, what);
    if (st2 != LT_OK) return st2;
    return lt_set_error(st, "%s", msg);
}

lt_status lt_world_agree(lt_world *w, lt_wdesc *d, const char *what)
{
    lt_world_publish(w, d);
    lt_status st = lt_world_wait_all(w, what);
    if (st != LT_OK) return st;
    return lt_world_verify_all(w, what);
}

lt_status lt_world_abstain(lt_world *w, const char *what, const char *reason)
{
    if (!w) return LT_OK;
    lt_wdesc d;
    memset(&d, 0, sizeof d);
    d.op = LT_WOP_BARRIER;
    for (int op = LT_WOP_BARRIER; op <= LT_WOP_EXCHANGE; op++)
        if (what && strcmp(what, lt_wop_name(op)) == 0) d.op = op;
    d.reduce = -1;
    d.abstain = 1;
    /* a reason longer than the descriptor's slot ends in "..." */
    if (snprintf(d.bad, sizeof d.bad, "%s", reason && *reason ? reason : "unknown error") >=
        (int)sizeof d.bad)
        memcpy(d.bad + sizeof d.bad - 4, "...", 4);
    /* lt_world_agree fails (our own bad descriptor) on every rank after the
     * first barrier, and lt_world_verify passes the second one: the same
     * two barriers a rank that found bad arguments goes through. */
    return lt_world_agree(w, &d, d.op == LT_WOP_BARRIER ? "barrier" : lt_wop_name(d.op));
}

lt_status lt_world_barrier(lt_world *w)
{
    if (!w) return LT_OK;
    lt_wdesc d;
    memset(&d, 0, sizeof d);
    d.op = LT_WOP_BARRIER;
    d.reduce = -1;
    lt_status st = lt_world_agree(w, &d, "barrier");
    if (st != LT_OK) return st;
    /* Descriptors may be overwritten by the next collective only after
     * every rank has read them. */
    return lt_world_wait_all(w, "barrier");
}
