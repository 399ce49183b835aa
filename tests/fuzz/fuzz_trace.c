/*
 * tests/fuzz/fuzz_trace.c — libFuzzer harness for the C API.
 *
 * Each input is decoded into a small program of API calls on 2 cores:
 * host transfers (every dtype, 0-size and huge-but-empty shapes, NaN/Inf and
 * out-of-range index values), scalars, lt_trace of any op of lazy/ops.def
 * (and invalid op numbers) with 0..5 inputs picked from a pool of 16
 * tensors, attributes from small, negative and extreme values, assigns,
 * syncs of every cause (wait or not), waits, reads into exactly-sized host
 * buffers, graph dumps, metrics and diagnosis reports. At the end every
 * tensor is read, released and the cores are drained; the run must then
 * have no live tensor and no device byte left on either core (else abort:
 * a leak). Errors returned by the library are expected; crashes, hangs,
 * sanitizer reports and leaks are findings.
 *
 * Build modes:
 *   -DLAZYTPU_FUZZ=ON (clang, make fuzz-c): fuzz_trace, linked with
 *     -fsanitize=fuzzer,address,undefined.
 *   every build: fuzz_trace_replay (LT_FUZZ_REPLAY): a plain main() that
 *     runs each file of the given files/directories once; ctest runs it
 *     over tests/fuzz/corpus/ (the committed regression inputs).
 *
 * Input format (a byte stream; missing bytes read as 0): repeated
 * [action byte][arguments...], see run_action.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lazytpu.h"
#include "device.h"      /* lt_core_bytes_in_use: leak check */

#define POOL 16
#define MAX_HOST_NUMEL 4096      /* host data generated per transfer */
#define MAX_KEEP_NUMEL 65536     /* larger traced results are dropped at once */
#define MAX_ACTIONS 400

/* ------------------------------------------------------------ the reader */

typedef struct rd {
    const uint8_t *p;
    size_t n, i;
} rd;

static unsigned u8(rd *r) { return r->i < r->n ? r->p[r->i++] : 0; }
static int more(const rd *r) { return r->i < r->n; }

static uint64_t u64(rd *r)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++) v = v << 8 | u8(r);
    return v;
}

/* Attribute-like integers: mostly small, sometimes negative or extreme. */
static int64_t any_int(rd *r)
{
    unsigned b = u8(r);
    switch (b >> 5) {
    case 0: case 1: case 2: return b & 7;                /* 0..7 */
    case 3: return -(int64_t)(b & 3) - 1;                 /* -1..-4 */
    case 4: return 8 + (b & 31) * 2;                      /* 8..70 */
    case 5: {
        static const int64_t ext[8] = {INT64_MIN, INT64_MAX, (int64_t)1 << 31,
                                       (int64_t)1 << 32, -((int64_t)1 << 40),
                                       (int64_t)1 << 62, -100, 1000};
        return ext[b & 7];
    }
    case 6: return (int64_t)u64(r);
    default: return b & 3;
    }
}

