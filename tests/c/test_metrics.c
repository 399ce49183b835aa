/* tests/c/test_metrics.c — the metrics registry, formatting, report, JSON. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazytpu.h"
#include "registry.h"
#include "report.h"

/* ------------------------------------------------------------ formatting */

static void test_format_time(void **st)
{
    char b[64];
    assert_string_equal(lt_fmt_time(418595.0, b, sizeof b), "418.595us");
    assert_string_equal(lt_fmt_time(694418595.0, b, sizeof b), "694ms418.595us");
    assert_string_equal(lt_fmt_time(177694418595.0, b, sizeof b),
                        "02m57s694ms418.595us");
    assert_string_equal(lt_fmt_time(1e6, b, sizeof b), "001ms000.000us");
    assert_string_equal(lt_fmt_time(500.0, b, sizeof b), "000.500us");
    assert_string_equal(lt_fmt_time(0.0, b, sizeof b), "000.000us");
    assert_string_equal(lt_fmt_time(3661e9 + 5e6 + 7000, b, sizeof b),
                        "01h01m01s005ms007.000us");
    assert_string_equal(lt_fmt_time(2 * 86400e9, b, sizeof b),
                        "02d00h00m00s000ms000.000us");
    assert_string_equal(lt_fmt_time(12e9, b, sizeof b), "12s000ms000.000us");
}

static void test_format_bytes(void **st)
{
    char b[64];
    assert_string_equal(lt_fmt_bytes(12, b, sizeof b), "12.00B");
    assert_string_equal(lt_fmt_bytes(1023, b, sizeof b), "1023.00B");
    assert_string_equal(lt_fmt_bytes(1024, b, sizeof b), "1.00KB");
    assert_string_equal(lt_fmt_bytes(512 * 1024, b, sizeof b), "512.00KB");
    assert_string_equal(lt_fmt_bytes(1.5 * 1024 * 1024, b, sizeof b), "1.50MB");
    assert_string_equal(lt_fmt_bytes(3.0 * 1024 * 1024 * 1024, b, sizeof b),
                        "3.00GB");
    assert_string_equal(lt_fmt_count(3, b, sizeof b), "3.00");
    assert_string_equal(lt_fmt_g(13.07164, b, sizeof b), "13.0716");
}

/* -------------------------------------------------------- thread safety */

#define NTHREADS 4
#define NITER 20000

static void *counter_worker(void *arg)
{
    long id = (long)arg;
    lt_counter *c = lt_counter_get("test::shared");
    char own[64];
    for (int i = 0; i < NITER; i++) {
        lt_counter_add(c, 1);
        lt_counter_inc_name("test::shared_by_name", 2);
        /* distinct names created concurrently */
        if (i % 1000 == 0) {
            snprintf(own, sizeof own, "test::t%ld_%d", id, i / 1000);
            lt_counter_inc_name(own, i / 1000 + 1);
        }
    }
    lt_metric *m = lt_metric_get("TestThreadMetric", LT_UNIT_COUNT);
    for (int i = 0; i < NITER; i++) lt_metric_add(m, (double)(i % 7));
    return NULL;
}

static void test_threads(void **st)
{
    pthread_t th[NTHREADS];
    for (long i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, counter_worker, (void *)i), 0);
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    assert_int_equal(lt_counter_value("test::shared"), NTHREADS * NITER);
    assert_int_equal(lt_counter_value("test::shared_by_name"), 2 * NTHREADS * NITER);
    for (int t = 0; t < NTHREADS; t++)
        for (int k = 0; k < NITER / 1000; k++) {
            char own[64];
            snprintf(own, sizeof own, "test::t%d_%d", t, k);
            assert_int_equal(lt_counter_value(own), k + 1);
        }
    int64_t total;
    double acc;
    assert_int_equal(lt_metric_data("TestThreadMetric", &total, &acc), 0);
    assert_int_equal(total, NTHREADS * NITER);
    double expect = 0;
    for (int i = 0; i < NITER; i++) expect += i % 7;
    assert_true(acc == expect * NTHREADS);
    /* same pointer for the same name */
    assert_ptr_equal(lt_counter_get("test::shared"), lt_counter_get("test::shared"));
    assert_ptr_equal(lt_metric_get("TestThreadMetric", LT_UNIT_NS),
                     lt_metric_get("TestThreadMetric", LT_UNIT_COUNT));
    assert_int_equal(lt_counter_value("test::never_created"), 0);
    assert_int_equal(lt_metric_data("NeverCreated", &total, &acc), -1);
    assert_int_equal(total, 0);
}

