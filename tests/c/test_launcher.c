/*
 * tests/c/test_launcher.c — runs the built `lazytpu-run` (directory in env
 * LAZYTPU_BIN_DIR) on small shell commands: success, a worker exiting 3, a
 * worker killed by SIGKILL (also one of 8, many times), a hang past
 * --timeout, a worker ignoring SIGTERM, signals while the launcher starts;
 * checks exit codes, the message naming ordinal and cause, bounded
 * time, no /dev/shm/lazytpu-<launcher pid>-* left and no process left.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct run_out {
    int code;            /* exit code, or 128+signal */
    double secs;
    char err[16384];     /* launcher's stderr */
    int shm_left;        /* /dev/shm/lazytpu-<pid>-* entries after exit */
} run_out;

static char tmpdir[256];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int count_shm(pid_t pid)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "lazytpu-%d-", (int)pid);
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

/* Runs lazytpu-run with the given options and `sh -c script`. */
static void run(run_out *o, const char *opts, const char *script)
{
    memset(o, 0, sizeof *o);
    const char *bin = getenv("LAZYTPU_BIN_DIR");
    char exe[512];
    snprintf(exe, sizeof exe, "%s/lazytpu-run", bin ? bin : ".");
    char errpath[512];
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", tmpdir);
    char *argv[32];
    int a = 0;
    argv[a++] = exe;
    char optbuf[512];
    snprintf(optbuf, sizeof optbuf, "%s", opts);
    for (char *t = strtok(optbuf, " "); t && a < 24; t = strtok(NULL, " "))
        argv[a++] = t;
    argv[a++] = "--";
    argv[a++] = "sh";
    argv[a++] = "-c";
    argv[a++] = (char *)script;
    argv[a] = NULL;
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        setenv("TMPD", tmpdir, 1);
        execv(exe, argv);
        _exit(99);
    }
    int st;
    waitpid(pid, &st, 0);
    o->secs = now_s() - t0;
    o->code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    FILE *f = fopen(errpath, "r");
    if (f) {
        size_t n = fread(o->err, 1, sizeof o->err - 1, f);
        o->err[n] = 0;
        fclose(f);
    }
    o->shm_left = count_shm(pid);
}

/* Every pid listed in $TMPD/pids must be gone. */
static void expect_no_process_left(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/pids", tmpdir);
    FILE *f = fopen(path, "r");
    if (!f) return;
    int pid, n = 0;
    while (fscanf(f, "%d", &pid) == 1) {
        n++;
        /* the launcher reaped its workers; grandchildren were re-parented
         * and reaped by init, or still exist as zombies of init at worst */
        int alive = kill(pid, 0) == 0;
        if (alive) {
            char p[64], buf[256] = { 0 };
            snprintf(p, sizeof p, "/proc/%d/stat", pid);
            FILE *s = fopen(p, "r");
            if (s) {
                if (!fgets(buf, sizeof buf, s)) buf[0] = 0;
                fclose(s);
            }
            char *rp = strrchr(buf, ')');
            if (rp && (rp[2] == 'Z' || rp[2] == 'X')) alive = 0;
            if (alive) fprintf(stderr, "process %d still alive: %s\n", pid, buf);
        }
        assert_false(alive);
    }
    fclose(f);
    remove(path);
}

static void dump(const run_out *o)
{
    fprintf(stderr, "exit %d after %.2fs, stderr:\n%s\n", o->code, o->secs, o->err);
}

