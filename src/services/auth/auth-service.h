/* The `auth` component: the one place that checks passwords and answers
 * user lookups for every other component. It listens on TCP and/or Unix
 * sockets (auth.listen) and speaks the line protocol of auth-protocol.h.
 * The event loop parses requests, answers from the cache and applies
 * failed-login delays; passdb/userdb lookups and password hashing run on a
 * worker pool with a bounded queue, so one slow hash never stalls the other
 * clients. */
#ifndef PETREL_SERVICES_AUTH_SERVICE_H
#define PETREL_SERVICES_AUTH_SERVICE_H

#include "core/cfg-read.h"
#include "core/error.h"
#include "services/auth/auth-cache.h"
#include "services/auth/auth-db.h"
#include "clients/auth/auth-penalty.h"
#include "net/service-env.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The `auth:` configuration section (docs/configuration.md). */
struct auth_config {
    char **listen;       /* NULL-terminated addresses; "unix:/path" or "host:port" */
    char **allowed_nets; /* TCP clients allowed to connect */
    int64_t socket_mode; /* permissions of Unix sockets */
    int64_t worker_threads;
    int64_t max_queue;
    int64_t max_connections;
    int64_t max_connections_per_ip; /* 0 = no cap */
    int64_t max_pending_per_connection;
    int64_t handshake_timeout_ms; /* until the first request; 0 = none */
    int64_t idle_timeout_ms;
    char **mechanisms; /* SASL mechanisms offered: PLAIN, LOGIN */
    struct auth_cache_config cache;
    struct auth_penalty_config penalty;
    char *warden_addr; /* "" = failure counts in this process; else shared in the warden */
    /* Client addresses exempt from the per-address delays and limit (the
     * monitor, proxies that do not pass the client's address on). */
    char **trusted_networks;
    /* TCP peers whose `ip=` is believed; for others the peer's own address
     * is used. Unix-socket peers are always believed. */
    char **trusted_clients;
    bool has_passdb;
    struct auth_db_config passdb;
    bool has_userdb; /* without one, the passdb's records answer USER */
    struct auth_db_config userdb;
};

void auth_config_defaults(struct auth_config *cfg);
/* Reads `node` (the `auth:` map; NULL keeps the defaults). `required`:
 * the component is enabled, so a passdb must be configured. */
bool auth_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                      struct auth_config *cfg);
void auth_config_free(struct auth_config *cfg);
void auth_config_print(const struct auth_config *cfg, FILE *out);

struct auth_service;

/* Opens the drivers, starts the workers and binds every listener. Failed
 * logins are counted in `penalty` (made by the caller: the in-process
 * store or the warden's, see auth.warden_addr), which the service owns from
 * this call on, also when it fails. */
struct auth_service *auth_service_start(const struct service_env *env,
                                        const struct auth_config *cfg,
                                        struct auth_penalty_store penalty, struct petrel_error *err);
/* The first listener's address ("127.0.0.1:10200", "unix:/run/petrel/auth"). */
const char *auth_service_address(const struct auth_service *svc);
/* Closes the listeners; open connections keep being served. */
void auth_service_stop_accepting(struct auth_service *svc);
/* Requests accepted and not yet answered. */
size_t auth_service_in_flight(const struct auth_service *svc);
void auth_service_free(struct auth_service *svc);

#endif
