/* What the admin API's areas share: the context every route gets, the
 * JSON forms of backends, mappings and the ring status, and one
 * registration function per area (one file each). */
#ifndef PETREL_SERVICES_DIRECTOR_API_PRIVATE_H
#define PETREL_SERVICES_DIRECTOR_API_PRIVATE_H

#include "net/http-server.h"
#include "services/director/director-config.h"
#include "services/director/director-peers.h"
#include "services/director/director-state.h"
#include "services/director/director-sync.h"

#include <jansson.h>
#include <stdbool.h>

#define DIRECTOR_SCHEMA_VERSION 1

struct director_api_ctx {
    struct director_state *state;
    struct director_peers *peers;
    struct director_sync *sync;
    const struct director_config *cfg;
    struct event_base *base;
    char *token;       /* the shared bearer token (topology asks peers with it) */
    unsigned api_port; /* this replica's API port (topology: peers use the same) */
};

/* {ip, port, tag, up, vhosts} plus last_updown_change when `dump`. */
json_t *director_json_backend(const struct director_backend *b, bool dump);
/* Every backend, in (address, port) order. */
json_t *director_json_backends(const struct director_state *st, bool dump);
/* The peers' ring addresses. */
json_t *director_json_peers(const struct director_peers *peers);
/* The Ring status object of GET /api/director/ring. */
json_t *director_json_ring_status(const struct director_api_ctx *ctx);

/* Replies 400/404/409/503 for a petrel_error. */
void director_reply_error(struct http_request *req, const struct petrel_error *err);
/* {"status": "ok"} */
void director_reply_ok(struct http_request *req);

void director_api_register_status(struct http_server *http, struct director_api_ctx *ctx);
void director_api_register_backends(struct http_server *http, struct director_api_ctx *ctx);
void director_api_register_users(struct http_server *http, struct director_api_ctx *ctx);
void director_api_register_ring(struct http_server *http, struct director_api_ctx *ctx);

#endif
