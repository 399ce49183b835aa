/* tests/c/test_errors.c — execution errors of asynchronous programs (see
 * docs/errors.md): a failed program poisons exactly its outputs; reading one
 * raises the error every time, naming op, shapes, dtypes, the frame that
 * traced the op and the sync's frame; nothing else is affected; waits and
 * step syncs report an unread error once; a later program that takes a
 * poisoned input fails saying so. Single process, several cores. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "lazytpu.h"
#include "tensor.h"
#include "device.h"
#include "diagnose.h"

static void reinit(const char *limit)
{
    lt_shutdown();
    unsetenv("LAZYTPU_HBM_BYTES");
    unsetenv("LAZYTPU_USE_BF16");
    if (limit) setenv("LAZYTPU_GRAPH_LIMIT", limit, 1);
    else unsetenv("LAZYTPU_GRAPH_LIMIT");
    setenv("LAZYTPU_NUM_CORES", "2", 1);
    setenv("LAZYTPU_MAX_INFLIGHT", "2", 1);
    assert_int_equal(lt_init(), LT_OK);
    lt_set_caller(NULL);
    lt_set_caller_hook(NULL);
}

static int setup(void **st) { (void)st; reinit(NULL); return 0; }
static int teardown(void **st)
{
    (void)st;
    lt_set_caller(NULL);
    lt_set_caller_hook(NULL);
    /* every test reads or waits for its errors: nothing is left over */
    assert_int_equal(lt_wait(-1), LT_OK);
    assert_int_equal(lt_live_tensors(0), 0);
    assert_int_equal(lt_live_tensors(1), 0);
    assert_int_equal(lt_core_bytes_in_use(0), 0);
    assert_int_equal(lt_core_bytes_in_use(1), 0);
    lt_shutdown();
    return 0;
}

#define EXPECT_IN(msg, needle)                                             \
    do {                                                                   \
        if (!strstr((msg), (needle)))                                      \
            fail_msg("expected \"%s\" in: %s", (needle), (msg));           \
    } while (0)

static lt_tensor *host_f32(int core, const float *d, int nd, const int64_t *dims)
{
    lt_shape s = lt_shape_make(nd, dims);
    lt_tensor *t;
    assert_int_equal(lt_tensor_from_host(core, d, LT_F32, &s, &t), LT_OK);
    return t;
}

static lt_tensor *host_i64(int core, const int64_t *d, int nd, const int64_t *dims)
{
    lt_shape s = lt_shape_make(nd, dims);
    lt_tensor *t;
    assert_int_equal(lt_tensor_from_host(core, d, LT_I64, &s, &t), LT_OK);
    return t;
}

static lt_tensor *op2(lt_op op, lt_tensor *a, lt_tensor *b, const lt_attrs *at)
{
    lt_tensor *o;
    lt_status st = lt_trace2(op, a, b, at, &o);
    if (st != LT_OK) fail_msg("%s", lt_last_error());
    return o;
}

/* x[idx] on `core` with x = f32[4, 3] (x[i][j] = 3i + j): a pending
 * index_select traced "at" frame (NULL: no frame). */
