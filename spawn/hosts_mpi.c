/*
 * spawn/hosts_mpi.c — the host leaders' link over MPI (see hosts.h): one
 * proxy thread per launcher that owns MPI, serves its host's collective
 * requests from the shared-memory mailbox (hostlink.h), carries faults
 * between hosts and gathers the metrics reports at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include "hostlink.h"
#include "hosts.h"
#include "reduce.h"
#include "options.h"

#define TAG_AGREE 11
#define TAG_FAULT 12
#define HELLO_MAGIC 0x6c744831u
#define FAULT_MAGIC 0x6c744631u
#define FAULT_DELIVERY_S 3.0
#define IDLE_WAIT_NS 2000000L          /* proxy idle poll: 2 ms */
#define MAX_INTER_BYTES ((size_t)1 << 30)

enum { CMD_FAULT = 1, CMD_FINISH = 2, CMD_STOP = 4 };
enum { EV_NONE = 0, EV_REMOTE = 1, EV_FINISHED = 2, EV_LOCAL = 3 };
enum { PR_OK = 0, PR_FAULT, PR_STOP, PR_TIMEOUT, PR_ERR };

typedef struct hello {
    uint32_t magic;
    int32_t local_size;
    int32_t pid;
    int32_t pad;
    uint64_t slot_bytes;
    char node[64];
} hello;

typedef struct fault_rec {
    uint32_t magic;
    int32_t code, ordinal, host;
    char msg[1024];
} fault_rec;

typedef struct hosts {
    lt_launch_link link;
    lt_world *w;
    int H, h, C;
    pthread_t th;
    int started, joined;
    int evfd;
    pthread_mutex_t mu;
    /* launcher -> proxy */
    atomic_int cmd;
    int f_code, f_ordinal;
    char f_msg[1024];
    char **local_reports;     /* C entries, owned */
    /* proxy -> launcher (under mu) */
    int ev, ev_code, ev_ordinal;
    char ev_msg[1024];
    /* proxy thread state */
    MPI_Comm comm, fcomm;
    MPI_Request fault_rq;
    fault_rec fault_in;
    int have_fault_rq;
    int connected;            /* comm and fcomm exist */
    int connecting;           /* in mpi_start */
    uint32_t served;
    uint64_t nagree;
    size_t inter;
    unsigned char *scratch, *scratch2;
    hello *peers;
    lt_hrec *recs;
    double timeout_s;
    char **all_reports, **host_reports;
    char errbuf[1024];
} hosts;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static const char *mpi_err(int rc, char *buf, size_t cap)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "?");
    snprintf(buf, cap, "%s", s);
    return buf;
}

/* ------------------------------------------------- sanitizer builds only */

#ifdef LAZYTPU_LSAN_KEEP_PLUGINS
/* LeakSanitizer checks at exit, after MPI_Finalize has dlclose()d Open
 * MPI's plug-ins: what they keep until exit would then be reported from
 * "<unknown module>" and no suppression could name it. This dlclose
 * (exported from lazytpu-run, so it interposes libopen-pal's) keeps every
 * library mapped; tests/c/lsan.supp then suppresses by module (mca_*). */
int dlclose(void *handle)
{
    (void)handle;
    return 0;
}
#endif

/* ---------------------------------------------------------------- events */

static void post_event(hosts *x, int ev, int code, int ordinal,
                       const char *msg)
{
    pthread_mutex_lock(&x->mu);
    if (x->ev == EV_NONE || (ev != EV_FINISHED && x->ev == EV_FINISHED)) {
        x->ev = ev;
        x->ev_code = code;
        x->ev_ordinal = ordinal;
        snprintf(x->ev_msg, sizeof x->ev_msg, "%s", msg ? msg : "");
    }
    pthread_mutex_unlock(&x->mu);
    uint64_t one = 1;
    if (write(x->evfd, &one, sizeof one) < 0) { /* counter full: still readable */ }
}

/* A fatal failure found by this proxy: the launcher stops everything and
 * tells the other hosts (through the fault command). */
static void local_failure(hosts *x, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void local_failure(hosts *x, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->errbuf, sizeof x->errbuf, fmt, ap);
    va_end(ap);
    post_event(x, EV_LOCAL, 1, -1, x->errbuf);
}

/* ----------------------------------------------------------------- polling */

/* 1 if another host's fault record arrived (event posted). */
static int remote_fault(hosts *x)
{
    if (!x->have_fault_rq) return 0;
    int flag = 0;
    MPI_Status stt;
    if (MPI_Test(&x->fault_rq, &flag, &stt) != MPI_SUCCESS || !flag) return 0;
    x->have_fault_rq = 0;
    fault_rec *f = &x->fault_in;
    f->msg[sizeof f->msg - 1] = 0;
    if (f->magic != FAULT_MAGIC)
        post_event(x, EV_REMOTE, 1, -1, "a malformed fault message arrived "
                   "from another host");
    else
        post_event(x, EV_REMOTE, f->code ? f->code : 1, f->ordinal, f->msg);
    return 1;
}

