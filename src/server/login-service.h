/* The `login` component (docs/login-proxy.md): the login proxy's fronts
 * (IMAP and POP3 in proxy mode; LMTP's front, protocols/lmtp/lmtp-proxy.h)
 * sharing one client of the directors' ring port, the backend TLS context
 * and the index of proxied sessions the ring's pushes act on. */
#ifndef PETREL_SERVER_LOGIN_SERVICE_H
#define PETREL_SERVER_LOGIN_SERVICE_H

#include "core/error.h"
#include "net/service-env.h"
#include "server/login-config.h"

#include <stddef.h>

struct login_service;

/* Connects to the directors and binds every front's listeners.
 * `internal_ca` (internal_tls.ca_file, may be NULL) verifies the backends
 * when login.backend_tls is on without its own CA file. NULL with err on
 * failure (nothing left running). */
struct login_service *login_service_start(const struct service_env *env,
                                          const struct login_config *cfg, const char *internal_ca,
                                          struct petrel_error *err);
/* The first front's first listener. */
const char *login_service_address(const struct login_service *ls);
/* Closes the listeners; pre-login sessions are told goodbye, relayed ones
 * end (the drain waits for them up to the shutdown timeout). */
void login_service_stop_accepting(struct login_service *ls);
/* Connections still open (pre-login and relayed). */
size_t login_service_in_flight(const struct login_service *ls);
void login_service_free(struct login_service *ls);

#endif