static lt_tensor *gather_rows(int core, int64_t idx, const char *frame)
{
    float x[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i;
    lt_tensor *X = host_f32(core, x, 2, (int64_t[]){4, 3});
    lt_tensor *I = host_i64(core, &idx, 1, (int64_t[]){1});
    lt_attrs a = {.n = 1, .i = {0}};
    lt_set_caller(frame);
    lt_tensor *y = op2(LT_OP_index_select, X, I, &a);
    lt_set_caller(NULL);
    lt_tensor_release(X);
    lt_tensor_release(I);
    return y;
}

/* (ones(2) * k) read on the host: the "unrelated" reads of the issue. */
static void read_ones_times(int core, double k, float want)
{
    float one[2] = {1, 1}, out[2] = {0, 0};
    lt_tensor *a = host_f32(core, one, 1, (int64_t[]){2}), *c, *y;
    assert_int_equal(lt_scalar(core, k, LT_F64, 1, &c), LT_OK);
    y = op2(LT_OP_mul, a, c, NULL);
    lt_status st = lt_tensor_to_host(y, out, LT_F32);
    if (st != LT_OK) fail_msg("ones * %g: %s", k, lt_last_error());
    assert_true(out[0] == want && out[1] == want);
    lt_tensor_release(a);
    lt_tensor_release(c);
    lt_tensor_release(y);
}

/* Reads t expecting failure st; returns a copy of the message. */
static char *read_fails(lt_tensor *t, lt_status want)
{
    float out[64];
    lt_status st = lt_tensor_to_host(t, out, LT_F32);
    if (st != want)
        fail_msg("read: status %d, want %d (%s)", st, want, lt_last_error());
    return strdup(lt_last_error());
}

/* ------------------------------------------------------------------ tests */

/* The exact sequence of issue 14: the error lands once, at the read of the
 * failed value; the later unrelated reads return their values. */
static void test_issue_sequence(void **state)
{
    lt_tensor *oob = gather_rows(0, 5, "user.py:10 in main");
    lt_set_caller("user.py:11 in main");
    char *m = read_fails(oob, LT_ERR_ARG);
    lt_set_caller(NULL);
    EXPECT_IN(m, "index_select: index 5 is out of range for dimension 0 of size 4");
    EXPECT_IN(m, "in index_select(f32[4, 3], i64[1]) -> f32[1, 3]");
    EXPECT_IN(m, "traced at user.py:10 in main");
    EXPECT_IN(m, "program synced at user.py:11 in main (value_read)");
    EXPECT_IN(m, "core 0]");
    if (strstr(m, "rank")) fail_msg("no world, no rank: %s", m);
    read_ones_times(0, 3, 3);      /* good1 */
    read_ones_times(0, 4, 4);      /* good2: the bug raised index_select here */
    read_ones_times(0, 5, 5);      /* good3 */
    for (int k = 0; k < 6; k++) read_ones_times(0, 6 + k, (float)(6 + k));
    /* the failed value raises every time it is read, the same message */
    char *m2 = read_fails(oob, LT_ERR_ARG);
    assert_string_equal(m, m2);
    /* it was read: neither a step sync nor a wait reports it again */
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_OK);
    assert_int_equal(lt_wait(0), LT_OK);
    assert_int_equal(lt_wait(-1), LT_OK);
    free(m);
    free(m2);
    lt_tensor_release(oob);
}

/* A program that fails poisons all its outputs and nothing else: its
 * inputs, tensors of earlier and later programs keep their values. */
static void test_poisons_exactly_the_programs_outputs(void **state)
{
    float xv[12];
    for (int i = 0; i < 12; i++) xv[i] = (float)i;
    lt_tensor *x = host_f32(0, xv, 2, (int64_t[]){4, 3});
    lt_tensor *before, *two;
    assert_int_equal(lt_scalar(0, 2.0, LT_F64, 1, &two), LT_OK);
    before = op2(LT_OP_mul, x, two, NULL);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    /* one program: a failing gather and an independent product */
    int64_t bad = -1;
    lt_tensor *I = host_i64(0, &bad, 1, (int64_t[]){1});
    lt_attrs a = {.n = 1, .i = {0}};
    lt_tensor *g = op2(LT_OP_index_select, x, I, &a);
    lt_tensor *p = op2(LT_OP_mul, x, two, NULL);
    lt_tensor *s = op2(LT_OP_add, p, two, NULL);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    char *m1 = read_fails(g, LT_ERR_ARG), *m2 = read_fails(p, LT_ERR_ARG),
         *m3 = read_fails(s, LT_ERR_ARG);
    EXPECT_IN(m1, "index_select: index -1 is out of range");
    assert_string_equal(m1, m2);   /* one fault for the whole program */
    assert_string_equal(m1, m3);
    /* its input and the earlier program's output are intact */
    float out[12];
    assert_int_equal(lt_tensor_to_host(x, out, LT_F32), LT_OK);
    for (int i = 0; i < 12; i++) assert_true(out[i] == (float)i);
    assert_int_equal(lt_tensor_to_host(before, out, LT_F32), LT_OK);
    for (int i = 0; i < 12; i++) assert_true(out[i] == 2.0f * i);
    /* a later program on the same core runs normally */
    lt_tensor *later = op2(LT_OP_add, x, x, NULL);
    assert_int_equal(lt_tensor_to_host(later, out, LT_F32), LT_OK);
    for (int i = 0; i < 12; i++) assert_true(out[i] == 2.0f * i);
    free(m1); free(m2); free(m3);
    lt_tensor_release(x); lt_tensor_release(two); lt_tensor_release(before);
    lt_tensor_release(I); lt_tensor_release(g); lt_tensor_release(p);
    lt_tensor_release(s); lt_tensor_release(later);
}