static double any_double(rd *r)
{
    static const double v[16] = {0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -7.25, 1e30,
                                 -1e30, NAN, INFINITY, -INFINITY, 1e-40, 4.0,
                                 5.0, 100.0};
    unsigned b = u8(r);
    if (b < 240) return v[b & 15];
    uint64_t bits = u64(r);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static lt_dtype any_dtype(rd *r)
{
    unsigned b = u8(r);
    if (b == 255) return (lt_dtype)LT_NUM_DTYPES;        /* invalid */
    if (b == 254) return (lt_dtype)-1;
    return (lt_dtype)(b % LT_NUM_DTYPES);
}

static int any_core(rd *r)
{
    unsigned b = u8(r);
    if (b == 255) return 2 + (int)(u8(r) % 80);          /* invalid */
    if (b == 254) return -1;
    return (int)(b & 1);
}

/* Product of the dims, or -1 when it does not fit (or a dim is negative). */
static int64_t safe_numel(const lt_shape *s)
{
    if (s->ndim < 0 || s->ndim > LT_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        if (s->dims[d] < 0) return -1;
    for (int d = 0; d < s->ndim; d++)
        if (s->dims[d] == 0) return 0;
    for (int d = 0; d < s->ndim; d++) {
        if (n > INT64_MAX / s->dims[d]) return -1;
        n *= s->dims[d];
    }
    return n;
}

static lt_shape any_shape(rd *r)
{
    lt_shape s;
    memset(&s, 0, sizeof s);
    unsigned b = u8(r);
    s.ndim = (int)(b % 5);
    if (b == 255) s.ndim = LT_MAX_DIMS;
    if (b == 254) s.ndim = LT_MAX_DIMS + 1;                /* invalid */
    if (b == 253) s.ndim = -1;
    for (int d = 0; d < s.ndim && d < LT_MAX_DIMS; d++) {
        unsigned c = u8(r);
        static const int64_t small[8] = {0, 1, 2, 3, 4, 5, 7, 8};
        if (c < 248) s.dims[d] = small[c & 7];
        else if (c == 248) s.dims[d] = -1;
        else {                                            /* big */
            static const int64_t big[7] = {(int64_t)1 << 20, (int64_t)1 << 31,
                                           (int64_t)1 << 32, (int64_t)1 << 40,
                                           (int64_t)1 << 62, INT64_MAX, 3037000500};
            s.dims[d] = big[c - 249];
        }
    }
    return s;
}

/* -------------------------------------------------------------- the state */

typedef struct fz {
    lt_tensor *pool[POOL];
    rd r;
} fz;

static void put(fz *f, int slot, lt_tensor *t)
{
    lt_tensor_release(f->pool[slot]);
    f->pool[slot] = t;
}

static lt_tensor *pick(fz *f) { return f->pool[u8(&f->r) % POOL]; }

/* Host values of dtype dt: table values chosen by the input. */
static void fill_host(rd *r, void *buf, lt_dtype dt, int64_t n)
{
    static const int64_t iv[12] = {0, 1, 2, 3, -1, 5, 7, 100, INT64_MAX,
                                   INT64_MIN, (int64_t)1 << 40, -((int64_t)1 << 31)};
    unsigned mode = u8(r);
    for (int64_t k = 0; k < n; k++) {
        unsigned b = (mode & 1) ? u8(r) : (unsigned)(k * 7 + mode);
        double d;
        switch (dt) {
        case LT_F32: ((float *)buf)[k] = (float)(b < 240 ? (double)((int)b % 9 - 4) * 0.5
                                                         : (b & 1 ? NAN : INFINITY)); break;
        case LT_BF16: ((uint16_t *)buf)[k] = (uint16_t)(0x3f80 + (b & 0x7f)); break;
        case LT_F64:
            d = b < 250 ? (double)((int)b % 11 - 5) : (b & 1 ? -INFINITY : NAN);
            ((double *)buf)[k] = d;
            break;
        case LT_I64: ((int64_t *)buf)[k] = iv[b % 12]; break;
        case LT_I32: ((int32_t *)buf)[k] = (int32_t)iv[b % 8]; break;
        case LT_BOOL: ((uint8_t *)buf)[k] = (uint8_t)(b & 1); break;
        default: break;
        }
    }
}

static void act_from_host(fz *f)
{
    rd *r = &f->r;
    int slot = (int)(u8(r) % POOL), core = any_core(r);
    lt_dtype dt = any_dtype(r);
    lt_shape s = any_shape(r);
    int64_t n = safe_numel(&s);
    size_t es = lt_dtype_size(dt);
    void *buf = NULL;
    if (n > 0 && n <= MAX_HOST_NUMEL && es) {
        buf = malloc((size_t)n * es);
        if (!buf) return;
        fill_host(r, buf, dt, n);
    } else if (n > 0) {
        return;                         /* no host data that large */
    }
    lt_tensor *t = NULL;
    lt_status st = lt_tensor_from_host(core, buf, dt, &s, &t);
    if (st == LT_OK) put(f, slot, t);
    else if (t) abort();                /* failure must create nothing */
    free(buf);
}

static void act_scalar(fz *f)
{
    rd *r = &f->r;
    int slot = (int)(u8(r) % POOL), core = any_core(r);
    double v = any_double(r);
    lt_dtype dt = any_dtype(r);
    int wrapped = (int)(u8(r) & 1);
    lt_tensor *t = NULL;
    if (lt_scalar(core, v, dt, wrapped, &t) == LT_OK) put(f, slot, t);
    else if (t) abort();
}

static void act_trace(fz *f)
{
    rd *r = &f->r;
    unsigned ob = u8(r);
    lt_op op = (lt_op)(ob % (LT_NUM_OPS + 2));          /* + 2 invalid */
    int ar = (unsigned)op < LT_NUM_OPS ? lt_op_arity(op) : 2;
    int n = ar >= 0 ? ar : 1 + (int)(u8(r) % 5);
    unsigned nb = u8(r);
    if (nb == 255) n++;
    else if (nb == 254 && n > 0) n--;
    lt_tensor *in[8];
    for (int k = 0; k < n && k < 8; k++) in[k] = pick(f);
    lt_attrs a;
    memset(&a, 0, sizeof a);
    unsigned ab = u8(r);
    int with_attrs = ab != 0;
    a.n = (int)(ab % 10);
    if (ab == 255) a.n = LT_MAX_ATTRS;
    if (ab == 254) a.n = LT_MAX_ATTRS + 1;               /* invalid */
    if (ab == 253) a.n = -1;
    for (int k = 0; k < a.n && k < LT_MAX_ATTRS; k++) a.i[k] = any_int(r);
    a.f[0] = any_double(r);
    a.f[1] = any_double(r);
    int slot = (int)(u8(r) % POOL);
    lt_tensor *t = NULL;
    lt_status st = lt_trace(op, n ? in : NULL, n, with_attrs ? &a : NULL, &t);
    if (st != LT_OK) {
        if (t) abort();
        return;
    }
    if (!t) abort();
    int64_t numel = safe_numel(lt_tensor_shape(t));
    if (numel < 0) abort();                              /* a shape rule let it through */
    if (numel > MAX_KEEP_NUMEL) {                       /* valid but too big to run */
        lt_tensor_release(t);
        return;
    }
    put(f, slot, t);
}

static const lt_sync_cause causes[LT_NUM_SYNC_CAUSES] = {
    LT_SYNC_MARK_STEP, LT_SYNC_OPTIMIZER_STEP, LT_SYNC_LOADER_STEP,
    LT_SYNC_VALUE_READ, LT_SYNC_SIZE_LIMIT, LT_SYNC_EXPLICIT, LT_SYNC_DYNAMIC_SHAPE};

static void act_sync(fz *f)
{
    rd *r = &f->r;
    unsigned b = u8(r);
    lt_tensor *list[4];
    int n = (int)(b & 3) + 1, k = 0;
    for (int i = 0; i < n; i++) {
        lt_tensor *t = pick(f);
        if (t) list[k++] = t;
    }
    lt_sync(list, k, causes[(b >> 2) % LT_NUM_SYNC_CAUSES], (int)((b >> 5) & 1));
}

static void act_sync_core(fz *f)
{
    rd *r = &f->r;
    unsigned b = u8(r);
    lt_sync_core(any_core(r), causes[(b >> 1) % LT_NUM_SYNC_CAUSES], (int)(b & 1));
}

static void act_read(fz *f)
{
    rd *r = &f->r;
    lt_tensor *t = pick(f);
    lt_dtype dt = any_dtype(r);
    if (!t) {
        if (lt_tensor_to_host(NULL, NULL, LT_F32) == LT_OK) abort();
        return;
    }
    int64_t n = safe_numel(lt_tensor_shape(t));
    size_t es = lt_dtype_size(dt);
    if (n < 0 || n > MAX_KEEP_NUMEL) abort();
    void *buf = n > 0 ? malloc((size_t)n * (es ? es : 1)) : NULL;   /* exact size */
    lt_tensor_to_host(t, buf, dt);
    free(buf);
}

static void act_assign(fz *f)
{
    lt_tensor *d = pick(f), *s = pick(f);
    lt_tensor_assign(d, s);
}

static void act_misc(fz *f)
{
    rd *r = &f->r;
    unsigned b = u8(r);
    switch (b % 10) {
    case 0: put(f, (int)(u8(r) % POOL), NULL); break;
    case 1: lt_wait(any_core(r)); break;
    case 2: case 3: {
        lt_tensor *list[3];
        int k = 0;
        for (int i = 0; i < 3; i++) {
            lt_tensor *t = pick(f);
            if (t) list[k++] = t;
        }
        char *s = (b % 10) == 2 ? lt_graph_text(list, k) : lt_graph_dot(list, k);
        free(s);
        break;
    }
    case 4: {
        char frame[320];
        size_t len = u8(r) + (size_t)(u8(r) & 63);
        for (size_t i = 0; i < len && i + 1 < sizeof frame; i++)
            frame[i] = (char)(' ' + u8(r) % 90);
        frame[len < sizeof frame ? len : sizeof frame - 1] = 0;
        lt_set_caller(len ? frame : NULL);
        break;
    }
    case 5: {
        static const char *ops[4] = {"aten::nonzero", "aten::cumsum", "aten::unique", "aten::x"};
        lt_fallback_record(ops[u8(r) & 3], (int64_t)any_int(r), (u8(r) & 1) ? "f.py:1 in g" : NULL);
        break;
    }
    case 6: {
        char *s = (u8(r) & 1) ? lt_metrics_report() : lt_metrics_json();
        free(s);
        s = lt_fallback_report();
        free(s);
        s = lt_diagnose_take_warnings();
        free(s);
        break;
    }
    case 7: {
        lt_tensor *t = pick(f);
        if (t) {
            lt_tensor_retain(t);
            (void)lt_tensor_is_pending(t);
            (void)lt_tensor_storage_dtype(t);
            lt_tensor_release(t);
        }
        break;
    }
    case 8: {
        /* move a tensor to another slot (aliases in the pool are fine) */
        lt_tensor *t = pick(f);
        put(f, (int)(u8(r) % POOL), lt_tensor_retain(t));
        break;
    }
    default:
        lt_set_caller(NULL);
        break;
    }
}

static void run_action(fz *f)
{
    switch (u8(&f->r) % 12) {
    case 0: case 1: act_from_host(f); break;
    case 2: act_scalar(f); break;
    case 3: case 4: case 5: case 6: act_trace(f); break;
    case 7: act_sync(f); break;
    case 8: act_sync_core(f); break;
    case 9: act_read(f); break;
    case 10: act_assign(f); break;
    default: act_misc(f); break;
    }
}

/* ------------------------------------------------------------ entry points */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* knobs for separate campaigns: LT_FUZZ_THREADS (kernel threads per
     * core, default 1), LT_FUZZ_BF16=1 (f32 stored as bf16) */
    const char *th = getenv("LT_FUZZ_THREADS");
    setenv("LAZYTPU_NUM_CORES", "2", 1);
    setenv("LAZYTPU_HBM_BYTES", "256M", 1);
    setenv("LAZYTPU_OMP_THREADS", th && *th ? th : "1", 1);
    const char *bf = getenv("LT_FUZZ_BF16");
    if (bf && *bf == '1') setenv("LAZYTPU_USE_BF16", "1", 1);
    else unsetenv("LAZYTPU_USE_BF16");
    setenv("LAZYTPU_GRAPH_LIMIT", "48", 1);
    setenv("LAZYTPU_COMPILE_CACHE_SIZE", "64", 1);
    setenv("LAZYTPU_MAX_INFLIGHT", "2", 1);
    setenv("LAZYTPU_BUFFER_CACHE_BYTES", "0", 1);   /* every free visible to ASan */
    setenv("LAZYTPU_SAVE_GRAPHS", "/dev/null", 1);
    unsetenv("LAZYTPU_SHM_NAME");
    unsetenv("LAZYTPU_WORLD_SIZE");
    if (lt_init() != LT_OK) {
        fprintf(stderr, "fuzz_trace: lt_init: %s\n", lt_last_error());
        abort();
    }
    lt_debug_set(2);                              /* diagnosis on, quiet */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f;
    memset(&f, 0, sizeof f);
    f.r.p = data;
    f.r.n = size;
    for (int a = 0; a < MAX_ACTIONS && more(&f.r); a++) run_action(&f);
    /* the end of every program: step syncs, every tensor read, released */
    lt_sync_core(0, LT_SYNC_MARK_STEP, 0);
    lt_sync_core(1, LT_SYNC_MARK_STEP, 1);
    for (int k = 0; k < POOL; k++) {
        lt_tensor *t = f.pool[k];
        if (!t) continue;
        int64_t n = safe_numel(lt_tensor_shape(t));
        if (n < 0 || n > MAX_KEEP_NUMEL) abort();
        double *buf = n > 0 ? malloc((size_t)n * sizeof *buf) : NULL;
        lt_tensor_to_host(t, buf, LT_F64);
        free(buf);
        put(&f, k, NULL);
    }
    lt_set_caller(NULL);
    for (int k = 0; k < 4 && lt_wait(-1) != LT_OK; k++) {}
    if (lt_wait(-1) != LT_OK) {
        fprintf(stderr, "fuzz_trace: waits keep reporting: %s\n", lt_last_error());
        abort();
    }
    for (int c = 0; c < 2; c++) {
        if (lt_live_tensors(c) != 0) {
            fprintf(stderr, "fuzz_trace: %lld tensors left on core %d\n",
                    (long long)lt_live_tensors(c), c);
            abort();
        }
        if (lt_core_bytes_in_use(c) != 0) {
            fprintf(stderr, "fuzz_trace: %zu device bytes left on core %d\n",
                    lt_core_bytes_in_use(c), c);
            abort();
        }
    }
    free(lt_diagnose_take_warnings());
    return 0;
}

#ifdef LT_FUZZ_REPLAY
/* Replay: every file named, or every file of every directory named (in
 * name order), once. Exit status 0 when all ran. */
#include <dirent.h>
#include <sys/stat.h>

static int replay_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        perror(path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) abort();
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, fp);
        if (got == 0) break;
        n += got;
    }
    fclose(fp);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    int files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            bad++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad += replay_file(argv[i]);
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            perror(argv[i]);
            bad++;
            continue;
        }
        char **names = NULL;
        size_t nn = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            if (nn == cap) {
                cap = cap ? 2 * cap : 64;
                char **nb = realloc(names, cap * sizeof *nb);
                if (!nb) abort();
                names = nb;
            }
            names[nn++] = strdup(e->d_name);
        }
        closedir(d);
        qsort(names, nn, sizeof *names, cmp_names);
        for (size_t k = 0; k < nn; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
            bad += replay_file(path);
            files++;
            free(names[k]);
        }
        free(names);
    }
    lt_shutdown();
    printf("fuzz_trace_replay: %d inputs replayed, %d unreadable\n", files, bad);
    return bad ? 1 : 0;
}
#endif
