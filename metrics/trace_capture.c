/*
 * metrics/trace_capture.c — capture sessions: trace events kept in memory
 * between lt_trace_capture_start and lt_trace_capture_stop, written as an
 * XSpace protobuf (.xplane.pb) and gzipped Chrome trace JSON (see
 * trace_capture.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "trace_capture.h"
#include "trace_events.h"
#include "registry.h"
#include "options.h"

#define CAP_MAX_EVENTS (1 << 18)

static pthread_mutex_t cap_mu = PTHREAD_MUTEX_INITIALIZER;
static int cap_on;
static int64_t cap_t0;             /* lt_now_ns at start */
static int64_t cap_wall0;          /* CLOCK_REALTIME ns at start */
static lt_trace_ev *cap_ev;
static int cap_n, cap_cap;
static int64_t cap_dropped;

int lt_trace_capture_active(void)
{
    pthread_mutex_lock(&cap_mu);
    int on = cap_on;
    pthread_mutex_unlock(&cap_mu);
    return on;
}

lt_status lt_trace_capture_start(void)
{
    pthread_mutex_lock(&cap_mu);
    if (cap_on) {
        pthread_mutex_unlock(&cap_mu);
        return lt_set_error(LT_ERR_STATE, "Profile has already been started. "
                            "Only one profile may be run at a time.");
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    cap_wall0 = (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
    cap_t0 = lt_now_ns();
    cap_n = 0;
    cap_dropped = 0;
    cap_on = 1;
    lt_trace_events_set_capture(1);
    pthread_mutex_unlock(&cap_mu);
    return LT_OK;
}

void lt_trace_capture_record(const char *name, const char *cat, int64_t start_ns,
                             int64_t dur_ns, int tid, const char *args_json)
{
    pthread_mutex_lock(&cap_mu);
    if (cap_on && start_ns >= cap_t0) {
        if (cap_n == cap_cap && cap_cap < CAP_MAX_EVENTS) {
            int nc = cap_cap ? cap_cap * 2 : 1024;
            lt_trace_ev *p = realloc(cap_ev, (size_t)nc * sizeof *p);
            if (p) {
                cap_ev = p;
                cap_cap = nc;
            }
        }
        if (cap_n < cap_cap)
            lt_trace_ev_fill(&cap_ev[cap_n++], name, cat, start_ns, dur_ns, tid, args_json);
        else
            cap_dropped++;
    }
    pthread_mutex_unlock(&cap_mu);
}

/* ---------------------------------------------------------- byte buffer */

typedef struct buf {
    unsigned char *p;
    size_t len, cap;
    int oom;
} buf;

static void b_put(buf *b, const void *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n) nc *= 2;
        unsigned char *p = realloc(b->p, nc);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void pb_varint(buf *b, uint64_t v)
{
    unsigned char t[10];
    int n = 0;
    do {
        t[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) t[n] |= 0x80;
        n++;
    } while (v);
    b_put(b, t, (size_t)n);
}

/* Field `f` as a varint; proto3 leaves zeros out unless `always`. */
static void pb_int(buf *b, int f, int64_t v, int always)
{
    if (!v && !always) return;
    pb_varint(b, (uint64_t)f << 3);
    pb_varint(b, (uint64_t)v);
}

static void pb_bytes(buf *b, int f, const void *s, size_t n)
{
    pb_varint(b, ((uint64_t)f << 3) | 2);
    pb_varint(b, n);
    b_put(b, s, n);
}

static void pb_str(buf *b, int f, const char *s) { pb_bytes(b, f, s, strlen(s)); }

/* Embeds message m as field f of b and empties m. */
static void pb_msg(buf *b, int f, buf *m)
{
    if (m->oom) b->oom = 1;
    pb_bytes(b, f, m->p, m->len);
    m->len = 0;
}

/* ------------------------------------------------------------- xplane */

static const char *thread_name(int tid, char *tmp, size_t n)
{
    if (tid == LT_TRACE_TID_HOST) return "host";
    if (tid == LT_TRACE_TID_LOADER) return "loader";
    if (tid < 0) {
        snprintf(tmp, n, "host thread %d", -tid);
        return tmp;
    }
    snprintf(tmp, n, "core %d", tid);
    return tmp;
}

static int cmp_tid(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* XSpace{planes: [XPlane "/host:CPU"], warnings, hostnames}. Event metadata
 * ids are 1 + the index of the first event of that name; stat metadata 1 is
 * "cat". Line timestamps are wall-clock ns (the session's start on
 * CLOCK_REALTIME plus the monotonic offset), event offsets in ps. */
static void xspace(buf *out, const lt_trace_ev *ev, int n, int64_t dropped, const char *host,
                   int64_t t0, int64_t wall0)
{
    buf plane = {0}, line = {0}, e = {0}, stat = {0}, md = {0}, ent = {0};
    pb_int(&plane, 1, 1, 0);
    pb_str(&plane, 2, "/host:CPU");
    int tids[64], nt = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int k = 0; k < nt && !seen; k++) seen = tids[k] == ev[i].tid;
        if (!seen && nt < 64) tids[nt++] = ev[i].tid;
    }
    qsort(tids, (size_t)nt, sizeof *tids, cmp_tid);
    int *name_id = malloc((size_t)(n ? n : 1) * sizeof *name_id);
    if (!name_id) {
        out->oom = 1;
        return;
    }
    for (int i = 0; i < n; i++) {
        name_id[i] = i + 1;
        for (int j = 0; j < i; j++)
            if (strcmp(ev[j].name, ev[i].name) == 0) {
                name_id[i] = name_id[j];
                break;
            }
    }
    for (int k = 0; k < nt; k++) {
        int64_t first = INT64_MAX, last = INT64_MIN;
        for (int i = 0; i < n; i++)
            if (ev[i].tid == tids[k]) {
                if (ev[i].ts_ns < first) first = ev[i].ts_ns;
                if (ev[i].ts_ns + ev[i].dur_ns > last) last = ev[i].ts_ns + ev[i].dur_ns;
            }
        char tmp[32];
        int id = lt_trace_ev_tid(tids[k]);
        pb_int(&line, 1, id, 1);
        pb_str(&line, 2, thread_name(tids[k], tmp, sizeof tmp));
        pb_int(&line, 3, wall0 + (first - t0), 0);
        for (int i = 0; i < n; i++) {
            if (ev[i].tid != tids[k]) continue;
            pb_int(&e, 1, name_id[i], 0);
            pb_int(&e, 2, (ev[i].ts_ns - first) * 1000, 1);
            pb_int(&e, 3, (ev[i].dur_ns > 0 ? ev[i].dur_ns : 0) * 1000, 0);
            pb_int(&stat, 1, 1, 0);
            pb_str(&stat, 5, ev[i].cat);
            pb_msg(&e, 4, &stat);
            pb_msg(&line, 4, &e);
        }
        pb_int(&line, 9, (last - first) * 1000, 0);
        pb_int(&line, 10, id, 1);
        pb_msg(&plane, 3, &line);
    }
    for (int i = 0; i < n; i++) {
        if (name_id[i] != i + 1) continue;
        pb_int(&md, 1, i + 1, 0);
        pb_str(&md, 2, ev[i].name);
        pb_int(&ent, 1, i + 1, 0);
        pb_msg(&ent, 2, &md);
        pb_msg(&plane, 4, &ent);
    }
    pb_int(&md, 1, 1, 0);
    pb_str(&md, 2, "cat");
    pb_str(&md, 3, "lazytpu trace event category");
    pb_int(&ent, 1, 1, 0);
    pb_msg(&ent, 2, &md);
    pb_msg(&plane, 5, &ent);
    pb_msg(out, 1, &plane);
    if (dropped) {
        char w[96];
        snprintf(w, sizeof w, "lazytpu: %lld trace events dropped (capture buffer full)",
                 (long long)dropped);
        pb_str(out, 3, w);
    }
    pb_str(out, 4, host);
    free(name_id);
    free(plane.p), free(line.p), free(e.p), free(stat.p), free(md.p), free(ent.p);
}

/* ---------------------------------------------------------------- gzip */

static uint32_t crc_table[256];

static void crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, crc_table_init);
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