/* ---------------------------------------------------------------- report */

/* The block of the report starting at "Metric: name\n" up to the next
 * "Metric:"/"Counter:" line; malloc'd or NULL. */
static char *metric_block(const char *rep, const char *head)
{
    const char *p = strstr(rep, head);
    if (!p) return NULL;
    const char *e = p + strlen(head);
    while (*e && strncmp(e, "Metric: ", 8) && strncmp(e, "Counter: ", 9) &&
           strncmp(e, "== ", 3)) {
        const char *nl = strchr(e, '\n');
        e = nl ? nl + 1 : e + strlen(e);
    }
    return strndup(p, (size_t)(e - p));
}

static void test_report_lines(void **st)
{
    lt_metric *m = lt_metric_get("TestCount", LT_UNIT_COUNT);
    for (int i = 1; i <= 100; i++) lt_metric_add(m, i);
    lt_metric *t = lt_metric_get("TestTime", LT_UNIT_NS);
    lt_metric_add(t, 1e6);
    lt_metric *b = lt_metric_get("TestBytes", LT_UNIT_BYTES);
    lt_metric_add(b, 1536.0 * 1024);
    lt_counter_inc_name("test::report_counter", 42);

    char *rep = lt_metrics_report();
    assert_non_null(rep);
    char *blk = metric_block(rep, "Metric: TestCount\n");
    assert_non_null(blk);
    assert_non_null(strstr(blk, "  TotalSamples: 100\n  Accumulator: 5050.00\n"));
    assert_non_null(strstr(blk,
        "  Percentiles: 1%=2.00; 5%=6.00; 10%=11.00; 20%=21.00; 50%=51.00; "
        "80%=81.00; 90%=91.00; 95%=96.00; 99%=100.00\n"));
    /* 100 samples added in a tight loop: the window spans time (>0 ns) */
    const char *vr = strstr(blk, "  ValueRate: ");
    const char *r = strstr(blk, "\n  Rate: ");
    assert_non_null(vr);
    assert_non_null(r);
    double rate = atof(r + 9);
    assert_true(rate > 0);
    assert_non_null(strstr(r, " / second\n"));
    free(blk);

    blk = metric_block(rep, "Metric: TestTime\n");
    assert_non_null(blk);
    assert_string_equal(blk,
        "Metric: TestTime\n  TotalSamples: 1\n  Accumulator: 001ms000.000us\n"
        "  Percentiles: 1%=001ms000.000us; 5%=001ms000.000us; "
        "10%=001ms000.000us; 20%=001ms000.000us; 50%=001ms000.000us; "
        "80%=001ms000.000us; 90%=001ms000.000us; 95%=001ms000.000us; "
        "99%=001ms000.000us\n");
    free(blk);
    blk = metric_block(rep, "Metric: TestBytes\n");
    assert_non_null(blk);
    assert_non_null(strstr(blk, "  Accumulator: 1.50MB\n"));
    assert_non_null(strstr(blk, "50%=1.50MB;"));
    free(blk);
    assert_non_null(strstr(rep, "Counter: test::report_counter\n  Value: 42\n"));
    free(rep);
}

