/* GET /api/director/status, /dump and /map (with or without ?user=). */
#include "services/director/director-api-private.h"

#include <string.h>

static void handle_status(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    http_reply_json(req, 200,
                    json_pack("{s:o, s:o}", "backends", director_json_backends(ctx->state, false),
                              "peers", director_json_peers(ctx->peers)));
}

struct users_walk {
    json_t *list;
    bool dump;
    int64_t now_ms;
    int64_t expire_ms;
};

static void add_user(const struct director_user *u, void *arg)
{
    struct users_walk *w = arg;
    char host[80];
    director_backend_address(u->backend, host, sizeof(host));
    json_t *o =
        json_pack("{s:I, s:s, s:b}", "hash", (json_int_t)u->hash, "host", host, "weak", u->weak);
    if (w->dump) {
        /* With sessions the mapping lives on: it expires at the earliest
         * user_expire after now. */
        int64_t at = u->sessions > 0 ? w->now_ms + w->expire_ms : u->expires_at_ms;
        json_object_set_new(o, "expires_at", json_integer(at / 1000));
    }
    json_array_append_new(w->list, o);
}

static json_t *users_json(const struct director_api_ctx *ctx, bool dump)
{
    const struct director_users *users = director_state_users(ctx->state);
    struct users_walk w = {
        .list = json_array(),
        .dump = dump,
        .now_ms = director_state_now_ms(ctx->state),
        .expire_ms = director_users_expire_ms(users),
    };
    director_users_foreach_mapped(users, w.now_ms, add_user, &w);
    return w.list;
}

static void handle_dump(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    http_reply_json(req, 200,
                    json_pack("{s:o, s:o, s:o}", "backends",
                              director_json_backends(ctx->state, true), "users",
                              users_json(ctx, true), "peers", director_json_peers(ctx->peers)));
}

/* ?user=: the live ring lookup, read-only (it records nothing). */
static void map_user(struct http_request *req, struct director_api_ctx *ctx, const char *user)
{
    const char *tag = http_request_query(req, "tag");
    struct director_lookup res;
    director_state_lookup(ctx->state, user, strlen(user), tag != NULL ? tag : "", false, &res);
    switch (res.outcome) {
    case RING_OUTCOME_BAD_REQUEST:
        http_reply_error(req, 400, "%s", res.error);
        return;
    case RING_OUTCOME_NO_BACKENDS:
        http_reply_error(req, 503, "no backends available");
        return;
    default:
        http_reply_json(req, 200,
                        json_pack("{s:s, s:s, s:i, s:s}", "user", user, "backend", res.backend->ip,
                                  "port", (int)res.backend->port, "tag", res.backend->tag));
    }
}

static void handle_map(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    const char *user = http_request_query(req, "user");
    if (user != NULL) {
        map_user(req, ctx, user);
        return;
    }
    http_reply_json(req, 200, json_pack("{s:o}", "users", users_json(ctx, false)));
}

void director_api_register_status(struct http_server *http, struct director_api_ctx *ctx)
{
    http_server_route(http, HTTP_GET, "/api/director/status", 0, handle_status, ctx);
    http_server_route(http, HTTP_GET, "/api/director/dump", 0, handle_dump, ctx);
    http_server_route(http, HTTP_GET, "/api/director/map", 0, handle_map, ctx);
}