/* Polls reqs[0..n) until every one completed (completed ones become
 * MPI_REQUEST_NULL). Returns PR_OK, PR_FAULT (another host failed: event
 * posted), PR_STOP (the launcher stops: its own fault, or the world was
 * aborted), PR_TIMEOUT (timeout_s > 0 passed; pending ones stay non-null)
 * or PR_ERR (x->errbuf). */
static int poll_reqs(hosts *x, MPI_Request *reqs, int n, double timeout_s)
{
    int64_t start = now_ns();
    int spins = 0;
    long nap = 0;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) {
            if (reqs[i] == MPI_REQUEST_NULL) continue;
            int flag = 0;
            int rc = MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) {
                char e[256];
                snprintf(x->errbuf, sizeof x->errbuf, "MPI error on host %d: "
                         "%s", x->h, mpi_err(rc, e, sizeof e));
                return PR_ERR;
            }
            pending += !flag;
        }
        if (!pending) return PR_OK;
        if (remote_fault(x)) return PR_FAULT;
        int c = atomic_load(&x->cmd);
        if (x->connecting) {
            /* a local failure during start-up: connect anyway (bounded by
             * the launcher's stop), so that the fault reaches the others */
            if ((c & CMD_STOP) && !(c & CMD_FAULT)) return PR_STOP;
        } else {
            if (c & (CMD_FAULT | CMD_STOP)) return PR_STOP;
            if (lt_world_aborted(x->w, NULL, 0)) return PR_STOP;
        }
        if (timeout_s > 0 && now_ns() - start > (int64_t)(timeout_s * 1e9))
            return PR_TIMEOUT;
        if (++spins < 200) continue;
        nap = nap ? (nap * 2 > 200000 ? 200000 : nap * 2) : 5000;
        struct timespec ts = { 0, nap };
        nanosleep(&ts, NULL);
    }
}

/* Turns a poll result into a request answer. Returns 1 if fatal. */
static int poll_fatal(hosts *x, int r, const char *what, char *msg,
                      size_t cap)
{
    switch (r) {
    case PR_OK: return 0;
    case PR_FAULT:
        pthread_mutex_lock(&x->mu);
        snprintf(msg, cap, "%s", x->ev_msg);
        pthread_mutex_unlock(&x->mu);
        return 1;
    case PR_STOP:
        snprintf(msg, cap, "%s: stopped (the job is failing)", what);
        return 1;
    case PR_TIMEOUT:
        local_failure(x, "inter-host %s on host %d made no progress within "
                      "%g s (LAZYTPU_COLLECTIVE_TIMEOUT)", what, x->h,
                      x->timeout_s);
        snprintf(msg, cap, "%s", x->errbuf);
        return 1;
    default:
        local_failure(x, "inter-host %s: %s", what, x->errbuf);
        snprintf(msg, cap, "%s", x->errbuf);
        return 1;
    }
}

/* ---------------------------------------------------------------- connect */