/* Nobody reads the failed value: a wait reports it once, then never again;
 * the value itself still raises when read later. */
static void test_wait_reports_once(void **state)
{
    lt_tensor *y = gather_rows(0, 9, "user.py:20 in step");
    lt_set_caller("user.py:21 in step");
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    lt_set_caller(NULL);
    assert_int_equal(lt_wait(0), LT_ERR_ARG);
    const char *m = lt_last_error();
    EXPECT_IN(m, "index_select: index 9 is out of range");
    EXPECT_IN(m, "traced at user.py:20 in step");
    EXPECT_IN(m, "program synced at user.py:21 in step (mark_step)");
    assert_int_equal(lt_wait(0), LT_OK);
    assert_int_equal(lt_wait(-1), LT_OK);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_OK);
    char *r = read_fails(y, LT_ERR_ARG);
    EXPECT_IN(r, "index_select: index 9 is out of range");
    free(r);
    lt_tensor_release(y);

    /* the same through a waiting step sync (mark_step(wait=True)) */
    y = gather_rows(0, 7, NULL);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_ERR_ARG);
    EXPECT_IN(lt_last_error(), "index 7 is out of range");
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_OK);
    assert_int_equal(lt_wait(-1), LT_OK);
    lt_tensor_release(y);

    /* several unread failures: the first is reported with a count (an
     * explicit tensor sync never reports) */
    for (int k = 0; k < 3; k++) {
        y = gather_rows(0, 10 + k, NULL);
        assert_int_equal(lt_sync(&y, 1, LT_SYNC_EXPLICIT, 0), LT_OK);
        lt_tensor_release(y);
    }
    assert_int_equal(lt_wait(-1), LT_ERR_ARG);
    EXPECT_IN(lt_last_error(), "index 10 is out of range");
    EXPECT_IN(lt_last_error(), "(+2 more failed programs on core 0)");
    assert_int_equal(lt_wait(-1), LT_OK);
}

/* w = w + w, then an asynchronous step sync. */
static lt_status double_and_step(lt_tensor *w)
{
    lt_tensor *w2 = op2(LT_OP_add, w, w, NULL);
    assert_int_equal(lt_tensor_assign(w, w2), LT_OK);
    lt_tensor_release(w2);
    return lt_sync_core(0, LT_SYNC_MARK_STEP, 0);
}

/* An asynchronous step sync (mark_step()) reports an unread error once,
 * deterministically: at the first step sync that has to wait for the
 * failed program to bound the pipeline (its program is LAZYTPU_MAX_INFLIGHT
 * = 2 programs later). Value reads in between never report it. */
