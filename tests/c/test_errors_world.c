/* tests/c/test_errors_world.c — execution errors under a world of 8
 * processes (forked ranks, spawn_harness.h): the failing rank's error names
 * its rank; a collective whose operand is missing on one rank (its program
 * failed, or its input is poisoned) fails on every rank with a message
 * naming that rank, quickly (no barrier timeout); the world and every core
 * keep working afterwards; waits report once. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include "spawn_harness.h"
#include "lazytpu.h"

#define NRANKS 8
#define BAD_RANK 3

/* Per child: the library on one core, attached to the harness's world
 * through the environment, as lazytpu-run would set it up. */
static int child_init(lt_world *w, int rank, hr_result *res)
{
    char v[32];
    setenv("LAZYTPU_SHM_NAME", lt_world_name(w), 1);
    snprintf(v, sizeof v, "%d", rank);
    setenv("LAZYTPU_ORDINAL", v, 1);
    snprintf(v, sizeof v, "%d", lt_world_size(w));
    setenv("LAZYTPU_WORLD_SIZE", v, 1);
    setenv("LAZYTPU_NUM_CORES", "1", 1);
    setenv("LAZYTPU_MAX_INFLIGHT", "2", 1);
    setenv("LAZYTPU_OMP_THREADS", "1", 1);
    HR_CHECK(res, rank, lt_init() == LT_OK, "init: %s", lt_last_error());
    return 0;
}

static lt_tensor *mk_x(int rank)
{
    float x[12];
    for (int i = 0; i < 12; i++) x[i] = (float)(rank * 100 + i);
    lt_shape s = lt_shape_make(2, (int64_t[]){4, 3});
    lt_tensor *t = NULL;
    lt_tensor_from_host(0, x, LT_F32, &s, &t);
    return t;
}

/* x[idx] with idx = 5 (out of range) on the bad rank, else 1. */
static lt_tensor *row(lt_tensor *x, int rank)
{
    int64_t idx = rank == BAD_RANK ? 5 : 1;
    lt_shape s = lt_shape_make(1, (int64_t[]){1});
    lt_tensor *I = NULL, *y = NULL;
    lt_tensor_from_host(0, &idx, LT_I64, &s, &I);
    lt_attrs a = {.n = 1, .i = {0}};
    lt_set_caller("model.py:7 in forward");
    lt_trace2(LT_OP_index_select, x, I, &a, &y);
    lt_set_caller(NULL);
    lt_tensor_release(I);
    return y;
}

static lt_tensor *all_reduce_sum(lt_tensor *t)
{
    lt_attrs a = {.n = 1, .i = {LT_REDUCE_SUM}, .f = {1.0}};
    lt_tensor *r = NULL;
    lt_trace1(LT_OP_all_reduce, t, &a, &r);
    return r;
}

/* After a failure: a clean all_reduce of x works on every rank. */
static int check_world_works(lt_tensor *x, int rank, hr_result *res)
{
    lt_tensor *r = all_reduce_sum(x);
    float out[12];
    lt_status st = lt_tensor_to_host(r, out, LT_F32);
    HR_CHECK(res, rank, st == LT_OK, "clean all_reduce: %s", lt_last_error());
    for (int i = 0; i < 12; i++) {
        float want = 0;
        for (int q = 0; q < NRANKS; q++) want += (float)(q * 100 + i);
        HR_CHECK(res, rank, out[i] == want, "clean all_reduce [%d] = %g, want %g",
                 i, out[i], want);
    }
    lt_tensor_release(r);
    return 0;
}

static int has(const char *m, const char *needle) { return strstr(m, needle) != NULL; }

/* One program per rank: row (fails on BAD_RANK) -> all_reduce, plus a
 * second all_reduce of x in the same program. */
static int rank_same_program(lt_world *w, int rank, void *ctx, hr_result *res)
{
    if (child_init(w, rank, res)) return 1;
    char me[32];
    snprintf(me, sizeof me, "rank %d of %d]", rank, NRANKS);
    lt_tensor *x = mk_x(rank), *y = row(x, rank);
    lt_tensor *r1 = all_reduce_sum(y), *r2 = all_reduce_sum(x);
    HR_CHECK(res, rank, r1 && r2, "trace: %s", lt_last_error());
    lt_set_caller("train.py:30 in step");
    lt_status st = lt_sync_core(0, LT_SYNC_MARK_STEP, 0);
    lt_set_caller(NULL);
    HR_CHECK(res, rank, st == LT_OK, "async step: %s", lt_last_error());
    float out[12];
    for (int pass = 0; pass < 2; pass++) {      /* every read raises */
        st = lt_tensor_to_host(r1, out, LT_F32);
        const char *m = lt_last_error();
        res->status[rank] = st;
        snprintf(res->msg[rank], sizeof res->msg[rank], "%s", m);
        if (rank == BAD_RANK) {
            HR_CHECK(res, rank, st == LT_ERR_ARG, "bad rank read: %d %s", st, m);
            HR_CHECK(res, rank, has(m, "index_select: index 5 is out of range") &&
                     has(m, "traced at model.py:7 in forward") && has(m, me),
                     "bad rank message: %s", m);
        } else {
            HR_CHECK(res, rank, st == LT_ERR_COLLECTIVE, "peer read: %d %s", st, m);
            HR_CHECK(res, rank, has(m, "all_reduce: rank 3 could not take part: "
                                       "index_select: index 5 is out of range") &&
                     has(m, "rank 3 of 8]") && has(m, me) &&
                     has(m, "in all_reduce(f32[1, 3]) -> f32[1, 3]") &&
                     has(m, "program synced at train.py:30 in step (mark_step)"),
                     "peer message: %s", m);
        }
    }
    /* the same program's other output is poisoned by the same fault */
    st = lt_tensor_to_host(r2, out, LT_F32);
    HR_CHECK(res, rank, st != LT_OK, "r2 should be poisoned");
    /* read: the waits stay silent */
    st = lt_wait(-1);
    HR_CHECK(res, rank, st == LT_OK, "wait after read: %s", lt_last_error());
    if (check_world_works(x, rank, res)) return 1;
    lt_tensor_release(r1); lt_tensor_release(r2);
    lt_tensor_release(y); lt_tensor_release(x);
    lt_shutdown();
    return 0;
}

