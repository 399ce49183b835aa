/*
 * tests/c/test_multihost.c — two simulated hosts x four cores over real
 * mpirun on loopback (`lazytpu-run --hosts 2 -n 4`, which runs `mpirun -np
 * 2 --oversubscribe [--allow-run-as-root] --bind-to none lazytpu-run -n 4`)
 * against one host x eight cores, with the worker program mh_worker:
 *   - the environment contract of the workers;
 *   - every collective x dtype x reduce type (lt_world_* and traced IR ops)
 *     equal to 1 x 8 (integers exactly, floats within tolerance), also with
 *     a tiny shared-memory segment (many chunks and super-chunks);
 *   - SGD training (traced C API, gradient all_reduce in the graph): 2 x 4
 *     parameters within 1e-5 of 1 x 8 and of 1 x 1 with the whole batch;
 *     the merged metrics report covers both hosts;
 *   - a rank killed on host 1, and host 1's launcher killed: everything
 *     ends within 60 s, non-zero exit, the cause named, no /dev/shm entry
 *     and no worker left;
 *   - mismatched collectives across hosts, a host whose ranks exit early and
 *     a host that never arrives: errors naming both sides, never a hang.
 * Without MPI in the build only the "how to enable it" error is checked.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN_DEADLINE_S 120.0

typedef struct run_out {
    int code;          /* exit code, 128+signal */
    double secs;
    char *err;         /* stderr + stdout (malloc'd) */
} run_out;

static char tmpdir[256];
static char bindir[512];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t r = fread(b, 1, (size_t)n, f);
    b[r] = 0;
    fclose(f);
    if (len) *len = r;
    return b;
}

/* Runs lazytpu-run with `opts` (space separated) and mh_worker `args`
 * (space separated, "%D" = a fresh directory `dir` under tmpdir), with
 * extra environment `env` ("K=V K2=V2" or NULL). Kills the whole process group
 * after RUN_DEADLINE_S: a hang fails the test instead of the suite. */
static void run_once(run_out *o, const char *opts, const char *worker_args,
                     const char *dir, const char *env)
{
    memset(o, 0, sizeof *o);
    char d[512], outp[600], exe[600], wexe[600];
    snprintf(d, sizeof d, "%s/%s", tmpdir, dir);
    mkdir(d, 0700);
    snprintf(outp, sizeof outp, "%s/%s.out", tmpdir, dir);
    snprintf(exe, sizeof exe, "%s/lazytpu-run", bindir);
    snprintf(wexe, sizeof wexe, "%s/mh_worker", bindir);
    char *argv[64];
    int a = 0;
    argv[a++] = exe;
    char ob[512], wb[512];
    snprintf(ob, sizeof ob, "%s", opts);
    for (char *t = strtok(ob, " "); t && a < 30; t = strtok(NULL, " ")) argv[a++] = t;
    argv[a++] = "--";
    argv[a++] = wexe;
    snprintf(wb, sizeof wb, "%s", worker_args);
    for (char *t = strtok(wb, " "); t && a < 60; t = strtok(NULL, " "))
        argv[a++] = strcmp(t, "%D") == 0 ? d : t;
    argv[a] = NULL;
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        int fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        if (env) {   /* "K=V K2=V2" */
            char *e = strdup(env), *save = NULL;
            for (char *t = strtok_r(e, " ", &save); t; t = strtok_r(NULL, " ", &save))
                putenv(t);
        }
        execv(exe, argv);
        _exit(99);
    }
    setpgid(pid, pid);
    int st = 0;
    for (;;) {
        pid_t p = waitpid(pid, &st, WNOHANG);
        if (p == pid) break;
        if (now_s() - t0 > RUN_DEADLINE_S) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
        }
        usleep(20000);
    }
    o->secs = now_s() - t0;
    o->code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    o->err = slurp(outp, NULL);
    if (!o->err) o->err = strdup("");
}

/* A sanitizer's own start-up or leak-check machinery can fail for reasons
 * outside the program (LeakSanitizer's ptrace-based stop-the-world refused,
 * ASan's shadow range taken by a randomized mapping); it then exits 1 with
 * its own message. Such a run says nothing about lazytpu-run: run again (at
 * most twice more), saying so. */
static int sanitizer_failed(const char *out)
{
    return strstr(out, "LeakSanitizer has encountered a fatal error") ||
           strstr(out, "Shadow memory range interleaves");
}