static void test_async_mark_step_reports_after_the_window(void **state)
{
    float one[2] = {1, 1}, out[2];
    lt_tensor *w = host_f32(0, one, 1, (int64_t[]){2});
    /* failed program N, then step N+1: OK, step N+2: reports, then OK */
    lt_tensor *y = gather_rows(0, 4, "user.py:30 in train");
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    assert_int_equal(double_and_step(w), LT_OK);
    assert_int_equal(double_and_step(w), LT_ERR_ARG);
    EXPECT_IN(lt_last_error(), "index 4 is out of range");
    EXPECT_IN(lt_last_error(), "traced at user.py:30 in train");
    assert_int_equal(double_and_step(w), LT_OK);
    assert_int_equal(double_and_step(w), LT_OK);
    lt_tensor_release(y);
    /* failed program, then value reads (programs too, past the window):
     * they do not report; the next step sync does */
    y = gather_rows(0, 5, NULL);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    for (int k = 1; k <= 4; k++) read_ones_times(0, k, (float)k);
    assert_int_equal(double_and_step(w), LT_ERR_ARG);
    EXPECT_IN(lt_last_error(), "index 5 is out of range");
    assert_int_equal(double_and_step(w), LT_OK);
    assert_int_equal(lt_tensor_to_host(w, out, LT_F32), LT_OK);
    assert_true(out[0] == 64.0f && out[1] == 64.0f);
    lt_tensor_release(y);
    lt_tensor_release(w);
}

/* A program whose input is poisoned fails at once, saying so and quoting
 * the original error (once, however long the chain); reading its output
 * claims the original too. */
static void test_poisoned_input_propagates(void **state)
{
    lt_tensor *y = gather_rows(0, 5, "user.py:40 in f");
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    lt_tensor *two;
    assert_int_equal(lt_scalar(0, 2.0, LT_F64, 1, &two), LT_OK);
    lt_tensor *z = op2(LT_OP_mul, y, two, NULL);
    lt_tensor *mm = NULL;
    float wv[6] = {1, 2, 3, 4, 5, 6};
    lt_tensor *wt = host_f32(0, wv, 2, (int64_t[]){3, 2});
    mm = op2(LT_OP_mm, y, wt, NULL);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    char *mz = read_fails(z, LT_ERR_ARG);
    EXPECT_IN(mz, "was poisoned by an earlier error: index_select: index 5 is out of range");
    EXPECT_IN(mz, "(f32[1, 3])");
    EXPECT_IN(mz, "traced at user.py:40 in f");
    char *mmm = read_fails(mm, LT_ERR_ARG);
    assert_string_equal(mz, mmm);           /* same program, same fault */
    EXPECT_IN(mmm, "poisoned by an earlier error: index_select");
    /* a chain of poisoned programs: the message quotes the root once */
    lt_tensor *cur = lt_tensor_retain(z);
    for (int k = 0; k < 20; k++) {       /* 20 programs, each fails */
        lt_tensor *nx = op2(LT_OP_add, cur, two, NULL);
        lt_tensor_release(cur);
        cur = nx;
        assert_int_equal(lt_sync(&cur, 1, LT_SYNC_EXPLICIT, 0), LT_OK);
    }
    char *mc = read_fails(cur, LT_ERR_ARG);
    EXPECT_IN(mc, "add (fused elementwise): an input (f32[1, 3]) was poisoned by an earlier error: index_select: index 5");
    const char *first = strstr(mc, "poisoned");
    assert_null(strstr(first + 1, "poisoned"));
    /* the reads claimed the root, z's program and the last one; the 19
     * intermediate programs failed unread: one wait reports them, once */
    assert_int_equal(lt_wait(-1), LT_ERR_ARG);
    EXPECT_IN(lt_last_error(), "poisoned by an earlier error: index_select: index 5");
    EXPECT_IN(lt_last_error(), "(+18 more failed programs on core 0)");
    assert_int_equal(lt_wait(-1), LT_OK);
    free(mz); free(mmm); free(mc);
    lt_tensor_release(cur); lt_tensor_release(y); lt_tensor_release(z);
    lt_tensor_release(two); lt_tensor_release(mm); lt_tensor_release(wt);
}

/* An unread root with a failing consumer: the wait reports the root first
 * (and counts the consumer), then nothing. */
