/*
 * spawn/launcher.c — fork+exec N workers over a shared-memory world,
 * forward their stderr with an ordinal prefix, and stop everyone when one
 * fails (see launcher.h).
 *
 * The supervisor is one poll() loop over a signalfd (SIGCHLD, SIGINT,
 * SIGTERM, SIGHUP, blocked while we run), the workers' stderr pipes and,
 * on several hosts, the inter-host link's event fd; every iteration reaps
 * exited workers with waitpid(pid, WNOHANG), so coalesced SIGCHLDs cannot
 * be missed.
 *
 * The mask blocks those signals in the launcher's thread only. Libraries
 * the launcher loads may have threads of their own (OpenBLAS starts its
 * helper threads when it is loaded, with every signal unblocked, and stops
 * them at our first fork): a process-directed SIGTERM may be delivered to
 * such a thread, where the default action would kill the launcher before
 * it stopped the workers and unlinked the segment. So the stop signals
 * also get a handler, which forwards them through a pipe that the loop
 * reads like the signalfd.
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
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "janitor.h"
#include "launcher.h"
#include "metrics_merge.h"
#include "world.h"
#include "options.h"

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
    int host, hosts;      /* this host, number of hosts (1: no link) */
    const lt_launch_link *link;
    int link_fd;          /* -1: no link (or not started) */
    int finishing;        /* link->finish called: waiting for the others */
    int finished;         /* every host finished */
    lt_janitor jan;
    pid_t self;
} launch;

/* Global ordinal of local worker k. */
static int gord(const launch *L, int k) { return L->host * L->n + k; }

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
    int pl = snprintf(pre, sizeof pre, "[ordinal %d] ", k);   /* global */
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

/* Reads what is available; returns 0 on EOF/error (fd closed). k is the
 * global ordinal (for the prefix). */
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

/* ------------------------------------------------------- stop signals */

/* Write end of the pipe the handler forwards signals through (-1: none). */
static volatile sig_atomic_t g_sig_wfd = -1;

static void forward_signal(int sig)
{
    int e = errno;
    unsigned char b = (unsigned char)sig;
    int fd = g_sig_wfd;
    if (fd >= 0 && write(fd, &b, 1) != 1) { /* pipe full: one is pending */ }
    errno = e;
}

static const int k_stop_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGCHLD };
#define N_STOP_SIGNALS ((int)(sizeof k_stop_signals / sizeof k_stop_signals[0]))

/* Installs forward_signal for the stop signals (and SIGCHLD, to wake the
 * loop) and ignores SIGPIPE; saves the old dispositions in old[0..N] (the
 * last one SIGPIPE's). fds[0] is the read end (-1 if no pipe could be made:
 * then the handlers do nothing and only the signalfd serves). */
static void forward_signals_start(int fds[2], struct sigaction *old)
{
    fds[0] = fds[1] = -1;
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) fds[0] = fds[1] = -1;
    g_sig_wfd = fds[1];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_signal;
    sa.sa_flags = SA_RESTART;
    sigfillset(&sa.sa_mask);
    for (int i = 0; i < N_STOP_SIGNALS; i++)
        sigaction(k_stop_signals[i], &sa, &old[i]);
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old[N_STOP_SIGNALS]);
}

