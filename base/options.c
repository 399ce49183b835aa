/*
 * base/options.c — the options table (base/options.def) and its parsers:
 * the only place that reads LAZYTPU_* variables (see options.h).
 */
#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "options.h"

#define OPT_STR_MAX 1024

static const lt_opt_info table[LT_OPT_COUNT] = {
#define LT_OPTION(id, name, alias, type, dflt, range, when, who, shown, doc) \
    {name, alias, LT_OPT_##type, dflt, range, LT_OPT_##when, LT_OPT_##who, shown, doc},
#include "options.def"
#undef LT_OPTION
};

/* A parsed value. */
typedef struct val {
    int64_t i;
    double d;
    const char *s;
} val;

LT_OPTIONS_LINKAGE const lt_opt_info *lt_opt_info_of(lt_opt o)
{
    return (int)o >= 0 && o < LT_OPT_COUNT ? &table[o] : NULL;
}

LT_OPTIONS_LINKAGE int lt_opt_find(const char *name)
{
    for (int i = 0; name && i < LT_OPT_COUNT; i++)
        if (strcmp(table[i].name, name) == 0) return i;
    return -1;
}

LT_OPTIONS_LINKAGE const char *lt_opt_type_name(lt_opt_type t)
{
    static const char *n[] = {"bool", "int", "size", "seconds", "string", "enum"};
    return (int)t >= 0 && t <= LT_OPT_ENUM ? n[t] : "?";
}

LT_OPTIONS_LINKAGE const char *lt_opt_when_name(lt_opt_when w)
{
    static const char *n[] = {"init", "process", "call"};
    return (int)w >= 0 && w <= LT_OPT_CALL ? n[w] : "?";
}

LT_OPTIONS_LINKAGE const char *lt_opt_who_name(lt_opt_who w)
{
    return w == LT_OPT_LAUNCHER ? "launcher" : "user";
}

/* ---------------------------------------------------------------- parsing */

/* "lo..hi" / "lo.." of an INT or SIZE row; 0 when it has none. */
static int range_of(const lt_opt_info *f, int64_t *lo, int64_t *hi)
{
    const char *dots = strstr(f->range, "..");
    if (!dots) return 0;
    *lo = strtoll(f->range, NULL, 10);
    *hi = dots[2] ? strtoll(dots + 2, NULL, 10) : INT64_MAX;
    return 1;
}

/* Index of word s in an ENUM row's "a|b|c", or -1. */
static int enum_index(const lt_opt_info *f, const char *s)
{
    size_t n = strlen(s);
    const char *w = f->range;
    for (int k = 0; *w; k++) {
        const char *bar = strchr(w, '|');
        size_t l = bar ? (size_t)(bar - w) : strlen(w);
        if (l == n && strncmp(w, s, n) == 0) return k;
        if (!bar) break;
        w = bar + 1;
    }
    return -1;
}

/* Bytes with an optional K/M/G/T suffix (binary), "KiB"/"KB" accepted;
 * -1 when malformed. */
static int64_t parse_bytes(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || v < 0) return -1;
    while (isspace((unsigned char)*end)) end++;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end != '\0' || v * mul >= 9.2e18) return -1;
    return (int64_t)(v * mul);
}

/* Parses s (non-empty) as row f says: 1 and *v, or 0 when malformed. */
static int parse(const lt_opt_info *f, const char *s, val *v)
{
    char *end;
    int64_t lo, hi;
    v->s = s;
    switch (f->type) {
    case LT_OPT_BOOL: {
        static const char *on[] = {"true", "yes", "on"}, *off[] = {"false", "no", "off"};
        for (int k = 0; k < 3; k++) {
            if (strcasecmp(s, on[k]) == 0) return v->i = 1, 1;
            if (strcasecmp(s, off[k]) == 0) return v->i = 0, 1;
        }
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (end == s || *end || errno) return 0;
        v->i = x != 0;
        return 1;
    }
    case LT_OPT_INT:
        errno = 0;
        v->i = strtoll(s, &end, 10);
        if (end == s || *end || errno) return 0;
        return !range_of(f, &lo, &hi) || (v->i >= lo && v->i <= hi);
    case LT_OPT_SIZE:
        v->i = parse_bytes(s);
        if (v->i < 0) return 0;
        return !range_of(f, &lo, &hi) || (v->i >= lo && v->i <= hi);
    case LT_OPT_SECONDS:
        errno = 0;
        v->d = strtod(s, &end);
        return end != s && !*end && !errno && v->d > 0;
    case LT_OPT_STRING:
        return strlen(s) < OPT_STR_MAX;
    case LT_OPT_ENUM:
        v->i = enum_index(f, s);
        return v->i >= 0;
    }
    return 0;
}

/* Reads row f from the environment: 1 set and valid (*v), 0 unset, -1
 * malformed; *v holds the default unless 1. *bad names the malformed
 * variable and value. */
static int read_env(const lt_opt_info *f, val *v, const char **bad_name, const char **bad_value)
{
    const char *names[2] = {f->name, f->alias};
    int state = 0, any_on = 0;
    for (int k = 0; k < 2 && names[k]; k++) {
        const char *s = getenv(names[k]);
        if (!s || !*s) continue;
        val x;
        if (!parse(f, s, &x)) {
            if (bad_name) *bad_name = names[k], *bad_value = s;
            state = -1;
            break;
        }
        if (f->type == LT_OPT_BOOL) {
            any_on |= (int)x.i;
            x.i = any_on;
        }
        if (state == 0 || f->type == LT_OPT_BOOL) *v = x;
        state = 1;
    }
    if (state == 1) return 1;
    *v = (val){0, 0, NULL};                 /* unset or malformed: the default */
    if (f->dflt) parse(f, f->dflt, v);
    return state;
}

