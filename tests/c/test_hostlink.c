/*
 * tests/c/test_hostlink.c — the multi-host pieces that need no MPI: the
 * cross-host verdict over host records, the two-level reductions (partials
 * then finish equal one reduction over all sources), the environment
 * contract of lt_world_attach_from_env, the per-host metrics merge, and the
 * janitor cleaning up after a launcher that died.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "hostlink.h"
#include "janitor.h"
#include "metrics_merge.h"
#include "../../spawn/reduce.h"

/* ---------------------------------------------------------------- verdict */

static void make_recs(lt_hrec *r, int hosts, int C)
{
    for (int k = 0; k < hosts; k++) {
        lt_hreq q;
        memset(&q, 0, sizeof q);
        lt_wdesc_init(&q.desc, LT_WOP_ALL_REDUCE, LT_F32, 512, NULL);
        q.desc.reduce = LT_REDUCE_SUM;
        q.desc.seq = 7;
        for (int l = 0; l < C; l++) q.counts[l] = 100 * k + l;
        lt_hrec_from_req(&r[k], k, 6, &q);
    }
}

static void test_verdict(void **state)
{
    lt_hrec r[3];
    char msg[1024];
    int64_t g[12];
    make_recs(r, 3, 4);
    assert_int_equal(lt_hostlink_verdict(r, 3, 4, msg, sizeof msg, g), LT_OK);
    assert_int_equal(g[0], 0);
    assert_int_equal(g[5], 101);
    assert_int_equal(g[11], 203);

    r[2].desc.count = 1024;
    r[2].desc.shape.dims[0] = 1024;
    assert_int_equal(lt_hostlink_verdict(r, 3, 4, msg, sizeof msg, NULL),
                     LT_ERR_COLLECTIVE);
    assert_string_equal(msg, "all_reduce: rank 8 (host 2) sent f32 [1024] but "
                             "rank 0 (host 0) sent f32 [512]");

    make_recs(r, 3, 4);
    r[1].desc.op = LT_WOP_BROADCAST;
    assert_int_equal(lt_hostlink_verdict(r, 3, 4, msg, sizeof msg, NULL),
                     LT_ERR_COLLECTIVE);
    assert_string_equal(msg, "collective mismatch: rank 4 (host 1) called "
                             "broadcast f32 [512] but rank 0 (host 0) called "
                             "all_reduce f32 [512]");

    /* a host's own disagreement wins, as it is */
    make_recs(r, 3, 4);
    snprintf(r[1].local_err, sizeof r[1].local_err, "local problem on host 1");
    assert_int_equal(lt_hostlink_verdict(r, 3, 4, msg, sizeof msg, NULL),
                     LT_ERR_COLLECTIVE);
    assert_string_equal(msg, "local problem on host 1");

    make_recs(r, 2, 4);
    r[1].state = LT_HREC_FINISHED;
    assert_int_equal(lt_hostlink_verdict(r, 2, 4, msg, sizeof msg, NULL),
                     LT_ERR_COLLECTIVE);
    assert_string_equal(msg, "collective mismatch: the ranks of host 1 all exited "
                             "but rank 0 (host 0) called all_reduce f32 [512] (#7)");
    r[0].state = LT_HREC_FINISHED;   /* everyone finished: fine */
    assert_int_equal(lt_hostlink_verdict(r, 2, 4, msg, sizeof msg, NULL), LT_OK);

    make_recs(r, 2, 4);
    r[1].magic = 0;
    assert_int_equal(lt_hostlink_verdict(r, 2, 4, msg, sizeof msg, NULL),
                     LT_ERR_COLLECTIVE);
    assert_non_null(strstr(msg, "host 1 sent a malformed record"));
}

/* ----------------------------------------------------- two-level reduction */

