#include "core/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool set_v(struct petrel_error *err, enum petrel_error_code code, int errnum,
                  const char *fmt, va_list ap)
{
    err->code = code;
    err->sys_errno = errnum;
    err->permanent = false;
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    return false;
}

bool petrel_error_set(struct petrel_error *err, enum petrel_error_code code, const char *fmt, ...)
{
    if (err == NULL)
        return false;
    va_list ap;
    va_start(ap, fmt);
    set_v(err, code, 0, fmt, ap);
    va_end(ap);
    return false;
}

bool petrel_error_set_errno(struct petrel_error *err, int errnum, const char *fmt, ...)
{
    if (err == NULL)
        return false;
    enum petrel_error_code code = errnum == EACCES || errnum == EPERM || errnum == EROFS
                                      ? PETREL_ERR_PERMISSION
                                      : PETREL_ERR_IO;
    va_list ap;
    va_start(ap, fmt);
    set_v(err, code, errnum, fmt, ap);
    va_end(ap);
    return false;
}

void petrel_error_prefix(struct petrel_error *err, const char *fmt, ...)
{
    if (err == NULL)
        return;
    char prefix[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    char joined[sizeof(prefix) + sizeof(err->message) + 2];
    snprintf(joined, sizeof(joined), "%s: %s", prefix, err->message);
    snprintf(err->message, sizeof(err->message), "%.*s", (int)(sizeof(err->message) - 1), joined);
}

void petrel_error_clear(struct petrel_error *err)
{
    if (err == NULL)
        return;
    err->code = PETREL_OK;
    err->sys_errno = 0;
    err->permanent = false;
    err->message[0] = '\0';
}

const char *petrel_error_code_name(enum petrel_error_code code)
{
    switch (code) {
    case PETREL_OK:
        return "ok";
    case PETREL_ERR_INVALID:
        return "invalid";
    case PETREL_ERR_NOT_FOUND:
        return "not_found";
    case PETREL_ERR_EXISTS:
        return "exists";
    case PETREL_ERR_CONFLICT:
        return "conflict";
    case PETREL_ERR_IO:
        return "io";
    case PETREL_ERR_UNSUPPORTED:
        return "unsupported";
    case PETREL_ERR_UNAVAILABLE:
        return "unavailable";
    case PETREL_ERR_PERMISSION:
        return "permission";
    case PETREL_ERR_LIMIT:
        return "limit";
    case PETREL_ERR_OVER_QUOTA:
        return "over_quota";
    }
    return "unknown";
}
