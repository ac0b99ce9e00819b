/* The director admin API (director-api.h): the HTTP server, its
 * authentication, the route table, and the JSON forms the areas share. */
#include "services/director/director-api.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "net/cidr.h"
#include "services/director/director-api-private.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static json_t *json_addr_or_null(const char *addr)
{
    return addr != NULL ? json_string(addr) : json_null();
}

static json_t *json_seq(uint64_t seq)
{
    return seq > 0 ? json_integer((json_int_t)seq) : json_null();
}

static void format_rfc3339(int64_t ms, char out[32])
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_t *json_link(const struct director_api_ctx *ctx, const char *addr)
{
    struct director_link_info li;
    director_sync_link_info(ctx->sync, addr, &li);
    if (li.role == DIRECTOR_ROLE_NONE)
        return json_null();
    static const char *const roles[] = {"none", "left", "right", "both"};
    char since[32];
    if (li.connected)
        format_rfc3339(li.since_ms, since);
    return json_pack("{s:s, s:s, s:o}", "role", roles[li.role], "state",
                     li.connected ? "connected" : "reconnecting", "since",
                     li.connected ? json_string(since) : json_null());
}

json_t *director_json_ring_status(const struct director_api_ctx *ctx)
{
    /* Members: this director and its peers in ring order; each one's
     * neighbours are computed over the same order. */
    const char *self = director_state_self(ctx->state);
    size_t npeers = director_peers_count(ctx->peers);
    size_t n = npeers + 1;
    size_t me = director_peers_self_index(ctx->peers);
    const char **addrs = xcalloc(n, sizeof(*addrs));
    for (size_t i = 0, p = 0; i < n; i++)
        addrs[i] = i == me ? self : director_peers_at(ctx->peers, p++)->addr;
    json_t *members = json_array();
    for (size_t i = 0; i < n; i++) {
        bool is_self = i == me;
        const char *left = n > 1 ? addrs[(i + n - 1) % n] : NULL;
        const char *right = n > 1 ? addrs[(i + 1) % n] : NULL;
        uint64_t seq = is_self ? director_state_local_seq(ctx->state)
                               : director_sync_watermark(ctx->sync, addrs[i]);
        json_array_append_new(
            members, json_pack("{s:s, s:I, s:b, s:o, s:o, s:o, s:o}", "addr", addrs[i], "index",
                               (json_int_t)i, "self", is_self, "left", json_addr_or_null(left),
                               "right", json_addr_or_null(right), "seq", json_seq(seq), "link",
                               is_self ? json_null() : json_link(ctx, addrs[i])));
    }
    free(addrs);
    json_t *tombstones = json_array();
    const struct director_tombstones *ts = director_sync_tombstones(ctx->sync);
    int64_t now = director_state_now_ms(ctx->state);
    for (size_t i = 0; i < director_tombstones_count(ts); i++) {
        const struct director_tombstone *t = director_tombstones_at(ts, i);
        json_array_append_new(tombstones, json_pack("{s:s, s:I}", "addr", t->addr, "age_secs",
                                                    (json_int_t)((now - t->since_ms) / 1000)));
    }
    char hash[65];
    director_state_backend_set_hash(ctx->state, hash);
    return json_pack("{s:i, s:s, s:I, s:o, s:o, s:s}", "schemaVersion", DIRECTOR_SCHEMA_VERSION,
                     "self", self, "size", (json_int_t)n, "members", members, "tombstones",
                     tombstones, "backendSetHash", hash);
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
                                        struct director_sync *sync, struct petrel_error *err)
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
        .max_connections_per_ip =
            cfg->api_max_connections_per_ip > 0 ? cfg->api_max_connections_per_ip : -1,
        .token = token,
        .allowed_nets = &api->allowed,
        .tls = NULL,
        .metrics = env->metrics,
    };
    api->http = http_server_new(env->base, &opts);
    api->ctx.state = state;
    api->ctx.peers = peers;
    api->ctx.sync = sync;
    api->ctx.cfg = cfg;
    api->ctx.base = env->base;
    api->ctx.token = xstrdup(token);
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
    free(api->ctx.token);
    free(api);
}
