/*
 * base/options.h — the LAZYTPU_* environment variables, read through one
 * table (base/options.def: name, type, default, range, when read, doc).
 *
 * Nothing else in the tree calls getenv on a LAZYTPU_ name: code asks for
 * lt_opt_int(LT_OPT_GRAPH_LIMIT) and the table decides how the value is
 * parsed, what an unset or malformed value gives (the default) and when the
 * environment is read:
 *   INIT     a snapshot taken by lt_options_load (lt_init, lt_devices_init:
 *            again after lt_shutdown); read before any load, the first
 *            access takes it;
 *   PROCESS  read at the first access, then fixed for the process;
 *   CALL     read at every access.
 * lt_options_load also checks every variable that is set, whatever its
 * class: a malformed value is an error naming the variable, so lt_init
 * refuses it (the accessors themselves never fail: they give the default).
 *
 * Thread safety: accessors may run on any thread; lt_options_load runs
 * under the caller's init lock (lt_init's or lt_devices_init's).
 */
#ifndef LT_BASE_OPTIONS_H
#define LT_BASE_OPTIONS_H

#include <stdint.h>
#include "lazytpu.h"

/* A copy of base/options.c may be built into another library as static
 * functions (backend/hooks/hooks_options.c): LT_OPTIONS_LINKAGE. */
#ifndef LT_OPTIONS_LINKAGE
#define LT_OPTIONS_LINKAGE LT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lt_opt {
#define LT_OPTION(id, name, alias, type, dflt, range, when, who, shown, doc) LT_OPT_##id,
#include "options.def"
#undef LT_OPTION
    LT_OPT_COUNT
} lt_opt;

typedef enum lt_opt_type {
    LT_OPT_BOOL, LT_OPT_INT, LT_OPT_SIZE, LT_OPT_SECONDS, LT_OPT_STRING, LT_OPT_ENUM
} lt_opt_type;

typedef enum lt_opt_when { LT_OPT_INIT, LT_OPT_PROCESS, LT_OPT_CALL } lt_opt_when;

typedef enum lt_opt_who { LT_OPT_USER, LT_OPT_LAUNCHER } lt_opt_who;

/* One row of the table (static storage; strings may be NULL where the
 * table says so). */
typedef struct lt_opt_info {
    const char *name, *alias;
    lt_opt_type type;
    const char *dflt;       /* as written in the environment, or NULL */
    const char *range;      /* "lo..hi", "lo..", "a|b|c" or "" */
    lt_opt_when when;
    lt_opt_who who;
    const char *shown;      /* docs' default text, or NULL */
    const char *doc;
} lt_opt_info;

/* Row o (NULL when o is out of range). */
LT_OPTIONS_LINKAGE const lt_opt_info *lt_opt_info_of(lt_opt o);
/* The option named `name` (the LAZYTPU_ name), or -1. */
LT_OPTIONS_LINKAGE int lt_opt_find(const char *name);
/* "bool", "int", "size", "seconds", "string", "enum" / "init", "process",
 * "call" / "user", "launcher". */
LT_OPTIONS_LINKAGE const char *lt_opt_type_name(lt_opt_type t);
LT_OPTIONS_LINKAGE const char *lt_opt_when_name(lt_opt_when w);
LT_OPTIONS_LINKAGE const char *lt_opt_who_name(lt_opt_who w);

/* 1 when the variable (or its alias) is set to a valid value, 0 when unset
 * or empty, -1 when set to a malformed one. Follows the option's `when`. */
LT_OPTIONS_LINKAGE int lt_opt_state(lt_opt o);
/* BOOL 0/1, INT, SIZE (bytes), ENUM (index in range's words); the default
 * when unset or malformed (0 when the table has none). */
LT_OPTIONS_LINKAGE int64_t lt_opt_int(lt_opt o);
/* SECONDS; the default when unset or malformed. */
LT_OPTIONS_LINKAGE double lt_opt_seconds(lt_opt o);
/* STRING, ENUM (the word); the default when unset or malformed, NULL when
 * the table has none. Valid until the next lt_options_load (INIT) or for
 * as long as the environment entry (CALL). */
LT_OPTIONS_LINKAGE const char *lt_opt_str(lt_opt o);

/* Takes the INIT snapshot from the environment and checks every variable
 * that is set. Returns LT_OK, or LT_ERR_ARG with lt_last_error()
 * "NAME=value: expected ..." for the first malformed one (the snapshot then
 * holds the default for it). */
LT_OPTIONS_LINKAGE lt_status lt_options_load(void);

#ifdef __cplusplus
}
#endif

#endif /* LT_BASE_OPTIONS_H */
