/* log — diagnostics on stderr. Library code may warn; only cli/ decides verbosity.
 * LOG_QUIET suppresses info and warnings (errors still print). Not thread-safe in ordering only:
 * each call writes one whole line with a single fprintf. */
#ifndef NS_UTIL_LOG_H
#define NS_UTIL_LOG_H

enum log_level { LOG_QUIET = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
