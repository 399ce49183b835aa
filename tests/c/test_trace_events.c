/* tests/c/test_trace_events.c — LAZYTPU_TRACE: the file parses as JSON
 * (a small validating parser below), has the Chrome trace structure, and
 * holds compile / execute / transfer / sync events plus user events. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lazytpu.h"

/* ------------------------------------------- a tiny JSON validator */

typedef struct jp { const char *p; int depth; } jp;

static void ws(jp *j) { while (*j->p && isspace((unsigned char)*j->p)) j->p++; }
static int value(jp *j);

static int string(jp *j)
{
    if (*j->p != '"') return 0;
    j->p++;
    while (*j->p && *j->p != '"') {
        if ((unsigned char)*j->p < 0x20) return 0;
        if (*j->p == '\\') {
            j->p++;
            if (!strchr("\"\\/bfnrtu", *j->p) || !*j->p) return 0;
            if (*j->p == 'u') {
                for (int i = 1; i <= 4; i++) if (!isxdigit((unsigned char)j->p[i])) return 0;
                j->p += 4;
            }
        }
        j->p++;
    }
    if (*j->p != '"') return 0;
    j->p++;
    return 1;
}

static int number(jp *j)
{
    const char *s = j->p;
    if (*j->p == '-') j->p++;
    if (!isdigit((unsigned char)*j->p)) return 0;
    if (*j->p == '0' && isdigit((unsigned char)j->p[1])) return 0;
    while (isdigit((unsigned char)*j->p)) j->p++;
    if (*j->p == '.') {
        j->p++;
        if (!isdigit((unsigned char)*j->p)) return 0;
        while (isdigit((unsigned char)*j->p)) j->p++;
    }
    if (*j->p == 'e' || *j->p == 'E') {
        j->p++;
        if (*j->p == '+' || *j->p == '-') j->p++;
        if (!isdigit((unsigned char)*j->p)) return 0;
        while (isdigit((unsigned char)*j->p)) j->p++;
    }
    return j->p > s;
}

static int composite(jp *j, char open, char close, int members)
{
    if (*j->p != open || ++j->depth > 64) return 0;
    j->p++;
    ws(j);
    if (*j->p == close) { j->p++; j->depth--; return 1; }
    for (;;) {
        ws(j);
        if (members) {
            if (!string(j)) return 0;
            ws(j);
            if (*j->p++ != ':') return 0;
        }
        if (!value(j)) return 0;
        ws(j);
        if (*j->p == ',') { j->p++; continue; }
        if (*j->p == close) { j->p++; j->depth--; return 1; }
        return 0;
    }
}

static int value(jp *j)
{
    ws(j);
    switch (*j->p) {
    case '{': return composite(j, '{', '}', 1);
    case '[': return composite(j, '[', ']', 0);
    case '"': return string(j);
    case 't': if (!strncmp(j->p, "true", 4)) { j->p += 4; return 1; } return 0;
    case 'f': if (!strncmp(j->p, "false", 5)) { j->p += 5; return 1; } return 0;
    case 'n': if (!strncmp(j->p, "null", 4)) { j->p += 4; return 1; } return 0;
    default: return number(j);
    }
}

static int json_valid(const char *s)
{
    jp j = {s, 0};
    if (!value(&j)) return 0;
    ws(&j);
    return *j.p == 0;
}

static void test_validator_itself(void **st)
{
    (void)st;
    assert_true(json_valid("{\"a\": [1, 2.5, -3e2, \"x\\n\", true, null, {}]}"));
    assert_false(json_valid("{\"a\": [1, 2,]}"));
    assert_false(json_valid("{\"a\": 1"));
    assert_false(json_valid("{\"a\": 01}"));
    assert_false(json_valid("{\"a\": \"x\"} x"));
}

/* ------------------------------------------------------------- helpers */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

/* Number of events whose object contains both `a` and `b`. */
static int count_events(const char *doc, const char *a, const char *b)
{
    int n = 0;
    for (const char *p = doc; (p = strstr(p, a)); p++) {
        const char *start = p, *end = strchr(p, '}');
        while (start > doc && *start != '{') start--;
        if (!end) break;
        size_t len = (size_t)(end - start);
        char *obj = strndup(start, len);
        if (!b || strstr(obj, b)) n++;
        free(obj);
    }
    return n;
}

