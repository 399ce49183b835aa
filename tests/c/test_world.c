/*
 * tests/c/test_world.c — the shared-memory world: create/attach, env
 * attach, a fork of a rank refused, barriers, and the failure model (a peer that dies or hangs, an
 * abort by the creator) failing every rank quickly instead of hanging.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include "spawn_harness.h"

static int shm_exists(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    return access(path, F_OK) == 0;
}

static void test_create_attach_unlink(void **state)
{
    lt_world *w = NULL;
    assert_int_equal(lt_world_create(4, 1 << 20, &w), LT_OK);
    assert_non_null(w);
    assert_int_equal(lt_world_size(w), 4);
    assert_int_equal(lt_world_rank(w), -1);
    const char *name = lt_world_name(w);
    assert_true(strncmp(name, "/lazytpu-", 9) == 0);
    assert_true(shm_exists(name));
    size_t slot = lt_world_slot_bytes(w);
    assert_true(slot >= 4096 && slot * 5 <= (1 << 20) && slot * 5 > (1 << 20) / 2);

    lt_world *a = NULL;
    assert_int_equal(lt_world_attach(name, 2, 4, &a), LT_OK);
    assert_int_equal(lt_world_rank(a), 2);
    assert_int_equal(lt_world_size(a), 4);
    assert_int_equal(lt_world_slot_bytes(a), slot);
    lt_world_close(a);

    lt_world *bad = NULL;
    assert_int_equal(lt_world_attach(name, 0, 3, &bad), LT_ERR_ARG);
    assert_null(bad);
    assert_non_null(strstr(lt_last_error(), "created for 4 ranks, not 3"));
    assert_int_equal(lt_world_attach(name, 4, 4, &bad), LT_ERR_ARG);
    assert_int_equal(lt_world_attach("/lazytpu-does-not-exist", 0, 4, &bad),
                     LT_ERR_INTERNAL);

    /* the creator is not a rank */
    assert_int_equal(lt_world_barrier(w), LT_ERR_ARG);

    char msg[64];
    assert_int_equal(lt_world_aborted(w, msg, sizeof msg), 0);
    lt_world_abort(w, "first");
    lt_world_abort(w, "second");
    assert_int_equal(lt_world_aborted(w, msg, sizeof msg), 1);
    assert_string_equal(msg, "first");

    lt_world_unlink(w);
    assert_false(shm_exists(name));
    lt_world_unlink(w);   /* idempotent */
    lt_world_close(w);
    assert_int_equal(lt_world_create(0, 0, &w), LT_ERR_ARG);
    assert_int_equal(lt_world_create(LT_WORLD_MAX_RANKS + 1, 0, &w), LT_ERR_ARG);
}

static void test_attach_from_env(void **state)
{
    unsetenv("LAZYTPU_SHM_NAME");
    lt_world *w = (lt_world *)1;
    assert_int_equal(lt_world_attach_from_env(&w), LT_OK);
    assert_null(w);
    assert_int_equal(lt_world_default_size(), 1);

    lt_world *c = NULL;
    assert_int_equal(lt_world_create(2, 0, &c), LT_OK);
    setenv("LAZYTPU_SHM_NAME", lt_world_name(c), 1);
    setenv("LAZYTPU_ORDINAL", "1", 1);
    setenv("LAZYTPU_WORLD_SIZE", "2", 1);
    assert_int_equal(lt_world_attach_from_env(&w), LT_OK);
    assert_non_null(w);
    assert_int_equal(lt_world_rank(w), 1);
    assert_int_equal(lt_world_default_size(), 2);
    assert_int_equal(lt_world_default_rank(), 1);
    lt_world_close(w);
    setenv("LAZYTPU_WORLD_SIZE", "two", 1);
    assert_int_equal(lt_world_attach_from_env(&w), LT_ERR_ARG);
    unsetenv("LAZYTPU_SHM_NAME");
    unsetenv("LAZYTPU_ORDINAL");
    unsetenv("LAZYTPU_WORLD_SIZE");
    lt_world_unlink(c);
    lt_world_close(c);
}