static void test_partial_then_finish_equals_one_reduction(void **state)
{
    enum { H = 3, C = 4, N = 5000 };
    for (int dt = 0; dt <= LT_BOOL; dt++)  /* the collective dtypes */
        for (int red = LT_REDUCE_SUM; red <= LT_REDUCE_OR; red++) {
            size_t es = lt_dtype_size(dt);
            lt_dtype at = lt_reduce_acc_dtype(dt);
            size_t aes = lt_dtype_size(at);
            unsigned char *src[H * C], *part[H];
            const void *all[H * C];
            for (int k = 0; k < H * C; k++) {
                src[k] = malloc(N * es);
                all[k] = src[k];
                for (int i = 0; i < N; i++) {
                    double v = red == LT_REDUCE_MUL ? ((i + k) % 3 == 0 ? 2 : 1)
                                                    : ((i * 7 + k * 5) % 19) - 9;
                    float f = (float)v;
                    switch (dt) {
                    case LT_F32: ((float *)src[k])[i] = f; break;
                    case LT_BF16: ((uint16_t *)src[k])[i] = lt_f32_to_bf16(f); break;
                    case LT_F64: ((double *)src[k])[i] = v; break;
                    case LT_I64: ((int64_t *)src[k])[i] = (int64_t)v; break;
                    case LT_I32: ((int32_t *)src[k])[i] = (int32_t)v; break;
                    default: ((uint8_t *)src[k])[i] = v > 0; break;
                    }
                }
            }
            double scale = red == LT_REDUCE_SUM ? 0.5 : 1.0;
            unsigned char *one = malloc(N * es), *two = malloc(N * es);
            assert_int_equal(lt_reduce_slots(one, all, H * C, N, dt, red, scale), LT_OK);
            for (int h = 0; h < H; h++) {
                part[h] = malloc(N * aes);
                assert_int_equal(lt_reduce_partial(part[h], all + h * C, C, N, dt, red),
                                 LT_OK);
            }
            const void *parts[H] = { part[0], part[1], part[2] };
            assert_int_equal(lt_reduce_finish(two, parts, H, N, dt, red, scale), LT_OK);
            /* exact here: small integers in every dtype (bf16 sums fit f32) */
            if (memcmp(one, two, N * es) != 0)
                fail_msg("%s %s: two-level result differs", lt_dtype_name(dt),
                         lt_reduce_type_name(red));
            for (int k = 0; k < H * C; k++) free(src[k]);
            for (int h = 0; h < H; h++) free(part[h]);
            free(one);
            free(two);
        }
}

/* ------------------------------------------------------------ environment */

static void setenv_all(const char *ord, const char *ws, const char *lo,
                       const char *lws, const char *hi, const char *nh)
{
    setenv("LAZYTPU_ORDINAL", ord, 1);
    setenv("LAZYTPU_WORLD_SIZE", ws, 1);
    setenv("LAZYTPU_LOCAL_ORDINAL", lo, 1);
    setenv("LAZYTPU_LOCAL_WORLD_SIZE", lws, 1);
    setenv("LAZYTPU_HOST_INDEX", hi, 1);
    setenv("LAZYTPU_NUM_HOSTS", nh, 1);
}