static void forward_signals_stop(int fds[2], const struct sigaction *old)
{
    for (int i = 0; i < N_STOP_SIGNALS; i++)
        sigaction(k_stop_signals[i], &old[i], NULL);
    sigaction(SIGPIPE, &old[N_STOP_SIGNALS], NULL);
    g_sig_wfd = -1;
    if (fds[0] >= 0) close(fds[0]);
    if (fds[1] >= 0) close(fds[1]);
    fds[0] = fds[1] = -1;
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

/* Records the first failure and stops everything; `remote`: it came from
 * another host (do not send it back). */
static void fail_v(launch *L, int ordinal, int code, int remote,
                   const char *fmt, va_list ap)
{
    if (L->failed) return;
    L->failed = 1;
    L->res->failed_ordinal = ordinal;
    L->res->exit_code = code;
    vsnprintf(L->res->message, sizeof L->res->message, fmt, ap);
    lt_world_abort(L->world, L->res->message);
    if (L->link && L->link_fd >= 0 && !remote)
        L->link->fault(L->link->ctx, code, ordinal, L->res->message);
    signal_groups(L, SIGTERM);
    double g = L->o->grace_s > 0 ? L->o->grace_s : 5.0;
    L->kill_at = now_ns() + (int64_t)(g * 1e9);
}

static void fail(launch *L, int ordinal, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fail(launch *L, int ordinal, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(L, ordinal, code, 0, fmt, ap);
    va_end(ap);
}

static void fail_remote(launch *L, int ordinal, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fail_remote(launch *L, int ordinal, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(L, ordinal, code, 1, fmt, ap);
    va_end(ap);
}

/* "worker 3" on one host; "worker 5 (host 1, local ordinal 1)" on several. */
static void worker_name(const launch *L, int k, char *buf, size_t cap)
{
    if (L->hosts > 1)
        snprintf(buf, cap, "worker %d (host %d, local ordinal %d)", gord(L, k),
                 L->host, k);
    else
        snprintf(buf, cap, "worker %d", k);
}

static void describe_exit(launch *L, int k)
{
    worker *wk = &L->w[k];
    int st = wk->status;
    char who[96];
    worker_name(L, k, who, sizeof who);
    if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        fail(L, gord(L, k), 128 + sig, "%s died: killed by signal %d (%s)",
             who, sig, lt_signal_name(sig));
    } else if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
        if (wk->last[0])
            fail(L, gord(L, k), WEXITSTATUS(st), "%s exited with code %d: %s",
                 who, WEXITSTATUS(st), wk->last);
        else
            fail(L, gord(L, k), WEXITSTATUS(st), "%s exited with code %d", who,
                 WEXITSTATUS(st));
    }
}

/* Reaps every exited worker, then names the first failure: a worker killed
 * by a signal before one that exited with an error (peers of a killed
 * worker notice its death and exit with an error themselves; reaped in
 * the same pass, the killed one is the cause). */
static void reap(launch *L)
{
    int newly[LT_WORLD_MAX_RANKS], nn = 0;
    for (int k = 0; k < L->n; k++) {
        worker *wk = &L->w[k];
        if (wk->pid <= 0) continue;
        /* Exited? Asked without reaping: while the zombie exists its pid,
         * and so its process group's id, cannot be reused, so the group
         * kill below reaches only what the worker left in its group (after
         * a reap a busy machine may already have given that number to
         * another job's process group). */
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)wk->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 ||
            si.si_pid != wk->pid)
            continue;
        kill(-wk->pid, SIGKILL);
        int st;
        pid_t p;
        while ((p = waitpid(wk->pid, &st, 0)) < 0 && errno == EINTR) {}
        if (p != wk->pid) continue;
        wk->status = st;
        wk->exited = 1;
        wk->pid = 0;
        L->live--;
        /* drain its pipe so the traceback's last line is known */
        while (wk->fd >= 0) {
            struct pollfd pf = { wk->fd, POLLIN, 0 };
            if (poll(&pf, 1, 0) <= 0 || !pump(gord(L, k), wk)) break;
        }
        newly[nn++] = k;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nn; i++)
            if (WIFSIGNALED(L->w[newly[i]].status) == !pass)
                describe_exit(L, newly[i]);
}

/* ------------------------------------------------------------------ start */

#define ENV_STORE 16