static void run(run_out *o, const char *opts, const char *worker_args,
                const char *dir, const char *env)
{
    for (int attempt = 0;; attempt++) {
        run_once(o, opts, worker_args, dir, env);
        if (attempt == 2 || !sanitizer_failed(o->err)) return;
        fprintf(stderr, "[%s] the sanitizer itself failed (exit %d); running "
                "again:\n%s\n", dir, o->code, o->err);
        free(o->err);
    }
}

static void dump(const run_out *o)
{
    fprintf(stderr, "exit %d after %.2fs, output:\n%s\n", o->code, o->secs, o->err);
}

static __attribute__((unused)) void expect_ok(run_out *o)
{
    if (o->code) dump(o);
    assert_int_equal(o->code, 0);
}

/* --------------------------------------------------------- record files */

typedef struct recs {
    int n;
    int dt[512];
    int64_t bytes[512];
    char *data[512];
    char *buf;
} recs;

static int read_recs(const char *path, recs *r)
{
    size_t len = 0;
    memset(r, 0, sizeof *r);
    r->buf = slurp(path, &len);
    if (!r->buf) return -1;
    size_t o = 0;
    while (o + 12 <= len && r->n < 512) {
        int32_t dt;
        int64_t b;
        memcpy(&dt, r->buf + o, 4);
        memcpy(&b, r->buf + o + 4, 8);
        if (o + 12 + (size_t)b > len) return -1;
        r->dt[r->n] = dt;
        r->bytes[r->n] = b;
        r->data[r->n] = r->buf + o + 12;
        r->n++;
        o += 12 + (size_t)b;
    }
    return 0;
}

