#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(struct err *e, const char *fmt, ...)
{
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int err_prefix(struct err *e, const char *fmt, ...)
{
    if (!e) return -1;
    char ctx[ERR_MSG_MAX], old[ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    size_t n = strlen(ctx);
    if (n > sizeof e->msg - 3) n = sizeof e->msg - 3;
    memcpy(e->msg, ctx, n);
    memcpy(e->msg + n, ": ", 2);
    size_t room = sizeof e->msg - n - 2;
    size_t m = strnlen(old, room - 1);
    memcpy(e->msg + n + 2, old, m);
    e->msg[n + 2 + m] = '\0';
    return -1;
}

void err_clear(struct err *e)
{
    if (e) e->msg[0] = '\0';
}