static char **build_env(const launch *L, int k, const char *shm,
                        char **store, int nstore)
{
    const lt_launch_opts *o = L->o;
    int n = L->n;
    int cnt = 0;
    while (environ[cnt]) cnt++;
    char **env = calloc((size_t)cnt + ENV_STORE + 1, sizeof *env);
    if (!env) return NULL;
    int e = 0;
    int have_omp = getenv("OMP_NUM_THREADS") != NULL;
    static const char *ours[] = {
        "LAZYTPU_ORDINAL=", "LAZYTPU_LOCAL_ORDINAL=", "LAZYTPU_WORLD_SIZE=",
        "LAZYTPU_LOCAL_WORLD_SIZE=", "LAZYTPU_SHM_NAME=", "LAZYTPU_NUM_CORES=",
        "LAZYTPU_HOST_INDEX=", "LAZYTPU_NUM_HOSTS="
    };
    for (int i = 0; i < cnt; i++) {
        int skip = 0;
        for (size_t j = 0; j < sizeof ours / sizeof *ours; j++)
            if (strncmp(environ[i], ours[j], strlen(ours[j])) == 0) skip = 1;
        if (o->metrics_path && strncmp(environ[i], "LAZYTPU_METRICS_FILE=", 21) == 0)
            skip = 1;
        /* workers never join the MPI job of their launcher */
        if (L->hosts > 1 && (strncmp(environ[i], "OMPI_", 5) == 0 ||
                             strncmp(environ[i], "PMIX_", 5) == 0))
            skip = 1;
        if (!skip) env[e++] = environ[i];
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long omp = cpus / n > 1 ? cpus / n : 1;
    int s = 0;
    snprintf(store[s++], 512, "LAZYTPU_ORDINAL=%d", gord(L, k));
    snprintf(store[s++], 512, "LAZYTPU_LOCAL_ORDINAL=%d", k);
    snprintf(store[s++], 512, "LAZYTPU_WORLD_SIZE=%d", n * L->hosts);
    snprintf(store[s++], 512, "LAZYTPU_LOCAL_WORLD_SIZE=%d", n);
    snprintf(store[s++], 512, "LAZYTPU_HOST_INDEX=%d", L->host);
    snprintf(store[s++], 512, "LAZYTPU_NUM_HOSTS=%d", L->hosts);
    snprintf(store[s++], 512, "LAZYTPU_SHM_NAME=%s", shm);
    snprintf(store[s++], 512, "LAZYTPU_NUM_CORES=1");
    if (!have_omp) snprintf(store[s++], 512, "OMP_NUM_THREADS=%ld", omp);
    else if (atol(getenv("OMP_NUM_THREADS")) > 0)
        omp = atol(getenv("OMP_NUM_THREADS"));
    /* The thread budget of the core's kernels (OpenMP regions and its
     * helper pool); OpenBLAS gets one thread: the core calls it serially and
     * splits GEMMs itself (its own idle threads would spin with sched_yield
     * after each call); when the CPUs are oversubscribed, idle OpenMP
     * threads sleep at once instead of spinning. */
    if (lt_opt_state(LT_OPT_OMP_THREADS) == 0)
        snprintf(store[s++], 512, "LAZYTPU_OMP_THREADS=%ld", omp);
    if (!getenv("OPENBLAS_NUM_THREADS"))
        snprintf(store[s++], 512, "OPENBLAS_NUM_THREADS=1");
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
    char storage[ENV_STORE][512];
    char *store[ENV_STORE];
    for (int i = 0; i < ENV_STORE; i++) store[i] = storage[i];
    char **env = build_env(L, k, lt_world_name(L->world), store, ENV_STORE);
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
        /* die with the launcher, even if it is SIGKILLed */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != L->self) _exit(126);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
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
    lt_janitor_watch(&L->jan, pid);
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
                                    len ? ", " : "", gord(L, k));
    int first = -1;
    for (int k = 0; k < L->n && first < 0; k++)
        if (L->w[k].pid > 0) first = gord(L, k);
    if (L->hosts > 1)
        fail(L, first, 124, "timed out after %g s on host %d; workers still "
             "running: %s", L->o->timeout_s, L->host,
             still[0] ? still : "none (waiting for the other hosts)");
    else
        fail(L, first, 124, "timed out after %g s; workers still running: %s",
             L->o->timeout_s, still);
}

/* Every local worker exited 0: hand this host's metrics reports to the link
 * and wait for the other hosts. */
static void begin_finish(launch *L)
{
    L->finishing = 1;
    char **rep = calloc((size_t)L->n, sizeof *rep);
    if (rep && L->o->metrics_path)
        for (int k = 0; k < L->n; k++)
            rep[k] = lt_metrics_read_report(L->o->metrics_path, gord(L, k));
    L->link->finish(L->link->ctx, rep, rep ? L->n : 0);
    free(rep);
}

static void on_link_event(launch *L)
{
    int code = 1, ordinal = -1;
    char msg[1024];
    int ev = L->link->event(L->link->ctx, &code, &ordinal, msg, sizeof msg);
    if (ev == 1) {
        /* failed elsewhere (already told to every host) or in the link */
        fail_remote(L, ordinal, code ? code : 1, "%s", msg);
    } else if (ev == 2) {
        L->finished = 1;
    }
}

