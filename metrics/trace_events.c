/*
 * metrics/trace_events.c — buffered Chrome/Perfetto trace events (see
 * trace_events.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "trace_events.h"
#include "registry.h"
#include "options.h"
#include "trace_capture.h"

typedef lt_trace_ev trace_ev;

#define EV_BATCH 4096
static const char FOOTER[] = "\n],\"displayTimeUnit\":\"ms\"}\n";

static pthread_mutex_t tr_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int tr_on;           /* the file sink is open */
static atomic_int tr_capture;      /* a capture session (trace_capture.c) records */
static int tr_fd = -1;
static off_t tr_body_end;          /* offset where the footer starts */
static trace_ev *tr_buf;
static int tr_n;
static int tr_pid;
static char tr_path[1100];
static int tr_atexit_done;

int lt_trace_enabled(void)
{
    return atomic_load_explicit(&tr_on, memory_order_relaxed) ||
           atomic_load_explicit(&tr_capture, memory_order_relaxed);
}

void lt_trace_events_set_capture(int on) { atomic_store(&tr_capture, on ? 1 : 0); }

int lt_trace_ev_tid(int tid)
{
    if (tid >= 0) return tid;
    return LT_TRACE_HOST_TID + (-tid - 1);   /* -1 host, -2 loader, ... */
}

static int write_all(int fd, const char *p, size_t n, off_t off)
{
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w < 0) {
            if (errno == EINTR) continue;
            return 0;
        }
        p += w;
        n -= (size_t)w;
        off += w;
    }
    return 1;
}

/* Writes text at the body end, then the footer after it (lock held). */
static int append_body(const char *text, size_t len)
{
    if (!write_all(tr_fd, text, len, tr_body_end)) return 0;
    tr_body_end += (off_t)len;
    return write_all(tr_fd, FOOTER, sizeof FOOTER - 1, tr_body_end);
}

static void fail_off(void)
{
    fprintf(stderr, "lazytpu: LAZYTPU_TRACE: cannot write %s; tracing disabled\n", tr_path);
    atomic_store(&tr_on, 0);
    if (tr_fd >= 0) close(tr_fd);
    tr_fd = -1;
    tr_n = 0;
}

void lt_trace_ev_fill(lt_trace_ev *e, const char *name, const char *cat, int64_t start_ns,
                      int64_t dur_ns, int tid, const char *args_json)
{
    e->ts_ns = start_ns;
    e->dur_ns = dur_ns;
    e->tid = tid;
    snprintf(e->name, sizeof e->name, "%s", name ? name : "?");
    snprintf(e->cat, sizeof e->cat, "%s", cat ? cat : "");
    if (args_json && strlen(args_json) < sizeof e->args)
        memcpy(e->args, args_json, strlen(args_json) + 1);
    else
        e->args[0] = 0;   /* never a truncated (invalid) object */
}

void lt_trace_ev_json(lt_sb *sb, const lt_trace_ev *e, int pid)
{
    lt_sb_puts(sb, ",\n{\"name\":");
    lt_sb_json_str(sb, e->name);
    lt_sb_puts(sb, ",\"cat\":");
    lt_sb_json_str(sb, e->cat);
    lt_sb_printf(sb, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d",
                 (double)e->ts_ns / 1e3, (double)(e->dur_ns > 0 ? e->dur_ns : 0) / 1e3,
                 pid, lt_trace_ev_tid(e->tid));
    if (e->args[0]) lt_sb_printf(sb, ",\"args\":{%s}", e->args);
    lt_sb_puts(sb, "}");
}

/* Writes the buffered events (lock held). */
static void flush_locked(void)
{
    if (tr_fd < 0 || tr_n == 0) return;
    lt_sb sb = {0};
    for (int i = 0; i < tr_n; i++) lt_trace_ev_json(&sb, &tr_buf[i], tr_pid);
    tr_n = 0;
    size_t len = sb.len;
    char *s = lt_sb_take(&sb);
    if (!s || !append_body(s, len)) fail_off();
    free(s);
}

void lt_trace_flush(void)
{
    pthread_mutex_lock(&tr_mu);
    flush_locked();
    pthread_mutex_unlock(&tr_mu);
}

static void close_locked(void)
{
    flush_locked();
    atomic_store(&tr_on, 0);
    if (tr_fd >= 0) close(tr_fd);
    tr_fd = -1;
    free(tr_buf);
    tr_buf = NULL;
}

void lt_trace_events_close(void)
{
    pthread_mutex_lock(&tr_mu);
    close_locked();
    pthread_mutex_unlock(&tr_mu);
}