static void test_attach_from_env_contract(void **state)
{
    lt_world *cr = NULL, *w = NULL;
    assert_int_equal(lt_world_create_host(2, 1 << 20, 1, 3, &cr), LT_OK);
    setenv("LAZYTPU_SHM_NAME", lt_world_name(cr), 1);
    setenv_all("3", "6", "1", "2", "1", "3");
    assert_int_equal(lt_world_attach_from_env(&w), LT_OK);
    assert_int_equal(lt_world_rank(w), 3);
    assert_int_equal(lt_world_size(w), 6);
    assert_int_equal(lt_world_local_rank(w), 1);
    assert_int_equal(lt_world_local_size(w), 2);
    assert_int_equal(lt_world_host_index(w), 1);
    assert_int_equal(lt_world_num_hosts(w), 3);
    lt_world_close(w);
    /* ordinal inconsistent with host and local ordinal */
    setenv_all("4", "6", "1", "2", "1", "3");
    assert_int_equal(lt_world_attach_from_env(&w), LT_ERR_ARG);
    assert_non_null(strstr(lt_last_error(), "inconsistent environment"));
    /* the segment of another host */
    setenv_all("1", "6", "1", "2", "0", "3");
    assert_int_equal(lt_world_attach_from_env(&w), LT_ERR_ARG);
    assert_non_null(strstr(lt_last_error(), "belongs to host 1 of 3"));
    /* one-host environment of round 1 (no local / host variables) */
    lt_world *one = NULL;
    assert_int_equal(lt_world_create(2, 1 << 20, &one), LT_OK);
    setenv("LAZYTPU_SHM_NAME", lt_world_name(one), 1);
    unsetenv("LAZYTPU_LOCAL_ORDINAL");
    unsetenv("LAZYTPU_LOCAL_WORLD_SIZE");
    unsetenv("LAZYTPU_HOST_INDEX");
    unsetenv("LAZYTPU_NUM_HOSTS");
    setenv("LAZYTPU_ORDINAL", "1", 1);
    setenv("LAZYTPU_WORLD_SIZE", "2", 1);
    assert_int_equal(lt_world_attach_from_env(&w), LT_OK);
    assert_int_equal(lt_world_rank(w), 1);
    assert_int_equal(lt_world_num_hosts(w), 1);
    lt_world_close(w);
    assert_int_equal(lt_world_create_host(2, 0, 3, 3, &w), LT_ERR_ARG);
    unsetenv("LAZYTPU_SHM_NAME");
    lt_world_unlink(one);
    lt_world_close(one);
    lt_world_unlink(cr);
    lt_world_close(cr);
}

/* ---------------------------------------------------------- metrics merge */

static void test_merge_per_host(void **state)
{
    char *rep[4];
    for (int k = 0; k < 4; k++) {
        char b[512];
        snprintf(b, sizeof b,
                 "Metric: CollectiveTime\n  TotalSamples: %d\n  Accumulator: 01s%03dms000.000us\n"
                 "Metric: InboundData\n  TotalSamples: 1\n  Accumulator: 1.50MB\n"
                 "Counter: MarkStep\n  Value: %d\n", k + 1, 100 * k, 10 + k);
        rep[k] = strdup(b);
    }
    char *hrep[2] = { strdup("Metric: InterHostProxyTime\n  TotalSamples: 3\n"
                             "  Accumulator: 002ms000.000us\n"), NULL };
    char path[] = "/tmp/lt-merge-test-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(lt_metrics_merge_reports(path, rep, 4, 2, hrep), 4);
    FILE *f = fopen(path, "r");
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    remove(path);
    assert_non_null(strstr(buf, "== merged over 4 ordinals on 2 hosts (4 reports) ==\n"));
    assert_non_null(strstr(buf, "Metric: CollectiveTime\n  TotalSamples: 10\n"
                                "  Accumulator: 04s600ms000.000us\n"));
    assert_non_null(strstr(buf, "Metric: InboundData\n  TotalSamples: 4\n  Accumulator: 6.00MB\n"));
    assert_non_null(strstr(buf, "Counter: MarkStep\n  Value: 46\n"));
    const char *ph = strstr(buf, "== per host ==\n");
    assert_non_null(ph);
    assert_non_null(strstr(ph, "Metric: CollectiveTime\n  PerHostSamples: 3 7\n"
                               "  PerHostAccumulator: 02s100ms000.000us 02s500ms000.000us\n"));
    assert_non_null(strstr(ph, "Metric: InterHostProxyTime\n  PerHostSamples: 3 0\n"));
    assert_non_null(strstr(ph, "Counter: MarkStep\n  PerHost: 21 25\n"));
    assert_non_null(strstr(buf, "== host 0 proxy ==\nMetric: InterHostProxyTime"));
    assert_non_null(strstr(buf, "== host 1 proxy ==\n(no report written)\n"));
    assert_non_null(strstr(buf, "== ordinal 3 (host 1) ==\nMetric: CollectiveTime"));
    for (int k = 0; k < 4; k++) free(rep[k]);
    free(hrep[0]);
}