static void test_report_order(void **st)
{
    const char *names[] = {"ZzzLast", "OutboundData", "AaaOther", "CompileTime",
                           "TensorsGraphSize", "ExecuteTime"};
    for (int i = 0; i < 6; i++)
        lt_metric_add(lt_metric_get(names[i], LT_UNIT_COUNT), 1);
    lt_counter_inc_name("test::zz", 1);
    lt_counter_inc_name("test::aa", 1);
    char *rep = lt_metrics_report();
    const char *order[] = {"Metric: CompileTime\n", "Metric: ExecuteTime\n",
                           "Metric: TensorsGraphSize\n", "Metric: OutboundData\n",
                           "Metric: AaaOther\n", "Metric: ZzzLast\n",
                           "Counter: test::aa\n", "Counter: test::zz\n"};
    const char *prev = rep;
    for (int i = 0; i < 8; i++) {
        const char *p = strstr(rep, order[i]);
        assert_non_null(p);
        assert_true(p >= prev);
        prev = p;
    }
    /* all metrics before any counter */
    const char *lastm = NULL, *p = rep;
    while ((p = strstr(p, "Metric: "))) lastm = p++;
    assert_true(lastm < strstr(rep, "Counter: "));
    free(rep);
    char *mn = lt_metric_names();
    assert_non_null(mn);
    assert_true(strstr(mn, "CompileTime\n") < strstr(mn, "AaaOther\n"));
    free(mn);
    char *cn = lt_counter_names();
    assert_true(strstr(cn, "test::aa\n") < strstr(cn, "test::zz\n"));
    free(cn);
}

static void test_ring_percentiles(void **st)
{
    lt_metric *m = lt_metric_get("TestRing", LT_UNIT_COUNT);
    for (int i = 0; i < 2000; i++) lt_metric_add(m, 1999 - i);  /* descending */
    int64_t total;
    double acc;
    lt_metric_data("TestRing", &total, &acc);
    assert_int_equal(total, 2000);
    assert_true(acc == 1999.0 * 2000 / 2);
    /* kept: the last 1024 added = values 0..1023; idx = p * 1024 */
    char *rep = lt_metrics_report();
    char *blk = metric_block(rep, "Metric: TestRing\n");
    assert_non_null(blk);
    assert_non_null(strstr(blk, "Percentiles: 1%=10.00; 5%=51.00; 10%=102.00; "
                                "20%=204.00; 50%=512.00; 80%=819.00; 90%=921.00; "
                                "95%=972.00; 99%=1013.00\n"));
    free(blk);
    free(rep);
}

static void test_notes(void **st)
{
    lt_metrics_note("recompilation", "graph 0xabc: input 0 [2, 3] -> [4, 3]");
    lt_metrics_note("fallbacks", "aten::foo x3");
    char *rep = lt_metrics_report();
    const char *r = strstr(rep, "== recompilation ==\ngraph 0xabc: input 0 [2, 3] -> [4, 3]\n");
    assert_non_null(r);
    const char *f = strstr(rep, "== fallbacks ==\naten::foo x3\n");
    assert_non_null(f);
    assert_true(r < f);
    assert_true(strstr(rep, "Counter: ") < r);
    free(rep);
    for (int i = 0; i < LT_NOTE_RING + 44; i++) {
        char line[32];
        snprintf(line, sizeof line, "line %d", i);
        lt_metrics_note("ringtest", line);
    }
    rep = lt_metrics_report();
    assert_non_null(strstr(rep, "== ringtest ==\n(44 earlier lines dropped)\nline 44\n"));
    char last[64];
    snprintf(last, sizeof last, "line %d\n", LT_NOTE_RING + 43);
    assert_non_null(strstr(rep, last));
    free(rep);
}

static void test_json(void **st)
{
    lt_metric_add(lt_metric_get("TestJson", LT_UNIT_BYTES), 2048);
    lt_counter_inc_name("test::json\"quote", 7);
    lt_metrics_note("jsonnotes", "a\tb");
    char *j = lt_metrics_json();
    assert_non_null(j);
    assert_non_null(strstr(j, "\"TestJson\": {\"unit\": \"bytes\", \"total_samples\": 1, "
                              "\"accumulator\": 2048, \"kept_samples\": 1, "
                              "\"value_rate\": null, \"rate\": null, "
                              "\"percentiles\": {\"1\": 2048, "));
    assert_non_null(strstr(j, "\"test::json\\\"quote\": 7"));
    assert_non_null(strstr(j, "\"jsonnotes\": {\"dropped\": 0, \"lines\": [\"a\\tb\"]}"));
    /* balanced braces/brackets outside strings */
    int depth = 0, instr = 0;
    for (const char *p = j; *p; p++) {
        if (instr) {
            if (*p == '\\') p++;
            else if (*p == '"') instr = 0;
            continue;
        }
        if (*p == '"') instr = 1;
        else if (*p == '{' || *p == '[') depth++;
        else if (*p == '}' || *p == ']') assert_true(--depth >= 0);
    }
    assert_int_equal(depth, 0);
    assert_int_equal(instr, 0);
    free(j);
}

