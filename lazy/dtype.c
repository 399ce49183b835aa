/*
 * lazy/dtype.c — the op-table lookups generated from lazy/ops.def (names,
 * arity, kind, by-name search). The dtype and shape helpers are in base/
 * (base/dtype.c, base/shape.c).
 */
#include <string.h>
#include "lazytpu.h"

/* --------------------------------------------------------------- op table */

static const char *const op_names[LT_NUM_OPS] = {
#define LT_OP(name, arity, kind, shape, dtype, kernel, expr) #name,
#include "ops.def"
#undef LT_OP
};

static const signed char op_arity[LT_NUM_OPS] = {
#define LT_OP(name, arity, kind, shape, dtype, kernel, expr) arity,
#include "ops.def"
#undef LT_OP
};

static const unsigned char op_kind[LT_NUM_OPS] = {
#define LT_OP(name, arity, kind, shape, dtype, kernel, expr) kind,
#include "ops.def"
#undef LT_OP
};

const char *lt_op_name(lt_op op)
{
    return (unsigned)op < LT_NUM_OPS ? op_names[op] : "?";
}

int lt_op_arity(lt_op op)
{
    return (unsigned)op < LT_NUM_OPS ? op_arity[op] : 0;
}

lt_op_kind lt_op_kind_of(lt_op op)
{
    return (unsigned)op < LT_NUM_OPS ? (lt_op_kind)op_kind[op] : LT_KIND_LEAF;
}

int lt_op_from_name(const char *name)
{
    if (!name) return -1;
    for (int i = 0; i < LT_NUM_OPS; i++)
        if (strcmp(op_names[i], name) == 0) return i;
    return -1;
}

/* include/lazytpu.h's enum comes from <build>/include/lazytpu_ops.h, generated
 * from this table (scripts/gen_ops_header.cmake): a stale copy fails here. */
enum {
#define LT_OP(name, ...) LT_TABLE_OP_##name,
#include "ops.def"
#undef LT_OP
    LT_TABLE_NUM_OPS
};
_Static_assert(LT_TABLE_NUM_OPS == LT_NUM_OPS, "lazytpu_ops.h is stale: rebuild");
#define LT_OP(name, ...) \
    _Static_assert(LT_TABLE_OP_##name == LT_OP_##name, "lazytpu_ops.h is stale: " #name);
#include "ops.def"
#undef LT_OP
