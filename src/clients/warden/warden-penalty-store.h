/* An auth penalty store (clients/auth/auth-penalty.h) kept in the warden,
 * so that every auth instance pointed at one warden shares failed-login
 * counts per client IP. Selected by auth.warden_addr.
 *
 * Each get asks the warden (PENALTY-GET, bounded by a 2 s deadline); each
 * inc is sent fire-and-forget (PENALTY-INC). Failures are also counted in
 * an in-process store with the auth configuration's own rules, which
 * answers whenever the warden cannot: an unreachable warden weakens the
 * protection to per-instance counts, never to none, and never blocks a
 * login. */
#ifndef PETREL_CLIENTS_WARDEN_PENALTY_STORE_H
#define PETREL_CLIENTS_WARDEN_PENALTY_STORE_H

#include "core/error.h"
#include "clients/auth/auth-penalty.h"

#include <event2/event.h>

#define WARDEN_PENALTY_STORE_TIMEOUT_MS 2000

/* A store talking to the warden at `addr` as `instance`. On failure (a bad
 * address) the returned store has NULL ops and err says why. */
struct auth_penalty_store warden_penalty_store_new(struct event_base *base, const char *addr,
                                                   const char *instance,
                                                   const struct auth_penalty_config *cfg,
                                                   struct petrel_error *err);

#endif