static void test_success_env_and_prefix(void **state)
{
    run_out o;
    run(&o, "-n 4",
        "echo \"env $LAZYTPU_ORDINAL/$LAZYTPU_WORLD_SIZE/$LAZYTPU_LOCAL_ORDINAL/"
        "$LAZYTPU_NUM_CORES\" >&2; test -e /dev/shm$LAZYTPU_SHM_NAME && "
        "echo shm-ok >&2; printf 'no newline' >&2");
    if (o.code) dump(&o);
    assert_int_equal(o.code, 0);
    for (int k = 0; k < 4; k++) {
        char want[64];
        snprintf(want, sizeof want, "[ordinal %d] env %d/4/%d/1\n", k, k, k);
        assert_non_null(strstr(o.err, want));
    }
    assert_non_null(strstr(o.err, "[ordinal 2] shm-ok\n"));
    assert_non_null(strstr(o.err, "[ordinal 3] no newline\n"));
    assert_null(strstr(o.err, "lazytpu-run:"));
    assert_int_equal(o.shm_left, 0);
}

/* Workers get one thread budget for the core's kernels (OpenMP and its
 * helpers), a single-threaded OpenBLAS and, when oversubscribed, sleeping
 * OpenMP waits; a user's OMP_NUM_THREADS is the budget; explicit settings
 * are kept. */
