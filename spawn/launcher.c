/*
 * spawn/launcher.c — fork+exec N workers over a shared-memory world,
 * forward their stderr with an ordinal prefix, and stop everyone when one
 * fails (see launcher.h).
 *
 * The supervisor is one poll() loop over a signalfd (SIGCHLD, SIGINT,
 * SIGTERM, SIGHUP, blocked while we run) and the workers' stderr pipes;
 * every iteration reaps exited workers with waitpid(pid, WNOHANG), so
 * coalesced SIGCHLDs cannot be missed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "launcher.h"
#include "metrics_merge.h"
#include "world.h"

extern char **environ;

#define LINE_CAP 8192

typedef struct worker {
    pid_t pid;            /* 0 once reaped */
    int fd;               /* stderr pipe read end, -1 when closed */
    int status;           /* waitpid status */
    int exited;
    char line[LINE_CAP];  /* partial line */
    size_t len;
    char last[512];       /* last non-empty line */
} worker;

typedef struct launch {
    const lt_launch_opts *o;
    lt_launch_result *res;
    lt_world *world;
    worker *w;
    int n;
    int live;
    int failed;           /* a failure was recorded: shutting down */
    int64_t kill_at;      /* ns: SIGKILL deadline once failed */
    int killed;
} launch;

const char *lt_signal_name(int sig)
{
    static _Thread_local char buf[32];
    const char *ab = sigabbrev_np(sig);
    if (!ab) return "SIG?";
    snprintf(buf, sizeof buf, "SIG%s", ab);
    return buf;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return;
        }
        p += k;
        n -= (size_t)k;
    }
}

/* ------------------------------------------------------------- stderr I/O */

static void emit_line(int k, worker *wk, const char *s, size_t n)
{
    char pre[32];
    int pl = snprintf(pre, sizeof pre, "[ordinal %d] ", k);
    char out[LINE_CAP + 40];
    memcpy(out, pre, (size_t)pl);
    memcpy(out + pl, s, n);
    out[pl + n] = '\n';
    write_all(2, out, (size_t)pl + n + 1);
    size_t e = n;
    while (e > 0 && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) e--;
    if (e > 0) {
        size_t c = e < sizeof wk->last - 1 ? e : sizeof wk->last - 1;
        memcpy(wk->last, s, c);
        wk->last[c] = 0;
    }
}

/* Reads what is available; returns 0 on EOF/error (fd closed). */
static int pump(int k, worker *wk)
{
    char buf[4096];
    ssize_t r = read(wk->fd, buf, sizeof buf);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return 1;
    if (r <= 0) {
        if (wk->len) emit_line(k, wk, wk->line, wk->len);
        wk->len = 0;
        close(wk->fd);
        wk->fd = -1;
        return 0;
    }
    for (ssize_t i = 0; i < r; i++) {
        if (buf[i] == '\n') {
            emit_line(k, wk, wk->line, wk->len);
            wk->len = 0;
        } else {
            if (wk->len == LINE_CAP) {
                emit_line(k, wk, wk->line, wk->len);
                wk->len = 0;
            }
            wk->line[wk->len++] = buf[i];
        }
    }
    return 1;
}

/* -------------------------------------------------------------- shutdown */

/* Signals the process group of every worker still running. */
static void signal_groups(launch *L, int sig)
{
    for (int k = 0; k < L->n; k++) {
        pid_t pg = L->w[k].pid;
        if (pg > 0) kill(-pg, sig);
    }
}

static void fail(launch *L, int ordinal, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fail(launch *L, int ordinal, int code, const char *fmt, ...)
{
    if (L->failed) return;
    L->failed = 1;
    L->res->failed_ordinal = ordinal;
    L->res->exit_code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->res->message, sizeof L->res->message, fmt, ap);
    va_end(ap);
    lt_world_abort(L->world, L->res->message);
    signal_groups(L, SIGTERM);
    double g = L->o->grace_s > 0 ? L->o->grace_s : 5.0;
    L->kill_at = now_ns() + (int64_t)(g * 1e9);
}

static void describe_exit(launch *L, int k)
{
    worker *wk = &L->w[k];
    int st = wk->status;
    if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        fail(L, k, 128 + sig, "worker %d died: killed by signal %d (%s)", k,
             sig, lt_signal_name(sig));
    } else if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
        if (wk->last[0])
            fail(L, k, WEXITSTATUS(st), "worker %d exited with code %d: %s", k,
                 WEXITSTATUS(st), wk->last);
        else
            fail(L, k, WEXITSTATUS(st), "worker %d exited with code %d", k,
                 WEXITSTATUS(st));
    }
}

static void reap(launch *L)
{
    for (int k = 0; k < L->n; k++) {
        worker *wk = &L->w[k];
        if (wk->pid <= 0) continue;
        int st;
        pid_t p = waitpid(wk->pid, &st, WNOHANG);
        if (p != wk->pid) continue;
        /* kill whatever the worker left in its group, then forget it */
        kill(-wk->pid, SIGKILL);
        wk->status = st;
        wk->exited = 1;
        wk->pid = 0;
        L->live--;
        /* drain its pipe so the traceback's last line is known */
        while (wk->fd >= 0) {
            struct pollfd pf = { wk->fd, POLLIN, 0 };
            if (poll(&pf, 1, 0) <= 0 || !pump(k, wk)) break;
        }
        describe_exit(L, k);
    }
}

