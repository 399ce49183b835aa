/*
 * lazy/exec_guard.h — the execution guard and the log of synced graphs
 * (public half in include/lazytpu.h: lt_set_no_execution,
 * lt_execution_check, lt_synced_graphs). The sync pipeline and replays ask
 * the guard before running anything and log each graph they sync.
 */
#ifndef LT_EXEC_GUARD_H
#define LT_EXEC_GUARD_H

#include <stdint.h>
#include "lazytpu.h"

/* 1 while lt_set_no_execution holds an owner (one atomic load; safe under
 * any lock: never calls out). */
int lt_exec_guard_on(void);
/* What a sync for `cause` would do, for the guard's message ("a value read
 * (...) would run the pending graph"). Static string. */
const char *lt_exec_cause_what(lt_sync_cause cause);
/* Appends `key` to the log of synced graphs (lt_synced_graphs). */
void lt_exec_log_graph(uint64_t key);

#endif
