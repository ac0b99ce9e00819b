#include "services/backend-api/backend-api.h"

#include "core/log.h"
#include "services/backend-api/api-storage.h"
#include "core/xalloc.h"
#include "clients/auth/auth-client.h"
#include "clients/warden/warden-client.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COMPONENT "backend-api"
/* Bounds one user/info or user/iterate call to the auth service. */
#define BACKEND_API_AUTH_TIMEOUT_MS 10000
/* Bounds one who or who/count call to the warden. */
#define BACKEND_API_WARDEN_TIMEOUT_MS 10000

struct backend_api {
    struct http_server *http;
    struct cidr_list allowed;
    struct storage_api storage;
    struct warden_client *warden; /* NULL without warden_service.listen */
};

struct backend_api *backend_api_start(const struct service_env *env,
                                      const struct backend_api_config *cfg,
                                      struct dict_registry *dicts, struct mail_storage *storage,
                                      struct petrel_error *err)
{
    struct backend_api *api = xcalloc(1, sizeof(*api));
    if (!cidr_list_parse((const char *const *)cfg->allowed_nets, &api->allowed, err)) {
        free(api);
        return NULL;
    }
    const char *token = getenv(cfg->token_env);
    if ((token == NULL || *token == '\0') && cfg->allow_unauthenticated_remote)
        log_warn(COMPONENT, "API authentication disabled on a listener other hosts may reach",
                 "reason=\"%s is empty and backend_api.allow_unauthenticated_remote is set\" "
                 "listen=%s",
                 cfg->token_env, cfg->listen);
    else if (token == NULL || *token == '\0')
        log_warn(COMPONENT, "API authentication disabled",
                 "reason=\"%s is empty\" hint=\"set it in production\"", cfg->token_env);
    struct http_server_options opts = {
        .name = COMPONENT,
        .max_body = (size_t)cfg->max_body_bytes,
        .timeout_ms = cfg->request_timeout_ms,
        .stream_timeout_ms = cfg->stream_timeout_ms,
        .max_connections = (size_t)cfg->max_connections,
        .max_connections_per_ip = cfg->max_connections_per_ip > 0 ? cfg->max_connections_per_ip : -1,
        .token = token,
        .allowed_nets = &api->allowed,
        .tls = env->internal_tls,
        .metrics = env->metrics,
    };
    api->http = http_server_new(env->base, &opts);
    backend_api_register_health(api->http, cfg);
    backend_api_register_dict(api->http, dicts, env->metrics);
    api->storage.storage = storage;
    if (cfg->auth_master_addr != NULL && *cfg->auth_master_addr != '\0') {
        api->storage.auth = auth_client_new(env->base, cfg->auth_master_addr,
                                            BACKEND_API_AUTH_TIMEOUT_MS, err);
        if (api->storage.auth == NULL) {
            backend_api_free(api);
            return NULL;
        }
    }
    backend_api_register_folder(api->http, &api->storage);
    backend_api_register_index(api->http, &api->storage);
    backend_api_register_subscriptions(api->http, &api->storage);
    backend_api_register_specialuse(api->http, &api->storage);
    backend_api_register_acl(api->http, &api->storage);
    backend_api_register_acl_index(api->http, &api->storage);
    backend_api_register_metadata(api->http, &api->storage);
    backend_api_register_user(api->http, &api->storage);
    backend_api_register_mail(api->http, &api->storage);
    if (cfg->quota != NULL)
        backend_api_register_quota(api->http, &api->storage, cfg->quota, dicts);
    if (cfg->warden_addr != NULL && *cfg->warden_addr != '\0') {
        char host[256] = "localhost", instance[160];
        gethostname(host, sizeof(host) - 1);
        snprintf(instance, sizeof(instance), "backend-api@%.54s:%.60s", host, cfg->listen);
        api->warden = warden_client_new(env->base, cfg->warden_addr, instance,
                                        BACKEND_API_WARDEN_TIMEOUT_MS, err);
        if (api->warden == NULL) {
            backend_api_free(api);
            return NULL;
        }
    }
    backend_api_register_who(api->http, api->warden);
    if (!http_server_listen(api->http, cfg->listen, err)) {
        backend_api_free(api);
        return NULL;
    }
    readiness_add_tcp(env->readiness, "backend-api-listener", http_server_address(api->http),
                      env->internal_tls != NULL, env->tls_client_cert, env->tls_client_key);
    log_info(COMPONENT, "listening", "addr=%s tls=%s auth=%s", http_server_address(api->http),
             env->internal_tls != NULL ? "on" : "off",
             token != NULL && *token != '\0' ? "token" : "off");
    return api;
}

const char *backend_api_address(const struct backend_api *api)
{
    return http_server_address(api->http);
}

void backend_api_stop_accepting(struct backend_api *api)
{
    http_server_stop_accepting(api->http);
}

void backend_api_abandon_in_flight(struct backend_api *api)
{
    http_server_abandon_all(api->http);
}

size_t backend_api_in_flight(const struct backend_api *api)
{
    return http_server_in_flight(api->http);
}

void backend_api_free(struct backend_api *api)
{
    if (api == NULL)
        return;
    /* Pending auth calls answer their HTTP requests (with an error) while
     * the server still exists. */
    auth_client_free(api->storage.auth);
    warden_client_free(api->warden);
    http_server_free(api->http);
    cidr_list_free(&api->allowed);
    free(api);
}