/* A fork child of a rank that attached is not that rank: its
 * lt_world_default fails, naming both pids, while the rank's own still
 * works. Run in a child process (lt_world_default attaches once). */
static int fork_of_rank(const char *name)
{
    setenv("LAZYTPU_SHM_NAME", name, 1);
    setenv("LAZYTPU_ORDINAL", "1", 1);
    setenv("LAZYTPU_WORLD_SIZE", "2", 1);
    lt_world *w = NULL;
    if (lt_world_default(&w) != LT_OK || !w || lt_world_rank(w) != 1) return 10;
    pid_t g = fork();
    if (g == 0) {
        lt_world *v = (lt_world *)1;
        if (lt_world_default(&v) != LT_ERR_COLLECTIVE || v) _exit(20);
        char want[128];
        snprintf(want, sizeof want, "is a fork of rank 1 (pid %d): only the launcher's "
                 "workers take part in collectives", (int)getppid());
        _exit(strstr(lt_last_error(), want) ? 0 : 21);
    }
    int st;
    if (waitpid(g, &st, 0) != g || !WIFEXITED(st)) return 11;
    if (WEXITSTATUS(st)) return WEXITSTATUS(st);
    if (lt_world_default(&w) != LT_OK || !w) return 12;
    return 0;
}

static void test_fork_of_a_rank_is_refused(void **state)
{
    lt_world *c = NULL;
    assert_int_equal(lt_world_create(2, 0, &c), LT_OK);
    pid_t p = fork();
    if (p == 0) _exit(fork_of_rank(lt_world_name(c)));
    int st;
    assert_int_equal(waitpid(p, &st, 0), p);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    lt_world_unlink(c);
    lt_world_close(c);
}

/* ---------------------------------------------------------------- barrier */

static int rank_barriers(lt_world *w, int rank, void *ctx, hr_result *res)
{
    int n = *(int *)ctx;
    /* a counter in shared memory: every rank increments once per round,
     * and after each barrier it must be a multiple of the world size */
    for (int i = 0; i < n; i++) {
        lt_status st = lt_world_barrier(w);
        HR_CHECK(res, rank, st == LT_OK, "barrier %d: %s", i, lt_last_error());
    }
    return 0;
}

static void test_many_barriers(void **state)
{
    int n = 300;
    hr_result *res = hr_run(8, 0, 30, 60, rank_barriers, NULL, &n);
    assert_non_null(res);
    hr_dump(res, 8);
    for (int r = 0; r < 8; r++) assert_int_equal(res->exit_code[r], 0);
    hr_free(res);
}

/* exchange gives a happens-before edge: values written before are seen */
static int rank_ordering(lt_world *w, int rank, void *ctx, hr_result *res)
{
    int N = lt_world_size(w);
    for (int round = 0; round < 50; round++) {
        int64_t v = round * 100 + rank, out[LT_WORLD_MAX_RANKS];
        lt_status st = lt_world_all_gather(w, &v, out, 1, 1, LT_I64, NULL);
        HR_CHECK(res, rank, st == LT_OK, "gather: %s", lt_last_error());
        for (int r = 0; r < N; r++)
            HR_CHECK(res, rank, out[r] == round * 100 + r, "round %d rank %d: %lld",
                     round, r, (long long)out[r]);
    }
    return 0;
}

static void test_back_to_back_collectives(void **state)
{
    hr_result *res = hr_run(5, 0, 30, 60, rank_ordering, NULL, NULL);
    assert_non_null(res);
    hr_dump(res, 5);
    for (int r = 0; r < 5; r++) assert_int_equal(res->exit_code[r], 0);
    hr_free(res);
}

/* ---------------------------------------------------------------- failures */

static int rank_peer_dies(lt_world *w, int rank, void *ctx, hr_result *res)
{
    float buf[4096];
    for (int i = 0; i < 4096; i++) buf[i] = 1;
    /* one good collective first */
    lt_status st = lt_world_all_reduce(w, buf, buf, 4096, LT_F32, LT_REDUCE_SUM, 1.0, NULL);
    HR_CHECK(res, rank, st == LT_OK, "first all_reduce: %s", lt_last_error());
    if (rank == 2) _exit(7);              /* dies before the second */
    st = lt_world_all_reduce(w, buf, buf, 4096, LT_F32, LT_REDUCE_SUM, 1.0, NULL);
    res->status[rank] = st;
    snprintf(res->msg[rank], sizeof res->msg[rank], "%s", lt_last_error());
    if (st == LT_OK) return 2;
    /* and the world stays failed */
    st = lt_world_barrier(w);
    return st == LT_ERR_COLLECTIVE ? 0 : 3;
}

