/* The `warden_service:` configuration section. */
#include "services/warden/warden-config.h"

#include "core/cfg-read.h"
#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "net/listen-config.h"
#include "clients/warden/warden-protocol.h"

#include <stdlib.h>
#include <string.h>

#define WARDEN_MAX_LISTEN 16
#define SECTION "warden_service"

void warden_config_defaults(struct warden_config *cfg)
{
    static const char *const none[] = {NULL};
    static const char *const nets[] = {"127.0.0.0/8", "::1/128", NULL};
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen = cfg_strv_dup(none);
    cfg->allowed_nets = cfg_strv_dup(nets);
    cfg->socket_mode = 0660; /* owner and group, as auth and LMTP */
    cfg->max_connections = 1024;
    cfg->max_connections_per_ip = 128;
    cfg->handshake_timeout_ms = 10000;
    cfg->max_sessions = 1000000;
    cfg->max_line_length = 16384;
    cfg->penalty_decay_ms = 300 * 1000;
    cfg->penalty_max_ips = 100000;
}

void warden_config_free(struct warden_config *cfg)
{
    cfg_strv_free(cfg->listen);
    cfg_strv_free(cfg->allowed_nets);
    memset(cfg, 0, sizeof(*cfg));
}

/* After listen_config_read_server(): an enabled warden listens somewhere. */
static bool check_listen_count(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                               size_t count)
{
    if (count == 0 && required)
        return cfg_fail_key(ctx, node, "listen", SECTION ".listen",
                            "the warden component needs an address to listen on");
    return true;
}

bool warden_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                        struct warden_config *cfg)
{
    static const char *const keys[] = {LISTEN_CONFIG_SERVER_KEYS, "max_sessions",
                                       "max_line_length",         "penalty_decay",
                                       "penalty_max_ips",         NULL};
    const struct listen_config_server server = LISTEN_CONFIG_SERVER_OF(cfg);
    const char *p = SECTION;
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    size_t listen_count = 0;
    return listen_config_read_server(ctx, node, p, WARDEN_MAX_LISTEN, &server, &listen_count) &&
           check_listen_count(ctx, node, required, listen_count) &&
           cfg_int(ctx, node, p, "max_sessions", 1, 100000000, &cfg->max_sessions) &&
           cfg_int(ctx, node, p, "max_line_length", WARDEN_LINE_MIN, WARDEN_LINE_MAX,
                   &cfg->max_line_length) &&
           cfg_duration_ms(ctx, node, p, "penalty_decay", 1000, 86400000, &cfg->penalty_decay_ms) &&
           cfg_int(ctx, node, p, "penalty_max_ips", 1, 100000000, &cfg->penalty_max_ips);
}

void warden_config_print(const struct warden_config *cfg, FILE *out)
{
    fputs(SECTION ":\n", out);
    listen_config_print_server(out, "  ", cfg->listen, cfg->allowed_nets, cfg->socket_mode,
                               cfg->max_connections, cfg->max_connections_per_ip,
                               cfg->handshake_timeout_ms);
    fprintf(out, "  max_sessions: %lld\n  max_line_length: %lld\n", (long long)cfg->max_sessions,
            (long long)cfg->max_line_length);
    fprintf(out, "  penalty_decay: %lldms\n  penalty_max_ips: %lld\n",
            (long long)cfg->penalty_decay_ms, (long long)cfg->penalty_max_ips);
}

const char *warden_config_client_address(const struct warden_config *cfg)
{
    return cfg->listen != NULL && cfg->listen[0] != NULL ? cfg->listen[0] : "";
}