static void test_unread_chain_reports_root(void **state)
{
    lt_tensor *y = gather_rows(0, 6, NULL);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    lt_tensor *z = op2(LT_OP_add, y, y, NULL);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    assert_int_equal(lt_wait(0), LT_ERR_ARG);
    const char *m = lt_last_error();
    if (strncmp(m, "index_select: index 6", 21) != 0) fail_msg("%s", m);
    EXPECT_IN(m, "(+1 more failed program on core 0)");
    assert_int_equal(lt_wait(0), LT_OK);
    lt_tensor_release(y);
    lt_tensor_release(z);
}

/* Cores are independent: a failure on core 0 touches nothing on core 1;
 * lt_wait(-1) reports it once; lt_wait(1) never. */
static void test_other_cores_unaffected(void **state)
{
    lt_tensor *y = gather_rows(0, 5, NULL);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    lt_tensor *y1 = gather_rows(1, 2, NULL);     /* valid on core 1 */
    float out[3];
    assert_int_equal(lt_tensor_to_host(y1, out, LT_F32), LT_OK);
    assert_true(out[0] == 6 && out[1] == 7 && out[2] == 8);
    read_ones_times(1, 3, 3);
    assert_int_equal(lt_sync_core(1, LT_SYNC_MARK_STEP, 1), LT_OK);
    assert_int_equal(lt_wait(1), LT_OK);
    assert_int_equal(lt_wait(-1), LT_ERR_ARG);
    EXPECT_IN(lt_last_error(), "core 0]");
    assert_int_equal(lt_wait(-1), LT_OK);
    /* both cores failing: each core's error is reported by one wait */
    lt_tensor *a = gather_rows(0, 8, NULL), *b = gather_rows(1, 9, NULL);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    assert_int_equal(lt_sync_core(1, LT_SYNC_MARK_STEP, 0), LT_OK);
    assert_int_equal(lt_wait(-1), LT_ERR_ARG);
    EXPECT_IN(lt_last_error(), "index 8");
    assert_int_equal(lt_wait(-1), LT_ERR_ARG);
    EXPECT_IN(lt_last_error(), "index 9");
    EXPECT_IN(lt_last_error(), "core 1]");
    assert_int_equal(lt_wait(-1), LT_OK);
    lt_tensor_release(a); lt_tensor_release(b);
    lt_tensor_release(y); lt_tensor_release(y1);
}

/* lt_sync(wait=1) of a tensor list reports the listed tensors' faults,
 * never another program's. */
static void test_sync_list_reports_own_faults_only(void **state)
{
    lt_tensor *bad = gather_rows(0, 5, NULL);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    lt_tensor *ok = gather_rows(0, 1, NULL);
    assert_int_equal(lt_sync(&ok, 1, LT_SYNC_EXPLICIT, 1), LT_OK);
    lt_tensor *bad2 = gather_rows(0, 4, NULL);
    assert_int_equal(lt_sync(&bad2, 1, LT_SYNC_EXPLICIT, 1), LT_ERR_ARG);
    EXPECT_IN(lt_last_error(), "index 4");
    assert_int_equal(lt_sync(&bad2, 1, LT_SYNC_EXPLICIT, 1), LT_ERR_ARG);   /* data now */
    assert_int_equal(lt_wait(0), LT_ERR_ARG);      /* the unread first one */
    EXPECT_IN(lt_last_error(), "index 5");
    assert_int_equal(lt_wait(0), LT_OK);
    lt_tensor_release(bad); lt_tensor_release(ok); lt_tensor_release(bad2);
}

/* Graph cuts at LAZYTPU_GRAPH_LIMIT happen inside lt_trace: they must never
 * report an earlier program's error to an unrelated traced op. */
