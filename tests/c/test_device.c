/* tests/c/test_device.c — simulated cores: budget errors, FIFO jobs and
 * sequence numbers, job error propagation, shutdown draining. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "device.h"

static void start(const char *hbm, const char *cores)
{
    lt_devices_shutdown();
    setenv("LAZYTPU_HBM_BYTES", hbm, 1);
    setenv("LAZYTPU_NUM_CORES", cores, 1);
    assert_int_equal(lt_devices_init(), LT_OK);
}

static void test_budget_error(void **state)
{
    start("1M", "4");
    assert_int_equal(lt_devices_count(), 4);
    lt_buffer *a = NULL, *b = NULL;
    size_t base = lt_core_bytes_in_use(3);
    assert_int_equal(lt_buffer_alloc(3, LT_F32, 150000, &a), LT_OK);
    assert_non_null(a);
    assert_true(((uintptr_t)a->data & 63) == 0);
    assert_int_equal(lt_core_bytes_in_use(3), base + 600000);
    assert_int_equal(lt_buffer_alloc(3, LT_F32, 150000, &b), LT_ERR_OOM);
    assert_null(b);
    const char *m = lt_last_error();
    assert_non_null(strstr(m, "core 3: device memory exhausted: requested 585.94 KiB"));
    assert_non_null(strstr(m, "with 585.94 KiB of 1.00 MiB in use"));
    /* another core has its own budget */
    assert_int_equal(lt_buffer_alloc(2, LT_F32, 150000, &b), LT_OK);
    lt_buffer_release(b);
    lt_buffer_release(a);
    assert_int_equal(lt_core_bytes_in_use(3), base);
    /* suffixes: 16G accepted, bad string rejected */
    lt_devices_shutdown();
    setenv("LAZYTPU_HBM_BYTES", "16GiB", 1);
    assert_int_equal(lt_devices_init(), LT_OK);
    assert_int_equal(lt_buffer_alloc(0, LT_BF16, 1 << 20, &a), LT_OK);
    lt_buffer_release(a);
    assert_int_equal(lt_buffer_alloc(0, LT_F64, (int64_t)3 << 30, &a), LT_ERR_OOM);
    assert_non_null(strstr(lt_last_error(), "requested 24.00 GiB with 0 B of 16.00 GiB in use"));
    lt_devices_shutdown();
    setenv("LAZYTPU_HBM_BYTES", "lots", 1);
    assert_int_equal(lt_devices_init(), LT_ERR_ARG);
    start("1G", "2");
}

typedef struct rec_job {
    lt_job job;
    int *log, *n, id;
    int fail;
    int *done_count;
} rec_job;

static lt_status rec_run(lt_job *j, int core)
{
    rec_job *r = (rec_job *)j;
    usleep(1000);
    r->log[(*r->n)++] = r->id;
    if (r->fail)
        return lt_set_error(LT_ERR_INTERNAL, "job %d failed on core %d", r->id, core);
    return LT_OK;
}

static void rec_done(lt_job *j)
{
    rec_job *r = (rec_job *)j;
    (*r->done_count)++;
    free(r);
}

static rec_job *mk(int *log, int *n, int id, int fail, int *dc)
{
    rec_job *r = calloc(1, sizeof *r);
    r->job.run = rec_run;
    r->job.done = rec_done;
    r->log = log;
    r->n = n;
    r->id = id;
    r->fail = fail;
    r->done_count = dc;
    return r;
}

static void test_seq_wait(void **state)
{
    start("1G", "2");
    int log[16], n = 0, dc = 0;
    uint64_t first = lt_core_next_seq(1);
    for (int i = 0; i < 10; i++) {
        lt_core_lock(1);
        uint64_t want = lt_core_next_seq(1);
        uint64_t s = lt_core_submit(1, &mk(log, &n, i, 0, &dc)->job);
        lt_core_unlock(1);
        assert_int_equal(s, want);
        assert_int_equal(s, first + i);
    }
    assert_int_equal(lt_core_wait(1, 0), LT_OK);
    assert_int_equal(n, 10);
    assert_int_equal(dc, 10);
    for (int i = 0; i < 10; i++)
        assert_int_equal(log[i], i);
    assert_true(lt_core_omp_threads(1) >= 1);
}

static void test_job_errors(void **state)
{
    start("1G", "2");
    int log[16], n = 0, dc = 0;
    lt_buffer *b;
    assert_int_equal(lt_buffer_alloc(0, LT_F32, 4, &b), LT_OK);
    lt_core_submit(0, &mk(log, &n, 1, 0, &dc)->job);
    lt_core_lock(0);
    b->ready_seq = lt_core_next_seq(0);
    lt_core_submit(0, &mk(log, &n, 2, 1, &dc)->job);
    lt_core_unlock(0);
    uint64_t s3 = lt_core_submit(0, &mk(log, &n, 3, 0, &dc)->job);
    assert_int_equal(lt_buffer_wait(b), LT_ERR_INTERNAL);
    assert_string_equal(lt_last_error(), "job 2 failed on core 0");
    lt_set_error(LT_OK, "%s", "");
    assert_int_equal(lt_core_wait(0, s3), LT_ERR_INTERNAL);
    assert_string_equal(lt_last_error(), "job 2 failed on core 0");
    assert_int_equal(n, 3);       /* later jobs still ran */
    /* reported once; the buffer keeps its writer's status */
    assert_int_equal(lt_core_wait(0, 0), LT_OK);
    assert_int_equal(lt_buffer_wait(b), LT_ERR_INTERNAL);
    lt_buffer_release(b);
}

static void test_shutdown_drains(void **state)
{
    start("1G", "2");
    int log[16], n = 0, dc = 0;
    for (int i = 0; i < 5; i++)
        lt_core_submit(1, &mk(log, &n, i, 0, &dc)->job);
    lt_buffer *b;
    assert_int_equal(lt_buffer_alloc(1, LT_I64, 10, &b), LT_OK);
    lt_devices_shutdown();
    assert_int_equal(n, 5);
    assert_int_equal(dc, 5);
    lt_buffer_release(b);   /* after shutdown: still safe */
    assert_int_equal(lt_core_bytes_in_use(1), 0);
    start("1G", "2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget_error),
        cmocka_unit_test(test_seq_wait),
        cmocka_unit_test(test_job_errors),
        cmocka_unit_test(test_shutdown_drains),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    lt_devices_shutdown();
    return r;
}
