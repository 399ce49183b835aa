/*
 * tests/c/support_diff.h — the harness of the differential tests
 * (test_ops_diff.c, test_ops_chains.c): random inputs, upload in several
 * layouts, run an op through the public API and through support_ref.c,
 * compare with tolerances, per-family statistics. Names are prefixed dt_.
 */
#ifndef LT_SUPPORT_DIFF_H
#define LT_SUPPORT_DIFF_H

#include <stdarg.h>
#include <string.h>
#include "lazytpu.h"
#include "support_ref.h"

/* Input generators. */
enum { G_NORM, G_POS, G_UNIT, G_NZ, G_TIES, G_BOOL, G_NEAR1, G_NAN, G_IDX, G_POSINT, G_VALS };
/* Input kinds: tensor, wrapped Python number (lt_scalar), ordinary 0-dim tensor. */
enum { K_TENSOR, K_WRAPPED, K_ZERODIM };
/* Input modes: how a tensor input reaches the op (see dt_make_input). */
enum { M_DATA, M_PENDING, M_TRANSPOSED, M_STRIDED, N_MODES };
#define NKINDS 19

typedef struct in_spec {
    int kind;
    lt_shape shape;
    lt_dtype dt;
    int gen;
    int64_t hi;            /* G_IDX: values in [0, hi) */
    double value;          /* K_WRAPPED / K_ZERODIM with gen G_VALS */
    const double *vals;    /* G_VALS for tensors */
} in_spec;

typedef struct tol_t { double rtol, atol; } tol_t;
static const tol_t TOL = {1e-5, 1e-6};
static const tol_t TOL_TR = {1e-4, 1e-5};     /* transcendental */

typedef struct dev_in {
    ref_array r;
    lt_tensor *t;
} dev_in;

typedef struct dt_family { int cases, failed, refused; } dt_family;

extern uint64_t dt_rng_state;
extern dt_family dt_fam[NKINDS];
extern int dt_op_cases[LT_NUM_OPS];
extern int dt_bf16_mode;               /* set in a LAZYTPU_USE_BF16=1 process */
extern const char *const dt_op_names[];
extern const lt_op_kind dt_op_kind[];
extern const char *const dt_kind_names[];
extern const char *const dt_mode_names[];

uint64_t dt_rng_u64(void);
double dt_rng_unit(void);
double dt_rng_range(double lo, double hi);
int64_t dt_rng_int(int64_t lo, int64_t hi);

int dt_is_fl(lt_dtype d);
int64_t dt_numel(const lt_shape *s);
void dt_shape_str(const lt_shape *s, char *buf, size_t cap);
const char *dt_dtn(lt_dtype d);
/* Value rounded to what the device stores for dt (bf16 mode: f32 -> bf16). */
double dt_store_round(double v, lt_dtype dt);
/* Prints "FAIL <desc>: <message>" (the first 60 failures of the process). */
void dt_report_fail(const char *desc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dt_describe(char *buf, size_t cap, lt_op op, const lt_attrs *at, const in_spec *sp, int n,
                 int mode);
/* 0 if got matches want within tol (NaN == NaN), else reports the first
 * mismatching element and returns 1. */
int dt_compare(const char *desc, const ref_array *want, const double *got, tol_t tol);
/* Materialises a spec: reference values in d->r and a device tensor d->t
 * reaching the op in `mode`. 0, or -1 with a message in err. */
int dt_make_input(const in_spec *sp, int mode, dev_in *d, char *err, size_t cap);
void dt_dev_free(dev_in *d, int n);
/* Runs op on the specs through the API and the reference and compares;
 * counts the case in its family. Returns 1 on failure. */
int dt_run_case(lt_op op, const lt_attrs *at, const in_spec *sp, int n, tol_t tol, int mode);
/* dt_run_case in every mode. */
void dt_run2(lt_op op, lt_attrs at, const in_spec *sp, int n, tol_t tol);
/* Reads a tensor as doubles (malloc'd into *out; free it). 0 or -1. */
int dt_read_tensor(lt_tensor *t, double **out);
/* Prints the per-family table; returns the number of failed cases. */
int dt_print_summary(void);
/* The cases of an LT_KIND_LINALG op (support_diff_linalg.c): identity checks
 * of its packed results over batches and views, counted in its family. */
void dt_cases_linalg(lt_op op);
/* The cases of random ops (distribution statistics, seeding) and of
 * collectives on a world of 1 (support_diff_random.c). */
void dt_cases_random(lt_op op);
void dt_cases_collective(lt_op op);

/* ---- case constructors ---- */
static inline lt_shape S(int nd, ...)
{
    lt_shape s;
    memset(&s, 0, sizeof s);
    va_list ap;
    va_start(ap, nd);
    for (int i = 0; i < nd; i++) s.dims[i] = va_arg(ap, int);
    va_end(ap);
    s.ndim = nd;
    return s;
}

/* D(3, 4): the shape [3, 4]; D0: a 0-dim shape. */
#define D(...) mkshape((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
                       (int64_t[]){__VA_ARGS__})
#define D0 S(0)

static inline lt_shape mkshape(int nd, const int64_t *d)
{
    lt_shape s;
    memset(&s, 0, sizeof s);
    s.ndim = nd;
    for (int i = 0; i < nd; i++) s.dims[i] = d[i];
    return s;
}

static inline in_spec T(lt_shape s, lt_dtype dt, int gen)
{
    in_spec x = {K_TENSOR, s, dt, gen, 0, 0, NULL};
    return x;
}
static inline in_spec TIDX(lt_shape s, int64_t hi)
{
    in_spec x = {K_TENSOR, s, LT_I64, G_IDX, hi, 0, NULL};
    return x;
}
static inline in_spec TV(lt_shape s, lt_dtype dt, const double *v)
{
    in_spec x = {K_TENSOR, s, dt, G_VALS, 0, 0, v};
    return x;
}
static inline in_spec W(double v, lt_dtype dt)        /* wrapped number */
{
    in_spec x = {K_WRAPPED, S(0), dt, G_VALS, 0, v, NULL};
    return x;
}
static inline in_spec Z(double v, lt_dtype dt)        /* ordinary 0-dim tensor */
{
    in_spec x = {K_ZERODIM, S(0), dt, G_VALS, 0, v, NULL};
    return x;
}

static inline lt_attrs A(int n, ...)
{
    lt_attrs a;
    memset(&a, 0, sizeof a);
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) a.i[i] = va_arg(ap, int);
    va_end(ap);
    a.n = n;
    return a;
}


#define RUN(op, at, tol, ...) do { \
        in_spec sp_[] = {__VA_ARGS__}; \
        dt_run2(op, at, sp_, (int)(sizeof sp_ / sizeof sp_[0]), tol); \
    } while (0)

#endif