static void test_graph_cut_never_reports(void **state)
{
    reinit("8");
    lt_tensor *y = gather_rows(0, 5, NULL);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    float one[2] = {1, 1};
    lt_tensor *w = host_f32(0, one, 1, (int64_t[]){2});
    for (int k = 0; k < 100; k++) {        /* ~12 cuts, many past the window */
        lt_tensor *w2;
        lt_status st = lt_trace2(LT_OP_add, w, w, NULL, &w2);
        if (st != LT_OK) fail_msg("trace %d: %s", k, lt_last_error());
        assert_int_equal(lt_tensor_assign(w, w2), LT_OK);
        lt_tensor_release(w2);
    }
    assert_true(lt_counter_value("GraphSizeLimitSync") >= 10);
    float out[2];
    assert_int_equal(lt_tensor_to_host(w, out, LT_F32), LT_OK);
    assert_true(out[0] == 0x1p100f);
    assert_int_equal(lt_wait(-1), LT_ERR_ARG);    /* still unread: reported here */
    assert_int_equal(lt_wait(-1), LT_OK);
    lt_tensor_release(w);
    lt_tensor_release(y);
}

/* nll_loss with a class id past the classes, gather with a bad index:
 * the same rules, their own messages. */
static void test_loss_and_gather_errors(void **state)
{
    float lp[10] = {0};
    lt_tensor *logp = host_f32(0, lp, 2, (int64_t[]){2, 5});
    int64_t tg[2] = {1, 7};
    lt_tensor *target = host_i64(0, tg, 1, (int64_t[]){2});
    lt_set_caller("train.py:57 in loss_fn");
    lt_attrs mean = {.n = 2, .i = {1, -100}};
    lt_tensor *loss = op2(LT_OP_nll_loss, logp, target, &mean);
    lt_set_caller(NULL);
    char *m = read_fails(loss, LT_ERR_ARG);
    EXPECT_IN(m, "nll_loss: target 7 is out of bounds for 5 classes");
    EXPECT_IN(m, "in nll_loss(f32[2, 5], i64[2]) -> f32[]");
    EXPECT_IN(m, "traced at train.py:57 in loss_fn");
    free(m);
    int64_t gi[4] = {0, 1, 2, 3};
    lt_tensor *gidx = host_i64(0, gi, 2, (int64_t[]){2, 2});
    lt_attrs d1 = {.n = 1, .i = {1}};
    lt_tensor *g = op2(LT_OP_gather, logp, gidx, &d1);   /* fine: 0..3 < 5 */
    float out[4];
    assert_int_equal(lt_tensor_to_host(g, out, LT_F32), LT_OK);
    gi[3] = 5;
    lt_tensor *gidx2 = host_i64(0, gi, 2, (int64_t[]){2, 2});
    lt_tensor *g2 = op2(LT_OP_gather, logp, gidx2, &d1);
    m = read_fails(g2, LT_ERR_ARG);
    EXPECT_IN(m, "gather: index 5 is out of range for dimension 1 of size 5");
    EXPECT_IN(m, "in gather(f32[2, 5], i64[2, 2]) -> f32[2, 2]");
    free(m);
    lt_tensor_release(logp); lt_tensor_release(target); lt_tensor_release(loss);
    lt_tensor_release(gidx); lt_tensor_release(g); lt_tensor_release(gidx2);
    lt_tensor_release(g2);
}

/* The frame of an op that checks its data comes from lt_set_caller, or
 * from the caller hook when nothing is set; the hook runs for those ops
 * only and the thread's frame is clear again afterwards. */
static int hook_calls;
static void test_hook(void)
{
    hook_calls++;
    lt_set_caller("hook.py:3 in model");
}

