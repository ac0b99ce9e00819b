/* POST /api/director/users/{user}/move and /kick. */
#include "services/director/director-api-private.h"

#include "core/json-util.h"
#include "core/log.h"

#include <string.h>

#define COMPONENT "director"

/* The target of a move: {"backend": "<ip>:<port>"} or {"ip", "port"}. */
static bool read_target(json_t *body, char ip[46], unsigned *port, struct petrel_error *err)
{
    const char *backend = NULL, *ip_field = NULL;
    int64_t port_field = -1;
    if (!json_get_string(body, "backend", false, &backend, err) ||
        !json_get_string(body, "ip", false, &ip_field, err) ||
        !json_get_int(body, "port", false, &port_field, err))
        return false;
    if (backend != NULL) {
        if (!director_parse_addr(backend, ip, port))
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "backend must be <ip>:<port>, found '%.64s'", backend);
        return true;
    }
    if (ip_field == NULL)
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "either backend (<ip>:<port>) or ip and port is required");
    if (port_field < 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "field 'port' is required with 'ip'");
    if (port_field < 1 || port_field > 65535)
        return petrel_error_set(err, PETREL_ERR_INVALID, "port must be 1..65535");
    if (strlen(ip_field) >= 46 || !director_ip_canonical(ip_field, ip))
        return petrel_error_set(err, PETREL_ERR_INVALID, "ip '%.64s' is not an IP address",
                                ip_field);
    *port = (unsigned)port_field;
    return true;
}

static void handle_move(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    const char *user = http_request_param(req, "user");
    json_t *body = http_request_json(req);
    if (body == NULL)
        return;
    struct petrel_error err;
    char ip[46];
    unsigned port = 0;
    bool ok = read_target(body, ip, &port, &err);
    json_decref(body);
    if (!ok || !director_state_user_move(ctx->state, user, ip, port, NULL, &err)) {
        director_reply_error(req, &err);
        return;
    }
    char user_q[300];
    log_info(COMPONENT, "user moved", "user=%s backend=%s:%u",
             log_quote(user_q, sizeof(user_q), user), ip, port);
    director_reply_ok(req);
}

static void handle_kick(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    const char *user = http_request_param(req, "user");
    struct petrel_error err;
    if (!director_state_user_kick(ctx->state, user, NULL, &err)) {
        director_reply_error(req, &err);
        return;
    }
    char user_q[300];
    log_info(COMPONENT, "user kicked", "user=%s", log_quote(user_q, sizeof(user_q), user));
    director_reply_ok(req);
}

void director_api_register_users(struct http_server *http, struct director_api_ctx *ctx)
{
    http_server_route(http, HTTP_POST, "/api/director/users/{user}/move", 0, handle_move, ctx);
    http_server_route(http, HTTP_POST, "/api/director/users/{user}/kick", 0, handle_kick, ctx);
}
