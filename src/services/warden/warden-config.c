/* The `warden_service:` configuration section. */
#include "services/warden/warden-config.h"

#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "net/cidr.h"
#include "net/sockaddr.h"
#include "services/warden/warden-protocol.h"

#include <stdlib.h>
#include <string.h>

#define WARDEN_MAX_LISTEN 16
#define SECTION "warden_service"

static char **strv(const char *const *items)
{
    size_t n = 0;
    while (items[n] != NULL)
        n++;
    char **v = xcalloc(n + 1, sizeof(char *));
    for (size_t i = 0; i < n; i++)
        v[i] = xstrdup(items[i]);
    return v;
}

void warden_config_defaults(struct warden_config *cfg)
{
    static const char *const none[] = {NULL};
    static const char *const nets[] = {"127.0.0.0/8", "::1/128", NULL};
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen = strv(none);
    cfg->allowed_nets = strv(nets);
    cfg->socket_mode = 0666;
    cfg->max_connections = 1024;
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

static const struct ynode *item_node(const struct ynode *map, const char *key, size_t i)
{
    const struct ynode *list = ynode_get(map, key);
    if (list != NULL && list->type == YNODE_SEQ && i < list->count)
        return list->items[i];
    return list;
}

static bool check_listen(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                         char **listen)
{
    size_t n = 0;
    for (; listen != NULL && listen[n] != NULL; n++) {
        struct petrel_error e;
        struct net_addr addr;
        if (!net_addr_parse(listen[n], &addr, &e))
            return cfg_fail(ctx, item_node(node, "listen", n), SECTION ".listen", "%s", e.message);
    }
    if (n == 0 && required) {
        const struct ynode *at = ynode_get(node, "listen");
        return cfg_fail(ctx, at != NULL ? at : node, SECTION ".listen",
                        "the warden component needs an address to listen on");
    }
    return true;
}

static bool check_nets(const struct cfg_ctx *ctx, const struct ynode *node, char **nets)
{
    for (size_t i = 0; nets != NULL && nets[i] != NULL; i++) {
        struct petrel_error e;
        struct cidr c;
        if (!cidr_parse(nets[i], &c, &e))
            return cfg_fail(ctx, item_node(node, "allowed_nets", i), SECTION ".allowed_nets", "%s",
                            e.message);
    }
    return true;
}

static bool read_socket_mode(const struct cfg_ctx *ctx, const struct ynode *node,
                             struct warden_config *cfg)
{
    char *text = NULL;
    if (!cfg_string(ctx, node, SECTION, "socket_mode", &text))
        return false;
    if (text == NULL)
        return true;
    char *end = NULL;
    long mode = strtol(text, &end, 8);
    bool ok = *text != '\0' && *end == '\0' && mode >= 0 && mode <= 0777;
    free(text);
    if (!ok)
        return cfg_fail(ctx, ynode_get(node, "socket_mode"), SECTION ".socket_mode",
                        "expected an octal mode such as \"0660\"");
    cfg->socket_mode = mode;
    return true;
}

bool warden_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                        struct warden_config *cfg)
{
    static const char *const keys[] = {"listen",          "allowed_nets",    "socket_mode",
                                       "max_connections", "max_sessions",    "max_line_length",
                                       "penalty_decay",   "penalty_max_ips", NULL};
    const char *p = SECTION;
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    return cfg_string_list(ctx, node, p, "listen", WARDEN_MAX_LISTEN, &cfg->listen, NULL) &&
           check_listen(ctx, node, required, cfg->listen) &&
           cfg_string_list(ctx, node, p, "allowed_nets", 256, &cfg->allowed_nets, NULL) &&
           check_nets(ctx, node, cfg->allowed_nets) && read_socket_mode(ctx, node, cfg) &&
           cfg_int(ctx, node, p, "max_connections", 1, 1000000, &cfg->max_connections) &&
           cfg_int(ctx, node, p, "max_sessions", 1, 100000000, &cfg->max_sessions) &&
           cfg_int(ctx, node, p, "max_line_length", WARDEN_LINE_MIN, WARDEN_LINE_MAX,
                   &cfg->max_line_length) &&
           cfg_duration_ms(ctx, node, p, "penalty_decay", 1000, 86400000, &cfg->penalty_decay_ms) &&
           cfg_int(ctx, node, p, "penalty_max_ips", 1, 100000000, &cfg->penalty_max_ips);
}

void warden_config_print(const struct warden_config *cfg, FILE *out)
{
    fputs(SECTION ":\n", out);
    yaml_put_list(out, "  ", "listen", cfg->listen);
    yaml_put_list(out, "  ", "allowed_nets", cfg->allowed_nets);
    fprintf(out, "  socket_mode: \"%04llo\"\n", (unsigned long long)cfg->socket_mode);
    fprintf(out,
            "  max_connections: %lld\n  max_sessions: %lld\n  max_line_length: %lld\n"
            "  penalty_decay: %lldms\n  penalty_max_ips: %lld\n",
            (long long)cfg->max_connections, (long long)cfg->max_sessions,
            (long long)cfg->max_line_length, (long long)cfg->penalty_decay_ms,
            (long long)cfg->penalty_max_ips);
}

const char *warden_config_client_address(const struct warden_config *cfg)
{
    return cfg->listen != NULL && cfg->listen[0] != NULL ? cfg->listen[0] : "";
}