/* ------------------------------------------------------------------ start */

static char **build_env(int k, int n, const lt_launch_opts *o,
                        const char *shm, char **store, int nstore)
{
    int cnt = 0;
    while (environ[cnt]) cnt++;
    char **env = calloc((size_t)cnt + 16, sizeof *env);
    if (!env) return NULL;
    int e = 0;
    int have_omp = getenv("OMP_NUM_THREADS") != NULL;
    static const char *ours[] = {
        "LAZYTPU_ORDINAL=", "LAZYTPU_LOCAL_ORDINAL=", "LAZYTPU_WORLD_SIZE=",
        "LAZYTPU_LOCAL_WORLD_SIZE=", "LAZYTPU_SHM_NAME=", "LAZYTPU_NUM_CORES="
    };
    for (int i = 0; i < cnt; i++) {
        int skip = 0;
        for (size_t j = 0; j < sizeof ours / sizeof *ours; j++)
            if (strncmp(environ[i], ours[j], strlen(ours[j])) == 0) skip = 1;
        if (o->metrics_path && strncmp(environ[i], "LAZYTPU_METRICS_FILE=", 21) == 0)
            skip = 1;
        if (!skip) env[e++] = environ[i];
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long omp = cpus / n > 1 ? cpus / n : 1;
    int s = 0;
    snprintf(store[s++], 512, "LAZYTPU_ORDINAL=%d", k);
    snprintf(store[s++], 512, "LAZYTPU_LOCAL_ORDINAL=%d", k);
    snprintf(store[s++], 512, "LAZYTPU_WORLD_SIZE=%d", n);
    snprintf(store[s++], 512, "LAZYTPU_LOCAL_WORLD_SIZE=%d", n);
    snprintf(store[s++], 512, "LAZYTPU_SHM_NAME=%s", shm);
    snprintf(store[s++], 512, "LAZYTPU_NUM_CORES=1");
    if (!have_omp) snprintf(store[s++], 512, "OMP_NUM_THREADS=%ld", omp);
    else if (atol(getenv("OMP_NUM_THREADS")) > 0)
        omp = atol(getenv("OMP_NUM_THREADS"));
    /* The thread budget of every pool in the worker: the core's OpenMP
     * kernels, OpenBLAS (its idle threads spin with sched_yield for a long
     * time after each call) and, when the CPUs are oversubscribed, idle
     * OpenMP threads sleep at once instead of spinning. */
    if (!getenv("LAZYTPU_OMP_THREADS"))
        snprintf(store[s++], 512, "LAZYTPU_OMP_THREADS=%ld", omp);
    if (!getenv("OPENBLAS_NUM_THREADS"))
        snprintf(store[s++], 512, "OPENBLAS_NUM_THREADS=%ld", omp);
    if (!getenv("OMP_WAIT_POLICY") && n > cpus)
        snprintf(store[s++], 512, "OMP_WAIT_POLICY=PASSIVE");
    if (o->metrics_path)
        snprintf(store[s++], 512, "LAZYTPU_METRICS_FILE=%s.ordinal-{ordinal}",
                 o->metrics_path);
    for (int i = 0; i < s && i < nstore; i++) env[e++] = store[i];
    env[e] = NULL;
    return env;
}

static lt_status start_worker(launch *L, int k, char *const argv[],
                              const sigset_t *oldmask)
{
    char storage[14][512];
    char *store[14];
    for (int i = 0; i < 14; i++) store[i] = storage[i];
    char **env = build_env(k, L->n, L->o, lt_world_name(L->world), store, 14);
    if (!env) return lt_set_error(LT_ERR_INTERNAL, "lazytpu-run: out of memory");
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        free(env);
        return lt_set_error(LT_ERR_INTERNAL, "lazytpu-run: pipe: %s",
                            strerror(errno));
    }
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        free(env);
        close(p[0]);
        close(p[1]);
        return lt_set_error(LT_ERR_INTERNAL, "lazytpu-run: fork: %s",
                            strerror(e));
    }
    if (pid == 0) {
        setpgid(0, 0);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, oldmask, NULL);
        dup2(p[1], 2);
        execvpe(argv[0], argv, env);
        char msg[600];
        int m = snprintf(msg, sizeof msg, "lazytpu-run: cannot run %s: %s\n",
                         argv[0], strerror(errno));
        write_all(2, msg, (size_t)m);
        _exit(127);
    }
    setpgid(pid, pid);
    free(env);
    close(p[1]);
    fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    L->w[k].pid = pid;
    L->w[k].fd = p[0];
    L->live++;
    return LT_OK;
}

/* ------------------------------------------------------------------- loop */