/* ------------------------------------------------------------ the values */

/* INIT snapshots and PROCESS values. ready: 0 not read, else state + 2. */
typedef struct slot {
    atomic_int ready;
    _Atomic int64_t i;
    double d;
    const char *s;              /* buf, or the table's default literal */
    char buf[OPT_STR_MAX];
} slot;

static slot slots[LT_OPT_COUNT];

/* Stores v into slot o and publishes state st. */
static void slot_store(lt_opt o, int st, const val *v)
{
    slot *sl = &slots[o];
    atomic_store_explicit(&sl->i, v->i, memory_order_relaxed);
    sl->d = v->d;
    if (v->s && v->s != table[o].dflt) {
        snprintf(sl->buf, sizeof sl->buf, "%s", v->s);
        sl->s = sl->buf;
    } else {
        sl->s = v->s;
    }
    atomic_store_explicit(&sl->ready, st + 2, memory_order_release);
}

/* The value of o under its `when`: state returned, value in *v. */
static int get(lt_opt o, val *v)
{
    if ((int)o < 0 || o >= LT_OPT_COUNT) {
        *v = (val){0, 0, NULL};
        return 0;
    }
    const lt_opt_info *f = &table[o];
    if (f->when == LT_OPT_CALL) return read_env(f, v, NULL, NULL);
    slot *sl = &slots[o];
    int r = atomic_load_explicit(&sl->ready, memory_order_acquire);
    if (r == 0) {
        /* first access (before any lt_options_load for INIT): concurrent
         * first readers parse the same environment and agree */
        int st = read_env(f, v, NULL, NULL);
        slot_store(o, st, v);
        r = st + 2;
    }
    v->i = atomic_load_explicit(&sl->i, memory_order_relaxed);
    v->d = sl->d;
    v->s = sl->s;
    return r - 2;
}

LT_OPTIONS_LINKAGE int lt_opt_state(lt_opt o)
{
    val v;
    return get(o, &v);
}

LT_OPTIONS_LINKAGE int64_t lt_opt_int(lt_opt o)
{
    /* hot (a PROCESS flag per kernel): an INIT or PROCESS value already read */
    if ((int)o >= 0 && o < LT_OPT_COUNT && table[o].when != LT_OPT_CALL &&
        atomic_load_explicit(&slots[o].ready, memory_order_acquire))
        return atomic_load_explicit(&slots[o].i, memory_order_relaxed);
    val v;
    get(o, &v);
    return v.i;
}

LT_OPTIONS_LINKAGE double lt_opt_seconds(lt_opt o)
{
    val v;
    get(o, &v);
    return v.d;
}

LT_OPTIONS_LINKAGE const char *lt_opt_str(lt_opt o)
{
    val v;
    get(o, &v);
    return v.s;
}

#ifndef LT_OPTIONS_STANDALONE
/* What row f accepts, for messages: "an integer in 1..64", ... */
static void expected(const lt_opt_info *f, char *out, size_t n)
{
    int64_t lo, hi;
    int r = range_of(f, &lo, &hi);
    switch (f->type) {
    case LT_OPT_BOOL:
        snprintf(out, n, "0 or 1 (or true/false, yes/no, on/off)");
        return;
    case LT_OPT_INT:
        if (r && hi != INT64_MAX)
            snprintf(out, n, "an integer in %lld..%lld", (long long)lo, (long long)hi);
        else if (r)
            snprintf(out, n, "an integer >= %lld", (long long)lo);
        else
            snprintf(out, n, "an integer");
        return;
    case LT_OPT_SIZE:
        snprintf(out, n, "bytes with optional K/M/G suffix%s", r && lo > 0 ? ", not 0" : "");
        return;
    case LT_OPT_SECONDS:
        snprintf(out, n, "seconds > 0");
        return;
    case LT_OPT_STRING:
        snprintf(out, n, "at most %d characters", OPT_STR_MAX - 1);
        return;
    case LT_OPT_ENUM: {
        /* "a|b|c" -> "a, b or c" */
        size_t k = 0;
        int words = 1;
        for (const char *p = f->range; *p; p++) words += *p == '|';
        int w = 0;
        for (const char *p = f->range; *p && k + 8 < n; p++) {
            if (*p == '|') {
                w++;
                const char *sep = w == words - 1 ? " or " : ", ";
                k += (size_t)snprintf(out + k, n - k, "%s", sep);
            } else {
                out[k++] = *p;
            }
        }
        out[k < n ? k : n - 1] = 0;
        return;
    }
    }
    snprintf(out, n, "?");
}
#endif

LT_OPTIONS_LINKAGE lt_status lt_options_load(void)
{
    const char *bad = NULL, *bad_value = NULL;
    int bad_opt = -1;
    for (int o = 0; o < LT_OPT_COUNT; o++) {
        const lt_opt_info *f = &table[o];
        val v;
        const char *bn = NULL, *bv = NULL;
        int st = read_env(f, &v, &bn, &bv);
        if (f->when == LT_OPT_INIT) slot_store((lt_opt)o, st, &v);
        if (st < 0 && bad_opt < 0) {
            bad_opt = o;
            bad = bn;
            bad_value = bv;
        }
    }
    if (bad_opt < 0) return LT_OK;
#ifdef LT_OPTIONS_STANDALONE
    return LT_ERR_ARG;
#else
    char want[160];
    expected(&table[bad_opt], want, sizeof want);
    return lt_set_error(LT_ERR_ARG, "%s=%.200s: expected %s", bad, bad_value, want);
#endif
}
