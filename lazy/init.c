/*
 * lazy/init.c — library lifecycle: lt_init (env parsing, cores, compile
 * cache), lt_shutdown, and the runtime settings.
 *
 * Environment:
 *   LAZYTPU_NUM_CORES            cores (default 8; parsed by device init)
 *   LAZYTPU_HBM_BYTES            per-core memory budget (device init)
 *   LAZYTPU_COMPILE_CACHE_SIZE   compile cache entries (default 1024)
 *   LAZYTPU_USE_BF16 / XLA_USE_BF16   store f32 as bf16 (default 0); read
 *                                at the first device value (lt_rt_bf16)
 *   LAZYTPU_GRAPH_LIMIT          nodes traced on a core before a forced sync
 *                                (default 200000)
 *   LAZYTPU_DEBUG / PT_XLA_DEBUG step warnings on stderr (lazy/diagnose.c)
 *   LAZYTPU_SAVE_GRAPHS=<file>   append every synced graph (text, or DOT
 *                                for *.dot) (lazy/graph_dump.c)
 *   LAZYTPU_TRACE=<file.json>    Chrome/Perfetto trace events
 *                                (metrics/trace_events.c)
 *   LAZYTPU_CHECK_FINITE=1       fail a program at the first op that
 *                                produces a NaN/Inf, naming its line
 *                                (lazy/finite.h; slow: no fusion)
 *   LAZYTPU_HFUSE=0              no horizontal fusion of same-program
 *                                elementwise steps (lazy/compile_hfuse.c)
 *   LAZYTPU_MATMUL_PRECISION     f32 (default), default, high, highest: how
 *                                f32 products multiply (lazy/precision.c)
 * lt_init may run again after lt_shutdown (the env is then re-read).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "tensor.h"
#include "cache.h"
#include "compile.h"
#include "device.h"
#include "diagnose.h"
#include "graph_dump.h"
#include "trace_events.h"

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t rt_mu;
static atomic_int rt_ready;
static lt_runtime rt;

static void rt_once_init(void)
{
    pthread_mutex_init(&rt_mu, NULL);
    for (int i = 0; i < LT_RT_MAX_CORES; i++) {
        lt_core_live *L = &rt.live[i];
        pthread_mutex_init(&L->mu, NULL);
        L->head.next = L->head.prev = &L->head;
        L->count = 0;
        L->traced = 0;
    }
    atomic_store(&rt.bf16, -1);
    rt.graph_limit = 200000;
    rt.cache_size = 1024;
    rt.max_inflight = 2;
}

static int env_flag(const char *name)
{
    const char *e = getenv(name);
    return e && *e && strcmp(e, "0") != 0 && strcasecmp(e, "false") != 0;
}

static int64_t env_int(const char *name, int64_t dflt)
{
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    char *end;
    long long v = strtoll(e, &end, 10);
    return (end != e && v > 0) ? (int64_t)v : dflt;
}

static void *prog_retain(void *p) { return lt_program_retain(p); }
static void prog_release(void *p) { lt_program_release(p); }

lt_status lt_init(void)
{
    pthread_once(&rt_once, rt_once_init);
    if (atomic_load_explicit(&rt_ready, memory_order_acquire)) return LT_OK;
    pthread_mutex_lock(&rt_mu);
    if (atomic_load(&rt_ready)) {
        pthread_mutex_unlock(&rt_mu);
        return LT_OK;
    }
    lt_status st = lt_rt_precision_init(&rt);
    if (st == LT_OK) st = lt_devices_init();
    if (st != LT_OK) {
        pthread_mutex_unlock(&rt_mu);
        return st;
    }
    int n = lt_devices_count();
    if (n > LT_RT_MAX_CORES) {
        lt_devices_shutdown();
        pthread_mutex_unlock(&rt_mu);
        return lt_set_error(LT_ERR_ARG, "init: %d cores exceed the maximum %d",
                            n, LT_RT_MAX_CORES);
    }
    rt.n_cores = n;
    atomic_store(&rt.bf16, -1);      /* decided at the first device value */
    rt.graph_limit = env_int("LAZYTPU_GRAPH_LIMIT", 200000);
    rt.cache_size = env_int("LAZYTPU_COMPILE_CACHE_SIZE", 1024);
    rt.max_inflight = env_int("LAZYTPU_MAX_INFLIGHT", 2);
    rt.check_finite = env_flag("LAZYTPU_CHECK_FINITE");
    rt.no_hfuse = getenv("LAZYTPU_HFUSE") && !env_flag("LAZYTPU_HFUSE");
    {
        const char *e = getenv("LAZYTPU_GEMM_EPILOGUE");
        rt.no_epilogue = e && *e && atoi(e) == 0;
    }
    rt.cache = lt_cache_new(rt.cache_size, prog_retain, prog_release);
    if (!rt.cache) {
        lt_devices_shutdown();
        pthread_mutex_unlock(&rt_mu);
        return lt_set_error(LT_ERR_INTERNAL, "init: out of host memory");
    }
    for (int i = 0; i < LT_RT_MAX_CORES; i++) {
        pthread_mutex_lock(&rt.live[i].mu);
        rt.live[i].traced = 0;
        rt.live[i].last_sync_end_ns = 0;
        pthread_mutex_unlock(&rt.live[i].mu);
    }
    lt_fe_metrics_get();
    lt_diagnose_init();
    lt_graph_dump_init();
    lt_trace_events_init(n);
    atomic_store_explicit(&rt_ready, 1, memory_order_release);
    pthread_mutex_unlock(&rt_mu);
    return LT_OK;
}