static void test_frame_from_hook(void **state)
{
    lt_set_caller_hook(test_hook);
    hook_calls = 0;
    float one[2] = {1, 1};
    lt_tensor *a = host_f32(0, one, 1, (int64_t[]){2});
    lt_tensor *b = op2(LT_OP_add, a, a, NULL);        /* no data check: no hook */
    assert_int_equal(hook_calls, 0);
    lt_tensor *y = gather_rows(0, 5, NULL);
    assert_int_equal(hook_calls, 1);
    assert_string_equal(lt_caller_frame(), "");
    lt_tensor *y2 = gather_rows(0, 5, "set.py:1 in explicit");   /* set: no hook */
    assert_int_equal(hook_calls, 1);
    char *m = read_fails(y, LT_ERR_ARG);
    EXPECT_IN(m, "traced at hook.py:3 in model");
    free(m);
    m = read_fails(y2, LT_ERR_ARG);
    EXPECT_IN(m, "traced at set.py:1 in explicit");
    free(m);
    lt_set_caller_hook(NULL);
    lt_tensor_release(a); lt_tensor_release(b);
    lt_tensor_release(y); lt_tensor_release(y2);
}

/* The core keeps working: many failures and successes interleaved, no
 * growth in live tensors or device bytes (teardown checks zero). */
/* A read of a value derived from the failing one (y.detach().cpu(),
 * y[0].item()) syncs only part of y's graph; y itself is synced by the next
 * step. That program contains the node that failed: it is the same
 * failure (the read claimed it), so no step or wait reports it again, and
 * y's own reads raise the original message. Found by the property tests
 * (index_select behind a detach). */
static void test_failed_node_synced_again_is_the_same_failure(void **state)
{
    lt_tensor *y = gather_rows(0, 7, "user.py:3 in f");
    lt_attrs a = {.n = 2, .i = {1, 3}};
    lt_tensor *d;
    assert_int_equal(lt_trace(LT_OP_reshape, &y, 1, &a, &d), LT_OK);
    char *m = read_fails(d, LT_ERR_ARG);
    EXPECT_IN(m, "index_select: index 7 is out of range");
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_OK);
    assert_int_equal(lt_wait(-1), LT_OK);
    char *m2 = read_fails(y, LT_ERR_ARG);
    assert_string_equal(m, m2);
    /* unread: the same failure reported once, by the first wait */
    lt_tensor *y2 = gather_rows(0, 8, NULL), *d2;
    assert_int_equal(lt_trace(LT_OP_reshape, &y2, 1, &a, &d2), LT_OK);
    assert_int_equal(lt_sync(&d2, 1, LT_SYNC_EXPLICIT, 0), LT_OK);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 0), LT_OK);
    assert_int_equal(lt_wait(-1), LT_ERR_ARG);
    EXPECT_IN(lt_last_error(), "index 8 is out of range");
    if (strstr(lt_last_error(), "more failed"))
        fail_msg("one failure, counted twice: %s", lt_last_error());
    assert_int_equal(lt_wait(-1), LT_OK);
    free(m);
    free(m2);
    lt_tensor_release(d);
    lt_tensor_release(y);
    lt_tensor_release(d2);
    lt_tensor_release(y2);
}

static void test_core_keeps_working(void **state)
{
    for (int k = 0; k < 200; k++) {
        lt_tensor *y = gather_rows(k % 2, k % 3 == 0 ? 4 + k : 1, NULL);
        if (k % 3 == 0) {
            char *m = read_fails(y, LT_ERR_ARG);
            free(m);
        } else {
            float out[3];
            assert_int_equal(lt_tensor_to_host(y, out, LT_F32), LT_OK);
            assert_true(out[0] == 3 && out[2] == 5);
        }
        lt_tensor_release(y);
        if (k % 10 == 0) assert_int_equal(lt_sync_core(k % 2, LT_SYNC_MARK_STEP, 0), LT_OK);
    }
    assert_int_equal(lt_wait(-1), LT_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_issue_sequence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_poisons_exactly_the_programs_outputs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_reports_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_async_mark_step_reports_after_the_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_poisoned_input_propagates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unread_chain_reports_root, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_cores_unaffected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sync_list_reports_own_faults_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_graph_cut_never_reports, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loss_and_gather_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_frame_from_hook, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_node_synced_again_is_the_same_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_core_keeps_working, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