static void on_signal(launch *L, int sig)
{
    if (L->hosts > 1)
        fail(L, -1, 128 + sig, "host %d interrupted by %s%s; stopping all "
             "workers", L->host, lt_signal_name(sig),
             sig == SIGTERM ? " (mpirun sends it when another host's "
                              "launcher ended abnormally)" : "");
    else
        fail(L, -1, 128 + sig, "interrupted by %s; stopping all workers",
             lt_signal_name(sig));
}

static void supervise(launch *L, int sfd, int pfd)
{
    int64_t deadline = L->o->timeout_s > 0
                           ? now_ns() + (int64_t)(L->o->timeout_s * 1e9)
                           : INT64_MAX;
    int64_t drain_until = 0;
    struct pollfd pf[LT_WORLD_MAX_RANKS + 3];
    int idx[LT_WORLD_MAX_RANKS + 3];
    for (;;) {
        reap(L);
        int64_t t = now_ns();
        if (L->live == 0) {
            /* workers gone: drain pipes briefly (a leftover grandchild may
             * hold one open: it was killed with its group above) */
            if (!drain_until) drain_until = t + 500000000;
            int open_fds = 0;
            for (int k = 0; k < L->n; k++) open_fds += L->w[k].fd >= 0;
            if (open_fds && t <= drain_until) goto wait;
            /* on several hosts, a clean end waits for every host */
            if (L->link_fd >= 0 && !L->failed && !L->finished) {
                if (!L->finishing) begin_finish(L);
                goto wait;
            }
            break;
        }
    wait:
        if (!L->failed && t >= deadline) on_timeout(L);
        if (L->failed && !L->killed && t >= L->kill_at) {
            signal_groups(L, SIGKILL);
            L->killed = 1;
        }
        int np = 0;
        pf[np].fd = sfd;
        pf[np].events = POLLIN;
        idx[np++] = -1;
        if (pfd >= 0) {
            pf[np].fd = pfd;
            pf[np].events = POLLIN;
            idx[np++] = -3;
        }
        if (L->link_fd >= 0) {
            pf[np].fd = L->link_fd;
            pf[np].events = POLLIN;
            idx[np++] = -2;
        }
        for (int k = 0; k < L->n; k++)
            if (L->w[k].fd >= 0) {
                pf[np].fd = L->w[k].fd;
                pf[np].events = POLLIN;
                idx[np++] = k;
            }
        int r = poll(pf, (nfds_t)np, 100);
        if (r <= 0) continue;
        for (int i = 0; i < np; i++) {
            if (!pf[i].revents) continue;
            if (idx[i] == -1) {
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof si) == sizeof si) {
                    int sig = (int)si.ssi_signo;
                    if (sig != SIGCHLD) on_signal(L, sig);
                }
            } else if (idx[i] == -3) {
                unsigned char b[64];
                ssize_t k;
                while ((k = read(pfd, b, sizeof b)) > 0)
                    for (ssize_t j = 0; j < k; j++)
                        if (b[j] != SIGCHLD) on_signal(L, b[j]);
            } else if (idx[i] == -2) {
                on_link_event(L);
            } else {
                pump(gord(L, idx[i]), &L->w[idx[i]]);
            }
        }
    }
    for (int k = 0; k < L->n; k++)
        if (L->w[k].fd >= 0) {
            close(L->w[k].fd);
            L->w[k].fd = -1;
        }
}

/* Metrics at the end: one host merges its reports into the file as before;
 * on several hosts host 0 writes the merge over every host after a clean
 * end, and after a failure each host merges its own into <path>.host-<h>. */