static void test_trace_file(void **st)
{
    (void)st;
    char path[64];
    snprintf(path, sizeof path, "/tmp/lt_trace_%d.json", (int)getpid());
    unlink(path);
    lt_shutdown();
    setenv("LAZYTPU_TRACE", path, 1);
    setenv("LAZYTPU_NUM_CORES", "2", 1);
    unsetenv("LAZYTPU_ORDINAL");
    unsetenv("LAZYTPU_WORLD_SIZE");
    assert_int_equal(lt_init(), LT_OK);
    assert_true(lt_trace_enabled());

    /* valid JSON right after opening */
    char *s = slurp(path);
    assert_non_null(s);
    assert_true(json_valid(s));
    free(s);

    float d[6] = {1, 2, 3, 4, 5, 6}, out[6];
    lt_shape sh = lt_shape_make(2, (int64_t[]){2, 3});
    lt_tensor *x, *y, *z;
    for (int step = 0; step < 3; step++) {
        assert_int_equal(lt_tensor_from_host(1, d, LT_F32, &sh, &x), LT_OK);
        assert_int_equal(lt_trace1(LT_OP_exp, x, NULL, &y), LT_OK);
        assert_int_equal(lt_trace2(LT_OP_add, x, y, NULL, &z), LT_OK);
        assert_int_equal(lt_sync_core(1, LT_SYNC_MARK_STEP, 0), LT_OK);
        assert_int_equal(lt_tensor_to_host(z, out, LT_F32), LT_OK);
        lt_tensor_release(x); lt_tensor_release(y); lt_tensor_release(z);
    }
    int64_t t0 = lt_now_ns();
    lt_trace_event("loader_wait", "loader", t0, 1500, LT_TRACE_TID_LOADER);
    lt_trace_event("all_reduce \"grads\"", "collective", t0 + 2000, 3000, 1);

    /* valid after an explicit flush, while still running */
    lt_trace_flush();
    s = slurp(path);
    assert_true(json_valid(s));
    assert_int_equal(count_events(s, "\"name\":\"compile\"", "\"ph\":\"X\""), 1);
    free(s);

    lt_shutdown();
    assert_false(lt_trace_enabled());
    lt_trace_event("after", "x", 0, 1, 0);   /* no-op once closed */
    s = slurp(path);
    assert_non_null(s);
    if (!json_valid(s)) fail_msg("trace is not valid JSON:\n%s", s);
    assert_true(strncmp(s, "{\"traceEvents\":[", 16) == 0);
    /* metadata */
    assert_int_equal(count_events(s, "\"name\":\"process_name\"", "\"lazytpu ordinal 0\""), 1);
    assert_int_equal(count_events(s, "\"name\":\"thread_name\"", "\"name\":\"host\""), 1);
    assert_int_equal(count_events(s, "\"name\":\"thread_name\"", "\"name\":\"core 1\""), 1);
    /* one compile (cache hits afterwards), three executes on core 1 */
    assert_int_equal(count_events(s, "\"name\":\"compile\"", "\"tid\":100"), 1);
    assert_int_equal(count_events(s, "\"name\":\"execute\"", "\"tid\":1,"), 3);
    assert_int_equal(count_events(s, "\"name\":\"transfer_to_device\"", "\"bytes\":24"), 3);
    assert_int_equal(count_events(s, "\"name\":\"transfer_from_device\"", "\"ph\":\"X\""), 3);
    assert_int_equal(count_events(s, "\"name\":\"sync\"", "\"cause\":\"mark_step\""), 3);
    assert_true(count_events(s, "\"name\":\"trace\"", "\"tid\":100") >= 2);
    assert_int_equal(count_events(s, "\"name\":\"loader_wait\"", "\"tid\":101"), 1);
    assert_int_equal(count_events(s, "\"name\":\"all_reduce \\\"grads\\\"\"", "\"dur\":3.000"), 1);
    assert_int_equal(count_events(s, "\"name\":\"after\"", NULL), 0);
    free(s);
    unlink(path);
    unsetenv("LAZYTPU_TRACE");
}

static void test_trace_off_by_default(void **st)
{
    (void)st;
    lt_shutdown();
    unsetenv("LAZYTPU_TRACE");
    assert_int_equal(lt_init(), LT_OK);
    assert_false(lt_trace_enabled());
    lt_trace_event("x", "y", 0, 1, 0);   /* harmless */
    lt_trace_flush();
    lt_shutdown();
}

static void test_trace_path_per_ordinal(void **st)
{
    (void)st;
    char base[64], want[64];
    snprintf(base, sizeof base, "/tmp/lt_trace_o_%d.json", (int)getpid());
    snprintf(want, sizeof want, "/tmp/lt_trace_o_%d.3.json", (int)getpid());
    unlink(want);
    lt_shutdown();
    setenv("LAZYTPU_TRACE", base, 1);
    setenv("LAZYTPU_ORDINAL", "3", 1);
    setenv("LAZYTPU_WORLD_SIZE", "4", 1);
    assert_int_equal(lt_init(), LT_OK);
    lt_trace_event("e", "c", 1000, 1000, LT_TRACE_TID_HOST);
    lt_shutdown();
    unsetenv("LAZYTPU_ORDINAL");
    unsetenv("LAZYTPU_WORLD_SIZE");
    unsetenv("LAZYTPU_TRACE");
    char *s = slurp(want);
    assert_non_null(s);
    assert_true(json_valid(s));
    assert_int_equal(count_events(s, "\"name\":\"e\"", "\"pid\":3"), 1);
    free(s);
    unlink(want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validator_itself),
        cmocka_unit_test(test_trace_file),
        cmocka_unit_test(test_trace_off_by_default),
        cmocka_unit_test(test_trace_path_per_ordinal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
