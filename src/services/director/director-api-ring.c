/* /api/director/ring (GET status, POST add peer, DELETE ?addr= remove
 * peer) and /api/director/ring/topology.
 *
 * Adding or removing a peer re-derives this director's neighbours (peer
 * sync starts or stops dial loops). The topology asks every peer for its
 * GET ring at the peer's ring ip and this replica's API port, with this
 * replica's bearer token, all at once, and answers when every peer has
 * answered or failed (director.ring.peer_timeout). */
#include "services/director/director-api-private.h"

#include "core/json-util.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/http-get.h"
#include "services/director/director-topology.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMPONENT "director"
/* A peer's ring status is small; more than this is not one. */
#define TOPOLOGY_MAX_ANSWER (1024 * 1024)

static void handle_get(struct http_request *req, void *arg)
{
    http_reply_json(req, 200, director_json_ring_status(arg));
}

static void handle_post(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    json_t *body = http_request_json(req);
    if (body == NULL)
        return;
    struct petrel_error err;
    const char *addr = NULL;
    bool ok = json_get_string(body, "addr", true, &addr, &err) &&
              director_peers_add(ctx->peers, addr, false, &err);
    if (!ok) {
        json_decref(body);
        director_reply_error(req, &err);
        return;
    }
    log_info(COMPONENT, "peer added", "addr=%s", addr);
    json_decref(body);
    director_sync_refresh(ctx->sync);
    director_reply_ok(req);
}

static void handle_delete(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    const char *addr = http_request_query(req, "addr");
    struct petrel_error err;
    if (addr == NULL || *addr == '\0') {
        http_reply_error(req, 400, "query parameter 'addr' is required");
        return;
    }
    if (!director_peers_remove(ctx->peers, addr, &err)) {
        director_reply_error(req, &err);
        return;
    }
    log_info(COMPONENT, "peer removed", "addr=%s", addr);
    director_sync_refresh(ctx->sync);
    director_reply_ok(req);
}

/* ---------- topology ---------- */

struct topology_call;

struct peer_fetch {
    struct topology_call *call;
    struct http_get *get; /* NULL once answered */
    json_t *replica;               /* {addr, reachable, status|error}, filled on answer */
};

struct topology_call {
    struct director_api_ctx *ctx;
    struct http_request *req;
    json_t *replicas; /* self first, then one per peer (owned) */
    struct peer_fetch *fetches;
    size_t count;
    size_t pending;
};

static void call_free(struct topology_call *call)
{
    for (size_t i = 0; i < call->count; i++)
        http_get_cancel(call->fetches[i].get);
    free(call->fetches);
    json_decref(call->replicas);
    free(call);
}

static void topology_reply(struct topology_call *call)
{
    struct director_api_ctx *ctx = call->ctx;
    json_t *issues = director_topology_issues(call->replicas);
    char port_note[160];
    snprintf(port_note, sizeof(port_note),
             "peer API addresses are the ring ip plus this replica's API port (%u)", ctx->api_port);
    json_t *assumptions =
        json_pack("[s, s, s]", port_note, "every replica accepts the same bearer token",
                  "membership is per replica: each status is that replica's view");
    bool healthy = director_topology_healthy(issues);
    http_reply_json(call->req, 200,
                    json_pack("{s:i, s:b, s:o, s:O, s:o}", "schemaVersion", DIRECTOR_SCHEMA_VERSION,
                              "healthy", healthy, "issues", issues, "replicas", call->replicas,
                              "assumptions", assumptions));
    call_free(call);
}

static void fetch_done(int status, const char *body, size_t len, const char *error, void *arg)
{
    struct peer_fetch *f = arg;
    struct topology_call *call = f->call;
    f->get = NULL; /* it frees itself after this callback */
    char why[200];
    json_t *st = NULL;
    if (status == 200) {
        st = json_loadb(body, len, 0, NULL);
        if (!json_is_object(st)) {
            json_decref(st);
            st = NULL;
            snprintf(why, sizeof(why), "the answer is not a ring status");
        }
    } else if (status != 0) {
        snprintf(why, sizeof(why), "GET /api/director/ring answered %d", status);
    } else {
        snprintf(why, sizeof(why), "%s", error != NULL ? error : "no answer");
    }
    if (st != NULL) {
        json_object_set_new(f->replica, "reachable", json_true());
        json_object_set_new(f->replica, "status", st);
    } else {
        json_object_set_new(f->replica, "reachable", json_false());
        json_object_set_new(f->replica, "error", json_string(why));
    }
    if (--call->pending == 0)
        topology_reply(call);
}

static void topology_cancel(struct http_request *req, enum http_cancel_reason why, void *arg)
{
    (void)req;
    (void)why;
    call_free(arg);
}

/* The peer's API address: its ring ip and this replica's API port. */
static void api_addr_of(const struct director_peer *p, unsigned api_port, char out[80])
{
    if (strchr(p->ip, ':') != NULL)
        snprintf(out, 80, "[%s]:%u", p->ip, api_port);
    else
        snprintf(out, 80, "%s:%u", p->ip, api_port);
}

static void handle_topology(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    struct topology_call *call = xcalloc(1, sizeof(*call));
    call->ctx = ctx;
    call->req = req;
    call->replicas = json_array();
    json_array_append_new(call->replicas,
                          json_pack("{s:s, s:b, s:o}", "addr", director_state_self(ctx->state),
                                    "reachable", 1, "status", director_json_ring_status(ctx)));
    call->count = director_peers_count(ctx->peers);
    if (call->count == 0) {
        topology_reply(call);
        return;
    }
    call->fetches = xcalloc(call->count, sizeof(*call->fetches));
    call->pending = call->count;
    for (size_t i = 0; i < call->count; i++) {
        const struct director_peer *p = director_peers_at(ctx->peers, i);
        struct peer_fetch *f = &call->fetches[i];
        f->call = call;
        f->replica = json_pack("{s:s}", "addr", p->addr);
        json_array_append_new(call->replicas, f->replica); /* the array owns it */
        char api[80];
        api_addr_of(p, ctx->api_port, api);
        f->get = http_get_start(ctx->base, api, "/api/director/ring", ctx->token,
                                         ctx->cfg->ring_peer_timeout_ms, TOPOLOGY_MAX_ANSWER,
                                         fetch_done, f);
    }
    http_request_set_cancel(req, topology_cancel, call);
}

void director_api_register_ring(struct http_server *http, struct director_api_ctx *ctx)
{
    http_server_route(http, HTTP_GET, "/api/director/ring", 0, handle_get, ctx);
    http_server_route(http, HTTP_POST, "/api/director/ring", 0, handle_post, ctx);
    http_server_route(http, HTTP_DELETE, "/api/director/ring", 0, handle_delete, ctx);
    http_server_route(http, HTTP_GET, "/api/director/ring/topology", 0, handle_topology, ctx);
}
