#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>

static enum log_level g_level = LOG_INFO;

void log_set_level(enum log_level level)
{
    g_level = level;
}

enum log_level log_get_level(void)
{
    return g_level;
}

static void vlog(enum log_level level, const char *tag, const char *fmt, va_list ap)
{
    if (level > g_level) return;
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    fprintf(stderr, "%s%s\n", tag, line);
}

void log_info(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(LOG_INFO, "", fmt, ap);
    va_end(ap);
}

void log_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(LOG_WARN, "warning: ", fmt, ap);
    va_end(ap);
}

void log_debug(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(LOG_DEBUG, "debug: ", fmt, ap);
    va_end(ap);
}
