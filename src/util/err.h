/* err — the error value every library call fills.
 *
 * Contract: a function that can fail returns int (0 = ok, non-zero = failed) and takes a `struct err *`
 * as its last argument. On failure it has written one human-readable message into it that says what
 * failed and where (file, byte offset, line number, key, tensor name). Callers add context with
 * err_prefix(). `e` may be NULL when the caller does not care about the message.
 * Only src/cli/ turns an error into an exit status. */
#ifndef NS_UTIL_ERR_H
#define NS_UTIL_ERR_H

#include <stddef.h>

#define ERR_MSG_MAX 1024

struct err {
    char msg[ERR_MSG_MAX];
};

/* Sets e->msg from a printf format and returns -1, so `return err_set(e, "...")` reads naturally. */
int err_set(struct err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "<context>: " to the current message and returns -1. */
int err_prefix(struct err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the message (e may be NULL). */
void err_clear(struct err *e);

#endif
