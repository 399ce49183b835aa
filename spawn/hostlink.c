/*
 * spawn/hostlink.c — the mailbox between a host's ranks and its proxy (see
 * hostlink.h), the cross-host agreement step of collectives and the
 * verdict over every host's descriptor.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hostlink.h"

#define HL_POLL_NS 50000000L   /* failure checks while waiting: 50 ms */

/* ------------------------------------------------------------- rank side */

/* Waits until *word satisfies (v == want) (exact) or, with seq = 1, until
 * the sequence number v reached want. Checks the abort flag and that the
 * proxy process lives; gives up (aborting the world) after twice the
 * collective timeout plus a minute: the proxy has its own timeouts, this
 * is a backstop for a proxy that stopped answering. */
static lt_status wait_word(lt_world *w, atomic_uint *word, unsigned want,
                           int seq, const char *what)
{
    lt_whdr *h = w->hdr;
    int64_t start = lt_world_now_ns();
    int64_t limit = (int64_t)((2 * w->timeout_s + 60) * 1e9);
    for (;;) {
        unsigned v = atomic_load_explicit(word, memory_order_acquire);
        if (seq ? (int)(v - want) >= 0 : v == want) return LT_OK;
        if (atomic_load(&h->aborted)) return lt_world_check(w, what);
        lt_world_futex_wait(word, v, HL_POLL_NS);
        v = atomic_load_explicit(word, memory_order_acquire);
        if (seq ? (int)(v - want) >= 0 : v == want) return LT_OK;
        char msg[400];
        int pid = atomic_load(&h->proxy_pid);
        if (lt_world_pid_dead(pid)) {
            snprintf(msg, sizeof msg, "the launcher of host %d (its proxy to "
                     "the other hosts, pid %d) died during %s", w->host, pid,
                     what);
            lt_world_abort(w, msg);
            return lt_world_check(w, what);
        }
        if (lt_world_now_ns() - start > limit) {
            snprintf(msg, sizeof msg, "%s: the proxy of host %d did not "
                     "answer within %.0f s", what, w->host, limit / 1e9);
            lt_world_abort(w, msg);
            return lt_world_check(w, what);
        }
    }
}

lt_status lt_hostlink_ready(lt_world *w, const char *what)
{
    if (atomic_load_explicit(&w->hdr->proxy_ready, memory_order_acquire) == 1)
        return LT_OK;
    return wait_word(w, &w->hdr->proxy_ready, 1, 0, what);
}

size_t lt_hostlink_inter_bytes(const lt_world *w)
{
    return (size_t)w->hdr->inter_bytes;
}

lt_status lt_hostlink_call(lt_world *w, const lt_hreq *req, const char *what)
{
    lt_whdr *h = w->hdr;
    int64_t t0 = lt_world_now_ns();
    unsigned target = ++w->hseq;
    if (w->rank == 0) {
        h->req = *req;
        atomic_store_explicit(&h->req_seq, target, memory_order_release);
        lt_world_futex_wake(&h->req_seq);
    }
    lt_status st = wait_word(w, &h->done_seq, target, 1, what);
    w->inter_ns += lt_world_now_ns() - t0;
    if (st != LT_OK) return st;
    const lt_hres *r = &h->res[target & 1];
    if (r->status != LT_OK)
        return lt_set_error((lt_status)r->status, "%s", r->msg);
    return LT_OK;
}

int64_t lt_hostlink_count(const lt_world *w, int g)
{
    return w->hdr->gcounts[g];
}

lt_status lt_world_verify_all(lt_world *w, const char *what)
{
    if (!lt_world_multihost(w)) return lt_world_verify(w, what);
    lt_whdr *h = w->hdr;
    lt_status st = lt_hostlink_ready(w, what);
    if (st != LT_OK) return st;
    lt_hreq req;
    memset(&req, 0, sizeof req);
    req.kind = LT_HREQ_AGREE;
    if (w->rank == 0) {
        if (lt_world_verify_local(w) != LT_OK)
            snprintf(req.local_err, sizeof req.local_err, "%s",
                     lt_last_error());
        req.desc = h->desc[0];
        for (int k = 0; k < w->size; k++) req.counts[k] = h->desc[k].count;
    }
    st = lt_hostlink_call(w, &req, what);
    if (st == LT_OK) return LT_OK;
    /* Every rank of every host has the same verdict. Wait until all local
     * ranks have read the descriptors before anyone publishes new ones. */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    lt_status st2 = lt_world_wait_all(w, what);
    if (st2 != LT_OK) return st2;
    return lt_set_error(st, "%s", msg);
}

