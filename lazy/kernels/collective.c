/*
 * lazy/kernels/collective.c — the collective ops of lazy/ops.def executed on
 * the calling process's world (spawn/world.h):
 *   all_reduce     i[0] = lt_reduce_type, f[0] = scale
 *   all_gather     i[0] = dim                 (out dim *= world size)
 *   reduce_scatter i = {reduce_type, dim}, f[0] = scale (out dim /= size)
 *   broadcast      i[0] = root ordinal
 * Without a world (not under the launcher: a world of 1) all_reduce is
 * input * scale (and/or of floats normalised to 0/1), reduce_scatter the
 * same, all_gather and broadcast copy the input.
 * Strided inputs are packed into contiguous memory first; the output is
 * contiguous. Timed in metric CollectiveTime, bytes in CollectiveBytes. On
 * several hosts (spawn/hostlink.h) each collective's time is also split
 * into IntraHostCollectiveTime (shared memory on this host) and
 * InterHostCollectiveTime (waiting for the host proxy's MPI exchange).
 * A rank that cannot take part (its output shape does not fit the world,
 * no memory to pack its input, its program failed or its input is poisoned:
 * lt_collective_abstain) still joins the collective as a failure, so every
 * rank gets an error naming it instead of waiting for it.
 */
#include <stdio.h>
#include "kutil.h"
#include "world.h"      /* spawn/: the one way from lazy/ into spawn/ */

static int64_t prod_dims(const lt_shape *s, int from, int to)
{
    int64_t p = 1;
    for (int d = from; d < to; d++) p *= s->dims[d];
    return p;
}

static lt_status shape_error(lt_op op, const lt_view *x, const lt_view *out,
                             int N)
{
    char a[96], b[96];
    lt_kutil_shape_str(&x->shape, a, sizeof a);
    lt_kutil_shape_str(&out->shape, b, sizeof b);
    return lt_set_error(LT_ERR_SHAPE,
                        "%s: input %s %s does not give output %s with a world "
                        "of %d (LAZYTPU_WORLD_SIZE=%d at trace time?)",
                        lt_op_name(op), kt_dtname(x->dtype), a, b, N,
                        lt_world_default_size());
}

/* The world's name for op's collective (lt_world_abstain). */
static const char *wop_of(lt_op op)
{
    switch (op) {
    case LT_OP_all_reduce: return "all_reduce";
    case LT_OP_all_gather: return "all_gather";
    case LT_OP_reduce_scatter: return "reduce_scatter";
    case LT_OP_broadcast: return "broadcast";
    default: return "barrier";
    }
}

int lt_collective_world(int *rank)
{
    if (rank) *rank = lt_world_default_rank();
    return lt_world_default_size();
}

lt_status lt_collective_abstain(lt_op op, const char *reason)
{
    lt_world *w = NULL;
    if (lt_world_default(&w) != LT_OK || !w) return LT_OK;
    return lt_world_abstain(w, wop_of(op), reason);
}

/* A local failure st (message set) on a world: abstain, keep st/message. */
static lt_status local_failure(lt_world *w, lt_op op, lt_status st)
{
    if (!w) return st;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    lt_world_abstain(w, wop_of(op), msg);
    return lt_set_error(st, "%s", msg);
}

lt_status lt_kernel_collective(lt_op op, const lt_attrs *a, const lt_view *in,
                               int n_in, const lt_view *out,
                               const lt_kernel_ctx *ctx)
{
    if (n_in != 1)
        return lt_set_error(LT_ERR_ARG, "%s: takes 1 input, got %d",
                            lt_op_name(op), n_in);
    lt_world *w = NULL;
    lt_status st = lt_world_default(&w);
    if (st != LT_OK) return lt_set_error(LT_ERR_COLLECTIVE, "%s: %s",
                                         lt_op_name(op), lt_last_error());
    int N = lt_world_size(w);
    const lt_view *x = &in[0];
    lt_dtype dt = out->dtype;
    int64_t n = kt_numel(&x->shape);
    int64_t n_out = kt_numel(&out->shape);
    /* a rank whose output does not fit fails the collective for everyone */
    int fits = 1;
    if (op == LT_OP_all_reduce || op == LT_OP_broadcast) {
        fits = n_out == n;
    } else if (op == LT_OP_all_gather) {
        int dim = (int)a->i[0];
        fits = dim >= 0 && dim < x->shape.ndim && n_out == n * N;
    } else if (op == LT_OP_reduce_scatter) {
        int dim = (int)a->i[1];
        fits = dim >= 0 && dim < x->shape.ndim && x->shape.dims[dim] % N == 0 &&
               n_out * N == n;
    }
    if (!fits) return local_failure(w, op, shape_error(op, x, out, N));
    void *owned = NULL;
    const void *src = lt_kutil_pack(x, dt, kt_nthreads(ctx), &owned);
    if (!src) return local_failure(w, op, LT_ERR_OOM);
    void *dst = kt_ptr(out);
    int64_t t0 = lt_now_ns();
    int64_t inter0 = lt_world_inter_ns(w);
    switch (op) {
    case LT_OP_all_reduce:
        st = lt_world_all_reduce(w, src, dst, n, dt, (lt_reduce_type)a->i[0],
                                 a->f[0], &x->shape);
        break;
    case LT_OP_all_gather: {
        int dim = (int)a->i[0];
        st = lt_world_all_gather(w, src, dst, prod_dims(&x->shape, 0, dim),
                                 prod_dims(&x->shape, dim, x->shape.ndim), dt,
                                 &x->shape);
        break;
    }
    case LT_OP_reduce_scatter: {
        int dim = (int)a->i[1];
        int64_t block = x->shape.dims[dim] / N *
                        prod_dims(&x->shape, dim + 1, x->shape.ndim);
        st = lt_world_reduce_scatter(w, src, dst, prod_dims(&x->shape, 0, dim),
                                     block, dt, (lt_reduce_type)a->i[0],
                                     a->f[0], &x->shape);
        break;
    }
    case LT_OP_broadcast:
        st = lt_world_broadcast(w, src, dst, n, dt, (int)a->i[0], &x->shape);
        break;
    default:
        st = lt_set_error(LT_ERR_INTERNAL, "collective kernel called for %s",
                          lt_op_name(op));
        break;
    }
    free(owned);
    if (st == LT_OK && N > 1) {
        int64_t total = lt_now_ns() - t0;
        lt_metric_add(lt_metric_get("CollectiveTime", LT_UNIT_NS),
                      (double)total);
        lt_metric_add(lt_metric_get("CollectiveBytes", LT_UNIT_BYTES),
                      (double)n * (double)kt_dtsize(dt));
        if (lt_world_num_hosts(w) > 1) {
            int64_t inter = lt_world_inter_ns(w) - inter0;
            lt_metric_add(lt_metric_get("InterHostCollectiveTime", LT_UNIT_NS),
                          (double)inter);
            lt_metric_add(lt_metric_get("IntraHostCollectiveTime", LT_UNIT_NS),
                          (double)(total - inter));
        }
    }
    return st;
}
