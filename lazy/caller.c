/*
 * lazy/caller.c — the user's code, as the embedder describes it: a
 * thread-local frame string ("train.py:42 in step") set with lt_set_caller
 * around rare events, and a hook the library runs when it needs a frame
 * nobody set (a graph cut at the size limit, tracing an op whose kernel
 * checks its input data).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tensor.h"
#include "diagnose.h"

static _Thread_local char caller_frame[256];

void lt_set_caller(const char *frame)
{
    if (!frame) {
        caller_frame[0] = 0;
        return;
    }
    snprintf(caller_frame, sizeof caller_frame, "%s", frame);
}

const char *lt_caller_frame(void) { return caller_frame; }

static void (*_Atomic caller_hook)(void);

void lt_set_caller_hook(void (*fn)(void)) { atomic_store(&caller_hook, fn); }

int lt_caller_hook_run(void)
{
    void (*fn)(void) = atomic_load(&caller_hook);
    if (fn) fn();
    return fn != NULL;
}

char *lt_caller_capture(void)
{
    if (caller_frame[0]) return strdup(caller_frame);
    if (!lt_caller_hook_run()) return NULL;
    char *f = caller_frame[0] ? strdup(caller_frame) : NULL;
    caller_frame[0] = 0;
    return f;
}
