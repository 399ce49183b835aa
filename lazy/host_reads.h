/*
 * lazy/host_reads.h — host reads of device values (.item(), .cpu(), print):
 * each one makes the host wait for the device, so a read per step puts the
 * device's latency into every step even when the value was computed long
 * ago. Every lt_tensor_to_host is recorded here (not only the reads that
 * had to run a graph first), per user line.
 */
#ifndef LT_HOST_READS_H
#define LT_HOST_READS_H

#include <stdint.h>

/* One successful host read on `core`: `bytes` copied, `wait_ns` the host
 * waited for the device (graph run + queued programs; 0 if the value was
 * ready), `synced` 1 when the read had to compile/run the pending graph,
 * `frame` the user's line (NULL/"" unknown). Counts HostReads (and
 * HostReadsWaited when wait_ns > 0), adds HostReadWaitTime, feeds the step
 * window of the debug warnings and the per-line table. Thread-safe. */
void lt_host_read_record(int core, int64_t bytes, int64_t wait_ns, int synced,
                         const char *frame);
/* A step boundary (lt_diagnose_step): per-step rates count from here. */
void lt_host_read_step(void);
/* lt_host_read_report (the report section) is public: include/lazytpu.h. */
/* Forgets the table (lt_diagnose_reset). */
void lt_host_read_reset(void);

#endif
