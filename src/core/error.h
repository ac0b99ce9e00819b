/* The error value that travels between layers: a small code plus a message.
 * Each front end maps the code once (HTTP status, IMAP response code, SMTP
 * reply). Functions that can fail take a `struct petrel_error *` (may be NULL
 * when the caller does not care) and return false / negative on failure. */
#ifndef PETREL_CORE_ERROR_H
#define PETREL_CORE_ERROR_H

#include <stdbool.h>

enum petrel_error_code {
    PETREL_OK = 0,
    PETREL_ERR_INVALID,     /* the caller's input is wrong */
    PETREL_ERR_NOT_FOUND,   /* the addressed thing does not exist */
    PETREL_ERR_EXISTS,      /* it exists already */
    PETREL_ERR_CONFLICT,    /* state forbids the operation */
    PETREL_ERR_IO,          /* the system or a driver failed */
    PETREL_ERR_UNSUPPORTED, /* not implemented by this driver / mode */
    PETREL_ERR_UNAVAILABLE, /* temporarily unable (shutting down, dependency down) */
    PETREL_ERR_PERMISSION,  /* not allowed */
    PETREL_ERR_LIMIT,       /* an implementation limit is reached (RFC 5530 LIMIT) */
    PETREL_ERR_OVER_QUOTA,  /* the user's storage allowance is used up (RFC 5530 OVERQUOTA) */
};

struct petrel_error {
    enum petrel_error_code code;
    char message[512];
    /* The errno behind an _IO or _PERMISSION error from a system call
     * (petrel_error_set_errno), 0 otherwise: what a front end needs to
     * tell a full disk (ENOSPC, EDQUOT) or a passing shortage (EMFILE,
     * ENOMEM) from a fault. */
    int sys_errno;
    /* Set after petrel_error_set() by a storage module whose OVER_QUOTA
     * refusal trying again will not cure (one message above the size cap,
     * a folder at its message cap): LMTP answers 552 instead of 452. */
    bool permanent;
};

/* Sets code and message; a NULL `err` is ignored. Always returns false so
 * callers can `return petrel_error_set(...)`. */
bool petrel_error_set(struct petrel_error *err, enum petrel_error_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* As petrel_error_set() for a failed system call: the code from `errnum`
 * (EACCES, EPERM, EROFS: _PERMISSION; anything else: _IO), and
 * err->sys_errno = errnum. */
bool petrel_error_set_errno(struct petrel_error *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepends context ("while X: ") to an existing message. */
void petrel_error_prefix(struct petrel_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void petrel_error_clear(struct petrel_error *err);
const char *petrel_error_code_name(enum petrel_error_code code);

#endif
