/* The listener keys of a line-protocol server section (listen-config.h). */
#include "net/listen-config.h"

#include "core/yaml-print.h"
#include "net/cidr.h"
#include "net/endpoint.h"
#include "net/sockaddr.h"

#include <stdio.h>
#include <stdlib.h>

#define NETS_MAX 256

/* Item `i` of the list under `key`, for error positions; the list itself
 * when it is not a sequence that long. */
bool listen_config_read_addresses(const struct cfg_ctx *ctx, const struct ynode *node,
                                  const char *section, size_t max, char ***listen, size_t *count)
{
    char path[64];
    snprintf(path, sizeof(path), "%s.listen", section);
    if (!cfg_string_list(ctx, node, section, "listen", max, listen, NULL))
        return false;
    size_t n = 0;
    for (; *listen != NULL && (*listen)[n] != NULL; n++) {
        struct petrel_error e;
        struct net_addr addr;
        if (!net_addr_parse((*listen)[n], &addr, &e))
            return cfg_fail(ctx, cfg_list_item(node, "listen", n), path, "%s", e.message);
    }
    *count = n;
    return true;
}

bool listen_config_read_nets_key(const struct cfg_ctx *ctx, const struct ynode *node,
                                 const char *section, const char *key, char ***nets)
{
    char path[96];
    snprintf(path, sizeof(path), "%s.%s", section, key);
    if (!cfg_string_list(ctx, node, section, key, NETS_MAX, nets, NULL))
        return false;
    for (size_t i = 0; *nets != NULL && (*nets)[i] != NULL; i++) {
        struct petrel_error e;
        struct cidr c;
        if (!cidr_parse((*nets)[i], &c, &e))
            return cfg_fail(ctx, cfg_list_item(node, key, i), path, "%s", e.message);
    }
    return true;
}

bool listen_config_read_nets(const struct cfg_ctx *ctx, const struct ynode *node,
                             const char *section, char ***nets)
{
    return listen_config_read_nets_key(ctx, node, section, "allowed_nets", nets);
}

bool listen_config_check_address(const struct cfg_ctx *ctx, const struct ynode *map,
                                 const char *section, const char *key, const char *value)
{
    struct petrel_error e;
    struct net_addr addr;
    if (value == NULL || net_addr_parse(value, &addr, &e))
        return true;
    char full[256];
    snprintf(full, sizeof(full), "%s.%s", section, key);
    return cfg_fail(ctx, ynode_get(map, key), full, "%s", e.message);
}

bool listen_config_check_target(const struct cfg_ctx *ctx, const struct ynode *map,
                                const char *section, const char *key, const char *value,
                                unsigned flags)
{
    struct petrel_error e;
    struct net_endpoint ep;
    if (value == NULL || *value == '\0' ||
        net_endpoint_parse(value, flags | NET_ENDPOINT_PORT_NONZERO, 0, &ep, &e))
        return true;
    char full[256];
    snprintf(full, sizeof(full), "%s.%s", section, key);
    return cfg_fail(ctx, ynode_get(map, key), full, "%s", e.message);
}

bool listen_config_read_socket_mode(const struct cfg_ctx *ctx, const struct ynode *node,
                                    const char *section, int64_t *mode)
{
    char *text = NULL;
    if (!cfg_string(ctx, node, section, "socket_mode", &text))
        return false;
    if (text == NULL)
        return true;
    char *end = NULL;
    long value = strtol(text, &end, 8);
    bool ok = *text != '\0' && *end == '\0' && value >= 0 && value <= 0777;
    free(text);
    if (!ok) {
        char path[64];
        snprintf(path, sizeof(path), "%s.socket_mode", section);
        return cfg_fail(ctx, ynode_get(node, "socket_mode"), path,
                        "expected an octal mode such as \"0660\"");
    }
    *mode = value;
    return true;
}

bool listen_config_read_client_limits(const struct cfg_ctx *ctx, const struct ynode *node,
                                      const char *section, int64_t *max_per_ip,
                                      int64_t *handshake_timeout_ms)
{
    return cfg_int(ctx, node, section, "max_connections_per_ip", 0, 1000000, max_per_ip) &&
           cfg_duration_ms(ctx, node, section, "handshake_timeout", 0, 3600000,
                           handshake_timeout_ms);
}

void listen_config_print(FILE *out, const char *indent, char **listen, char **allowed_nets,
                         int64_t socket_mode)
{
    yaml_put_list(out, indent, "listen", listen);
    yaml_put_list(out, indent, "allowed_nets", allowed_nets);
    fprintf(out, "%ssocket_mode: \"%04llo\"\n", indent, (unsigned long long)socket_mode);
}

bool listen_config_read_server(const struct cfg_ctx *ctx, const struct ynode *node,
                               const char *section, size_t max_listen,
                               const struct listen_config_server *server, size_t *listen_count)
{
    return listen_config_read_addresses(ctx, node, section, max_listen, server->listen,
                                        listen_count) &&
           listen_config_read_nets(ctx, node, section, server->allowed_nets) &&
           listen_config_read_socket_mode(ctx, node, section, server->socket_mode) &&
           cfg_int(ctx, node, section, "max_connections", 1, 1000000, server->max_connections) &&
           listen_config_read_client_limits(ctx, node, section, server->max_connections_per_ip,
                                            server->handshake_timeout_ms);
}

void listen_config_print_server(FILE *out, const char *indent, char **listen, char **allowed_nets,
                                int64_t socket_mode, int64_t max_connections,
                                int64_t max_connections_per_ip, int64_t handshake_timeout_ms)
{
    listen_config_print(out, indent, listen, allowed_nets, socket_mode);
    fprintf(out, "%smax_connections: %lld\n%smax_connections_per_ip: %lld\n", indent,
            (long long)max_connections, indent, (long long)max_connections_per_ip);
    fprintf(out, "%shandshake_timeout: %lldms\n", indent, (long long)handshake_timeout_ms);
}

bool listen_config_read_api_limits(const struct cfg_ctx *ctx, const struct ynode *node,
                                   const char *section, int64_t body_max, int64_t *max_body_bytes,
                                   int64_t *max_connections, int64_t *max_connections_per_ip)
{
    return cfg_int(ctx, node, section, "max_body_bytes", 1024, body_max, max_body_bytes) &&
           cfg_int(ctx, node, section, "max_connections", 1, 1000000, max_connections) &&
           cfg_int(ctx, node, section, "max_connections_per_ip", 0, 1000000,
                   max_connections_per_ip);
}

void listen_config_print_api_limits(FILE *out, const char *indent, int64_t max_body_bytes,
                                    int64_t max_connections, int64_t max_connections_per_ip,
                                    bool allow_unauthenticated_remote)
{
    fprintf(out, "%smax_body_bytes: %lld\n%smax_connections: %lld\n", indent,
            (long long)max_body_bytes, indent, (long long)max_connections);
    fprintf(out, "%smax_connections_per_ip: %lld\n%sallow_unauthenticated_remote: %s\n", indent,
            (long long)max_connections_per_ip, indent,
            allow_unauthenticated_remote ? "true" : "false");
}
