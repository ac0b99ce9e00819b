/* The `warden` component: the session registry and the shared auth
 * penalty table. It listens on TCP and/or Unix sockets
 * (warden_service.listen), admits TCP clients from allowed_nets, and
 * speaks the line protocol of warden-protocol.h. Every request is answered
 * on the loop at once (nothing waits on I/O), in the order it came.
 *
 * A connection's sessions live as long as the connection: when it closes
 * they are reaped, as are an instance's sessions when it says HELLO with a
 * new boot id (warden-registry.h). Metrics: petrel_warden_request_seconds
 * {verb,result}, petrel_warden_sessions, petrel_warden_sessions_reaped_total,
 * petrel_warden_penalty_lookups_total{result}, petrel_warden_connections,
 * petrel_warden_connections_total. */
#ifndef PETREL_SERVICES_WARDEN_SERVICE_H
#define PETREL_SERVICES_WARDEN_SERVICE_H

#include "core/error.h"
#include "net/service-env.h"
#include "services/warden/warden-config.h"

#include <stddef.h>

struct warden_service;

/* Binds every listener. `cfg` is borrowed and must outlive the service. */
struct warden_service *warden_service_start(const struct service_env *env,
                                            const struct warden_config *cfg,
                                            struct petrel_error *err);
/* The first listener's bound address ("127.0.0.1:10210", "unix:/run/petrel/warden"). */
const char *warden_service_address(const struct warden_service *svc);
/* Closes the listeners; open connections keep being served. */
void warden_service_stop_accepting(struct warden_service *svc);
/* Sessions registered now. */
size_t warden_service_sessions(const struct warden_service *svc);
/* Closes every connection and frees the state. */
void warden_service_free(struct warden_service *svc);

#endif