static void test_thread_budget_env(void **state)
{
    static const char *vars[] = { "OMP_NUM_THREADS", "LAZYTPU_OMP_THREADS",
                                  "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY" };
    char *saved[4];
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(vars[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(vars[i]);
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = (int)(cpus < 8 ? 8 : cpus + 1);       /* oversubscribed */
    long omp = cpus / n > 1 ? cpus / n : 1;
    const char *script = "echo \"thr $OMP_NUM_THREADS/$LAZYTPU_OMP_THREADS/"
                         "$OPENBLAS_NUM_THREADS/$OMP_WAIT_POLICY\" >&2";
    char opts[32], want[96];
    run_out o;
    snprintf(opts, sizeof opts, "-n %d", n);
    run(&o, opts, script);
    if (o.code) dump(&o);
    assert_int_equal(o.code, 0);
    snprintf(want, sizeof want, "[ordinal 0] thr %ld/%ld/1/PASSIVE\n", omp, omp);
    if (!strstr(o.err, want)) dump(&o);
    assert_non_null(strstr(o.err, want));

    setenv("OMP_NUM_THREADS", "3", 1);
    run(&o, "-n 1", script);
    assert_int_equal(o.code, 0);
    if (!strstr(o.err, "[ordinal 0] thr 3/3/1/\n")) dump(&o);
    assert_non_null(strstr(o.err, "[ordinal 0] thr 3/3/1/\n"));
    setenv("OPENBLAS_NUM_THREADS", "2", 1);
    setenv("OMP_WAIT_POLICY", "ACTIVE", 1);
    run(&o, "-n 1", script);
    assert_int_equal(o.code, 0);
    if (!strstr(o.err, "[ordinal 0] thr 3/3/2/ACTIVE\n")) dump(&o);
    assert_non_null(strstr(o.err, "[ordinal 0] thr 3/3/2/ACTIVE\n"));
    for (int i = 0; i < 4; i++) {
        if (saved[i]) setenv(vars[i], saved[i], 1);
        else unsetenv(vars[i]);
        free(saved[i]);
    }
}

static void test_worker_exit_code_stops_everyone(void **state)
{
    run_out o;
    run(&o, "-n 4",
        "echo $$ >> $TMPD/pids; if [ $LAZYTPU_ORDINAL = 2 ]; then sleep 0.2; "
        "echo 'Traceback (most recent call last):' >&2; "
        "echo 'ValueError: boom' >&2; exit 3; fi; sleep 30 & echo $! >> $TMPD/pids; wait");
    if (o.code != 3) dump(&o);
    assert_int_equal(o.code, 3);
    assert_non_null(strstr(o.err, "lazytpu-run: worker 2 exited with code 3: "
                                  "ValueError: boom\n"));
    assert_true(o.secs < 5.0);
    assert_int_equal(o.shm_left, 0);
    expect_no_process_left();
}

static void test_worker_killed_by_signal(void **state)
{
    run_out o;
    run(&o, "-n 3",
        "echo $$ >> $TMPD/pids; if [ $LAZYTPU_ORDINAL = 1 ]; then sleep 0.2; "
        "kill -9 $$; fi; sleep 30 & echo $! >> $TMPD/pids; wait");
    if (o.code != 137) dump(&o);
    assert_int_equal(o.code, 128 + 9);
    assert_non_null(strstr(o.err, "lazytpu-run: worker 1 died: killed by signal 9 (SIGKILL)\n"));
    assert_true(o.secs < 5.0);
    assert_int_equal(o.shm_left, 0);
    expect_no_process_left();
}

static void test_timeout_stops_hanging_workers(void **state)
{
    run_out o;
    run(&o, "-n 3 --timeout 1",
        "echo $$ >> $TMPD/pids; if [ $LAZYTPU_ORDINAL = 0 ]; then exit 0; fi; "
        "sleep 30 & echo $! >> $TMPD/pids; wait");
    if (o.code != 124) dump(&o);
    assert_int_equal(o.code, 124);
    assert_non_null(strstr(o.err, "lazytpu-run: timed out after 1 s; workers "
                                  "still running: 1, 2\n"));
    assert_true(o.secs >= 0.9 && o.secs < 4.0);
    assert_int_equal(o.shm_left, 0);
    expect_no_process_left();
}

static void test_sigterm_ignored_gets_sigkill(void **state)
{
    run_out o;
    run(&o, "-n 2 --grace 0.5",
        "echo $$ >> $TMPD/pids; trap '' TERM; if [ $LAZYTPU_ORDINAL = 0 ]; then "
        "sleep 0.2; exit 5; fi; sleep 30 & echo $! >> $TMPD/pids; wait");
    if (o.code != 5) dump(&o);
    assert_int_equal(o.code, 5);
    assert_non_null(strstr(o.err, "lazytpu-run: worker 0 exited with code 5\n"));
    assert_true(o.secs >= 0.5 && o.secs < 4.0);
    assert_int_equal(o.shm_left, 0);
    expect_no_process_left();
}

static void test_metrics_are_merged(void **state)
{
    run_out o;
    char opts[600];
    snprintf(opts, sizeof opts, "-n 3 --metrics %s/metrics.txt", tmpdir);
    run(&o, opts,
        "f=$(echo \"$LAZYTPU_METRICS_FILE\" | sed \"s/{ordinal}/$LAZYTPU_ORDINAL/\"); "
        "printf 'Metric: ExecuteTime\\n  TotalSamples: 2\\n  Accumulator: 1ms\\n"
        "Counter: MarkStep\\n  Value: %d\\n' $((LAZYTPU_ORDINAL + 1)) > $f");
    if (o.code) dump(&o);
    assert_int_equal(o.code, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/metrics.txt", tmpdir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    assert_non_null(strstr(buf, "== merged over 3 ordinals (3 reports) ==\n"));
    assert_non_null(strstr(buf, "Metric: ExecuteTime\n  TotalSamples: 6\n"));
    assert_non_null(strstr(buf, "Counter: MarkStep\n  Value: 6\n"));
    /* per-ordinal rows only for what differs: MarkStep 1/2/3, not the
     * identical ExecuteTime */
    const char *po = strstr(buf, "== per ordinal (where ordinals differ) ==\n");
    assert_non_null(po);
    assert_non_null(strstr(po, "Counter: MarkStep\n  PerOrdinal: 1 2 3\n"
                               "== ordinal 0 =="));
    assert_non_null(strstr(buf, "== ordinal 2 ==\nMetric: ExecuteTime"));
    snprintf(path, sizeof path, "%s/metrics.txt.ordinal-1", tmpdir);
    assert_int_equal(access(path, F_OK), -1);
}

/* SIGTERM to the launcher (like Ctrl-C's SIGINT) stops every worker. */
static void test_launcher_signal_stops_all(void **state)
{
    const char *bin = getenv("LAZYTPU_BIN_DIR");
    char exe[512], script[1024];
    snprintf(exe, sizeof exe, "%s/lazytpu-run", bin ? bin : ".");
    snprintf(script, sizeof script,
             "echo $$ >> %s/pids; sleep 30 & echo $! >> %s/pids; wait", tmpdir, tmpdir);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 2);
        execl(exe, exe, "-n", "3", "--", "sh", "-c", script, (char *)NULL);
        _exit(99);
    }
    usleep(500000);
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 128 + SIGTERM);
    assert_true(now_s() - t0 < 4.0);
    assert_int_equal(count_shm(pid), 0);
    expect_no_process_left();
}

