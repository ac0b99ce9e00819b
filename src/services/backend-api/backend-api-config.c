/* The `backend_api:` configuration section (backend-api.h). */
#include "services/backend-api/backend-api.h"

#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "net/listen-config.h"

#include <stdlib.h>

void backend_api_config_defaults(struct backend_api_config *b)
{
    /* Loopback by default (the spec says ":9105"): the operator API must
     * not be reachable from other hosts until someone chooses so
     * (docs/decisions.md). */
    b->listen = xstrdup("127.0.0.1:9105");
    b->token_env = xstrdup("BACKEND_API_TOKEN");
    b->auth_master_addr = xstrdup("");
    b->request_timeout_ms = 30000;
    b->stream_timeout_ms = 300000;
    b->max_body_bytes = 1024 * 1024;
    b->max_connections = 4096;
    b->max_connections_per_ip = 128;
}

bool backend_api_config_read(const struct cfg_ctx *ctx, const struct ynode *node,
                             struct backend_api_config *b)
{
    static const char *const keys[] = {"listen",
                                       "allowed_nets",
                                       "token_env",
                                       "auth_master_addr",
                                       "request_timeout",
                                       "stream_timeout",
                                       "max_body_bytes",
                                       "max_connections",
                                       "max_connections_per_ip",
                                       "allow_unauthenticated_remote",
                                       NULL};
    const char *p = "backend_api";
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    const struct ynode *listen = ynode_get(node, "listen");
    if (listen != NULL)
        b->listen_line = listen->line;
    return cfg_string(ctx, node, p, "listen", &b->listen) &&
           cfg_bool(ctx, node, p, "allow_unauthenticated_remote",
                    &b->allow_unauthenticated_remote) &&
           listen_config_check_address(ctx, node, p, "listen", b->listen) &&
           listen_config_read_nets(ctx, node, p, &b->allowed_nets) &&
           cfg_string(ctx, node, p, "token_env", &b->token_env) &&
           cfg_string(ctx, node, p, "auth_master_addr", &b->auth_master_addr) &&
           /* the form the auth client dials, checked here for file:line */
           listen_config_check_target(ctx, node, p, "auth_master_addr", b->auth_master_addr,
                                      NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_ANY_OK) &&
           cfg_duration_ms(ctx, node, p, "request_timeout", 100, 3600000, &b->request_timeout_ms) &&
           cfg_duration_ms(ctx, node, p, "stream_timeout", 100, 86400000, &b->stream_timeout_ms) &&
           listen_config_read_api_limits(ctx, node, p, 64 * 1024 * 1024, &b->max_body_bytes,
                                         &b->max_connections, &b->max_connections_per_ip);
}

void backend_api_config_print(const struct backend_api_config *b, FILE *out)
{
    const char *token = getenv(b->token_env);
    fputs("backend_api:\n", out);
    yaml_put_kv(out, "  ", "listen", b->listen);
    yaml_put_list(out, "  ", "allowed_nets", b->allowed_nets);
    /* Never the token itself: only whether it is set. */
    fprintf(out, "  # %s\n",
            token != NULL && *token != '\0' ? "token set" : "token unset: auth disabled");
    yaml_put_kv(out, "  ", "token_env", b->token_env);
    yaml_put_kv(out, "  ", "auth_master_addr", b->auth_master_addr);
    fprintf(out, "  request_timeout: %lldms\n  stream_timeout: %lldms\n",
            (long long)b->request_timeout_ms, (long long)b->stream_timeout_ms);
    listen_config_print_api_limits(out, "  ", b->max_body_bytes, b->max_connections,
                                   b->max_connections_per_ip, b->allow_unauthenticated_remote);
}

void backend_api_config_free(struct backend_api_config *b)
{
    free(b->listen);
    cfg_strv_free(b->allowed_nets);
    free(b->token_env);
    free(b->auth_master_addr);
}
