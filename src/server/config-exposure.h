/* Refuses a configuration that would open an operator API to other hosts
 * without authentication: the backend-plane API (backend_api) and the
 * director's admin API (director.api) listening on a non-loopback address
 * with no bearer token, unless the section says
 * `allow_unauthenticated_remote: true`. Telemetry's POST /debug/loglevel
 * is guarded per request instead (services/telemetry). */
#ifndef PETREL_SERVER_CONFIG_EXPOSURE_H
#define PETREL_SERVER_CONFIG_EXPOSURE_H

#include "core/error.h"
#include "server/config.h"

#include <stdbool.h>

/* Checks the enabled components once the component list is final. False
 * with "file:line: key: message" in err (a configuration error). */
bool config_check_exposure(const struct petrel_config *cfg, struct petrel_error *err);

/* True for a Unix socket and a loopback address ("127.0.0.1:9105",
 * "[::1]:9103", "localhost:1"); false for every other address, the
 * wildcard (":9105", "0.0.0.0:9105", "[::]:9105") included. */
bool config_listen_is_local(const char *listen);

#endif