static void test_clear_all(void **st)
{
    lt_counter_inc_name("test::clearme", 5);
    lt_metric_add(lt_metric_get("TestClear", LT_UNIT_NS), 100);
    lt_metrics_note("clearnotes", "gone");
    lt_metrics_clear_all();
    assert_int_equal(lt_counter_value("test::clearme"), 0);
    int64_t total = -1;
    double acc = -1;
    assert_int_equal(lt_metric_data("TestClear", &total, &acc), 0);
    assert_int_equal(total, 0);
    assert_true(acc == 0);
    char *rep = lt_metrics_report();
    assert_null(strstr(rep, "test::clearme"));
    assert_null(strstr(rep, "TestClear"));
    assert_null(strstr(rep, "clearnotes"));
    free(rep);
    char *cn = lt_counter_names();
    assert_non_null(strstr(cn, "test::clearme\n"));
    free(cn);
    /* usable again after clear */
    lt_counter_inc_name("test::clearme", 3);
    assert_int_equal(lt_counter_value("test::clearme"), 3);
    lt_metric_add(lt_metric_get("TestClear", LT_UNIT_NS), 7);
    lt_metric_data("TestClear", &total, &acc);
    assert_int_equal(total, 1);
    assert_true(acc == 7);
}

static void test_now(void **st)
{
    int64_t a = lt_now_ns(), b = lt_now_ns();
    assert_true(a > 0);
    assert_true(b >= a);
    assert_null(lt_counter_get(NULL));
    lt_counter_add(NULL, 1);       /* NULL-safe */
    lt_metric_add(NULL, 1);
}

/* ---------------------------------------------------- registered sections */

static char *section_head(void) { return strdup("TEST-HEAD-SECTION\n"); }
static char *section_analysis(void) { return strdup("== test analysis ==\nline\n"); }
static char *section_empty(void) { return NULL; }

/* Parts register report sections (metrics/report.h); lazy/'s register
 * themselves before main, without lt_init (this test never calls it). */
static void test_report_sections(void **st)
{
    assert_int_equal(lt_report_section_add(LT_REPORT_ANALYSIS, 15, section_analysis), 0);
    assert_int_equal(lt_report_section_add(LT_REPORT_ANALYSIS, 15, section_analysis), 0);
    assert_int_equal(lt_report_section_add(LT_REPORT_HEAD, 5, section_head), 0);
    assert_int_equal(lt_report_section_add(LT_REPORT_HEAD, 1, section_empty), 0);
    lt_fallback_record("aten::test_sections", 1000, "t.py:1 in f");
    lt_counter_inc_name("test::sections", 1);
    lt_metrics_note("sections", "a note");

    char *rep = lt_metrics_report();
    assert_non_null(rep);
    /* lazy's header (order 0) first, then this HEAD section, then metrics */
    const char *hd = "lazytpu: f32 matrix products at matmul precision ";
    assert_true(strncmp(rep, hd, strlen(hd)) == 0);
    const char *head = strstr(rep, "TEST-HEAD-SECTION\n");
    const char *counter = strstr(rep, "Counter: test::sections\n");
    const char *note = strstr(rep, "== sections ==\na note\n");
    const char *fallback = strstr(rep, "== fallback ==\n");
    const char *mine = strstr(rep, "== test analysis ==\nline\n");
    assert_non_null(head);
    assert_non_null(counter);
    assert_non_null(note);
    assert_non_null(fallback);
    assert_non_null(mine);
    assert_true(head < counter && counter < note);
    /* ANALYSIS by order: fallback (10) before this one (15) */
    assert_true(note < fallback && fallback < mine);
    /* registered twice, emitted once */
    assert_null(strstr(mine + 1, "== test analysis =="));
    free(rep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_time),
        cmocka_unit_test(test_format_bytes),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_report_lines),
        cmocka_unit_test(test_report_order),
        cmocka_unit_test(test_ring_percentiles),
        cmocka_unit_test(test_notes),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_clear_all),
        cmocka_unit_test(test_now),
        cmocka_unit_test(test_report_sections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