static void at_exit_flush(void) { lt_trace_events_close(); }

void lt_trace_thread_meta(lt_sb *sb, int pid, int tid, const char *name, int sort)
{
    lt_sb_printf(sb, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                 "\"args\":{\"name\":", pid, tid);
    lt_sb_json_str(sb, name);
    lt_sb_printf(sb, "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,"
                 "\"tid\":%d,\"args\":{\"sort_index\":%d}}", pid, tid, sort);
}

/* Path with the ordinal: "{ordinal}" or "%d" replaced; else, when the world
 * size > 1, ".<ordinal>" inserted before the extension. */
static void make_path(const char *p, int ordinal, int world)
{
    const char *pct = strstr(p, "%d");
    const char *brace = strstr(p, "{ordinal}");
    if (brace) {
        snprintf(tr_path, sizeof tr_path, "%.*s%d%s", (int)(brace - p), p, ordinal, brace + 9);
    } else if (pct) {
        snprintf(tr_path, sizeof tr_path, "%.*s%d%s", (int)(pct - p), p, ordinal, pct + 2);
    } else if (world > 1) {
        const char *dot = strrchr(p, '.');
        const char *slash = strrchr(p, '/');
        if (dot && (!slash || dot > slash))
            snprintf(tr_path, sizeof tr_path, "%.*s.%d%s", (int)(dot - p), p, ordinal, dot);
        else
            snprintf(tr_path, sizeof tr_path, "%s.%d", p, ordinal);
    } else {
        snprintf(tr_path, sizeof tr_path, "%s", p);
    }
}

void lt_trace_events_init(int n_cores)
{
    const char *p = lt_opt_str(LT_OPT_TRACE);
    pthread_mutex_lock(&tr_mu);
    close_locked();
    if (!p || !*p || strlen(p) > 1000) {
        pthread_mutex_unlock(&tr_mu);
        return;
    }
    tr_pid = (int)lt_opt_int(LT_OPT_ORDINAL);
    make_path(p, tr_pid, (int)lt_opt_int(LT_OPT_WORLD_SIZE));
    tr_buf = malloc(EV_BATCH * sizeof *tr_buf);
    tr_fd = open(tr_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (!tr_buf || tr_fd < 0) {
        fail_off();
        free(tr_buf);
        tr_buf = NULL;
        pthread_mutex_unlock(&tr_mu);
        return;
    }
    tr_n = 0;
    tr_body_end = 0;
    lt_sb sb = {0};
    lt_sb_printf(&sb, "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
                 "\"tid\":0,\"args\":{\"name\":\"lazytpu ordinal %d\"}}", tr_pid, tr_pid);
    lt_trace_thread_meta(&sb, tr_pid, LT_TRACE_HOST_TID, "host", -2);
    lt_trace_thread_meta(&sb, tr_pid, LT_TRACE_HOST_TID + 1, "loader", -1);
    for (int c = 0; c < n_cores; c++) {
        char nm[32];
        snprintf(nm, sizeof nm, "core %d", c);
        lt_trace_thread_meta(&sb, tr_pid, c, nm, c);
    }
    size_t len = sb.len;
    char *s = lt_sb_take(&sb);
    if (!s || !append_body(s, len)) {
        fail_off();
    } else {
        atomic_store(&tr_on, 1);
        if (!tr_atexit_done) {
            tr_atexit_done = 1;
            atexit(at_exit_flush);
        }
    }
    free(s);
    pthread_mutex_unlock(&tr_mu);
}

void lt_trace_event_args(const char *name, const char *cat, int64_t start_ns,
                         int64_t dur_ns, int tid, const char *args_json)
{
    if (!lt_trace_enabled()) return;
    if (atomic_load_explicit(&tr_capture, memory_order_relaxed))
        lt_trace_capture_record(name, cat, start_ns, dur_ns, tid, args_json);
    if (!atomic_load_explicit(&tr_on, memory_order_relaxed)) return;
    pthread_mutex_lock(&tr_mu);
    if (tr_fd >= 0 && tr_buf) {
        lt_trace_ev_fill(&tr_buf[tr_n++], name, cat, start_ns, dur_ns, tid, args_json);
        if (tr_n == EV_BATCH) flush_locked();
    }
    pthread_mutex_unlock(&tr_mu);
}

void lt_trace_event(const char *name, const char *cat, int64_t start_ns,
                    int64_t dur_ns, int tid)
{
    lt_trace_event_args(name, cat, start_ns, dur_ns, tid, NULL);
}
