/*
 * lazy/init.c — library lifecycle: lt_init (env parsing, cores, compile
 * cache), lt_shutdown, and the runtime settings.
 *
 * Options (LAZYTPU_* variables) come from the table in base/options.def,
 * read through base/options.h: lt_init takes the snapshot of the init-time
 * ones (and refuses a malformed variable), then the cores, the compile cache
 * and the settings below read it.
 * lt_init may run again after lt_shutdown (the env is then re-read).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "tensor.h"
#include "cache.h"
#include "pcache.h"
#include "compile.h"
#include "device.h"
#include "diagnose.h"
#include "graph_dump.h"
#include "trace_events.h"
#include "options.h"

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t rt_mu;
static atomic_int rt_ready;
static lt_runtime rt;

/* Process exit (exit(), the end of main, Python's finalisation) while a
 * core still runs a program: the library destructors that follow (OpenBLAS
 * frees its buffers) would pull memory from under the kernels, a crash
 * after a script's last asynchronous step. The cores finish what they were
 * given and stop first; the records stay, so anything released later (a
 * static destructor dropping a tensor) still works, and a job submitted
 * after this runs inline. Skipped when another thread holds the runtime. */
static void rt_at_exit(void)
{
    if (!atomic_load(&rt_ready) || pthread_mutex_trylock(&rt_mu) != 0)
        return;
    lt_devices_shutdown();
    pthread_mutex_unlock(&rt_mu);
}

static void rt_once_init(void)
{
    atexit(rt_at_exit);
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
    lt_status st = lt_options_load();
    if (st == LT_OK) st = lt_rt_precision_init(&rt);
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
    rt.graph_limit = lt_opt_int(LT_OPT_GRAPH_LIMIT);
    rt.cache_size = lt_opt_int(LT_OPT_COMPILE_CACHE_SIZE);
    rt.max_inflight = lt_opt_int(LT_OPT_MAX_INFLIGHT);
    rt.check_finite = (int)lt_opt_int(LT_OPT_CHECK_FINITE);
    rt.no_hfuse = !lt_opt_int(LT_OPT_HFUSE);
    rt.no_epilogue = !lt_opt_int(LT_OPT_GEMM_EPILOGUE);
    rt.cache = lt_cache_new(rt.cache_size, prog_retain, prog_release);
    rt.pcache = lt_pcache_new();
    if (!rt.cache || !rt.pcache) {
        lt_cache_free(rt.cache);
        lt_pcache_free(rt.pcache);
        rt.cache = NULL;
        rt.pcache = NULL;
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
    lt_pcache_free(rt.pcache);
    rt.pcache = NULL;
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

lt_compile_opts lt_rt_compile_opts(void)
{
    const lt_runtime *r = lt_rt_peek();
    lt_compile_opts o = {0};
    if (r) {
        o.check_finite = r->check_finite;
        o.no_hfuse = r->no_hfuse;
        o.no_epilogue = r->no_epilogue;
    }
    return o;
}

lt_status lt_compile(const lt_graph *g, lt_program **out)
{
    lt_compile_opts o = lt_rt_compile_opts();
    return lt_compile_with(g, &o, out);
}

int lt_rt_bf16(lt_runtime *r)
{
    int v = atomic_load_explicit(&r->bf16, memory_order_acquire);
    if (v >= 0) return v;
    int want = (int)lt_opt_int(LT_OPT_USE_BF16);     /* or XLA_USE_BF16 */
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
    /* torch_xla's names, seen from the host (its PJRT client): bytes sent
     * to the device are OutboundData, bytes read back InboundData */
    fm.to_dev_bytes = lt_metric_get("OutboundData", LT_UNIT_BYTES);
    fm.from_dev_bytes = lt_metric_get("InboundData", LT_UNIT_BYTES);
    fm.compile_time = lt_metric_get("CompileTime", LT_UNIT_NS);
    fm.execute_time = lt_metric_get("ExecuteTime", LT_UNIT_NS);
    fm.graph_size = lt_metric_get("TensorsGraphSize", LT_UNIT_COUNT);
}

const lt_fe_metrics *lt_fe_metrics_get(void)
{
    pthread_once(&fm_once, fm_init);
    return &fm;
}