static double elem(const char *p, int dt, int64_t i)
{
    switch (dt) {
    case 0: { float f; memcpy(&f, p + 4 * i, 4); return f; }
    case 1: { uint16_t h; memcpy(&h, p + 2 * i, 2); uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
    case 2: { double f; memcpy(&f, p + 8 * i, 8); return f; }
    default: return 0;
    }
}

/* Compares two record files: same records; integers and bool byte-equal,
 * floats within a relative tolerance (f32 1e-5, bf16 1e-2, f64 1e-12).
 * Returns the largest float difference seen (absolute). */
static __attribute__((unused)) double compare_files(const char *a, const char *b)
{
    recs ra, rb;
    assert_int_equal(read_recs(a, &ra), 0);
    assert_int_equal(read_recs(b, &rb), 0);
    if (ra.n != rb.n) fprintf(stderr, "%s: %d records, %s: %d\n", a, ra.n, b, rb.n);
    assert_int_equal(ra.n, rb.n);
    assert_true(ra.n > 0);
    double worst = 0;
    for (int i = 0; i < ra.n; i++) {
        assert_int_equal(ra.dt[i], rb.dt[i]);
        assert_int_equal(ra.bytes[i], rb.bytes[i]);
        int dt = ra.dt[i];
        if (dt > 2) {            /* i64, i32, bool: exact */
            if (memcmp(ra.data[i], rb.data[i], (size_t)ra.bytes[i]) != 0)
                fprintf(stderr, "record %d (dtype %d) differs\n", i, dt);
            assert_memory_equal(ra.data[i], rb.data[i], (size_t)ra.bytes[i]);
            continue;
        }
        double tol = dt == 0 ? 1e-5 : dt == 1 ? 1e-2 : 1e-12;
        int64_t n = ra.bytes[i] / (dt == 0 ? 4 : dt == 1 ? 2 : 8);
        for (int64_t j = 0; j < n; j++) {
            double x = elem(ra.data[i], dt, j), y = elem(rb.data[i], dt, j);
            double d = fabs(x - y);
            if (d > worst) worst = d;
            if (d > tol * (1 + fabs(x)))
                fprintf(stderr, "record %d [%lld]: %g vs %g\n", i, (long long)j, x, y);
            assert_true(d <= tol * (1 + fabs(x)));
        }
    }
    free(ra.buf);
    free(rb.buf);
    return worst;
}

static __attribute__((unused)) void path_of(char *buf, size_t cap, const char *dir, const char *file)
{
    snprintf(buf, cap, "%s/%s/%s", tmpdir, dir, file);
}

/* ------------------------------------------------------- process checks */

/* DIR/proc-<k>.txt: "pid launcher-pid shm-name": no worker alive, no
 * segment left. n < 0: workers may have been stopped before writing theirs
 * (at least one file is required). */
static __attribute__((unused)) void expect_nothing_left(const char *dir, int n)
{
    int optional = n < 0, seen = 0;
    if (optional) n = -n;
    usleep(300000);   /* the janitor of a killed launcher is asynchronous */
    for (int k = 0; k < n; k++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s/proc-%d.txt", tmpdir, dir, k);
        char *t = slurp(p, NULL);
        if (!t && optional) continue;
        assert_non_null(t);
        seen++;
        int pid = 0, ppid = 0;
        char shm[256] = "";
        assert_int_equal(sscanf(t, "%d %d %255s", &pid, &ppid, shm), 3);
        free(t);
        char sp[300];
        snprintf(sp, sizeof sp, "/dev/shm%s", shm);
        if (access(sp, F_OK) == 0) fprintf(stderr, "%s left behind\n", sp);
        assert_int_equal(access(sp, F_OK), -1);
        int alive = kill(pid, 0) == 0;
        if (alive) {
            char sp2[64], buf[256] = "";
            snprintf(sp2, sizeof sp2, "/proc/%d/stat", pid);
            FILE *f = fopen(sp2, "r");
            if (f) {
                if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
                fclose(f);
            }
            char *rp = strrchr(buf, ')');
            if (rp && (rp[2] == 'Z' || rp[2] == 'X')) alive = 0;
            if (alive) fprintf(stderr, "worker %d (pid %d) still alive\n", k, pid);
        }
        assert_false(alive);
    }
    assert_true(seen > 0);
}

#ifdef LT_TEST_HAVE_MPI

/* ------------------------------------------------------------- the tests */

static void test_worker_environment(void **state)
{
    run_out o;
    char exe[600];
    snprintf(exe, sizeof exe, "%s/lazytpu-run", bindir);
    /* a shell instead of mh_worker: print the contract */
    memset(&o, 0, sizeof o);
    char outp[600];
    snprintf(outp, sizeof outp, "%s/env.out", tmpdir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(exe, exe, "--hosts", "2", "-n", "2", "--", "sh", "-c",
              "echo \"env $LAZYTPU_ORDINAL $LAZYTPU_LOCAL_ORDINAL $LAZYTPU_HOST_INDEX "
              "$LAZYTPU_NUM_HOSTS $LAZYTPU_WORLD_SIZE $LAZYTPU_LOCAL_WORLD_SIZE "
              "${OMPI_COMM_WORLD_RANK:-no-mpi}\" >&2",
              (char *)NULL);
        _exit(99);
    }
    int st;
    waitpid(pid, &st, 0);
    o.err = slurp(outp, NULL);
    o.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    expect_ok(&o);
    static const char *want[] = {
        "[ordinal 0] env 0 0 0 2 4 2 no-mpi\n", "[ordinal 1] env 1 1 0 2 4 2 no-mpi\n",
        "[ordinal 2] env 2 0 1 2 4 2 no-mpi\n", "[ordinal 3] env 3 1 1 2 4 2 no-mpi\n"
    };
    for (int i = 0; i < 4; i++) {
        if (!strstr(o.err, want[i])) dump(&o);
        assert_non_null(strstr(o.err, want[i]));
    }
    free(o.err);
}

static void test_collectives_2x4_equal_1x8(void **state)
{
    run_out a, b, c;
    run(&a, "-n 8", "coll %D", "coll18", NULL);
    expect_ok(&a);
    run(&b, "--hosts 2 -n 4", "coll %D", "coll24", NULL);
    expect_ok(&b);
    /* 1 MiB segments: many chunks and super-chunks per collective */
    run(&c, "--hosts 2 -n 4 --shm-bytes 1048576", "coll %D", "coll24s", NULL);
    expect_ok(&c);
    double worst = 0;
    for (int r = 0; r < 8; r++) {
        char f1[600], f2[600], f3[600], name[32];
        snprintf(name, sizeof name, "coll-%d.bin", r);
        path_of(f1, sizeof f1, "coll18", name);
        path_of(f2, sizeof f2, "coll24", name);
        path_of(f3, sizeof f3, "coll24s", name);
        double w1 = compare_files(f1, f2), w2 = compare_files(f1, f3);
        if (w1 > worst) worst = w1;
        if (w2 > worst) worst = w2;
    }
    printf("collectives 2x4 vs 1x8: largest float difference %g (1x8 %.2fs, "
           "2x4 %.2fs, 2x4 small shm %.2fs)\n", worst, a.secs, b.secs, c.secs);
    free(a.err);
    free(b.err);
    free(c.err);
}

static void test_sgd_2x4_equal_1x8(void **state)
{
    run_out a, b, c;
    run(&a, "-n 1", "sgd %D", "sgd11", NULL);
    expect_ok(&a);
    run(&b, "-n 8", "sgd %D", "sgd18", NULL);
    expect_ok(&b);
    char opts[700];
    snprintf(opts, sizeof opts, "--hosts 2 -n 4 --metrics %s/sgd-metrics.txt", tmpdir);
    run(&c, opts, "sgd %D", "sgd24", NULL);
    expect_ok(&c);
    char f1[600], f8[600], f24[600];
    path_of(f1, sizeof f1, "sgd11", "sgd-0.bin");
    path_of(f8, sizeof f8, "sgd18", "sgd-0.bin");
    path_of(f24, sizeof f24, "sgd24", "sgd-0.bin");
    recs r1, r8, r24;
    assert_int_equal(read_recs(f1, &r1), 0);
    assert_int_equal(read_recs(f8, &r8), 0);
    assert_int_equal(read_recs(f24, &r24), 0);
    assert_int_equal(r1.n, 2);
    assert_int_equal(r8.n, 2);
    assert_int_equal(r24.n, 2);
    double d18 = 0, d24 = 0, moved = 0;
    for (int i = 0; i < 2; i++) {
        int64_t n = r1.bytes[i] / 4;
        for (int64_t j = 0; j < n; j++) {
            double x1 = elem(r1.data[i], 0, j), x8 = elem(r8.data[i], 0, j);
            double x24 = elem(r24.data[i], 0, j);
            d18 = fmax(d18, fabs(x1 - x8));
            d24 = fmax(d24, fabs(x8 - x24));
            double init = i == 0 ? 0.3 * sin(1.3 * j + 0.2) : 0.3 * cos(0.7 * j - 0.1);
            moved = fmax(moved, fabs(x24 - init));
        }
    }
    printf("SGD: |1x8 - 1x1| = %g, |2x4 - 1x8| = %g, parameters moved by %g\n",
           d18, d24, moved);
    assert_true(d24 <= 1e-5);
    assert_true(d18 <= 1e-5);
    assert_true(moved > 1e-3);           /* it trained */
    /* every rank of the 2x4 run holds the same parameters */
    for (int r = 1; r < 8; r++) {
        char fr[600], name[32];
        snprintf(name, sizeof name, "sgd-%d.bin", r);
        path_of(fr, sizeof fr, "sgd24", name);
        compare_files(f24, fr);
    }
    free(r1.buf);
    free(r8.buf);
    free(r24.buf);
    /* the merged metrics cover both hosts, collective time split */
    char mp[600];
    snprintf(mp, sizeof mp, "%s/sgd-metrics.txt", tmpdir);
    char *m = slurp(mp, NULL);
    assert_non_null(m);
    assert_non_null(strstr(m, "== merged over 8 ordinals on 2 hosts (8 reports) ==\n"));
    assert_non_null(strstr(m, "Metric: CollectiveTime\n  TotalSamples: 192\n"));
    assert_non_null(strstr(m, "Metric: InterHostCollectiveTime\n  TotalSamples: 192\n"));
    assert_non_null(strstr(m, "Metric: IntraHostCollectiveTime\n"));
    const char *ph = strstr(m, "== per host ==\n");
    assert_non_null(ph);
    assert_non_null(strstr(ph, "Metric: InterHostCollectiveTime\n  PerHostSamples: 96 96\n"
                               "  PerHostAccumulator: "));
    assert_non_null(strstr(ph, "Metric: InterHostProxyTime\n  PerHostSamples: "));
    assert_non_null(strstr(m, "== host 1 proxy ==\n"));
    /* each ordinal's own report: its header line (the matmul precision), then
     * its metrics */
    const char *o7 = strstr(m, "== ordinal 7 (host 1) ==\nlazytpu: f32 matrix products");
    assert_non_null(o7);
    assert_non_null(strstr(o7, "\nMetric: "));
    free(m);
    free(a.err);
    free(b.err);
    free(c.err);
}

static void test_rank_killed_on_host1_ends_everything(void **state)
{
    run_out o;
    run(&o, "--hosts 2 -n 4", "kill %D 5", "kill", NULL);
    if (o.code != 137) dump(&o);
    assert_int_equal(o.code, 128 + 9);
    assert_true(o.secs < 60);
    /* both launchers name the rank, its host and the cause */
    const char *why = "worker 5 (host 1, local ordinal 1) died: killed by signal 9 (SIGKILL)\n";
    char w0[200], w1[200];
    snprintf(w0, sizeof w0, "lazytpu-run[host 0]: %s", why);
    snprintf(w1, sizeof w1, "lazytpu-run[host 1]: %s", why);
    if (!strstr(o.err, w0) || !strstr(o.err, w1)) dump(&o);
    assert_non_null(strstr(o.err, w1));
    assert_non_null(strstr(o.err, w0));
    expect_nothing_left("kill", 8);
    printf("rank killed on host 1: everything ended after %.2f s\n", o.secs);
    free(o.err);
}

/* A worker that fails while the launchers are still connecting: the fault
 * still reaches host 0 (its launcher reports the cause, not mpirun's
 * SIGTERM), and every host writes the outcome to its status file. */
static void test_failure_during_startup_is_carried(void **state)
{
    run_out o;
    char opts[700];
    snprintf(opts, sizeof opts, "--hosts 2 -n 2 --status-file %s/fail.status", tmpdir);
    run(&o, opts, "fail %D 3", "fail", NULL);
    if (o.code != 1) dump(&o);
    assert_int_equal(o.code, 1);
    assert_true(o.secs < 60);
    const char *why = "worker 3 (host 1, local ordinal 1) exited with code 1: "
                      "mh_worker ordinal 3: failing on purpose\n";
    char w0[300];
    snprintf(w0, sizeof w0, "lazytpu-run[host 0]: %s", why);
    if (!strstr(o.err, w0)) dump(&o);
    assert_non_null(strstr(o.err, w0));
    char sp[600];
    snprintf(sp, sizeof sp, "%s/fail.status", tmpdir);
    char *st = slurp(sp, NULL);
    assert_non_null(st);
    assert_string_equal(st, "1\t3\tworker 3 (host 1, local ordinal 1) exited with "
                            "code 1: mh_worker ordinal 3: failing on purpose\n");
    free(st);
    expect_nothing_left("fail", -4);
    free(o.err);
}

static void test_host1_launcher_killed_ends_everything(void **state)
{
    run_out o;
    run(&o, "--hosts 2 -n 4", "killhost %D 5", "killhost", NULL);
    if (o.code == 0) dump(&o);
    assert_int_not_equal(o.code, 0);
    assert_true(o.secs < 60);
    /* mpirun names the host (its rank 1 = host 1) and the signal */
    if (!strstr(o.err, "process rank 1") || !strstr(o.err, "signal 9")) dump(&o);
    assert_non_null(strstr(o.err, "process rank 1"));
    assert_non_null(strstr(o.err, "signal 9"));
    expect_nothing_left("killhost", 8);
    printf("launcher of host 1 killed: everything ended after %.2f s\n", o.secs);
    free(o.err);
}

static void expect_same_message(const char *dir, const char *want)
{
    for (int r = 0; r < 8; r++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s/mm-%d.txt", tmpdir, dir, r);
        char *t = slurp(p, NULL);
        assert_non_null(t);
        if (strcmp(t, want)) fprintf(stderr, "ordinal %d: %s\n", r, t);
        assert_string_equal(t, want);
        free(t);
    }
}

static void test_mismatch_across_hosts_names_both(void **state)
{
    run_out o;
    run(&o, "--hosts 2 -n 4", "mismatch %D 0", "mm0", NULL);
    expect_ok(&o);
    expect_same_message("mm0", "all_reduce: rank 4 (host 1) sent f32 [1024] but "
                               "rank 0 (host 0) sent f32 [512]");
    free(o.err);
    run(&o, "--hosts 2 -n 4", "mismatch %D 1", "mm1", NULL);
    expect_ok(&o);
    expect_same_message("mm1", "all_reduce: rank 6 (host 1) sent f32 [1024] but "
                               "rank 4 (host 1) sent f32 [512]");
    free(o.err);
}

static void test_abstaining_rank_on_host1_fails_everyone(void **state)
{
    run_out o;
    run(&o, "--hosts 2 -n 4", "abstain %D", "abstain", NULL);
    expect_ok(&o);
    expect_same_message("abstain", "all_reduce: rank 5 (host 1) could not take "
                                   "part: its input is poisoned");
    free(o.err);
}

static void test_host_exiting_early_is_an_error(void **state)
{
    run_out o;
    run(&o, "--hosts 2 -n 4", "early %D", "early", NULL);
    if (o.code == 0) dump(&o);
    assert_int_not_equal(o.code, 0);
    assert_true(o.secs < 60);
    const char *want = "collective mismatch: the ranks of host 1 all exited but "
                       "rank 0 (host 0) called all_reduce f32 [8] (#3)";
    if (!strstr(o.err, want)) dump(&o);
    assert_non_null(strstr(o.err, want));
    free(o.err);
}

static void test_missing_host_times_out(void **state)
{
    run_out o;
    run(&o, "--hosts 2 -n 2", "stall %D 30", "stall", "LAZYTPU_COLLECTIVE_TIMEOUT=2");
    if (o.code == 0) dump(&o);
    assert_int_not_equal(o.code, 0);
    assert_true(o.secs < 20);
    const char *want = "all_reduce #1 timed out after 2 s: rank 0 (host 0) called "
                       "all_reduce f32 [8] but host(s) 1 (";
    if (!strstr(o.err, want)) dump(&o);
    assert_non_null(strstr(o.err, want));
    free(o.err);
}

static void test_usage_errors(void **state)
{
    run_out o;
    run(&o, "--hosts 0 -n 2", "coll %D", "usage", NULL);
    if (o.code != 2) dump(&o);
    assert_int_equal(o.code, 2);
    assert_non_null(strstr(o.err, "--hosts wants 1..64"));
    free(o.err);
    run(&o, "--hosts 2 -n 2", "coll %D", "usage2", "OMPI_COMM_WORLD_SIZE=2");
    if (o.code != 2) dump(&o);
    assert_int_equal(o.code, 2);
    assert_non_null(strstr(o.err, "malformed OMPI_COMM_WORLD_RANK"));
    free(o.err);
    /* different -n per host is refused by every host */
    char exe[600], outp[600];
    snprintf(exe, sizeof exe, "%s/lazytpu-run", bindir);
    snprintf(outp, sizeof outp, "%s/uneven.out", tmpdir);
    char cmd[2000];
    snprintf(cmd, sizeof cmd,
             "mpirun -np 2 --oversubscribe --allow-run-as-root --bind-to none "
             "sh -c 'exec %s -n $((OMPI_COMM_WORLD_RANK + 1)) -- true' > %s 2>&1",
             exe, outp);
    int st = system(cmd);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    char *t = slurp(outp, NULL);
    assert_non_null(t);
    if (!strstr(t, "every host must run the same -n")) fprintf(stderr, "%s\n", t);
    assert_non_null(strstr(t, "every host must run the same -n"));
    free(t);
}

#else /* no MPI in this build */

static void test_without_mpi_says_how_to_enable(void **state)
{
    run_out o;
    run(&o, "--hosts 2 -n 2", "coll %D", "nompi", NULL);
    if (o.code != 2) dump(&o);
    assert_int_equal(o.code, 2);
    assert_non_null(strstr(o.err, "libopenmpi-dev"));
    free(o.err);
    run(&o, "-n 2", "coll %D", "nompi2",
        "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0");
    if (o.code != 2) dump(&o);
    assert_int_equal(o.code, 2);
    assert_non_null(strstr(o.err, "started by mpirun as host 0 of 2"));
    assert_non_null(strstr(o.err, "libopenmpi-dev"));
    free(o.err);
}

#endif

static int setup(void **state)
{
    const char *b = getenv("LAZYTPU_BIN_DIR");
    snprintf(bindir, sizeof bindir, "%s", b ? b : ".");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lt-multihost-test-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#ifdef LT_TEST_HAVE_MPI
        cmocka_unit_test(test_worker_environment),
        cmocka_unit_test(test_collectives_2x4_equal_1x8),
        cmocka_unit_test(test_sgd_2x4_equal_1x8),
        cmocka_unit_test(test_rank_killed_on_host1_ends_everything),
        cmocka_unit_test(test_failure_during_startup_is_carried),
        cmocka_unit_test(test_host1_launcher_killed_ends_everything),
        cmocka_unit_test(test_mismatch_across_hosts_names_both),
        cmocka_unit_test(test_abstaining_rank_on_host1_fails_everyone),
        cmocka_unit_test(test_host_exiting_early_is_an_error),
        cmocka_unit_test(test_missing_host_times_out),
        cmocka_unit_test(test_usage_errors),
#else
        cmocka_unit_test(test_without_mpi_says_how_to_enable),
#endif
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
