/* tests/c/test_options.c — the options table (base/options.def): parsing of
 * each type, when each class is read, errors naming the variable, and the
 * table's own consistency. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "lazytpu.h"
#include "options.h"

static void unset_all(void)
{
    for (int o = 0; o < LT_OPT_COUNT; o++) {
        const lt_opt_info *f = lt_opt_info_of((lt_opt)o);
        unsetenv(f->name);
        if (f->alias) unsetenv(f->alias);
    }
}

/* Every row: a LAZYTPU_ name, unique, findable; its default (when it has
 * one) is a valid value of its own type and range. */
static void test_table(void **state)
{
    unset_all();
    for (int o = 0; o < LT_OPT_COUNT; o++) {
        const lt_opt_info *f = lt_opt_info_of((lt_opt)o);
        assert_non_null(f->name);
        assert_int_equal(strncmp(f->name, "LAZYTPU_", 8), 0);
        assert_int_equal(lt_opt_find(f->name), o);
        assert_non_null(f->doc);
        assert_true(strlen(f->doc) > 10);
        assert_true(f->type != LT_OPT_ENUM || strchr(f->range, '|'));
        if (f->dflt && f->when != LT_OPT_PROCESS) setenv(f->name, f->dflt, 1);
    }
    assert_int_equal(lt_opt_find("LAZYTPU_NO_SUCH"), -1);
    assert_null(lt_opt_info_of(LT_OPT_COUNT));
    assert_int_equal(lt_options_load(), LT_OK);
    for (int o = 0; o < LT_OPT_COUNT; o++) {
        const lt_opt_info *f = lt_opt_info_of((lt_opt)o);
        if (f->dflt && f->when != LT_OPT_PROCESS) assert_int_equal(lt_opt_state((lt_opt)o), 1);
    }
    unset_all();
    assert_int_equal(lt_options_load(), LT_OK);
    assert_int_equal(lt_opt_state(LT_OPT_GRAPH_LIMIT), 0);
}

/* INIT: a snapshot, changed only by lt_options_load. */
static void test_init_snapshot(void **state)
{
    unset_all();
    setenv("LAZYTPU_GRAPH_LIMIT", "77", 1);
    assert_int_equal(lt_options_load(), LT_OK);
    assert_int_equal(lt_opt_int(LT_OPT_GRAPH_LIMIT), 77);
    setenv("LAZYTPU_GRAPH_LIMIT", "88", 1);
    assert_int_equal(lt_opt_int(LT_OPT_GRAPH_LIMIT), 77);
    assert_int_equal(lt_options_load(), LT_OK);
    assert_int_equal(lt_opt_int(LT_OPT_GRAPH_LIMIT), 88);
    setenv("LAZYTPU_SAVE_GRAPHS", "/tmp/x.dot", 1);
    assert_int_equal(lt_options_load(), LT_OK);
    unsetenv("LAZYTPU_SAVE_GRAPHS");
    assert_string_equal(lt_opt_str(LT_OPT_SAVE_GRAPHS), "/tmp/x.dot");   /* a copy */
    unset_all();
    assert_int_equal(lt_options_load(), LT_OK);
    assert_int_equal(lt_opt_int(LT_OPT_GRAPH_LIMIT), 200000);
    assert_null(lt_opt_str(LT_OPT_SAVE_GRAPHS));
}

/* CALL: read at every access; malformed gives the default. */
static void test_call_live(void **state)
{
    unset_all();
    assert_string_equal(lt_opt_str(LT_OPT_CONV_ALGO), "auto");
    assert_int_equal(lt_opt_state(LT_OPT_CONV_ALGO), 0);
    setenv("LAZYTPU_CONV_ALGO", "winograd", 1);
    assert_string_equal(lt_opt_str(LT_OPT_CONV_ALGO), "winograd");
    assert_int_equal(lt_opt_int(LT_OPT_CONV_ALGO), 1);
    setenv("LAZYTPU_CONV_ALGO", "im2col", 1);
    assert_string_equal(lt_opt_str(LT_OPT_CONV_ALGO), "im2col");
    setenv("LAZYTPU_CONV_ALGO", "fast", 1);
    assert_int_equal(lt_opt_state(LT_OPT_CONV_ALGO), -1);
    assert_string_equal(lt_opt_str(LT_OPT_CONV_ALGO), "auto");
    setenv("LAZYTPU_CONV_ALGO", "", 1);                 /* empty = unset */
    assert_int_equal(lt_opt_state(LT_OPT_CONV_ALGO), 0);
    unsetenv("LAZYTPU_CONV_ALGO");
}