static int mpi_start(hosts *x)
{
    int prov = 0, rc;
    char e[256];
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &prov);
    if (rc != MPI_SUCCESS) {
        local_failure(x, "host %d: MPI_Init_thread failed: %s", x->h,
                      mpi_err(rc, e, sizeof e));
        return -1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int r = -1, n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (r != x->h || n != x->H) {
        local_failure(x, "MPI says this is rank %d of %d, but the environment "
                      "said host %d of %d", r, n, x->h, x->H);
        return -1;
    }
    MPI_Request rq[2];
    rc = MPI_Comm_idup(MPI_COMM_WORLD, &x->comm, &rq[0]);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_idup(MPI_COMM_WORLD, &x->fcomm, &rq[1]);
    if (rc != MPI_SUCCESS) {
        local_failure(x, "host %d: MPI_Comm_idup: %s", x->h,
                      mpi_err(rc, e, sizeof e));
        return -1;
    }
    int pr = poll_reqs(x, rq, 2, x->timeout_s);
    if (pr != PR_OK) {
        if (pr == PR_TIMEOUT)
            local_failure(x, "host %d: the other hosts did not connect within "
                          "%g s", x->h, x->timeout_s);
        else if (pr == PR_ERR)
            local_failure(x, "host %d: %s", x->h, x->errbuf);
        return -1;
    }
    MPI_Comm_set_errhandler(x->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(x->fcomm, MPI_ERRORS_RETURN);
    x->connected = 1;
    /* the fault channel is live before anything else can fail */
    rc = MPI_Irecv(&x->fault_in, (int)sizeof x->fault_in, MPI_BYTE,
                   MPI_ANY_SOURCE, TAG_FAULT, x->fcomm, &x->fault_rq);
    if (rc != MPI_SUCCESS) {
        local_failure(x, "host %d: MPI_Irecv: %s", x->h, mpi_err(rc, e, sizeof e));
        return -1;
    }
    x->have_fault_rq = 1;
    hello me;
    memset(&me, 0, sizeof me);
    me.magic = HELLO_MAGIC;
    me.local_size = x->C;
    me.pid = (int)getpid();
    me.slot_bytes = lt_world_slot_bytes(x->w);
    gethostname(me.node, sizeof me.node - 1);
    x->peers = calloc((size_t)x->H, sizeof *x->peers);
    x->recs = calloc((size_t)x->H, sizeof *x->recs);
    if (!x->peers || !x->recs) {
        local_failure(x, "host %d: out of memory", x->h);
        return -1;
    }
    rc = MPI_Iallgather(&me, (int)sizeof me, MPI_BYTE, x->peers, (int)sizeof me,
                        MPI_BYTE, x->comm, &rq[0]);
    if (rc != MPI_SUCCESS) {
        local_failure(x, "host %d: MPI_Iallgather: %s", x->h,
                      mpi_err(rc, e, sizeof e));
        return -1;
    }
    pr = poll_reqs(x, rq, 1, x->timeout_s);
    if (pr != PR_OK) {
        if (pr == PR_TIMEOUT)
            local_failure(x, "host %d: the other hosts did not connect within "
                          "%g s", x->h, x->timeout_s);
        else if (pr == PR_ERR)
            local_failure(x, "host %d: %s", x->h, x->errbuf);
        return -1;
    }
    size_t inter = MAX_INTER_BYTES;
    for (int k = 0; k < x->H; k++) {
        hello *p = &x->peers[k];
        p->node[sizeof p->node - 1] = 0;
        if (p->magic != HELLO_MAGIC) {
            local_failure(x, "host %d is not a lazytpu-run of this version", k);
            return -1;
        }
        if (p->local_size != x->C) {
            local_failure(x, "hosts run different numbers of cores: host %d "
                          "(%s) runs -n %d but host %d (%s) -n %d; every "
                          "host must run the same -n", k, p->node,
                          p->local_size, x->h, me.node, x->C);
            return -1;
        }
        if (p->slot_bytes < inter) inter = (size_t)p->slot_bytes;
    }
    x->inter = inter & ~(size_t)63;
    x->scratch = malloc(x->inter);
    x->scratch2 = malloc(x->inter);
    if (!x->scratch || !x->scratch2) {
        local_failure(x, "host %d: out of memory for %zu-byte buffers", x->h,
                      x->inter);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- requests */

static void count_metric(const char *kind, int64_t t0, double bytes)
{
    char name[64];
    snprintf(name, sizeof name, "InterHostRequests::%s", kind);
    lt_counter_inc_name(name, 1);
    lt_metric_add(lt_metric_get("InterHostProxyTime", LT_UNIT_NS),
                  (double)(now_ns() - t0));
    if (bytes > 0)
        lt_metric_add(lt_metric_get("InterHostSentData", LT_UNIT_BYTES), bytes);
}

/* AGREE: every host sends its record to every other host; missing ones are
 * named on timeout. Returns 1 if fatal. */
static int serve_agree(hosts *x, const lt_hreq *q, lt_status *st, char *msg,
                       size_t cap)
{
    int64_t t0 = now_ns();
    const char *what = lt_wop_name(q->desc.op);
    lt_hrec_from_req(&x->recs[x->h], x->h, x->nagree, q);
    MPI_Request *rq = calloc((size_t)(2 * x->H), sizeof *rq);
    if (!rq) {
        local_failure(x, "host %d: out of memory", x->h);
        snprintf(msg, cap, "%s", x->errbuf);
        return 1;
    }
    int n = 0, rc = MPI_SUCCESS;
    for (int k = 0; k < x->H && rc == MPI_SUCCESS; k++) {
        if (k == x->h) continue;
        rc = MPI_Irecv(&x->recs[k], (int)sizeof(lt_hrec), MPI_BYTE, k,
                       TAG_AGREE, x->comm, &rq[n++]);
        if (rc == MPI_SUCCESS)
            rc = MPI_Isend(&x->recs[x->h], (int)sizeof(lt_hrec), MPI_BYTE, k,
                           TAG_AGREE, x->comm, &rq[n++]);
    }
    int pr = rc == MPI_SUCCESS ? poll_reqs(x, rq, n, x->timeout_s) : PR_ERR;
    if (rc != MPI_SUCCESS) {
        char e[256];
        snprintf(x->errbuf, sizeof x->errbuf, "%s", mpi_err(rc, e, sizeof e));
    }
    if (pr == PR_TIMEOUT) {
        char missing[300];
        size_t len = 0;
        missing[0] = 0;
        for (int i = 0, k = 0; k < x->H; k++) {
            if (k == x->h) continue;
            if (rq[i] != MPI_REQUEST_NULL && len + 40 < sizeof missing)
                len += (size_t)snprintf(missing + len, sizeof missing - len,
                                        "%s%d (%s)", len ? ", " : "", k,
                                        x->peers[k].node);
            i += 2;
        }
        char d[200];
        lt_wdesc_str(&q->desc, d, sizeof d);
        local_failure(x, "%s #%llu timed out after %g s: rank %d (host %d) "
                      "called %s %s but host(s) %s did not arrive", what,
                      (unsigned long long)q->desc.seq, x->timeout_s,
                      x->h * x->C, x->h, what, d, missing);
        free(rq);
        snprintf(msg, cap, "%s", x->errbuf);
        return 1;
    }
    free(rq);
    if (poll_fatal(x, pr, what, msg, cap)) return 1;
    x->nagree++;
    *st = lt_hostlink_verdict(x->recs, x->H, x->C, msg, cap,
                              x->w->hdr->gcounts);
    count_metric("agree", t0, (double)sizeof(lt_hrec) * (x->H - 1));
    for (int k = 0; k < x->H; k++)
        if (x->recs[k].state == LT_HREC_FINISHED) {
            /* a host is gone: nothing more can succeed */
            local_failure(x, "%s", msg);
            return 1;
        }
    return 0;
}

/* REDUCE: alltoallv of the host partials, reduction of this host's block
 * over hosts (in host order: the same on every host), in-place
 * allgatherv of the results. */
static int serve_reduce(hosts *x, const lt_hreq *q, char *msg, size_t cap)
{
    int64_t t0 = now_ns();
    int H = x->H, h = x->h;
    int64_t M = q->count;
    size_t es = lt_dtype_size((lt_dtype)q->dtype);
    size_t aes = lt_dtype_size((lt_dtype)q->acc_dtype);
    if (!es || !aes || M < 0 || (size_t)M * aes > x->inter) {
        local_failure(x, "host %d: bad reduce request (%lld elements)", h,
                      (long long)M);
        snprintf(msg, cap, "%s", x->errbuf);
        return 1;
    }
    unsigned char *res = lt_hostlink_area(x->w);
    int sc[LT_WORLD_MAX_HOSTS], sd[LT_WORLD_MAX_HOSTS];
    int rc_[LT_WORLD_MAX_HOSTS], rd[LT_WORLD_MAX_HOSTS];
    int64_t lo_h = M * h / H, blk = M * (h + 1) / H - lo_h;
    for (int j = 0; j < H; j++) {
        int64_t lo = M * j / H, hi = M * (j + 1) / H;
        sc[j] = (int)((hi - lo) * (int64_t)aes);
        sd[j] = (int)(lo * (int64_t)aes);
        rc_[j] = (int)(blk * (int64_t)aes);
        rd[j] = (int)(j * blk * (int64_t)aes);
    }
    MPI_Request rq;
    int rc = MPI_Ialltoallv(res, sc, sd, MPI_BYTE, x->scratch, rc_, rd,
                            MPI_BYTE, x->comm, &rq);
    int pr = rc == MPI_SUCCESS ? poll_reqs(x, &rq, 1, x->timeout_s) : PR_ERR;
    if (rc != MPI_SUCCESS) mpi_err(rc, x->errbuf, sizeof x->errbuf);
    if (poll_fatal(x, pr, "all_reduce", msg, cap)) return 1;
    const void *srcs[LT_WORLD_MAX_HOSTS];
    for (int k = 0; k < H; k++) srcs[k] = x->scratch + (size_t)k * blk * aes;
    if (blk > 0)
        lt_reduce_finish(res + (size_t)lo_h * es, srcs, H, blk,
                         (lt_dtype)q->dtype, q->reduce, q->scale);
    for (int j = 0; j < H; j++) {
        int64_t lo = M * j / H, hi = M * (j + 1) / H;
        rc_[j] = (int)((hi - lo) * (int64_t)es);
        rd[j] = (int)(lo * (int64_t)es);
    }
    rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, res, rc_, rd,
                         MPI_BYTE, x->comm, &rq);
    pr = rc == MPI_SUCCESS ? poll_reqs(x, &rq, 1, x->timeout_s) : PR_ERR;
    if (rc != MPI_SUCCESS) mpi_err(rc, x->errbuf, sizeof x->errbuf);
    if (poll_fatal(x, pr, "all_reduce", msg, cap)) return 1;
    count_metric("reduce", t0, (double)(M - blk) * aes + (double)blk * es * (H - 1));
    return 0;
}

/* RSCATTER: res = [rows][H][C][cols] partials; host j gets [rows][j][..]. */
static int serve_rscatter(hosts *x, const lt_hreq *q, char *msg, size_t cap)
{
    int64_t t0 = now_ns();
    int H = x->H, C = x->C;
    int64_t rows = q->count, cols = q->cols;
    size_t es = lt_dtype_size((lt_dtype)q->dtype);
    size_t aes = lt_dtype_size((lt_dtype)q->acc_dtype);
    int64_t blk = rows * C * cols;   /* elements per host block */
    if (!es || !aes || rows < 0 || cols < 0 ||
        (size_t)(blk * H) * aes > x->inter) {
        local_failure(x, "host %d: bad reduce_scatter request", x->h);
        snprintf(msg, cap, "%s", x->errbuf);
        return 1;
    }
    unsigned char *res = lt_hostlink_area(x->w);
    size_t row_bytes = (size_t)(C * cols) * aes;
    for (int j = 0; j < H; j++)
        for (int64_t i = 0; i < rows; i++)
            memcpy(x->scratch2 + ((size_t)j * rows + i) * row_bytes,
                   res + ((size_t)i * H + j) * row_bytes, row_bytes);
    MPI_Request rq;
    int bytes = (int)((size_t)blk * aes);
    int rc = MPI_Ialltoall(x->scratch2, bytes, MPI_BYTE, x->scratch, bytes,
                           MPI_BYTE, x->comm, &rq);
    int pr = rc == MPI_SUCCESS ? poll_reqs(x, &rq, 1, x->timeout_s) : PR_ERR;
    if (rc != MPI_SUCCESS) mpi_err(rc, x->errbuf, sizeof x->errbuf);
    if (poll_fatal(x, pr, "reduce_scatter", msg, cap)) return 1;
    const void *srcs[LT_WORLD_MAX_HOSTS];
    for (int k = 0; k < H; k++) srcs[k] = x->scratch + (size_t)k * blk * aes;
    if (blk > 0)
        lt_reduce_finish(res, srcs, H, blk, (lt_dtype)q->dtype, q->reduce,
                         q->scale);
    count_metric("reduce_scatter", t0, (double)bytes * (H - 1));
    return 0;
}

static int serve_gather(hosts *x, const lt_hreq *q, char *msg, size_t cap)
{
    int64_t t0 = now_ns();
    if (q->count < 0 || (size_t)q->count * x->H > x->inter) {
        local_failure(x, "host %d: bad gather request", x->h);
        snprintf(msg, cap, "%s", x->errbuf);
        return 1;
    }
    MPI_Request rq;
    int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL,
                            lt_hostlink_area(x->w), (int)q->count, MPI_BYTE,
                            x->comm, &rq);
    int pr = rc == MPI_SUCCESS ? poll_reqs(x, &rq, 1, x->timeout_s) : PR_ERR;
    if (rc != MPI_SUCCESS) mpi_err(rc, x->errbuf, sizeof x->errbuf);
    if (poll_fatal(x, pr, "all_gather", msg, cap)) return 1;
    count_metric("gather", t0, (double)q->count * (x->H - 1));
    return 0;
}

static int serve_bcast(hosts *x, const lt_hreq *q, char *msg, size_t cap)
{
    int64_t t0 = now_ns();
    if (q->count < 0 || (size_t)q->count > x->inter || q->root_host < 0 ||
        q->root_host >= x->H) {
        local_failure(x, "host %d: bad broadcast request", x->h);
        snprintf(msg, cap, "%s", x->errbuf);
        return 1;
    }
    MPI_Request rq;
    int rc = MPI_Ibcast(lt_hostlink_area(x->w), (int)q->count, MPI_BYTE,
                        q->root_host, x->comm, &rq);
    int pr = rc == MPI_SUCCESS ? poll_reqs(x, &rq, 1, x->timeout_s) : PR_ERR;
    if (rc != MPI_SUCCESS) mpi_err(rc, x->errbuf, sizeof x->errbuf);
    if (poll_fatal(x, pr, "broadcast", msg, cap)) return 1;
    count_metric("broadcast", t0, x->h == q->root_host ? (double)q->count : 0);
    return 0;
}

/* Serves one request; answers it. Returns 1 if fatal (answered with an
 * error; an event was posted unless the launcher itself is stopping). */
static int serve(hosts *x, uint32_t seq, const lt_hreq *q)
{
    char msg[1024];
    lt_status st = LT_OK;
    int fatal;
    msg[0] = 0;
    switch (q->kind) {
    case LT_HREQ_AGREE: fatal = serve_agree(x, q, &st, msg, sizeof msg); break;
    case LT_HREQ_REDUCE: fatal = serve_reduce(x, q, msg, sizeof msg); break;
    case LT_HREQ_RSCATTER: fatal = serve_rscatter(x, q, msg, sizeof msg); break;
    case LT_HREQ_GATHER: fatal = serve_gather(x, q, msg, sizeof msg); break;
    case LT_HREQ_BCAST: fatal = serve_bcast(x, q, msg, sizeof msg); break;
    default:
        local_failure(x, "host %d: unknown request kind %d", x->h, q->kind);
        snprintf(msg, sizeof msg, "%s", x->errbuf);
        fatal = 1;
        break;
    }
    if (fatal) st = LT_ERR_COLLECTIVE;
    lt_hostlink_done(x->w, seq, st, msg);
    return fatal;
}

/* ------------------------------------------------------------------ faults */

static void send_faults(hosts *x)
{
    if (!x->connected) return;   /* MPI never came up: mpirun ends the job */
    fault_rec f;
    memset(&f, 0, sizeof f);
    f.magic = FAULT_MAGIC;
    pthread_mutex_lock(&x->mu);
    f.code = x->f_code;
    f.ordinal = x->f_ordinal;
    snprintf(f.msg, sizeof f.msg, "%s", x->f_msg);
    pthread_mutex_unlock(&x->mu);
    f.host = x->h;
    MPI_Request *rq = calloc((size_t)x->H, sizeof *rq);
    if (!rq) return;
    int n = 0;
    for (int k = 0; k < x->H; k++)
        if (k != x->h &&
            MPI_Issend(&f, (int)sizeof f, MPI_BYTE, k, TAG_FAULT, x->fcomm,
                       &rq[n]) == MPI_SUCCESS)
            n++;
    /* delivered when matched by the peers' posted receives; bounded */
    int64_t end = now_ns() + (int64_t)(FAULT_DELIVERY_S * 1e9);
    for (;;) {
        int flag = 0;
        if (MPI_Testall(n, rq, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS ||
            flag || now_ns() > end)
            break;
        if (remote_fault(x)) { /* they know already */ }
        struct timespec ts = { 0, 200000 };
        nanosleep(&ts, NULL);
    }
    free(rq);
}

/* ------------------------------------------------------------------ finish */

/* Packs n strings as [int64 n][int64 len...][bytes...]. */
static char *pack_texts(char *const *t, int n, size_t *out_len)
{
    size_t len = 8 * (size_t)(n + 1);
    for (int i = 0; i < n; i++) len += t[i] ? strlen(t[i]) : 0;
    char *b = malloc(len);
    if (!b) return NULL;
    int64_t v = n;
    memcpy(b, &v, 8);
    size_t off = 8 * (size_t)(n + 1);
    for (int i = 0; i < n; i++) {
        v = t[i] ? (int64_t)strlen(t[i]) : -1;
        memcpy(b + 8 * (size_t)(i + 1), &v, 8);
        if (v > 0) {
            memcpy(b + off, t[i], (size_t)v);
            off += (size_t)v;
        }
    }
    *out_len = len;
    return b;
}

/* Unpacks into out[0..n) (NULL for missing). Returns the bytes used. */
static size_t unpack_texts(const char *b, size_t len, char **out, int n)
{
    if (len < 8) return len;
    int64_t cnt;
    memcpy(&cnt, b, 8);
    if (cnt != n || len < 8 * (size_t)(n + 1)) return len;
    size_t off = 8 * (size_t)(n + 1);
    for (int i = 0; i < n; i++) {
        int64_t l;
        memcpy(&l, b + 8 * (size_t)(i + 1), 8);
        if (l < 0 || off + (size_t)l > len) continue;
        out[i] = malloc((size_t)l + 1);
        if (out[i]) {
            memcpy(out[i], b + off, (size_t)l);
            out[i][l] = 0;
        }
        off += (size_t)l;
    }
    return off;
}

/* Gathers every host's reports (C workers + the proxy's own) to host 0. */
static int gather_reports(hosts *x)
{
    int C = x->C, H = x->H;
    char **mine = calloc((size_t)C + 1, sizeof *mine);
    if (!mine) return PR_ERR;
    for (int k = 0; k < C; k++) mine[k] = x->local_reports ? x->local_reports[k] : NULL;
    mine[C] = lt_metrics_report();
    size_t len = 0;
    char *buf = pack_texts(mine, C + 1, &len);
    free(mine[C]);
    free(mine);
    if (!buf || len > (size_t)INT32_MAX) {
        free(buf);
        snprintf(x->errbuf, sizeof x->errbuf, "metrics reports too large");
        return PR_ERR;
    }
    int mylen = (int)len;
    int *lens = x->h == 0 ? calloc((size_t)H, sizeof *lens) : NULL;
    MPI_Request rq;
    int rc = MPI_Igather(&mylen, 1, MPI_INT, lens, 1, MPI_INT, 0, x->comm, &rq);
    int pr = rc == MPI_SUCCESS ? poll_reqs(x, &rq, 1, 0) : PR_ERR;
    if (pr != PR_OK) {
        free(buf);
        free(lens);
        return pr;
    }
    int *displs = NULL;
    char *all = NULL;
    if (x->h == 0) {
        displs = calloc((size_t)H, sizeof *displs);
        int64_t total = 0;
        for (int k = 0; k < H; k++) {
            displs[k] = (int)total;
            total += lens[k];
        }
        all = total <= INT32_MAX ? malloc((size_t)total + 1) : NULL;
    }
    rc = MPI_Igatherv(buf, mylen, MPI_BYTE, all, lens, displs, MPI_BYTE, 0,
                      x->comm, &rq);
    pr = rc == MPI_SUCCESS ? poll_reqs(x, &rq, 1, 0) : PR_ERR;
    free(buf);
    if (pr == PR_OK && x->h == 0 && all) {
        x->all_reports = calloc((size_t)H * C, sizeof *x->all_reports);
        x->host_reports = calloc((size_t)H, sizeof *x->host_reports);
        char **tmp = calloc((size_t)C + 1, sizeof *tmp);
        for (int k = 0; k < H && x->all_reports && x->host_reports && tmp; k++) {
            memset(tmp, 0, ((size_t)C + 1) * sizeof *tmp);
            unpack_texts(all + displs[k], (size_t)lens[k], tmp, C + 1);
            for (int l = 0; l < C; l++) x->all_reports[k * C + l] = tmp[l];
            x->host_reports[k] = tmp[C];
        }
        free(tmp);
    }
    free(all);
    free(displs);
    free(lens);
    return pr;
}

static void finish(hosts *x)
{
    lt_hrec *me = &x->recs[x->h];
    memset(me, 0, sizeof *me);
    me->magic = LT_HREC_MAGIC;
    me->host = x->h;
    me->state = LT_HREC_FINISHED;
    me->nagree = x->nagree;
    MPI_Request *rq = calloc((size_t)(2 * x->H), sizeof *rq);
    if (!rq) {
        local_failure(x, "host %d: out of memory", x->h);
        return;
    }
    int n = 0;
    for (int k = 0; k < x->H; k++) {
        if (k == x->h) continue;
        MPI_Irecv(&x->recs[k], (int)sizeof(lt_hrec), MPI_BYTE, k, TAG_AGREE,
                  x->comm, &rq[n++]);
        MPI_Isend(me, (int)sizeof(lt_hrec), MPI_BYTE, k, TAG_AGREE, x->comm,
                  &rq[n++]);
    }
    /* no timeout: other hosts may legitimately run longer (the launcher's
     * --timeout still applies) */
    int pr = poll_reqs(x, rq, n, 0);
    free(rq);
    if (pr == PR_ERR) local_failure(x, "host %d: %s", x->h, x->errbuf);
    if (pr != PR_OK) return;
    char msg[1024];
    if (lt_hostlink_verdict(x->recs, x->H, x->C, msg, sizeof msg, NULL) !=
        LT_OK) {
        local_failure(x, "%s", msg);
        return;
    }
    pr = gather_reports(x);
    if (pr == PR_ERR) local_failure(x, "host %d: %s", x->h, x->errbuf);
    if (pr != PR_OK) return;
    if (x->have_fault_rq) {
        MPI_Cancel(&x->fault_rq);
        MPI_Wait(&x->fault_rq, MPI_STATUS_IGNORE);
        x->have_fault_rq = 0;
    }
    MPI_Comm_free(&x->comm);
    MPI_Comm_free(&x->fcomm);
    x->connected = 0;
    MPI_Finalize();
    post_event(x, EV_FINISHED, 0, -1, "");
}

/* ------------------------------------------------------------ proxy thread */

/* After a fatal event: wait for the launcher's fault or stop command. */
static void drain(hosts *x)
{
    for (;;) {
        int c = atomic_load(&x->cmd);
        if (c & CMD_FAULT) {
            send_faults(x);
            return;
        }
        if (c & CMD_STOP) return;
        remote_fault(x);
        struct timespec ts = { 0, IDLE_WAIT_NS };
        nanosleep(&ts, NULL);
    }
}

static void *proxy_main(void *arg)
{
    hosts *x = arg;
    x->connecting = 1;
    int rc = mpi_start(x);
    x->connecting = 0;
    if (rc != 0) {
        lt_world_abort(x->w, x->errbuf);
        drain(x);
        return NULL;
    }
    lt_hostlink_set_ready(x->w, x->inter);
    for (;;) {
        int c = atomic_load(&x->cmd);
        if (c & CMD_FAULT) {
            send_faults(x);
            return NULL;
        }
        if (c & CMD_STOP) return NULL;
        if (remote_fault(x)) break;
        if (c & CMD_FINISH) {
            finish(x);
            break;
        }
        lt_hreq q;
        if (lt_hostlink_next(x->w, x->served, &q, IDLE_WAIT_NS)) {
            uint32_t seq = x->served + 1;
            int fatal = serve(x, seq, &q);
            x->served = seq;
            if (fatal) break;
        }
    }
    drain(x);
    return NULL;
}

/* ------------------------------------------------------- link callbacks */

static int cb_start(void *ctx, lt_world *w)
{
    hosts *x = ctx;
    x->w = w;
    x->C = lt_world_local_size(w);
    x->timeout_s = lt_opt_seconds(LT_OPT_COLLECTIVE_TIMEOUT);
    x->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (x->evfd < 0) {
        lt_set_error(LT_ERR_INTERNAL, "lazytpu-run: eventfd: %s",
                     strerror(errno));
        return -1;
    }
    if (pthread_create(&x->th, NULL, proxy_main, x) != 0) {
        lt_set_error(LT_ERR_INTERNAL, "lazytpu-run: cannot start the host "
                     "proxy thread");
        return -1;
    }
    x->started = 1;
    return x->evfd;
}

static int cb_event(void *ctx, int *code, int *ordinal, char *msg,
                    size_t cap)
{
    hosts *x = ctx;
    uint64_t v;
    if (read(x->evfd, &v, sizeof v) < 0) { /* nothing pending */ }
    pthread_mutex_lock(&x->mu);
    int ev = x->ev;
    *code = x->ev_code;
    *ordinal = x->ev_ordinal;
    snprintf(msg, cap, "%s", x->ev_msg);
    x->ev = EV_NONE;
    pthread_mutex_unlock(&x->mu);
    return ev == EV_LOCAL ? 1 : ev;
}

static void cb_fault(void *ctx, int code, int ordinal, const char *msg)
{
    hosts *x = ctx;
    pthread_mutex_lock(&x->mu);
    x->f_code = code;
    x->f_ordinal = ordinal;
    snprintf(x->f_msg, sizeof x->f_msg, "%s", msg);
    pthread_mutex_unlock(&x->mu);
    atomic_fetch_or(&x->cmd, CMD_FAULT);
    if (x->w) lt_hostlink_wake(x->w);
}

static void cb_finish(void *ctx, char **reports, int n)
{
    hosts *x = ctx;
    x->local_reports = calloc((size_t)x->C, sizeof *x->local_reports);
    for (int k = 0; k < n && k < x->C && x->local_reports; k++)
        x->local_reports[k] = reports[k];
    atomic_fetch_or(&x->cmd, CMD_FINISH);
    if (x->w) lt_hostlink_wake(x->w);
}

static void cb_reports(void *ctx, char ***ordinals, char ***hostr)
{
    hosts *x = ctx;
    *ordinals = x->all_reports;
    *hostr = x->host_reports;
}

static void cb_stop(void *ctx)
{
    hosts *x = ctx;
    if (!x->started || x->joined) return;
    atomic_fetch_or(&x->cmd, CMD_STOP);
    if (x->w) lt_hostlink_wake(x->w);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)FAULT_DELIVERY_S + 3;
    if (pthread_timedjoin_np(x->th, NULL, &ts) == 0) x->joined = 1;
}

lt_launch_link *lt_hosts_link_new(int host_index, int num_hosts)
{
    hosts *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->h = host_index;
    x->H = num_hosts;
    x->evfd = -1;
    pthread_mutex_init(&x->mu, NULL);
    x->link.ctx = x;
    x->link.start = cb_start;
    x->link.event = cb_event;
    x->link.fault = cb_fault;
    x->link.finish = cb_finish;
    x->link.reports = cb_reports;
    x->link.stop = cb_stop;
    return &x->link;
}

void lt_hosts_link_free(lt_launch_link *link)
{
    if (!link) return;
    hosts *x = link->ctx;
    if (x->started && !x->joined) return;   /* thread still running: leak */
    if (x->evfd >= 0) close(x->evfd);
    if (x->local_reports)
        for (int k = 0; k < x->C; k++) free(x->local_reports[k]);
    free(x->local_reports);
    if (x->all_reports)
        for (int k = 0; k < x->H * x->C; k++) free(x->all_reports[k]);
    free(x->all_reports);
    if (x->host_reports)
        for (int k = 0; k < x->H; k++) free(x->host_reports[k]);
    free(x->host_reports);
    free(x->scratch);
    free(x->scratch2);
    free(x->peers);
    free(x->recs);
    pthread_mutex_destroy(&x->mu);
    free(x);
}
