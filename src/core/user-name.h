/* The one rule for user names, for every layer that takes one: auth (what
 * may log in), the storage (what may become a path) and the warden (what
 * a session reports). One rule, so that a name auth lets log in is never
 * refused by the storage afterwards; only the maximum length differs by
 * caller (a registry may hold longer names than a path component can be).
 *
 * A user name is 1..max bytes of valid UTF-8 with no control character
 * (C0, DEL, C1), no '/' or '\' (path separators on the systems Dovecot
 * migrates from) and no leading '.' (".", "..", hidden files). */
#ifndef PETREL_CORE_USER_NAME_H
#define PETREL_CORE_USER_NAME_H

#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>

/* What auth and the storage accept: a file name component (NAME_MAX). */
#define USER_NAME_MAX 255

/* True when `name` follows the rule with at most `max_len` bytes; else
 * false with `err` (may be NULL) saying which part fails (INVALID). */
bool user_name_valid(const char *name, size_t max_len, struct petrel_error *err);

#endif
