/* The `director` component: routes users to backends (docs/director.md).
 * Owns the director state, the ring-protocol listener (:9102), the admin
 * API (:9103), the peer list, the expiry timer, the director metrics
 * (petrel_director_backend_info, petrel_director_backend_sessions; the
 * ring server observes petrel_director_lookup_seconds) and readiness checks
 * that both ports are bound and accepting. */
#ifndef PETREL_SERVICES_DIRECTOR_SERVICE_H
#define PETREL_SERVICES_DIRECTOR_SERVICE_H

#include "core/error.h"
#include "services/director/director-config.h"
#include "net/service-env.h"

#include <stdbool.h>
#include <stddef.h>

struct director_service;

/* Reads the token, binds both listeners, registers the initial backends and
 * permanent peers. `cfg` must outlive the service. */
struct director_service *director_service_start(const struct service_env *env,
                                                const struct director_config *cfg,
                                                struct petrel_error *err);
/* Bound addresses. */
const char *director_service_api_address(const struct director_service *svc);
const char *director_service_ring_address(const struct director_service *svc);
/* Closes both listeners; open connections are served on. */
void director_service_stop_accepting(struct director_service *svc);
/* Admin API requests not yet answered. */
size_t director_service_in_flight(const struct director_service *svc);
void director_service_abandon_in_flight(struct director_service *svc);
void director_service_free(struct director_service *svc);

#endif
