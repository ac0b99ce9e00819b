/* The director admin HTTP API (specification document 2), default :9103,
 * on the foundation's HTTP server: allow-list (403) before the bearer token
 * (401), JSON errors. Endpoints (docs/director.md#admin-api):
 *
 *   GET  /api/director/status | dump | map | map?user=
 *   GET  /api/director/backends            POST /api/director/backends
 *   PATCH|DELETE /api/director/backends/{ip}
 *   POST /api/director/backends/{ip|all}/up | down | flush
 *   POST /api/director/users/{user}/move | kick
 *   GET|POST|DELETE /api/director/ring     GET /api/director/ring/topology
 *
 * The API borrows the state, the peer list, peer sync and the
 * configuration. */
#ifndef PETREL_SERVICES_DIRECTOR_API_H
#define PETREL_SERVICES_DIRECTOR_API_H

#include "core/error.h"
#include "services/director/director-config.h"
#include "services/director/director-peers.h"
#include "services/director/director-state.h"
#include "services/director/director-sync.h"
#include "net/service-env.h"

#include <stdbool.h>
#include <stddef.h>

struct director_api;

/* Binds cfg->api_listen. `token` "" disables the token check (a warning is
 * logged by the caller). */
struct director_api *director_api_start(const struct service_env *env,
                                        const struct director_config *cfg, const char *token,
                                        struct director_state *state, struct director_peers *peers,
                                        struct director_sync *sync, struct petrel_error *err);
const char *director_api_address(const struct director_api *api);
void director_api_stop_accepting(struct director_api *api);
size_t director_api_in_flight(const struct director_api *api);
void director_api_abandon_in_flight(struct director_api *api);
void director_api_free(struct director_api *api);

#endif
