/*
 * lazy/fault.h — execution errors of device programs ("faults"): what a
 * failed program leaves behind, and the message that names it.
 *
 * When a program fails on its core (a kernel finds an index out of range, a
 * collective fails, an input was already poisoned), the core creates one
 * lt_fault holding the status and the full message, and attaches it to every
 * buffer the program was to write (lt_buffer.fault): those buffers never hold
 * a valid value, they are "poisoned".
 *   - Reading a poisoned buffer raises its fault, every time
 *     (lt_fault_raise, from lt_buffer_wait).
 *   - A later program that takes a poisoned buffer as input does not run: it
 *     fails with a derived fault whose message names the input and quotes the
 *     original ("root") fault's message. Derived faults point at the root, so
 *     messages never nest deeper than one level.
 *   - A fault is "claimed" once a read raised it or a wait reported it;
 *     claiming a derived fault claims its root too. Waits report unclaimed
 *     faults only, so one failure reaches the user's waits at most once (see
 *     lt_core_wait in device.h and the Conventions in include/lazytpu.h).
 */
#ifndef LT_FAULT_H
#define LT_FAULT_H

#include <stdatomic.h>
#include <stddef.h>
#include "lazytpu.h"

struct lt_node;
struct lt_view;

typedef struct lt_fault {
    atomic_int refs;
    atomic_int claimed;         /* 1 once raised by a read or reported */
    lt_status st;
    int core;
    uint64_t seq;               /* the failed job on `core` */
    struct lt_fault *root;      /* derived fault: the original (owned), else NULL */
    char msg[];                 /* the full message, NUL-terminated */
} lt_fault;

/* A new fault (1 reference, unclaimed) with a copy of msg; takes a new
 * reference to root's origin when root is given (derived fault). NULL on
 * host malloc failure. */
lt_fault *lt_fault_new(lt_status st, const char *msg, int core, uint64_t seq,
                       lt_fault *root);
lt_fault *lt_fault_retain(lt_fault *f);          /* NULL-safe; returns f */
void lt_fault_release(lt_fault *f);              /* NULL-safe */
/* The original fault: f->root for a derived fault, else f. */
lt_fault *lt_fault_origin(lt_fault *f);
/* Marks f (and its root) claimed. */
void lt_fault_claim(lt_fault *f);
int lt_fault_is_claimed(const lt_fault *f);
/* Sets the thread's last error to f's status and message, claims f and
 * returns its status. */
lt_status lt_fault_raise(lt_fault *f);

/* Where a program failed, as a suffix for the kernel's message:
 *   " [in index_select(f32[4, 3], i64[1]) -> f32[1, 3] traced at t.py:12 in
 *   main; program synced at t.py:14 in main (value_read); core 0; rank 3 of
 *   8]"
 * node: the failing step's node (its frame, input shapes and dtypes), or
 * NULL (then op/in/n_in describe the step from its views); op < 0: no step
 * (omits the "in ..." part). sync_frame may be NULL/"". The rank part
 * appears under a world of more than one process (LAZYTPU_WORLD_SIZE).
 * Always NUL-terminates buf. */
void lt_fault_where(char *buf, size_t cap, const struct lt_node *node, int op,
                    const struct lt_view *in, int n_in,
                    const char *sync_frame, lt_sync_cause cause, int core);

#endif