static void write_metrics(launch *L)
{
    const char *path = L->o->metrics_path;
    if (!path) return;
    if (L->hosts <= 1) {
        lt_metrics_merge_files(path, L->n);
        return;
    }
    if (L->finished) {
        if (L->host != 0) return;
        char **ord = NULL, **hst = NULL;
        L->link->reports(L->link->ctx, &ord, &hst);
        lt_metrics_merge_reports(path, ord, L->n * L->hosts, L->hosts, hst);
        return;
    }
    char **rep = calloc((size_t)L->n, sizeof *rep);
    if (!rep) return;
    for (int k = 0; k < L->n; k++)
        rep[k] = lt_metrics_read_report(path, gord(L, k));
    char p[4096];
    snprintf(p, sizeof p, "%s.host-%d", path, L->host);
    lt_metrics_merge_reports(p, rep, L->n, 1, NULL);
    for (int k = 0; k < L->n; k++) free(rep[k]);
    free(rep);
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
    int hosts = o->num_hosts > 1 ? o->num_hosts : 1;
    if (hosts > 1 && (!o->link || o->host_index < 0 ||
                      o->host_index >= hosts || hosts > LT_WORLD_MAX_HOSTS))
        return lt_set_error(LT_ERR_ARG, "lazytpu-run: host %d of %d needs an "
                            "inter-host link (1..%d hosts)", o->host_index,
                            hosts, LT_WORLD_MAX_HOSTS);
    launch L;
    memset(&L, 0, sizeof L);
    L.o = o;
    L.res = res;
    L.n = o->nprocs;
    L.hosts = hosts;
    L.host = hosts > 1 ? o->host_index : 0;
    L.link = hosts > 1 ? o->link : NULL;
    L.link_fd = -1;
    L.self = getpid();
    L.jan.fd = -1;
    L.w = calloc((size_t)L.n, sizeof *L.w);
    if (!L.w) return lt_set_error(LT_ERR_INTERNAL, "lazytpu-run: out of memory");
    for (int k = 0; k < L.n; k++) L.w[k].fd = -1;
    /* Signals that stop the job are blocked (in this thread) and forwarded
     * (from any other thread: see the file comment) before the segment
     * exists, and read from a signalfd and the forwarding pipe afterwards:
     * a SIGINT/SIGTERM/SIGHUP arriving while the launcher starts (before
     * the janitor exists) would otherwise kill it with the segment in
     * /dev/shm. SIGPIPE is ignored: a closed reader of our stderr or a dead
     * janitor must not kill the launcher before it has stopped the workers
     * and unlinked the segment (workers get the defaults back). */
    sigset_t mask, oldmask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, &oldmask);
    int sig_pipe[2];
    struct sigaction old_actions[N_STOP_SIGNALS + 1];
    forward_signals_start(sig_pipe, old_actions);
    lt_status st = lt_world_create_host(L.n, o->shm_bytes, L.host, hosts,
                                        &L.world);
    if (st != LT_OK) {
        forward_signals_stop(sig_pipe, old_actions);
        sigprocmask(SIG_SETMASK, &oldmask, NULL);
        free(L.w);
        return st;
    }
    /* before any other child or thread: see janitor.h */
    lt_janitor_start(&L.jan, lt_world_name(L.world));
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        st = lt_set_error(LT_ERR_INTERNAL, "lazytpu-run: signalfd: %s",
                          strerror(errno));
        goto out;
    }
    /* the proxy thread must not exist yet when the workers are forked */
    for (int k = 0; k < L.n; k++) {
        st = start_worker(&L, k, argv, &oldmask);
        if (st != LT_OK) {
            char msg[600];
            snprintf(msg, sizeof msg, "%s", lt_last_error());
            fail(&L, -1, 1, "%s", msg);
            lt_set_error(st, "%s", msg);
            break;
        }
    }
    /* workers are forked before the link starts MPI (no fork after
     * MPI_Init, no MPI state inherited) */
    if (L.link && st == LT_OK) {
        L.link_fd = L.link->start(L.link->ctx, L.world);
        if (L.link_fd < 0) {
            char msg[600];
            snprintf(msg, sizeof msg, "%s", lt_last_error());
            fail(&L, -1, 1, "%s", msg);
        }
    }
    char err[600];
    snprintf(err, sizeof err, "%s", st != LT_OK ? lt_last_error() : "");
    supervise(&L, sfd, sig_pipe[0]);
    if (L.link) L.link->stop(L.link->ctx);
    if (st == LT_OK) write_metrics(&L);
    if (st != LT_OK) lt_set_error(st, "%s", err);
    if (st == LT_OK && res->message[0] && !o->quiet) {
        char line[1200];
        int m = L.hosts > 1
                    ? snprintf(line, sizeof line, "lazytpu-run[host %d]: %s\n",
                               L.host, res->message)
                    : snprintf(line, sizeof line, "lazytpu-run: %s\n",
                               res->message);
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
    lt_world_unlink(L.world);
    lt_janitor_done(&L.jan);
    forward_signals_stop(sig_pipe, old_actions);
    sigprocmask(SIG_SETMASK, &oldmask, NULL);
    lt_world_close(L.world);
    free(L.w);
    return st;
}
