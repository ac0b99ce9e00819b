/* Dropping root after the listening sockets are bound (as Postfix and
 * OpenSMTPD do). */
#ifndef PETREL_SERVER_PRIVILEGES_H
#define PETREL_SERVER_PRIVILEGES_H

#include "core/error.h"

#include <stdbool.h>

/* When running as root: switches to `user` (and `group`, else the user's
 * primary group) permanently, or fails when no user is configured unless
 * `allow_root`. Not root: nothing to do. */
bool privileges_drop(const char *user, const char *group, bool allow_root,
                     struct petrel_error *err);

#endif