/* PROCESS: the first access decides for the process. */
static void test_process_fixed(void **state)
{
    setenv("LAZYTPU_PROFILE", "yes", 1);
    assert_int_equal(lt_opt_int(LT_OPT_PROFILE), 1);
    setenv("LAZYTPU_PROFILE", "0", 1);
    assert_int_equal(lt_options_load(), LT_OK);
    assert_int_equal(lt_opt_int(LT_OPT_PROFILE), 1);
    unsetenv("LAZYTPU_PROFILE");
}

/* Each type's parser, through CALL options (read at once). */
static void test_types(void **state)
{
    unset_all();
    static const struct { const char *s; int64_t want; } sizes[] = {
        {"4096", 4096}, {"4K", 4096}, {"1.5K", 1536}, {"16GiB", (int64_t)16 << 30},
        {"512MB", (int64_t)512 << 20}, {"2 M", (int64_t)2 << 20}, {"0", 0},
    };
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        setenv("LAZYTPU_SHM_BYTES", sizes[k].s, 1);
        assert_int_equal(lt_opt_state(LT_OPT_SHM_BYTES), 1);
        assert_int_equal(lt_opt_int(LT_OPT_SHM_BYTES), sizes[k].want);
    }
    setenv("LAZYTPU_SHM_BYTES", "lots", 1);
    assert_int_equal(lt_opt_state(LT_OPT_SHM_BYTES), -1);
    assert_int_equal(lt_opt_int(LT_OPT_SHM_BYTES), (int64_t)256 << 20);
    unsetenv("LAZYTPU_SHM_BYTES");

    assert_true(lt_opt_seconds(LT_OPT_COLLECTIVE_TIMEOUT) == 300.0);
    setenv("LAZYTPU_COLLECTIVE_TIMEOUT", "0.5", 1);
    assert_true(lt_opt_seconds(LT_OPT_COLLECTIVE_TIMEOUT) == 0.5);
    setenv("LAZYTPU_COLLECTIVE_TIMEOUT", "0", 1);
    assert_int_equal(lt_opt_state(LT_OPT_COLLECTIVE_TIMEOUT), -1);
    assert_true(lt_opt_seconds(LT_OPT_COLLECTIVE_TIMEOUT) == 300.0);
    unsetenv("LAZYTPU_COLLECTIVE_TIMEOUT");

    static const struct { const char *s; int want; } bools[] = {
        {"1", 1}, {"0", 0}, {"true", 1}, {"FALSE", 0}, {"yes", 1}, {"off", 0}, {"2", 1},
    };
    for (size_t k = 0; k < sizeof bools / sizeof *bools; k++) {
        setenv("LAZYTPU_REPLAY_DEBUG", bools[k].s, 1);
        assert_int_equal(lt_opt_int(LT_OPT_REPLAY_DEBUG), bools[k].want);
    }
    setenv("LAZYTPU_REPLAY_DEBUG", "maybe", 1);
    assert_int_equal(lt_opt_state(LT_OPT_REPLAY_DEBUG), -1);
    unsetenv("LAZYTPU_REPLAY_DEBUG");

    /* a bool with torch_xla's alias: on when either is on */
    setenv("XLA_USE_BF16", "1", 1);
    assert_int_equal(lt_opt_int(LT_OPT_USE_BF16), 1);
    setenv("LAZYTPU_USE_BF16", "0", 1);
    assert_int_equal(lt_opt_int(LT_OPT_USE_BF16), 1);
    unsetenv("XLA_USE_BF16");
    assert_int_equal(lt_opt_int(LT_OPT_USE_BF16), 0);
    unsetenv("LAZYTPU_USE_BF16");

    /* ints: range checked, no trailing junk */
    setenv("LAZYTPU_WORLD_SIZE", "4", 1);
    assert_int_equal(lt_opt_int(LT_OPT_WORLD_SIZE), 4);
    setenv("LAZYTPU_WORLD_SIZE", "two", 1);
    assert_int_equal(lt_opt_state(LT_OPT_WORLD_SIZE), -1);
    assert_int_equal(lt_opt_int(LT_OPT_WORLD_SIZE), 1);
    setenv("LAZYTPU_WORLD_SIZE", "4x", 1);
    assert_int_equal(lt_opt_state(LT_OPT_WORLD_SIZE), -1);
    setenv("LAZYTPU_WORLD_SIZE", "0", 1);
    assert_int_equal(lt_opt_state(LT_OPT_WORLD_SIZE), -1);
    unsetenv("LAZYTPU_WORLD_SIZE");
    assert_null(lt_opt_str(LT_OPT_SHM_NAME));
    assert_string_equal(lt_opt_str(LT_OPT_MPIRUN), "mpirun");
}

