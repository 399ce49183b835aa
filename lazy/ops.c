/*
 * lazy/ops.c — the rows of the op table (lazy/ops.def): one expansion of the
 * table gives every column the core reads at run time, and the kernel map
 * (the kernel column -> the family's function) beside it.
 */
#include <string.h>
#include "ops.h"
#include "shape.h"
#include "spmd.h"
#include "kernels/kernel.h"

/* Kernel families the compiler runs itself (elementwise ops through the
 * fused interpreter, reductions through its reduction loops) or none at
 * all (leaves): no kernel function. */
#define LT_KFN_none NULL
#define LT_KFN_fused NULL
#define LT_KFN_reduce NULL
#define LT_KFN_argreduce NULL
#define LT_KFN_view lt_kernel_view
#define LT_KFN_matmul lt_kernel_matmul
#define LT_KFN_conv lt_kernel_conv
#define LT_KFN_conv3d lt_kernel_conv3d
#define LT_KFN_pool lt_kernel_pool
#define LT_KFN_norm lt_kernel_norm
#define LT_KFN_lnorm lt_kernel_lnorm
#define LT_KFN_scan lt_kernel_scan
#define LT_KFN_sort lt_kernel_sort
#define LT_KFN_scatter lt_kernel_scatter
#define LT_KFN_cat lt_kernel_cat
#define LT_KFN_index lt_kernel_index
#define LT_KFN_loss lt_kernel_loss
#define LT_KFN_random lt_kernel_random
#define LT_KFN_collective lt_kernel_collective
#define LT_KFN_search lt_kernel_search
#define LT_KFN_linalg lt_kernel_linalg
#define LT_KFN_manual lt_kernel_spmd_manual

/* the manual-sharding boundaries' kernel (lazy/spmd_manual.c): refuses */
lt_status lt_kernel_spmd_manual(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                                const lt_view *out, const lt_kernel_ctx *ctx);

/* One row per op: every column but expr (which only the elementwise
 * interpreter and the C tests' reference expand). */
typedef struct op_row {
    const char *name;
    signed char in_min, in_max;  /* tensor inputs; in_max -1: no limit */
    unsigned char kind;          /* lt_op_kind */
    unsigned char dtype;         /* lt_dtype_rule */
    unsigned char spmd;          /* lt_spmd_rule */
    unsigned char cost;          /* lt_op_cost */
    unsigned char checks;        /* lt_op_checks */
    unsigned char ident;         /* lt_op_ident */
    lt_shape_rule_fn shape;
    lt_kernel_fn kernel;
} op_row;

static const op_row rows[LT_NUM_OPS] = {
#define LT_OP(name, in_min, in_max, kind, shape, dtype, kernel, spmd, cost, checks, ident, expr) \
    [LT_OP_##name] = {#name, in_min, in_max, kind, LT_DT_##dtype, LT_SPMD_##spmd,               \
                      LT_COST_##cost, LT_CHECKS_##checks, LT_IDENT_##ident,                    \
                      lt_shape_rule_##shape, LT_KFN_##kernel},
#include "ops.def"
#undef LT_OP
};

/* rows[op] of a valid op, else the leaf-like row of an invalid one. */
static const op_row *row(lt_op op)
{
    static const op_row invalid = {"?", 0, 0, LT_KIND_LEAF, LT_DT_LEAF, LT_SPMD_OPAQUE,
                                   LT_COST_costly, LT_CHECKS_none, LT_IDENT_none, NULL, NULL};
    return (unsigned)op < LT_NUM_OPS ? &rows[op] : &invalid;
}

const char *lt_op_name(lt_op op) { return row(op)->name; }

int lt_op_arity(lt_op op)
{
    const op_row *r = row(op);
    return r->in_min == r->in_max ? r->in_min : -1;
}

lt_op_kind lt_op_kind_of(lt_op op) { return (lt_op_kind)row(op)->kind; }

int lt_op_from_name(const char *name)
{
    if (!name) return -1;
    for (int i = 0; i < LT_NUM_OPS; i++)
        if (strcmp(rows[i].name, name) == 0) return i;
    return -1;
}

lt_status lt_op_check_inputs(lt_op op, int n)
{
    const op_row *r = row(op);
    if (n >= r->in_min && (r->in_max < 0 || n <= r->in_max))
        return LT_OK;
    if (r->in_min == r->in_max)
        return lt_set_error(LT_ERR_ARG, "%s: takes %d inputs, got %d", r->name, r->in_min, n);
    if (r->in_max < 0)
        return lt_set_error(LT_ERR_ARG, "%s: needs at least %d input%s, got %d", r->name,
                            r->in_min, r->in_min == 1 ? "" : "s", n);
    return lt_set_error(LT_ERR_ARG, "%s: takes %d %s %d inputs, got %d", r->name, r->in_min,
                        r->in_max == r->in_min + 1 ? "or" : "to", r->in_max, n);
}

int lt_op_cheap(lt_op op) { return row(op)->cost == LT_COST_cheap; }
lt_op_checks lt_op_checks_of(lt_op op) { return (lt_op_checks)row(op)->checks; }
lt_op_ident lt_op_ident_of(lt_op op) { return (lt_op_ident)row(op)->ident; }
lt_dtype_rule lt_op_dtype_rule(lt_op op) { return (lt_dtype_rule)row(op)->dtype; }
lt_shape_rule_fn lt_op_shape_rule(lt_op op) { return row(op)->shape; }
lt_kernel_fn lt_kernel_for(lt_op op) { return row(op)->kernel; }
lt_spmd_rule lt_spmd_rule_of(lt_op op) { return (lt_spmd_rule)row(op)->spmd; }

/* include/lazytpu.h's enum comes from <build>/include/lazytpu_ops.h, generated
 * from this table (scripts/gen_ops_header.cmake): a stale copy fails here. */
enum {
#define LT_OP(name, ...) LT_TABLE_OP_##name,
#include "ops.def"
#undef LT_OP
    LT_TABLE_NUM_OPS
};
_Static_assert((int)LT_TABLE_NUM_OPS == (int)LT_NUM_OPS, "lazytpu_ops.h is stale: rebuild");
#define LT_OP(name, ...) \
    _Static_assert((int)LT_TABLE_OP_##name == (int)LT_OP_##name, "lazytpu_ops.h is stale: " #name);
#include "ops.def"
#undef LT_OP
