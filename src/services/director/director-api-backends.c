/* /api/director/backends: list, add, change vhosts, remove, and the state
 * operations up, down and flush (each also for `all`). */
#include "services/director/director-api-private.h"

#include "core/json-util.h"
#include "core/log.h"
#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

#define COMPONENT "director"
#define DEFAULT_VHOSTS 100

static void handle_list(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    http_reply_json(req, 200,
                    json_pack("{s:o}", "backends", director_json_backends(ctx->state, false)));
}

/* The {ip} segment: "all" or an IP literal; anything else is a 404 (no
 * backend can have that address). */
static bool is_all(const char *ip)
{
    return strcmp(ip, "all") == 0;
}

static void handle_add(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    json_t *body = http_request_json(req);
    if (body == NULL)
        return;
    struct petrel_error err;
    const char *ip = NULL, *tag = "";
    int64_t port = 0, vhosts = DEFAULT_VHOSTS;
    if (!json_get_string(body, "ip", true, &ip, &err) ||
        !json_get_int(body, "port", true, &port, &err) ||
        !json_get_string(body, "tag", false, &tag, &err) ||
        !json_get_int(body, "vhosts", false, &vhosts, &err)) {
        json_decref(body);
        http_reply_error(req, 400, "%s", err.message);
        return;
    }
    if (port < 1 || port > 65535) {
        json_decref(body);
        http_reply_error(req, 400, "port must be 1..65535");
        return;
    }
    const struct director_state_config *sc = director_state_config(ctx->state);
    if (vhosts < 0 || vhosts > (int64_t)sc->max_vhosts) {
        json_decref(body);
        http_reply_error(req, 400, "vhosts must be 0..%u", (unsigned)sc->max_vhosts);
        return;
    }
    if (!director_state_backend_add(ctx->state, ip, (unsigned)port, tag, (uint32_t)vhosts, NULL,
                                    &err)) {
        json_decref(body);
        director_reply_error(req, &err);
        return;
    }
    log_info(COMPONENT, "backend added", "ip=%s port=%lld vhosts=%lld", ip, (long long)port,
             (long long)vhosts);
    json_decref(body);
    director_reply_ok(req);
}

static void handle_patch(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    const char *ip = http_request_param(req, "ip");
    json_t *body = http_request_json(req);
    if (body == NULL)
        return;
    struct petrel_error err;
    int64_t vhosts = 0;
    bool ok = json_get_int(body, "vhosts", true, &vhosts, &err);
    json_decref(body);
    if (!ok) {
        http_reply_error(req, 400, "%s", err.message);
        return;
    }
    const struct director_state_config *sc = director_state_config(ctx->state);
    if (vhosts < 0 || vhosts > (int64_t)sc->max_vhosts) {
        /* An unknown backend is still a 404, whatever the body says. */
        if (director_backends_find(director_state_backends(ctx->state), ip) == NULL)
            http_reply_error(req, 404, "backend not found: %s", ip);
        else
            http_reply_error(req, 400, "vhosts must be 0..%u", (unsigned)sc->max_vhosts);
        return;
    }
    if (!director_state_backend_set_vhosts(ctx->state, ip, (uint32_t)vhosts, NULL, &err)) {
        director_reply_error(req, &err);
        return;
    }
    log_info(COMPONENT, "backend vhosts changed", "ip=%s vhosts=%lld", ip, (long long)vhosts);
    director_reply_ok(req);
}

static void handle_delete(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    const char *ip = http_request_param(req, "ip");
    struct petrel_error err;
    if (!director_state_backend_remove(ctx->state, ip, NULL, &err)) {
        director_reply_error(req, &err);
        return;
    }
    log_info(COMPONENT, "backend removed", "ip=%s", ip);
    director_reply_ok(req);
}

/* Copies the backends' ips first: a state change may not move them, but
 * the list must not be walked while changing it. */
static size_t all_ips(const struct director_api_ctx *ctx, char (**ips)[DIRECTOR_IP_MAX])
{
    const struct director_backends *reg = director_state_backends(ctx->state);
    size_t n = director_backends_count(reg);
    *ips = xcalloc(n + 1, DIRECTOR_IP_MAX);
    for (size_t i = 0; i < n; i++)
        memcpy((*ips)[i], director_backends_at(reg, i)->ip, DIRECTOR_IP_MAX);
    return n;
}

static void set_state(struct http_request *req, struct director_api_ctx *ctx,
                      enum ring_backend_state state)
{
    const char *ip = http_request_param(req, "ip");
    struct petrel_error err;
    if (is_all(ip)) {
        char(*ips)[DIRECTOR_IP_MAX];
        size_t n = all_ips(ctx, &ips);
        for (size_t i = 0; i < n; i++)
            director_state_backend_set_state(ctx->state, ips[i], state, NULL, NULL);
        free(ips);
    } else if (!director_state_backend_set_state(ctx->state, ip, state, NULL, &err)) {
        director_reply_error(req, &err);
        return;
    }
    log_info(COMPONENT, state == RING_STATE_UP ? "backend up" : "backend down", "ip=%s", ip);
    director_reply_ok(req);
}

static void handle_up(struct http_request *req, void *arg)
{
    set_state(req, arg, RING_STATE_UP);
}

static void handle_down(struct http_request *req, void *arg)
{
    set_state(req, arg, RING_STATE_FLUSH);
}

static void handle_flush(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    const char *ip = http_request_param(req, "ip");
    struct petrel_error err;
    size_t flushed = 0;
    if (is_all(ip)) {
        char(*ips)[DIRECTOR_IP_MAX];
        size_t n = all_ips(ctx, &ips);
        for (size_t i = 0; i < n; i++) {
            size_t one = 0;
            director_state_backend_flush(ctx->state, ips[i], NULL, &one, NULL);
            flushed += one;
        }
        free(ips);
    } else if (!director_state_backend_flush(ctx->state, ip, NULL, &flushed, &err)) {
        director_reply_error(req, &err);
        return;
    }
    log_info(COMPONENT, "backend flushed", "ip=%s users_flushed=%zu", ip, flushed);
    http_reply_json(req, 200,
                    json_pack("{s:s, s:I}", "status", "ok", "users_flushed", (json_int_t)flushed));
}

void director_api_register_backends(struct http_server *http, struct director_api_ctx *ctx)
{
    http_server_route(http, HTTP_GET, "/api/director/backends", 0, handle_list, ctx);
    http_server_route(http, HTTP_POST, "/api/director/backends", 0, handle_add, ctx);
    http_server_route(http, HTTP_PATCH, "/api/director/backends/{ip}", 0, handle_patch, ctx);
    http_server_route(http, HTTP_DELETE, "/api/director/backends/{ip}", 0, handle_delete, ctx);
    http_server_route(http, HTTP_POST, "/api/director/backends/{ip}/up", 0, handle_up, ctx);
    http_server_route(http, HTTP_POST, "/api/director/backends/{ip}/down", 0, handle_down, ctx);
    http_server_route(http, HTTP_POST, "/api/director/backends/{ip}/flush", 0, handle_flush, ctx);
}
