/* base/error.c — thread-local last error (see lt_last_error in lazytpu.h). */
#include <stdarg.h>
#include <stdio.h>
#include "lazytpu.h"

static _Thread_local char lt_err_msg[1024];

const char *lt_last_error(void) { return lt_err_msg; }

lt_status lt_set_error(lt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lt_err_msg, sizeof lt_err_msg, fmt, ap);
    va_end(ap);
    return st;
}
