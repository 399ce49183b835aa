/*
 * spawn/hostlink.h — the link between the ranks of one host and their host
 * proxy, over the host's shared-memory segment (no MPI here).
 *
 * On several hosts each host's launcher (`lazytpu-run`, the host leader) is
 * also the host's proxy: the only process that talks to the other hosts
 * (over MPI, spawn/hosts_mpi.c). Workers never use MPI: a hierarchical
 * collective does its intra-host part over the segment as on one host,
 * leaves the host's share in the segment's result slot, and asks the proxy
 * (lt_hostlink_call) to do the inter-host part on it. The proxy answers in
 * the same slot.
 *
 * Mailbox protocol (fields in lt_whdr, world_int.h): all local ranks call
 * lt_hostlink_call with the same request after a local barrier; local rank
 * 0 writes it and bumps req_seq (futex); the proxy serves it, writes the
 * answer into res[seq & 1] and sets done_seq = seq (futex). Ranks wait for
 * done_seq with the world's failure checks (abort flag, proxy process
 * alive). Any two calls are separated by a local barrier, except that one
 * data request may follow an AGREE directly: hence two answer entries.
 *
 * Request kinds (lt_hreq_kind):
 *   AGREE     compare descriptors across hosts (global barrier, too); on
 *             success gcounts[] holds every global rank's count
 *   REDUCE    result slot [count] of acc_dtype host partials -> [count] of
 *             dtype, reduced over hosts in host order, times scale
 *   GATHER    result slot = hosts blocks of `count` bytes; host h's block
 *             is filled by host h, after the call every block everywhere
 *   RSCATTER  result slot [rows][hosts][local][cols] acc_dtype partials ->
 *             [rows][local][cols] dtype: this host's ranks' shards reduced
 *             over hosts, times scale
 *   BCAST     result slot [count bytes] of host root_host -> every host
 */
#ifndef LT_HOSTLINK_H
#define LT_HOSTLINK_H

#include "world_int.h"

/* ------------------------------------------------------------ rank side */

/* Waits until this host's proxy has connected to the other hosts (first
 * collective only; immediate afterwards). LT_ERR_COLLECTIVE if the world
 * was aborted (e.g. the proxy failed to start) or the proxy died. */
lt_status lt_hostlink_ready(lt_world *w, const char *what);

/* Bytes of the result slot every host may use in one request (equal on all
 * hosts; valid after lt_hostlink_ready). */
size_t lt_hostlink_inter_bytes(const lt_world *w);

/* One request to the proxy (see above). Every local rank calls it with the
 * same request; returns the proxy's verdict (LT_ERR_COLLECTIVE with the
 * message on a disagreement or failure, the world then possibly aborted).
 * The time spent is added to lt_world_inter_ns. */
lt_status lt_hostlink_call(lt_world *w, const lt_hreq *req, const char *what);

/* After a successful AGREE: count of global rank g (payload bytes of a
 * rendezvous), for g < lt_world_size(w). */
int64_t lt_hostlink_count(const lt_world *w, int g);

/* ----------------------------------------------------------- proxy side */

/* Marks the proxy connected with `inter_bytes` usable per request (the
 * creator, once). Wakes waiting ranks. */
void lt_hostlink_set_ready(lt_world *w, size_t inter_bytes);

/* Waits up to timeout_ns for request number served + 1. Returns 1 with the
 * request copied into *out, 0 if none arrived (timeout, or woken by
 * lt_hostlink_wake or an abort). */
int lt_hostlink_next(lt_world *w, uint32_t served, lt_hreq *out,
                     int64_t timeout_ns);

/* Answers request `seq`: status (LT_OK or an error) and message (may be
 * NULL). Wakes the ranks. */
void lt_hostlink_done(lt_world *w, uint32_t seq, lt_status st,
                      const char *msg);

/* Wakes a proxy blocked in lt_hostlink_next (e.g. to look at commands of
 * its own process). */
void lt_hostlink_wake(lt_world *w);

/* The data area of requests (the segment's result slot). */
unsigned char *lt_hostlink_area(lt_world *w);

/* What the proxies exchange for an AGREE (fixed size, sent as bytes). */
typedef struct lt_hrec {
    uint32_t magic;         /* LT_HREC_MAGIC */
    int32_t host;
    int32_t state;          /* LT_HREC_* */
    int32_t pad;
    uint64_t nagree;        /* AGREEs this host's proxy has served before */
    lt_wdesc desc;
    char local_err[512];
    int64_t counts[LT_WORLD_MAX_RANKS];
} lt_hrec;

#define LT_HREC_MAGIC 0x6c744852u
#define LT_HREC_COLLECTIVE 0   /* the host's ranks are in a collective */
#define LT_HREC_FINISHED 1     /* the host's ranks all exited */

/* Fills rec from this host's AGREE request. */
void lt_hrec_from_req(lt_hrec *rec, int host, uint64_t nagree,
                      const lt_hreq *req);

/* The verdict over every host's record (recs[0..hosts), in host order,
 * `local_size` ranks per host). LT_OK and, if gcounts is not NULL,
 * gcounts[k * local_size + l] = recs[k].counts[l]; or LT_ERR_COLLECTIVE
 * with the message in msg: the first host's own disagreement, else the
 * first host whose collective differs from host 0's, naming both sides
 * ("all_reduce: rank 4 (host 1) sent f32 [8] but rank 0 (host 0) sent f32
 * [4]", "host 1's ranks all exited but rank 0 (host 0) called all_reduce
 * f32 [4] (#3)"). The same records give the same verdict on every host. */
lt_status lt_hostlink_verdict(const lt_hrec *recs, int hosts, int local_size,
                              char *msg, size_t cap, int64_t *gcounts);

#endif
