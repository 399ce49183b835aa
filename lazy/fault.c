/*
 * lazy/fault.c — fault records (refcounted execution errors) and the
 * "where did it fail" suffix of their messages. See fault.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fault.h"
#include "ir.h"
#include "kernels/kernel.h"

lt_fault *lt_fault_new(lt_status st, const char *msg, int core, uint64_t seq,
                       lt_fault *root)
{
    if (!msg) msg = "";
    size_t len = strlen(msg);
    lt_fault *f = malloc(sizeof *f + len + 1);
    if (!f) return NULL;
    atomic_init(&f->refs, 1);
    atomic_init(&f->claimed, 0);
    f->st = st;
    f->core = core;
    f->seq = seq;
    f->root = root ? lt_fault_retain(lt_fault_origin(root)) : NULL;
    memcpy(f->msg, msg, len + 1);
    return f;
}

lt_fault *lt_fault_retain(lt_fault *f)
{
    if (f) atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
    return f;
}

void lt_fault_release(lt_fault *f)
{
    if (!f || atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1)
        return;
    lt_fault *root = f->root;   /* roots have no root: no recursion */
    free(f);
    lt_fault_release(root);
}

lt_fault *lt_fault_origin(lt_fault *f)
{
    return f && f->root ? f->root : f;
}

void lt_fault_claim(lt_fault *f)
{
    if (!f) return;
    atomic_store(&f->claimed, 1);
    if (f->root) atomic_store(&f->root->claimed, 1);
}

int lt_fault_is_claimed(const lt_fault *f)
{
    return f && atomic_load(&((lt_fault *)f)->claimed);
}

lt_status lt_fault_raise(lt_fault *f)
{
    lt_fault_claim(f);
    return lt_set_error(f->st, "%s", f->msg);
}

/* "f32[4, 3]" appended at buf+*len (bounded). */
static void put_tensor(char *buf, size_t cap, size_t *len, lt_dtype dt,
                       const lt_shape *s)
{
    char sh[160];
    lt_shape_str(s, sh, sizeof sh);
    if (*len < cap)
        *len += (size_t)snprintf(buf + *len, cap - *len, "%s%s",
                                 lt_dtype_name(dt), sh);
}

static void put(char *buf, size_t cap, size_t *len, const char *fmt,
                const char *a)
{
    if (*len < cap) *len += (size_t)snprintf(buf + *len, cap - *len, fmt, a);
}

void lt_fault_where(char *buf, size_t cap, const lt_node *node, int op,
                    const lt_view *in, int n_in, const char *sync_frame,
                    lt_sync_cause cause, int core)
{
    if (!cap) return;
    size_t len = 0;
    buf[0] = 0;
    put(buf, cap, &len, "%s", " [");
    const char *sep = "";
    if (node || op >= 0) {
        put(buf, cap, &len, "in %s(", lt_op_name(node ? (lt_op)node->op : (lt_op)op));
        int n = node ? node->n_in : n_in;
        for (int k = 0; k < n && k < 8; k++) {
            if (k) put(buf, cap, &len, "%s", ", ");
            if (node)
                put_tensor(buf, cap, &len, (lt_dtype)node->in[k]->dtype,
                           &node->in[k]->shape);
            else
                put_tensor(buf, cap, &len, in[k].dtype, &in[k].shape);
        }
        if (n > 8) put(buf, cap, &len, "%s", ", ...");
        put(buf, cap, &len, "%s", ")");
        if (node) {
            put(buf, cap, &len, "%s", " -> ");
            put_tensor(buf, cap, &len, (lt_dtype)node->dtype, &node->shape);
            if (node->frame) put(buf, cap, &len, " traced at %s", node->frame);
        }
        sep = "; ";
    }
    if (sync_frame && *sync_frame) {
        put(buf, cap, &len, "%s", sep);
        put(buf, cap, &len, "program synced at %s", sync_frame);
        put(buf, cap, &len, " (%s)", lt_sync_cause_name(cause));
        sep = "; ";
    }
    char tail[64];
    snprintf(tail, sizeof tail, "core %d", core);
    put(buf, cap, &len, "%s", sep);
    put(buf, cap, &len, "%s", tail);
    int rank;
    int size = lt_collective_world(&rank);
    if (size > 1) {
        snprintf(tail, sizeof tail, "; rank %d of %d", rank, size);
        put(buf, cap, &len, "%s", tail);
    }
    put(buf, cap, &len, "%s", "]");
    if (len >= cap && cap > 2) {      /* truncated: keep the closing bracket */
        buf[cap - 2] = ']';
        buf[cap - 1] = 0;
    }
}