static void on_timeout(launch *L)
{
    char still[400];
    size_t len = 0;
    still[0] = 0;
    for (int k = 0; k < L->n && len + 16 < sizeof still; k++)
        if (L->w[k].pid > 0)
            len += (size_t)snprintf(still + len, sizeof still - len, "%s%d",
                                    len ? ", " : "", k);
    int first = -1;
    for (int k = 0; k < L->n && first < 0; k++)
        if (L->w[k].pid > 0) first = k;
    fail(L, first, 124, "timed out after %g s; workers still running: %s",
         L->o->timeout_s, still);
}

static void supervise(launch *L, int sfd)
{
    int64_t deadline = L->o->timeout_s > 0
                           ? now_ns() + (int64_t)(L->o->timeout_s * 1e9)
                           : INT64_MAX;
    int64_t drain_until = 0;
    struct pollfd pf[LT_WORLD_MAX_RANKS + 1];
    int idx[LT_WORLD_MAX_RANKS + 1];
    for (;;) {
        reap(L);
        int64_t t = now_ns();
        if (L->live == 0) {
            /* workers gone: drain pipes briefly (a leftover grandchild may
             * hold one open: it was killed with its group above) */
            if (!drain_until) drain_until = t + 500000000;
            int open_fds = 0;
            for (int k = 0; k < L->n; k++) open_fds += L->w[k].fd >= 0;
            if (!open_fds || t > drain_until) break;
        }
        if (!L->failed && t >= deadline) on_timeout(L);
        if (L->failed && !L->killed && t >= L->kill_at) {
            signal_groups(L, SIGKILL);
            L->killed = 1;
        }
        int np = 0;
        pf[np].fd = sfd;
        pf[np].events = POLLIN;
        idx[np++] = -1;
        for (int k = 0; k < L->n; k++)
            if (L->w[k].fd >= 0) {
                pf[np].fd = L->w[k].fd;
                pf[np].events = POLLIN;
                idx[np++] = k;
            }
        int r = poll(pf, (nfds_t)np, 100);
        if (r <= 0) continue;
        if (pf[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == sizeof si) {
                int sig = (int)si.ssi_signo;
                if (sig != SIGCHLD)
                    fail(L, -1, 128 + sig, "interrupted by %s; stopping all "
                         "workers", lt_signal_name(sig));
            }
        }
        for (int i = 1; i < np; i++)
            if (pf[i].revents) pump(idx[i], &L->w[idx[i]]);
    }
    for (int k = 0; k < L->n; k++)
        if (L->w[k].fd >= 0) {
            close(L->w[k].fd);
            L->w[k].fd = -1;
        }
}

lt_status lt_launch(const lt_launch_opts *o, char *const argv[],
                    lt_launch_result *res)
{
    memset(res, 0, sizeof *res);
    res->failed_ordinal = -1;
    if (!o || o->nprocs < 1 || o->nprocs > LT_WORLD_MAX_RANKS)
        return lt_set_error(LT_ERR_ARG, "lazytpu-run: number of workers %d "
                            "out of range 1..%d", o ? o->nprocs : 0,
                            LT_WORLD_MAX_RANKS);
    if (!argv || !argv[0])
        return lt_set_error(LT_ERR_ARG, "lazytpu-run: no command given");
    launch L;
    memset(&L, 0, sizeof L);
    L.o = o;
    L.res = res;
    L.n = o->nprocs;
    L.w = calloc((size_t)L.n, sizeof *L.w);
    if (!L.w) return lt_set_error(LT_ERR_INTERNAL, "lazytpu-run: out of memory");
    for (int k = 0; k < L.n; k++) L.w[k].fd = -1;
    lt_status st = lt_world_create(L.n, o->shm_bytes, &L.world);
    if (st != LT_OK) {
        free(L.w);
        return st;
    }
    sigset_t mask, oldmask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, &oldmask);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        st = lt_set_error(LT_ERR_INTERNAL, "lazytpu-run: signalfd: %s",
                          strerror(errno));
        goto out;
    }
    for (int k = 0; k < L.n; k++) {
        st = start_worker(&L, k, argv, &oldmask);
        if (st != LT_OK) {
            char msg[600];
            snprintf(msg, sizeof msg, "%s", lt_last_error());
            fail(&L, -1, 1, "%s", msg);
            break;
        }
    }
    supervise(&L, sfd);
    if (st == LT_OK && o->metrics_path)
        lt_metrics_merge_files(o->metrics_path, L.n);
    if (st == LT_OK && res->message[0] && !o->quiet) {
        char line[1100];
        int m = snprintf(line, sizeof line, "lazytpu-run: %s\n", res->message);
        write_all(2, line, (size_t)m);
    }
    close(sfd);
out:
    {
        /* discard signals that arrived while blocked (SIGCHLD) but keep
         * SIGINT/SIGTERM semantics: the job is over, exit code tells */
        struct timespec zero = { 0, 0 };
        sigset_t chld;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        while (sigtimedwait(&chld, NULL, &zero) > 0) {}
    }
    sigprocmask(SIG_SETMASK, &oldmask, NULL);
    lt_world_unlink(L.world);
    lt_world_close(L.world);
    free(L.w);
    return st;
}