static void test_dead_peer_fails_everyone_quickly(void **state)
{
    /* timeout 60 s: death must be detected long before it */
    hr_result *res = hr_run(4, 0, 60, 30, rank_peer_dies, NULL, NULL);
    assert_non_null(res);
    hr_dump(res, 4);
    assert_int_equal(res->killed_by_harness, 0);
    assert_int_equal(res->exit_code[2], 7);
    for (int r = 0; r < 4; r++) {
        if (r == 2) continue;
        assert_int_equal(res->exit_code[r], 0);
        assert_int_equal(res->status[r], LT_ERR_COLLECTIVE);
        assert_non_null(strstr(res->msg[r], "rank 2"));
        assert_non_null(strstr(res->msg[r], "died during all_reduce"));
        assert_true(res->elapsed[r] < 5.0);
    }
    hr_free(res);
}

static int rank_peer_hangs(lt_world *w, int rank, void *ctx, hr_result *res)
{
    int64_t v = rank;
    if (rank == 1) {
        usleep(2500000);                  /* longer than the 1 s timeout */
        return 0;
    }
    lt_status st = lt_world_all_reduce(w, &v, &v, 1, LT_I64, LT_REDUCE_SUM, 1.0, NULL);
    res->status[rank] = st;
    snprintf(res->msg[rank], sizeof res->msg[rank], "%s", lt_last_error());
    return st == LT_OK ? 2 : 0;
}

static void test_hanging_peer_times_out(void **state)
{
    hr_result *res = hr_run(3, 0, 1.0, 30, rank_peer_hangs, NULL, NULL);
    assert_non_null(res);
    hr_dump(res, 3);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(res->exit_code[r], 0);
        if (r == 1) continue;
        assert_int_equal(res->status[r], LT_ERR_COLLECTIVE);
        assert_non_null(strstr(res->msg[r], "timed out after 1 s"));
        assert_non_null(strstr(res->msg[r], "rank(s) 1"));
        assert_true(res->elapsed[r] < 3.5);
    }
    hr_free(res);
}

static int rank_wait_forever(lt_world *w, int rank, void *ctx, hr_result *res)
{
    if (rank == 0) {
        usleep(1500000);
        return 0;
    }
    lt_status st = lt_world_barrier(w);
    res->status[rank] = st;
    snprintf(res->msg[rank], sizeof res->msg[rank], "%s", lt_last_error());
    return st == LT_OK ? 2 : 0;
}

static void parent_abort(lt_world *w, void *ctx)
{
    usleep(300000);
    lt_world_abort(w, "worker 0 died: killed by signal 9 (SIGKILL)");
}

static void test_creator_abort_wakes_everyone(void **state)
{
    hr_result *res = hr_run(4, 0, 60, 30, rank_wait_forever, parent_abort, NULL);
    assert_non_null(res);
    hr_dump(res, 4);
    for (int r = 1; r < 4; r++) {
        assert_int_equal(res->exit_code[r], 0);
        assert_int_equal(res->status[r], LT_ERR_COLLECTIVE);
        assert_string_equal(res->msg[r], "barrier: world aborted: worker 0 died: "
                                         "killed by signal 9 (SIGKILL)");
        assert_true(res->elapsed[r] < 1.5);
    }
    hr_free(res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_attach_unlink),
        cmocka_unit_test(test_attach_from_env),
        cmocka_unit_test(test_fork_of_a_rank_is_refused),
        cmocka_unit_test(test_many_barriers),
        cmocka_unit_test(test_back_to_back_collectives),
        cmocka_unit_test(test_dead_peer_fails_everyone_quickly),
        cmocka_unit_test(test_hanging_peer_times_out),
        cmocka_unit_test(test_creator_abort_wakes_everyone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