/* ---------------------------------------------------------------- janitor */

/* 1 while pid exists and is not a zombie (orphans may wait for a reaper). */
static int alive(int pid)
{
    if (kill(pid, 0) != 0) return 0;
    char p[64], buf[256] = "";
    snprintf(p, sizeof p, "/proc/%d/stat", pid);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
    fclose(f);
    char *rp = strrchr(buf, ')');
    return !(rp && (rp[2] == 'Z' || rp[2] == 'X'));
}

/* A fake launcher (child) creates a world, starts a janitor, forks a
 * "worker" in its own group and dies by SIGKILL: the janitor must kill the
 * worker group and unlink the segment. */
static void test_janitor_after_launcher_killed(void **state)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t launcher = fork();
    if (launcher == 0) {
        close(p[0]);
        lt_world *w = NULL;
        if (lt_world_create(1, 1 << 20, &w) != LT_OK) _exit(1);
        lt_janitor j;
        if (lt_janitor_start(&j, lt_world_name(w)) != 0) _exit(2);
        pid_t wk = fork();
        if (wk == 0) {   /* like an exec'd worker: no inherited fds */
            setpgid(0, 0);
            close_range(3, ~0U, 0);
            for (;;) pause();
        }
        setpgid(wk, wk);
        lt_janitor_watch(&j, wk);
        char line[128];
        int n = snprintf(line, sizeof line, "%d %s\n", (int)wk, lt_world_name(w));
        if (write(p[1], line, (size_t)n) != n) _exit(3);
        for (;;) pause();
    }
    close(p[1]);
    char line[128] = "";
    ssize_t r = read(p[0], line, sizeof line - 1);
    assert_true(r > 0);
    line[r] = 0;
    close(p[0]);
    int wk = 0;
    char name[64];
    assert_int_equal(sscanf(line, "%d %63s", &wk, name), 2);
    char shm[128];
    snprintf(shm, sizeof shm, "/dev/shm%s", name);
    assert_int_equal(access(shm, F_OK), 0);
    kill(launcher, SIGKILL);
    waitpid(launcher, NULL, 0);
    int gone = 0;
    for (int i = 0; i < 200 && !gone; i++) {
        usleep(10000);
        gone = access(shm, F_OK) != 0 && !alive(wk);
    }
    if (!gone) kill(wk, SIGKILL);
    assert_true(gone);
}

/* A normal end: the janitor only unlinks and exits. */
static void test_janitor_done(void **state)
{
    lt_world *w = NULL;
    assert_int_equal(lt_world_create(1, 1 << 20, &w), LT_OK);
    lt_janitor j;
    assert_int_equal(lt_janitor_start(&j, lt_world_name(w)), 0);
    pid_t child = fork();
    if (child == 0) {
        setpgid(0, 0);
        usleep(300000);
        _exit(0);
    }
    setpgid(child, child);
    lt_janitor_watch(&j, child);
    lt_janitor_done(&j);          /* must not kill the (still running) child */
    assert_int_equal(kill(child, 0), 0);
    int st;
    waitpid(child, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char shm[128];
    snprintf(shm, sizeof shm, "/dev/shm%s", lt_world_name(w));
    assert_int_equal(access(shm, F_OK), -1);   /* unlinked by the janitor */
    lt_world_close(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verdict),
        cmocka_unit_test(test_partial_then_finish_equals_one_reduction),
        cmocka_unit_test(test_attach_from_env_contract),
        cmocka_unit_test(test_merge_per_host),
        cmocka_unit_test(test_janitor_after_launcher_killed),
        cmocka_unit_test(test_janitor_done),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
