/*
 * lazy/exec_guard.c — what a step function traced as one graph needs from
 * the core (include/lazytpu.h, "Execution guard"): the guard that refuses
 * any execution while it is traced, and the numbered log of the graphs
 * syncs ran, from which the Python side tells how many distinct graphs a
 * function has made (max_different_graphs).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec_guard.h"
#include "tensor.h"

/* ------------------------------------------------------------------ guard */

static atomic_int guard_on;
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
static char *guard_owner;          /* under guard_mu */

void lt_set_no_execution(const char *owner)
{
    char *copy = owner ? strdup(owner) : NULL;
    pthread_mutex_lock(&guard_mu);
    free(guard_owner);
    guard_owner = copy;
    atomic_store(&guard_on, copy != NULL);
    pthread_mutex_unlock(&guard_mu);
}

char *lt_no_execution(void)
{
    if (!atomic_load(&guard_on)) return NULL;
    pthread_mutex_lock(&guard_mu);
    char *s = guard_owner ? strdup(guard_owner) : NULL;
    pthread_mutex_unlock(&guard_mu);
    return s;
}

int lt_exec_guard_on(void) { return atomic_load(&guard_on); }

const char *lt_exec_cause_what(lt_sync_cause cause)
{
    switch (cause) {
    case LT_SYNC_VALUE_READ:
        return "a value read (.item(), .cpu(), .tolist(), print(t), bool(t), if t: ...) "
               "would run the pending graph";
    case LT_SYNC_DYNAMIC_SHAPE:
        return "an op whose output shape depends on tensor values (nonzero, "
               "masked_select, boolean-mask indexing) would run the pending graph";
    case LT_SYNC_SIZE_LIMIT:
        return "the graph reached LAZYTPU_GRAPH_LIMIT nodes and would be cut "
               "(run in pieces)";
    case LT_SYNC_MARK_STEP:
    case LT_SYNC_OPTIMIZER_STEP:
    case LT_SYNC_LOADER_STEP:
        return "a step boundary (mark_step, optimizer_step(barrier=True) or a loader "
               "step) would run the pending graph";
    default:
        return "an explicit sync would run the pending graph";
    }
}

lt_status lt_execution_check(const char *what)
{
    if (!atomic_load(&guard_on)) return LT_OK;
    char *owner = lt_no_execution();
    if (!owner) return LT_OK;              /* lifted meanwhile */
    char *frame = lt_caller_capture();     /* may run the hook: no lock held */
    lt_set_error(LT_ERR_STATE,
                 "%s: %s%s%s%s; nothing may execute while the function is traced: "
                 "read values after the step (add_step_closure) and keep host "
                 "code out of the function, or compile it without full_graph",
                 owner, what ? what : "something would execute",
                 frame ? " (at " : "", frame ? frame : "", frame ? ")" : "");
    free(frame);
    free(owner);
    return LT_ERR_STATE;
}

/* -------------------------------------------------------- synced graphs */

#define LOG_CAP 256

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t log_keys[LOG_CAP];
static uint64_t log_seq;           /* number of the latest logged sync */

void lt_exec_log_graph(uint64_t key)
{
    pthread_mutex_lock(&log_mu);
    log_seq++;
    log_keys[log_seq % LOG_CAP] = key;
    pthread_mutex_unlock(&log_mu);
}

uint64_t lt_synced_graphs(uint64_t since, uint64_t *keys, int cap, int *n)
{
    pthread_mutex_lock(&log_mu);
    uint64_t seq = log_seq;
    uint64_t from = since < seq ? since + 1 : seq + 1;     /* first number to give */
    if (seq >= LOG_CAP && from <= seq - LOG_CAP) from = seq - LOG_CAP + 1;
    if (cap < 0 || !keys) cap = 0;
    if (seq + 1 - from > (uint64_t)cap) from = seq + 1 - (uint64_t)cap;
    int k = 0;
    for (uint64_t i = from; i <= seq; i++) keys[k++] = log_keys[i % LOG_CAP];
    pthread_mutex_unlock(&log_mu);
    if (n) *n = k;
    return seq;
}