/* The bad rank's operand comes from an earlier, failed program: its
 * all_reduce program has a poisoned input and abstains. Nobody reads: the
 * wait reports it once on every rank. */
static int rank_poisoned_operand(lt_world *w, int rank, void *ctx, hr_result *res)
{
    if (child_init(w, rank, res)) return 1;
    lt_tensor *x = mk_x(rank), *y = row(x, rank);
    lt_status st = lt_sync(&y, 1, LT_SYNC_EXPLICIT, 0);
    HR_CHECK(res, rank, st == LT_OK, "sync y: %s", lt_last_error());
    lt_tensor *r = all_reduce_sum(y);
    st = lt_sync_core(0, LT_SYNC_MARK_STEP, 0);
    HR_CHECK(res, rank, st == LT_OK, "async step: %s", lt_last_error());
    st = lt_wait(-1);
    const char *m = lt_last_error();
    res->status[rank] = st;
    snprintf(res->msg[rank], sizeof res->msg[rank], "%s", m);
    if (rank == BAD_RANK) {
        /* the unread root (index_select) first, the all_reduce counted */
        HR_CHECK(res, rank, st == LT_ERR_ARG && has(m, "index_select: index 5") &&
                 has(m, "rank 3 of 8]") && has(m, "(+1 more failed program on core 0)"),
                 "bad rank wait: %d %s", st, m);
    } else {
        /* the peers are told rank 3's original error, not its derived one */
        HR_CHECK(res, rank, st == LT_ERR_COLLECTIVE &&
                 has(m, "all_reduce: rank 3 could not take part: index_select: index 5 "
                        "is out of range") && !has(m, "poisoned") && has(m, "rank 3 of 8]"),
                 "peer wait: %d %s", st, m);
    }
    st = lt_wait(-1);
    HR_CHECK(res, rank, st == LT_OK, "second wait: %s", lt_last_error());
    /* a read still raises */
    float out[3];
    st = lt_tensor_to_host(r, out, LT_F32);
    HR_CHECK(res, rank, st != LT_OK, "poisoned all_reduce read succeeded");
    if (check_world_works(x, rank, res)) return 1;
    lt_tensor_release(r); lt_tensor_release(y); lt_tensor_release(x);
    lt_shutdown();
    return 0;
}

/* The world-level primitive: rank 5 abstains from an all_gather (and rank
 * 6 from the barrier after it); everyone fails naming the lowest such
 * rank, then a normal all_reduce works. */
static int rank_abstain(lt_world *w, int rank, void *ctx, hr_result *res)
{
    float send[4], recv[4 * NRANKS];
    for (int i = 0; i < 4; i++) send[i] = (float)(rank + i);
    lt_status st = rank == 5
        ? lt_world_abstain(w, "all_gather", "no operand (test)")
        : lt_world_all_gather(w, send, recv, 1, 4, LT_F32, NULL);
    HR_CHECK(res, rank, st == LT_ERR_COLLECTIVE &&
             has(lt_last_error(), "all_gather: rank 5 could not take part: no operand (test)"),
             "all_gather: %d %s", st, lt_last_error());
    st = rank == 6 || rank == 2 ? lt_world_abstain(w, "barrier", "late") : lt_world_barrier(w);
    HR_CHECK(res, rank, st == LT_ERR_COLLECTIVE &&
             has(lt_last_error(), "barrier: rank 2 could not take part: late"),
             "barrier: %d %s", st, lt_last_error());
    st = lt_world_all_reduce(w, send, recv, 4, LT_F32, LT_REDUCE_SUM, 1.0, NULL);
    HR_CHECK(res, rank, st == LT_OK, "all_reduce after: %s", lt_last_error());
    for (int i = 0; i < 4; i++)
        HR_CHECK(res, rank, recv[i] == (float)(28 + 8 * i), "sum[%d] = %g", i, recv[i]);
    HR_CHECK(res, rank, lt_world_abstain(NULL, "all_reduce", "x") == LT_OK, "NULL world");
    return 0;
}

static void run_world(hr_rank_fn fn)
{
    /* barrier timeout 120 s: a hang would show as a run far longer than
     * the few seconds the failure path needs */
    hr_result *res = hr_run(NRANKS, 0, 120, 200, fn, NULL, NULL);
    assert_non_null(res);
    int bad = 0;
    for (int r = 0; r < NRANKS; r++) bad |= res->exit_code[r] != 0;
    if (bad || res->killed_by_harness) {
        hr_dump(res, NRANKS);
        fail_msg("a rank failed");
    }
    if (res->total > 60) {
        hr_dump(res, NRANKS);
        fail_msg("took %.1f s: a rank waited for the failed one", res->total);
    }
    hr_free(res);
}

static void test_failed_program_fails_collective_everywhere(void **state)
{
    run_world(rank_same_program);
}

static void test_poisoned_operand_fails_collective_everywhere(void **state)
{
    run_world(rank_poisoned_operand);
}

static void test_abstain_fails_everyone_naming_the_rank(void **state)
{
    run_world(rank_abstain);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_abstain_fails_everyone_naming_the_rank),
        cmocka_unit_test(test_failed_program_fails_collective_everywhere),
        cmocka_unit_test(test_poisoned_operand_fails_collective_everywhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
