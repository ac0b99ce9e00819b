/* The telemetry listener every petreld process serves (default :8080):
 * GET /healthz, GET /readyz, GET /metrics, GET|POST /debug/loglevel.
 * Never published to mail clients; optional allow-list. The GETs are
 * readable by whoever the allow-list admits; POST /debug/loglevel (it
 * changes what the process logs) needs a loopback peer, the bearer token
 * of telemetry.token_env, or telemetry.allow_unauthenticated_remote. */
#ifndef PETREL_SERVICES_TELEMETRY_H
#define PETREL_SERVICES_TELEMETRY_H

#include "core/error.h"
#include "net/service-env.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct readiness_check_config {
    char *name;
    char *tcp; /* host:port */
    bool tls;
};

/* The `telemetry` configuration section. */
struct telemetry_config {
    char *listen;
    char **allowed_nets; /* NULL-terminated; NULL = everyone */
    struct readiness_check_config *checks; /* operator-declared dependency checks */
    size_t check_count;
    int64_t readiness_deadline_ms;
    /* POST /debug/loglevel: loopback peers, a bearer token from this
     * variable, or anyone when allow_unauthenticated_remote is set. */
    char *token_env;
    bool allow_unauthenticated_remote;
};

struct telemetry;

/* Binds the listener, registers the configured dependency checks and the
 * petrel_log_level gauge. The live log level table is log_installed(). */
struct telemetry *telemetry_start(const struct service_env *env, const struct telemetry_config *cfg,
                                  struct petrel_error *err);
const char *telemetry_address(const struct telemetry *t);
/* Cancels a pending TTL revert (the level was set anew, e.g. by SIGHUP). */
void telemetry_level_reloaded(struct telemetry *t);
/* Starts refreshing the readiness gauges now and every 10 s (call once
 * every component has registered its checks). */
void telemetry_start_refresh(struct telemetry *t);
void telemetry_stop_accepting(struct telemetry *t);
/* Answers what is still in flight 503 (shutdown timeout reached). */
void telemetry_abandon_in_flight(struct telemetry *t);
/* Requests whose handler has not answered yet (shutdown waits for them). */
size_t telemetry_in_flight(const struct telemetry *t);
void telemetry_free(struct telemetry *t);

#endif