/* gzip member of `in` with stored (uncompressed) deflate blocks: any gzip
 * reader opens it; it is not smaller than the JSON. */
static void gzip_stored(buf *out, const unsigned char *in, size_t n)
{
    static const unsigned char hdr[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
    b_put(out, hdr, sizeof hdr);
    size_t off = 0;
    do {
        size_t k = n - off > 65535 ? 65535 : n - off;
        unsigned char bh[5] = {(unsigned char)(off + k == n), (unsigned char)(k & 0xff),
                               (unsigned char)(k >> 8), (unsigned char)(~k & 0xff),
                               (unsigned char)((~k >> 8) & 0xff)};
        b_put(out, bh, sizeof bh);
        b_put(out, in + off, k);
        off += k;
    } while (off < n);
    uint32_t crc = crc32_of(in, n), sz = (uint32_t)n;
    unsigned char tail[8];
    for (int i = 0; i < 4; i++) {
        tail[i] = (unsigned char)(crc >> (8 * i));
        tail[4 + i] = (unsigned char)(sz >> (8 * i));
    }
    b_put(out, tail, sizeof tail);
}

/* ---------------------------------------------------------- chrome json */

/* {"traceEvents": [...]} with ts relative to the session's start (us). */
static char *trace_json(const lt_trace_ev *ev, int n, int pid, int64_t t0, size_t *len)
{
    lt_sb sb = {0};
    lt_sb_printf(&sb, "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
                 "\"tid\":0,\"args\":{\"name\":\"lazytpu ordinal %d\"}}", pid, pid);
    int done[64], nd = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int k = 0; k < nd && !seen; k++) seen = done[k] == ev[i].tid;
        if (seen || nd == 64) continue;
        done[nd++] = ev[i].tid;
        char tmp[32];
        lt_trace_thread_meta(&sb, pid, lt_trace_ev_tid(ev[i].tid),
                             thread_name(ev[i].tid, tmp, sizeof tmp),
                             ev[i].tid >= 0 ? ev[i].tid : ev[i].tid - 1);
    }
    for (int i = 0; i < n; i++) {
        lt_trace_ev e = ev[i];
        e.ts_ns -= t0;
        lt_trace_ev_json(&sb, &e, pid);
    }
    lt_sb_puts(&sb, "\n],\"displayTimeUnit\":\"ms\"}\n");
    *len = sb.len;
    return lt_sb_take(&sb);
}

