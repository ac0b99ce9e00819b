/* /api/director/ring (GET status, POST add peer, DELETE ?addr= remove
 * peer) and /api/director/ring/topology.
 *
 * This step is the single director: the ring is this replica alone, so
 * the status has one member (self, no neighbours, no link) and no
 * tombstones. Peers added here are remembered (status lists them) but no
 * link is dialled yet; the topology therefore reports every known peer as
 * `peer-unreachable` instead of leaving it out. */
#include "services/director/director-api-private.h"

#include "core/json-util.h"
#include "core/log.h"

#include <stdio.h>
#include <string.h>

#define COMPONENT "director"

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
    director_reply_ok(req);
}

static void handle_topology(struct http_request *req, void *arg)
{
    struct director_api_ctx *ctx = arg;
    json_t *issues = json_array();
    json_t *replicas = json_array();
    json_array_append_new(replicas,
                          json_pack("{s:s, s:b, s:o}", "addr", director_state_self(ctx->state),
                                    "reachable", 1, "status", director_json_ring_status(ctx)));
    for (size_t i = 0; i < director_peers_count(ctx->peers); i++) {
        const struct director_peer *p = director_peers_at(ctx->peers, i);
        json_array_append_new(replicas, json_pack("{s:s, s:b, s:s}", "addr", p->addr, "reachable",
                                                  0, "error", "not connected"));
        char detail[160];
        snprintf(detail, sizeof(detail), "peer %s is known but not connected to this replica",
                 p->addr);
        json_array_append_new(issues, json_pack("{s:s, s:s, s:s}", "severity", "error", "type",
                                                "peer-unreachable", "detail", detail));
    }
    char port_note[160];
    snprintf(port_note, sizeof(port_note),
             "peer API addresses are the ring ip plus this replica's API port (%u)", ctx->api_port);
    json_t *assumptions =
        json_pack("[s, s, s]", port_note, "every replica accepts the same bearer token",
                  "membership is per replica: each status is that replica's view");
    http_reply_json(req, 200,
                    json_pack("{s:i, s:b, s:o, s:o, s:o}", "schemaVersion", DIRECTOR_SCHEMA_VERSION,
                              "healthy", json_array_size(issues) == 0, "issues", issues, "replicas",
                              replicas, "assumptions", assumptions));
}

void director_api_register_ring(struct http_server *http, struct director_api_ctx *ctx)
{
    http_server_route(http, HTTP_GET, "/api/director/ring", 0, handle_get, ctx);
    http_server_route(http, HTTP_POST, "/api/director/ring", 0, handle_post, ctx);
    http_server_route(http, HTTP_DELETE, "/api/director/ring", 0, handle_delete, ctx);
    http_server_route(http, HTTP_GET, "/api/director/ring/topology", 0, handle_topology, ctx);
}
