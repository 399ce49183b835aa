/*
 * metrics/trace_capture.h — capture sessions (public side:
 * lt_trace_capture_start / _stop / _active in include/lazytpu.h).
 *
 * While a session runs, every trace event (what LAZYTPU_TRACE writes,
 * whether or not it is set) is also kept in memory; stopping writes them
 * where TensorBoard's profile plugin looks for a run:
 * <logdir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.xplane.pb and
 * <host>.trace.json.gz.
 */
#ifndef LT_TRACE_CAPTURE_H
#define LT_TRACE_CAPTURE_H

#include <stdint.h>

/* Keeps one event in the running session's buffer (called by
 * lt_trace_event_args while a session records; thread-safe). Events that
 * started before the session began are not kept; past the buffer's bound
 * they are counted and dropped. */
void lt_trace_capture_record(const char *name, const char *cat, int64_t start_ns,
                             int64_t dur_ns, int tid, const char *args_json);

#endif
