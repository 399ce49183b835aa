/* tests/c/test_keep_f32.c — lt_trace_keep_f32: in bf16 mode the calling
 * thread's traced f32 results are stored as f32 while it is on (values keep
 * their f32 bits), a cast traced after it is off rounds them back to bf16
 * storage, other threads are not affected, and outside bf16 mode it changes
 * nothing. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdlib.h>
#include "lazytpu.h"

static void reinit(const char *bf16)
{
    lt_shutdown();
    if (bf16) setenv("LAZYTPU_USE_BF16", bf16, 1); else unsetenv("LAZYTPU_USE_BF16");
    unsetenv("XLA_USE_BF16");
    setenv("LAZYTPU_NUM_CORES", "1", 1);
    assert_int_equal(lt_init(), LT_OK);
}

static int teardown(void **st)
{
    (void)st;
    assert_int_equal(lt_wait(-1), LT_OK);
    assert_int_equal(lt_live_tensors(0), 0);
    lt_shutdown();
    return 0;
}

static lt_tensor *host1(float v)
{
    lt_shape s = lt_shape_make(1, (int64_t[]){1});
    lt_tensor *t;
    assert_int_equal(lt_tensor_from_host(0, &v, LT_F32, &s, &t), LT_OK);
    return t;
}

static float read1(lt_tensor *t)
{
    float v;
    assert_int_equal(lt_tensor_to_host(t, &v, LT_F32), LT_OK);
    return v;
}

static lt_tensor *add(lt_tensor *a, lt_tensor *b)
{
    lt_tensor *o;
    assert_int_equal(lt_trace2(LT_OP_add, a, b, NULL, &o), LT_OK);
    return o;
}

static void *other_thread(void *arg)
{
    lt_tensor **ab = arg;
    return add(ab[0], ab[1]);      /* this thread never turned keep on */
}

static void test_keep_f32_in_bf16_mode(void **st)
{
    (void)st;
    reinit("1");
    /* 1 and 2^-10 are bf16 values; their sum 1 + 2^-10 is not (bf16 steps
     * by 2^-7 at 1) */
    lt_tensor *a = host1(1.0f), *b = host1(0.0009765625f);
    lt_tensor *plain = add(a, b);
    assert_int_equal(lt_trace_keep_f32(1), 0);
    lt_tensor *kept = add(a, b);
    lt_tensor *ab[2] = {a, b};
    pthread_t th;
    void *res;
    assert_int_equal(pthread_create(&th, NULL, other_thread, ab), 0);
    assert_int_equal(pthread_join(th, &res), 0);
    lt_tensor *other = res;
    assert_int_equal(lt_trace_keep_f32(0), 1);
    lt_attrs c = {.n = 1, .i = {LT_F32}};
    lt_tensor *rounded;
    assert_int_equal(lt_trace1(LT_OP_cast, kept, &c, &rounded), LT_OK);

    assert_int_equal(lt_tensor_dtype(kept), LT_F32);
    assert_int_equal(lt_tensor_storage_dtype(plain), LT_BF16);
    assert_int_equal(lt_tensor_storage_dtype(kept), LT_F32);
    assert_int_equal(lt_tensor_storage_dtype(other), LT_BF16);
    assert_int_equal(lt_tensor_storage_dtype(rounded), LT_BF16);
    assert_true(read1(plain) == 1.0f);
    assert_true(read1(kept) == 1.0009765625f);
    assert_true(read1(other) == 1.0f);
    assert_true(read1(rounded) == 1.0f);
    lt_tensor *all[] = {a, b, plain, kept, other, rounded};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_tensor_release(all[i]);
}

static void test_keep_f32_outside_bf16_mode(void **st)
{
    (void)st;
    reinit(NULL);
    lt_tensor *a = host1(1.0f), *b = host1(0.0009765625f);
    lt_trace_keep_f32(1);
    lt_tensor *s = add(a, b);
    lt_trace_keep_f32(0);
    assert_int_equal(lt_tensor_storage_dtype(s), LT_F32);
    assert_true(read1(s) == 1.0009765625f);
    lt_tensor_release(a); lt_tensor_release(b); lt_tensor_release(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_keep_f32_in_bf16_mode, teardown),
        cmocka_unit_test_teardown(test_keep_f32_outside_bf16_mode, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
