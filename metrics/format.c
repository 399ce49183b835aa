/* metrics/format.c — value formatting for the metrics report (torch_xla's
 * style) and a small string builder. See registry.h for the contracts. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "registry.h"

char *lt_fmt_time(double ns, char *buf, size_t cap)
{
    static const struct {
        const char *suffix;
        double scale;   /* ns per unit */
        int width;
    } parts[] = {
        {"d", 86400e9, 2}, {"h", 3600e9, 2}, {"m", 60e9, 2},
        {"s", 1e9, 2},     {"ms", 1e6, 3},
    };
    if (!cap) return buf;
    size_t pos = 0;
    buf[0] = 0;
    if (isnan(ns)) {
        snprintf(buf, cap, "nan");
        return buf;
    }
    if (ns < 0) {
        pos += (size_t)snprintf(buf, cap, "-");
        ns = -ns;
    }
    int started = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        double whole = floor(ns / parts[i].scale);
        if (whole >= 1.0 || started) {
            if (pos < cap)
                pos += (size_t)snprintf(buf + pos, cap - pos, "%0*.0f%s",
                                        parts[i].width, whole, parts[i].suffix);
            ns -= whole * parts[i].scale;
            started = 1;
        }
    }
    if (pos < cap) snprintf(buf + pos, cap - pos, "%07.3fus", ns / 1e3);
    return buf;
}

char *lt_fmt_bytes(double bytes, char *buf, size_t cap)
{
    static const char *const sfx[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    unsigned k = 0;
    while (k + 1 < sizeof sfx / sizeof sfx[0] && bytes >= 1024.0) {
        bytes /= 1024.0;
        k++;
    }
    snprintf(buf, cap, "%.2f%s", bytes, sfx[k]);
    return buf;
}

char *lt_fmt_count(double v, char *buf, size_t cap)
{
    snprintf(buf, cap, "%.2f", v);
    return buf;
}

char *lt_fmt_value(lt_metric_unit unit, double v, char *buf, size_t cap)
{
    switch (unit) {
    case LT_UNIT_NS: return lt_fmt_time(v, buf, cap);
    case LT_UNIT_BYTES: return lt_fmt_bytes(v, buf, cap);
    default: return lt_fmt_count(v, buf, cap);
    }
}

char *lt_fmt_g(double v, char *buf, size_t cap)
{
    snprintf(buf, cap, "%g", v);
    return buf;
}

/* --------------------------------------------------------- string builder */

static int sb_reserve(lt_sb *sb, size_t extra)
{
    if (sb->failed) return 0;
    if (sb->len + extra + 1 <= sb->cap) return 1;
    size_t ncap = sb->cap ? sb->cap : 256;
    while (ncap < sb->len + extra + 1) ncap *= 2;
    char *p = realloc(sb->p, ncap);
    if (!p) {
        sb->failed = 1;
        return 0;
    }
    sb->p = p;
    sb->cap = ncap;
    return 1;
}

void lt_sb_printf(lt_sb *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !sb_reserve(sb, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(sb->p + sb->len, sb->cap - sb->len, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

void lt_sb_puts(lt_sb *sb, const char *s)
{
    size_t n = strlen(s);
    if (!sb_reserve(sb, n)) return;
    memcpy(sb->p + sb->len, s, n + 1);
    sb->len += n;
}

void lt_sb_json_str(lt_sb *sb, const char *s)
{
    lt_sb_puts(sb, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': lt_sb_puts(sb, "\\\""); break;
        case '\\': lt_sb_puts(sb, "\\\\"); break;
        case '\n': lt_sb_puts(sb, "\\n"); break;
        case '\r': lt_sb_puts(sb, "\\r"); break;
        case '\t': lt_sb_puts(sb, "\\t"); break;
        default:
            if (*c < 0x20) lt_sb_printf(sb, "\\u%04x", *c);
            else {
                char one[2] = {(char)*c, 0};
                lt_sb_puts(sb, one);
            }
        }
    }
    lt_sb_puts(sb, "\"");
}

char *lt_sb_take(lt_sb *sb)
{
    char *p = NULL;
    if (!sb->failed) {
        if (!sb->p) sb_reserve(sb, 0);
        if (!sb->failed) {
            p = sb->p;
            p[sb->len] = 0;
            sb->p = NULL;
        }
    }
    free(sb->p);
    memset(sb, 0, sizeof *sb);
    return p;
}