/* ------------------------------------------------------------ proxy side */

void lt_hostlink_set_ready(lt_world *w, size_t inter_bytes)
{
    w->hdr->inter_bytes = inter_bytes;
    atomic_store_explicit(&w->hdr->proxy_ready, 1, memory_order_release);
    lt_world_futex_wake(&w->hdr->proxy_ready);
}

int lt_hostlink_next(lt_world *w, uint32_t served, lt_hreq *out,
                     int64_t timeout_ns)
{
    lt_whdr *h = w->hdr;
    unsigned v = atomic_load_explicit(&h->req_seq, memory_order_acquire);
    if (v == served && timeout_ns > 0) {
        lt_world_futex_wait(&h->req_seq, served, (long)timeout_ns);
        v = atomic_load_explicit(&h->req_seq, memory_order_acquire);
    }
    if (v == served) return 0;
    *out = h->req;
    return 1;
}

void lt_hostlink_done(lt_world *w, uint32_t seq, lt_status st,
                      const char *msg)
{
    lt_hres *r = &w->hdr->res[seq & 1];
    r->status = (int32_t)st;
    snprintf(r->msg, sizeof r->msg, "%s", msg ? msg : "");
    atomic_store_explicit(&w->hdr->done_seq, seq, memory_order_release);
    lt_world_futex_wake(&w->hdr->done_seq);
}

void lt_hostlink_wake(lt_world *w)
{
    lt_world_futex_wake(&w->hdr->req_seq);
}

unsigned char *lt_hostlink_area(lt_world *w)
{
    return lt_world_slot(w, w->size);
}

/* --------------------------------------------------------------- verdict */

void lt_hrec_from_req(lt_hrec *rec, int host, uint64_t nagree,
                      const lt_hreq *req)
{
    memset(rec, 0, sizeof *rec);
    rec->magic = LT_HREC_MAGIC;
    rec->host = host;
    rec->state = LT_HREC_COLLECTIVE;
    rec->nagree = nagree;
    rec->desc = req->desc;
    memcpy(rec->local_err, req->local_err, sizeof rec->local_err);
    rec->local_err[sizeof rec->local_err - 1] = 0;
    memcpy(rec->counts, req->counts, sizeof rec->counts);
}

lt_status lt_hostlink_verdict(const lt_hrec *recs, int hosts, int local_size,
                              char *msg, size_t cap, int64_t *gcounts)
{
    char dn[64], rn[64], what[200];
    msg[0] = 0;
    for (int k = 0; k < hosts; k++)
        if (recs[k].magic != LT_HREC_MAGIC) {
            snprintf(msg, cap, "inter-host agreement: host %d sent a "
                     "malformed record (another lazytpu version?)", k);
            return LT_ERR_COLLECTIVE;
        }
    /* a host whose ranks all exited while another is in a collective */
    int fin = -1, col = -1;
    for (int k = 0; k < hosts; k++) {
        if (recs[k].state == LT_HREC_FINISHED && fin < 0) fin = k;
        if (recs[k].state != LT_HREC_FINISHED && col < 0) col = k;
    }
    if (fin >= 0 && col >= 0) {
        lt_wdesc_str(&recs[col].desc, what, sizeof what);
        snprintf(msg, cap, "collective mismatch: the ranks of host %d all "
                 "exited but rank %d (host %d) called %s %s (#%llu)", fin,
                 col * local_size, col, lt_wop_name(recs[col].desc.op), what,
                 (unsigned long long)recs[col].desc.seq);
        return LT_ERR_COLLECTIVE;
    }
    for (int k = 0; k < hosts; k++)
        if (recs[k].local_err[0]) {
            snprintf(msg, cap, "%s", recs[k].local_err);
            return LT_ERR_COLLECTIVE;
        }
    snprintf(rn, sizeof rn, "rank 0 (host 0)");
    for (int k = 1; k < hosts; k++) {
        snprintf(dn, sizeof dn, "rank %d (host %d)", k * local_size, k);
        if (lt_wdesc_compare(&recs[k].desc, dn, &recs[0].desc, rn, msg, cap))
            return LT_ERR_COLLECTIVE;
    }
    if (gcounts)
        for (int k = 0; k < hosts; k++)
            for (int l = 0; l < local_size; l++)
                gcounts[k * local_size + l] = recs[k].counts[l];
    return LT_OK;
}
