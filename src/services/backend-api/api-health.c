/* GET /api/backend/health (public: liveness probes come from the node) and
 * GET /api/backend/version. */
#include "services/backend-api/backend-api.h"

#include "version.h"

static void handle_health(struct http_request *req, void *ctx)
{
    (void)ctx;
    static const char body[] = "{\"status\":\"ok\"}";
    http_reply(req, 200, "application/json", body, sizeof(body) - 1);
}

static void handle_version(struct http_request *req, void *ctx)
{
    (void)ctx;
    http_reply_json(req, 200, json_pack("{s:s, s:i}", "version", PETREL_VERSION, "api", 1));
}

void backend_api_register_health(struct http_server *http, const struct backend_api_config *cfg)
{
    (void)cfg;
    http_server_route(http, HTTP_GET, "/api/backend/health", HTTP_ROUTE_PUBLIC, handle_health,
                      NULL);
    http_server_route(http, HTTP_GET, "/api/backend/version", 0, handle_version, NULL);
}
