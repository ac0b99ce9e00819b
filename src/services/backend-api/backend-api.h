/* The backend-plane operator HTTP API (specification document 1), default
 * :9105. This module owns the listener, authentication (allow-list before
 * bearer token from the environment), internal TLS, and the route table;
 * each API area registers its routes from its own file (api-health.c, ...). */
#ifndef PETREL_SERVICES_BACKEND_API_H
#define PETREL_SERVICES_BACKEND_API_H

#include "core/cfg-read.h"
#include "core/error.h"
#include "dict/dict.h"
#include "storage/mail-storage.h"
#include "net/http-server.h"
#include "net/service-env.h"
#include "storage/quota/quota-config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The `backend_api` configuration section. */
struct backend_api_config {
    char *listen;
    char **allowed_nets; /* NULL-terminated; NULL = every client */
    char *token_env;     /* environment variable holding the bearer token */
    char *auth_master_addr;
    /* Not a key: warden_service.listen's first entry ("" or NULL: no
     * warden), set by the configuration loader; borrowed from it. */
    const char *warden_addr;
    /* Not a key: the `quota:` section (the quota endpoints), set by the
     * configuration loader; borrowed from it. */
    const struct quota_config *quota;
    int64_t request_timeout_ms;
    int64_t stream_timeout_ms;
    int64_t max_body_bytes;
    int64_t max_connections;
    /* Start on a non-loopback address without a token (else refused). */
    bool allow_unauthenticated_remote;
    int listen_line; /* not a key: where `listen` was set, for errors (0 = default) */
    int64_t max_connections_per_ip; /* 0 = no cap */
};

/* The `backend_api:` section (docs/configuration.md): defaults, reading
 * (errors `file:line: backend_api.<key>: message`), the effective values
 * for --check-config (never the token, only whether it is set) and
 * freeing. */
void backend_api_config_defaults(struct backend_api_config *cfg);
bool backend_api_config_read(const struct cfg_ctx *ctx, const struct ynode *node,
                             struct backend_api_config *cfg);
void backend_api_config_print(const struct backend_api_config *cfg, FILE *out);
void backend_api_config_free(struct backend_api_config *cfg);

struct backend_api;

/* Binds the listener and registers every area's routes. The token is read
 * from the environment now; an empty token disables authentication (a
 * warning is logged). */
struct backend_api *backend_api_start(const struct service_env *env,
                                      const struct backend_api_config *cfg,
                                      struct dict_registry *dicts, struct mail_storage *storage,
                                      struct petrel_error *err);
const char *backend_api_address(const struct backend_api *api);
void backend_api_stop_accepting(struct backend_api *api);
size_t backend_api_in_flight(const struct backend_api *api);
/* Answers what is still in flight 503 (shutdown timeout reached). */
void backend_api_abandon_in_flight(struct backend_api *api);
void backend_api_free(struct backend_api *api);

/* Area registration (one file each). Contexts live as long as the server. */
void backend_api_register_health(struct http_server *http, const struct backend_api_config *cfg);
void backend_api_register_dict(struct http_server *http, struct dict_registry *dicts,
                               struct metrics_registry *metrics);
struct storage_api;
void backend_api_register_folder(struct http_server *http, struct storage_api *api);
void backend_api_register_index(struct http_server *http, struct storage_api *api);
void backend_api_register_subscriptions(struct http_server *http, struct storage_api *api);
void backend_api_register_specialuse(struct http_server *http, struct storage_api *api);
void backend_api_register_acl(struct http_server *http, struct storage_api *api); /* api-acl.c */
/* api-acl-index.c: acl/rebuild, acl/registry/list, acl/registry/rebuild */
void backend_api_register_acl_index(struct http_server *http, struct storage_api *api);
void backend_api_register_metadata(struct http_server *http, struct storage_api *api);
void backend_api_register_user(struct http_server *http, struct storage_api *api);
void backend_api_register_mail(struct http_server *http, struct storage_api *api);
/* quota/show, quota/recalc, quota/clone/list, quota/clone/get. */
void backend_api_register_quota(struct http_server *http, struct storage_api *storage,
                                const struct quota_config *cfg, struct dict_registry *dicts);
/* who and who/count; a NULL `warden` (none configured) answers 501. */
struct warden_client;
void backend_api_register_who(struct http_server *http, struct warden_client *warden);

#endif
