/* The director admin API (director-api.h): the HTTP server, its
 * authentication, the route table, and the JSON forms the areas share. */
#include "services/director/director-api.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "net/cidr.h"
#include "services/director/director-api-private.h"

#include <stdlib.h>
#include <string.h>

#define COMPONENT "director"

struct director_api {
    struct http_server *http;
    struct cidr_list allowed;
    struct director_api_ctx ctx;
};

/* ---------- shared JSON ---------- */

json_t *director_json_backend(const struct director_backend *b, bool dump)
{
    json_t *o = json_pack("{s:s, s:i, s:s, s:b, s:I}", "ip", b->ip, "port", (int)b->port, "tag",
                          b->tag, "up", b->state == RING_STATE_UP, "vhosts", (json_int_t)b->vhosts);
    if (dump)
        json_object_set_new(o, "last_updown_change", json_integer(b->last_updown_change));
    return o;
}

json_t *director_json_backends(const struct director_state *st, bool dump)
{
    const struct director_backends *reg = director_state_backends(st);
    json_t *list = json_array();
    for (size_t i = 0; i < director_backends_count(reg); i++)
        json_array_append_new(list, director_json_backend(director_backends_at(reg, i), dump));
    return list;
}

json_t *director_json_peers(const struct director_peers *peers)
{
    json_t *list = json_array();
    for (size_t i = 0; i < director_peers_count(peers); i++)
        json_array_append_new(list, json_string(director_peers_at(peers, i)->addr));
    return list;
}

json_t *director_json_ring_status(const struct director_api_ctx *ctx)
{
    /* A single director: the ring is this replica alone. The peer-sync
     * step adds the members it is linked with (left/right neighbours,
     * links, per-origin watermarks, tombstones). */
    const char *self = director_state_self(ctx->state);
    uint64_t seq = director_state_local_seq(ctx->state);
    json_t *me = json_pack("{s:s, s:i, s:b, s:n, s:n, s:o, s:n}", "addr", self, "index", 0, "self",
                           1, "left", "right", "seq",
                           seq > 0 ? json_integer((json_int_t)seq) : json_null(), "link");
    char hash[65];
    director_state_backend_set_hash(ctx->state, hash);
    return json_pack("{s:i, s:s, s:i, s:[o], s:[], s:s}", "schemaVersion", DIRECTOR_SCHEMA_VERSION,
                     "self", self, "size", 1, "members", me, "tombstones", "backendSetHash", hash);
}

void director_reply_error(struct http_request *req, const struct petrel_error *err)
{
    int status;
    switch (err->code) {
    case PETREL_ERR_NOT_FOUND:
        status = 404;
        break;
    case PETREL_ERR_EXISTS:
    case PETREL_ERR_CONFLICT:
        status = 409;
        break;
    case PETREL_ERR_UNAVAILABLE:
        status = 503;
        break;
    case PETREL_ERR_INVALID:
        status = 400;
        break;
    default:
        status = 500;
        break;
    }
    http_reply_error(req, status, "%s", err->message);
}

void director_reply_ok(struct http_request *req)
{
    static const char body[] = "{\"status\":\"ok\"}";
    http_reply(req, 200, "application/json", body, sizeof(body) - 1);
}

/* ---------- life cycle ---------- */

static unsigned port_of(const char *address)
{
    const char *colon = strrchr(address, ':');
    return colon != NULL ? (unsigned)strtoul(colon + 1, NULL, 10) : 0;
}

struct director_api *director_api_start(const struct service_env *env,
                                        const struct director_config *cfg, const char *token,
                                        struct director_state *state, struct director_peers *peers,
                                        struct petrel_error *err)
{
    struct director_api *api = xcalloc(1, sizeof(*api));
    if (!cidr_list_parse((const char *const *)cfg->api_allowed_nets, &api->allowed, err)) {
        free(api);
        return NULL;
    }
    struct http_server_options opts = {
        .name = "director-api",
        .max_body = (size_t)cfg->api_max_body_bytes,
        .timeout_ms = cfg->api_request_timeout_ms,
        .max_connections = (size_t)cfg->api_max_connections,
        .token = token,
        .allowed_nets = &api->allowed,
        .tls = NULL,
        .metrics = env->metrics,
    };
    api->http = http_server_new(env->base, &opts);
    api->ctx.state = state;
    api->ctx.peers = peers;
    api->ctx.cfg = cfg;
    director_api_register_status(api->http, &api->ctx);
    director_api_register_backends(api->http, &api->ctx);
    director_api_register_users(api->http, &api->ctx);
    director_api_register_ring(api->http, &api->ctx);
    if (!http_server_listen(api->http, cfg->api_listen, err)) {
        director_api_free(api);
        return NULL;
    }
    api->ctx.api_port = port_of(http_server_address(api->http));
    return api;
}

const char *director_api_address(const struct director_api *api)
{
    return http_server_address(api->http);
}

void director_api_stop_accepting(struct director_api *api)
{
    http_server_stop_accepting(api->http);
}

size_t director_api_in_flight(const struct director_api *api)
{
    return http_server_in_flight(api->http);
}

void director_api_abandon_in_flight(struct director_api *api)
{
    http_server_abandon_all(api->http);
}

void director_api_free(struct director_api *api)
{
    if (api == NULL)
        return;
    http_server_free(api->http);
    cidr_list_free(&api->allowed);
    free(api);
}