/* ------------------------------------------------------------- writing */

static lt_status mkdirs(char *path)
{
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        int r = mkdir(path, 0755);
        int e = errno;
        *p = c;
        if (r != 0 && e != EEXIST) {
            *p = 0;
            lt_status st = lt_set_error(LT_ERR_ARG, "profiler: cannot create directory %s: %s",
                                        path, strerror(e));
            *p = c;
            return st;
        }
        if (!c) return LT_OK;
    }
}

static lt_status write_file(const char *path, const void *p, size_t n, int oom)
{
    if (oom) return lt_set_error(LT_ERR_OOM, "profiler: out of host memory writing %s", path);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        int e = errno;
        if (f) fclose(f);
        return lt_set_error(LT_ERR_ARG, "profiler: cannot write %s: %s", path, strerror(e));
    }
    return LT_OK;
}

static lt_status export_run(const char *logdir, const lt_trace_ev *ev, int n, int64_t dropped,
                            int64_t t0, int64_t wall0, char *run_dir, size_t rn)
{
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    time_t now = (time_t)(wall0 / 1000000000ll);
    struct tm tm;
    localtime_r(&now, &tm);
    char dir[4096], path[4400];
    int len = snprintf(dir, sizeof dir, "%s/plugins/profile/%04d_%02d_%02d_%02d_%02d_%02d", logdir,
                       tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                       tm.tm_sec);
    if (len < 0 || (size_t)len >= sizeof dir)
        return lt_set_error(LT_ERR_ARG, "profiler: log directory path too long: %s", logdir);
    lt_status st = mkdirs(dir);
    if (st != LT_OK) return st;
    if (run_dir && rn) snprintf(run_dir, rn, "%s", dir);

    buf pb = {0};
    xspace(&pb, ev, n, dropped, host, t0, wall0);
    snprintf(path, sizeof path, "%s/%s.xplane.pb", dir, host);
    st = write_file(path, pb.p, pb.len, pb.oom);
    free(pb.p);
    if (st != LT_OK) return st;

    size_t jn = 0;
    char *js = trace_json(ev, n, (int)lt_opt_int(LT_OPT_ORDINAL), t0, &jn);
    buf gz = {0};
    if (js) gzip_stored(&gz, (const unsigned char *)js, jn);
    snprintf(path, sizeof path, "%s/%s.trace.json.gz", dir, host);
    st = write_file(path, gz.p, gz.len, gz.oom || !js);
    free(js);
    free(gz.p);
    return st;
}

lt_status lt_trace_capture_stop(const char *logdir, char *run_dir, size_t n)
{
    pthread_mutex_lock(&cap_mu);
    if (!cap_on) {
        pthread_mutex_unlock(&cap_mu);
        return lt_set_error(LT_ERR_STATE, "No profile started");
    }
    cap_on = 0;
    lt_trace_events_set_capture(0);
    lt_trace_ev *ev = cap_ev;
    int count = cap_n;
    int64_t dropped = cap_dropped, t0 = cap_t0, wall0 = cap_wall0;
    cap_ev = NULL;
    cap_n = cap_cap = 0;
    pthread_mutex_unlock(&cap_mu);
    lt_status st = LT_OK;
    if (logdir && !*logdir)
        st = lt_set_error(LT_ERR_ARG, "profiler: empty log directory");
    else if (logdir)
        st = export_run(logdir, ev, count, dropped, t0, wall0, run_dir, n);
    free(ev);
    return st;
}