/* lt_options_load refuses a malformed variable of any class, naming it. */
static void expect_error(const char *name, const char *value, const char *msg)
{
    unset_all();
    setenv(name, value, 1);
    assert_int_equal(lt_options_load(), LT_ERR_ARG);
    if (!strstr(lt_last_error(), msg)) fail_msg("got '%s', want '%s'", lt_last_error(), msg);
    unsetenv(name);
}

static void test_errors_name_the_variable(void **state)
{
    expect_error("LAZYTPU_NUM_CORES", "0", "LAZYTPU_NUM_CORES=0: expected an integer in 1..64");
    expect_error("LAZYTPU_NUM_CORES", "65", "LAZYTPU_NUM_CORES=65: expected an integer in 1..64");
    expect_error("LAZYTPU_MATMUL_PRECISION", "bf16",
                 "LAZYTPU_MATMUL_PRECISION=bf16: expected f32, default, high or highest");
    expect_error("LAZYTPU_HBM_BYTES", "lots",
                 "LAZYTPU_HBM_BYTES=lots: expected bytes with optional K/M/G suffix");
    expect_error("LAZYTPU_HBM_BYTES", "0", "LAZYTPU_HBM_BYTES=0: expected bytes");
    expect_error("LAZYTPU_GRAPH_LIMIT", "abc", "LAZYTPU_GRAPH_LIMIT=abc: expected an integer >= 1");
    expect_error("LAZYTPU_CONV_ALGO", "fast",
                 "LAZYTPU_CONV_ALGO=fast: expected auto, winograd or im2col");
    expect_error("PT_XLA_DEBUG", "maybe", "PT_XLA_DEBUG=maybe: expected 0 or 1");
    expect_error("LAZYTPU_COLLECTIVE_TIMEOUT", "soon",
                 "LAZYTPU_COLLECTIVE_TIMEOUT=soon: expected seconds > 0");
    /* the snapshot keeps the default for the malformed one */
    unset_all();
    setenv("LAZYTPU_GRAPH_LIMIT", "abc", 1);
    assert_int_equal(lt_options_load(), LT_ERR_ARG);
    assert_int_equal(lt_opt_int(LT_OPT_GRAPH_LIMIT), 200000);
    unset_all();
    assert_int_equal(lt_options_load(), LT_OK);
}

/* lt_init refuses it too (the core does not start). */
static void test_init_refuses(void **state)
{
    lt_shutdown();
    unset_all();
    setenv("LAZYTPU_NUM_CORES", "1", 1);
    setenv("LAZYTPU_MAX_INFLIGHT", "none", 1);
    assert_int_equal(lt_init(), LT_ERR_ARG);
    assert_non_null(strstr(lt_last_error(), "LAZYTPU_MAX_INFLIGHT=none"));
    unsetenv("LAZYTPU_MAX_INFLIGHT");
    assert_int_equal(lt_init(), LT_OK);
    lt_shutdown();
    unsetenv("LAZYTPU_NUM_CORES");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_init_snapshot),
        cmocka_unit_test(test_call_live),
        cmocka_unit_test(test_process_fixed),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_errors_name_the_variable),
        cmocka_unit_test(test_init_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