/* One of 8 workers SIGKILLs itself at a varying moment while its peers
 * run (each with a child in its group): after every run the segment is
 * gone and no process is left. LAZYTPU_TEST_SIGKILL_RUNS runs (default
 * 20). */
static void test_sigkill_one_of_eight_leaves_nothing(void **state)
{
    const char *e = getenv("LAZYTPU_TEST_SIGKILL_RUNS");
    int runs = e && atoi(e) > 0 ? atoi(e) : 20;
    for (int r = 0; r < runs; r++) {
        run_out o;
        char script[400];
        snprintf(script, sizeof script,
                 "echo $$ >> $TMPD/pids; sleep 30 & echo $! >> $TMPD/pids; "
                 "if [ $LAZYTPU_ORDINAL = 5 ]; then sleep 0.0%d; kill -9 $$; fi; wait",
                 r % 10);
        run(&o, "-n 8", script);
        if (o.code != 137 || o.shm_left) {
            fprintf(stderr, "run %d: ", r);
            dump(&o);
        }
        assert_int_equal(o.code, 128 + 9);
        assert_non_null(strstr(o.err, "lazytpu-run: worker 5 died: killed by signal 9 (SIGKILL)\n"));
        assert_int_equal(o.shm_left, 0);
        expect_no_process_left();
    }
}

/* SIGTERM (or SIGINT) reaching the launcher at any moment of its start
 * (before and after it has made the segment, forked the janitor and the
 * workers): when the launcher has exited, no segment of it is left. The
 * signals are blocked before the segment exists, so the launcher always
 * stops the workers and unlinks it itself. */
static void test_signal_during_start_leaves_no_segment(void **state)
{
    const char *bin = getenv("LAZYTPU_BIN_DIR");
    char exe[512];
    snprintf(exe, sizeof exe, "%s/lazytpu-run", bin ? bin : ".");
    for (int r = 0; r < 60; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            int fd = open("/dev/null", O_WRONLY);
            dup2(fd, 2);
            execl(exe, exe, "-n", "4", "--", "sleep", "30", (char *)NULL);
            _exit(99);
        }
        usleep((useconds_t)(r * 150));
        kill(pid, r % 2 ? SIGTERM : SIGINT);
        int st;
        waitpid(pid, &st, 0);
        if (count_shm(pid) != 0)
            fail_msg("run %d (signal after %d us): segment of launcher %d left", r, r * 150,
                     (int)pid);
    }
}

static void test_usage_errors(void **state)
{
    run_out o;
    run(&o, "-n 0", "true");
    assert_int_equal(o.code, 2);
    assert_non_null(strstr(o.err, "-n wants 1..64"));
}

static int setup(void **state)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lt-launcher-test-XXXXXX");
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
        cmocka_unit_test(test_success_env_and_prefix),
        cmocka_unit_test(test_thread_budget_env),
        cmocka_unit_test(test_worker_exit_code_stops_everyone),
        cmocka_unit_test(test_worker_killed_by_signal),
        cmocka_unit_test(test_timeout_stops_hanging_workers),
        cmocka_unit_test(test_sigterm_ignored_gets_sigkill),
        cmocka_unit_test(test_metrics_are_merged),
        cmocka_unit_test(test_launcher_signal_stops_all),
        cmocka_unit_test(test_sigkill_one_of_eight_leaves_nothing),
        cmocka_unit_test(test_signal_during_start_leaves_no_segment),
        cmocka_unit_test(test_usage_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