void lt_shutdown(void)
{
    pthread_once(&rt_once, rt_once_init);
    pthread_mutex_lock(&rt_mu);
    if (!atomic_load(&rt_ready)) {
        pthread_mutex_unlock(&rt_mu);
        return;
    }
    lt_wait(-1);
    atomic_store(&rt_ready, 0);
    lt_devices_shutdown();
    lt_cache_free(rt.cache);
    rt.cache = NULL;
    lt_sync_state_reset();
    lt_trace_events_close();
    pthread_mutex_unlock(&rt_mu);
}

lt_runtime *lt_rt(void)
{
    if (atomic_load_explicit(&rt_ready, memory_order_acquire)) return &rt;
    if (lt_init() != LT_OK) return NULL;
    return &rt;
}

void lt_rt_once(void) { pthread_once(&rt_once, rt_once_init); }

lt_runtime *lt_rt_peek(void)
{
    return atomic_load_explicit(&rt_ready, memory_order_acquire) ? &rt : NULL;
}

lt_core_live *lt_live(int core) { return &rt.live[core]; }

int lt_num_cores(void)
{
    lt_runtime *r = lt_rt();
    return r ? r->n_cores : 0;
}

int lt_rt_bf16(lt_runtime *r)
{
    int v = atomic_load_explicit(&r->bf16, memory_order_acquire);
    if (v >= 0) return v;
    int want = env_flag("LAZYTPU_USE_BF16") || env_flag("XLA_USE_BF16");
    /* the first caller decides; concurrent first callers agree on its value */
    atomic_compare_exchange_strong(&r->bf16, &v, want);
    return atomic_load_explicit(&r->bf16, memory_order_acquire);
}

int lt_bf16_mode(void)
{
    lt_runtime *r = lt_rt();
    return r ? lt_rt_bf16(r) : 0;
}

/* ------------------------------------------------------ front-end metrics */

static pthread_once_t fm_once = PTHREAD_ONCE_INIT;
static lt_fe_metrics fm;

static void fm_init(void)
{
    fm.create_tensor = lt_counter_get("CreateLtTensor");
    fm.destroy_tensor = lt_counter_get("DestroyLtTensor");
    fm.cached = lt_counter_get("CachedCompile");
    fm.uncached = lt_counter_get("UncachedCompile");
    fm.mark_step = lt_counter_get("MarkStep");
    fm.size_limit_sync = lt_counter_get("GraphSizeLimitSync");
    for (int c = 0; c < LT_NUM_SYNC_CAUSES; c++) {
        char name[64];
        snprintf(name, sizeof name, "SyncCause::%s", lt_sync_cause_name((lt_sync_cause)c));
        fm.sync_cause[c] = lt_counter_get(name);
    }
    fm.to_dev_time = lt_metric_get("TransferToDeviceTime", LT_UNIT_NS);
    fm.from_dev_time = lt_metric_get("TransferFromDeviceTime", LT_UNIT_NS);
    fm.inbound = lt_metric_get("InboundData", LT_UNIT_BYTES);
    fm.outbound = lt_metric_get("OutboundData", LT_UNIT_BYTES);
    fm.compile_time = lt_metric_get("CompileTime", LT_UNIT_NS);
    fm.execute_time = lt_metric_get("ExecuteTime", LT_UNIT_NS);
    fm.graph_size = lt_metric_get("TensorsGraphSize", LT_UNIT_COUNT);
}

const lt_fe_metrics *lt_fe_metrics_get(void)
{
    pthread_once(&fm_once, fm_init);
    return &fm;
}
