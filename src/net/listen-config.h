/* The listener keys of a line-protocol server's configuration section
 * (`listen`, `allowed_nets`, `socket_mode`, `max_connections_per_ip`,
 * `handshake_timeout`; docs/configuration.md), read the same way for the
 * auth service, the warden, quota-status and LMTP. Errors follow
 * core/cfg-read.h: `file:line: <section>.<key>: message`, pointing at the
 * offending list item when there is one. */
#ifndef PETREL_NET_LISTEN_CONFIG_H
#define PETREL_NET_LISTEN_CONFIG_H

#include "core/cfg-read.h"
#include "net/endpoint.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Reads `listen` (at most `max` addresses, replacing *listen when the key
 * is there) and checks that each is "host:port" or "unix:/path". *count
 * gets the number of addresses (the caller decides whether 0 is fine). */
bool listen_config_read_addresses(const struct cfg_ctx *ctx, const struct ynode *node,
                                  const char *section, size_t max, char ***listen, size_t *count);
/* Reads `allowed_nets` (at most 256 CIDRs, replacing *nets when the key
 * is there) and checks each. */
bool listen_config_read_nets(const struct cfg_ctx *ctx, const struct ynode *node,
                             const char *section, char ***nets);
/* The same for a list of CIDRs under another key. */
bool listen_config_read_nets_key(const struct cfg_ctx *ctx, const struct ynode *node,
                                 const char *section, const char *key, char ***nets);
/* Checks that `value` (the value of `key` in `map`) is a listener address
 * net_addr_parse() takes ("host:port", "[v6]:port", "unix:/path"), a host
 * name resolved now; NULL passes (the key is absent). Errors name
 * `<section>.<key>`. */
bool listen_config_check_address(const struct cfg_ctx *ctx, const struct ynode *map,
                                 const char *section, const char *key, const char *value);
/* Checks that `value` (the value of `key` in `map`) is the address of a
 * service to dial: net_endpoint_parse() with `flags` (net/endpoint.h),
 * port 1-65535. A host name is not looked up here (the client resolves it
 * at each connect). NULL and "" pass. Errors name `<section>.<key>`. */
bool listen_config_check_target(const struct cfg_ctx *ctx, const struct ynode *map,
                                const char *section, const char *key, const char *value,
                                unsigned flags);
/* Reads `socket_mode`, octal text such as "0660" (0-0777), into *mode;
 * absent: *mode is kept. */
bool listen_config_read_socket_mode(const struct cfg_ctx *ctx, const struct ynode *node,
                                    const char *section, int64_t *mode);

/* Reads `max_connections_per_ip` (0 = no cap, up to 1000000) and
 * `handshake_timeout` (a duration, 0 = none, up to 1 h); absent keys keep
 * their values. */
bool listen_config_read_client_limits(const struct cfg_ctx *ctx, const struct ynode *node,
                                      const char *section, int64_t *max_per_ip,
                                      int64_t *handshake_timeout_ms);

/* The keys of a line-protocol service's listener (the auth,
 * warden_service and quota.quota_status sections), for the section's
 * cfg_check_keys() list. */
#define LISTEN_CONFIG_SERVER_KEYS                                                                  \
    "listen", "allowed_nets", "socket_mode", "max_connections", "max_connections_per_ip",          \
        "handshake_timeout"

/* Where a section keeps the values of LISTEN_CONFIG_SERVER_KEYS. */
struct listen_config_server {
    char ***listen;
    char ***allowed_nets;
    int64_t *socket_mode;
    int64_t *max_connections;
    int64_t *max_connections_per_ip;
    int64_t *handshake_timeout_ms;
};

/* The struct listen_config_server of a section struct whose fields carry
 * the same names (listen, allowed_nets, ..., handshake_timeout_ms). */
#define LISTEN_CONFIG_SERVER_OF(cfg)                                                               \
    {                                                                                              \
        &(cfg)->listen, &(cfg)->allowed_nets, &(cfg)->socket_mode, &(cfg)->max_connections,        \
            &(cfg)->max_connections_per_ip, &(cfg)->handshake_timeout_ms                           \
    }

/* Reads LISTEN_CONFIG_SERVER_KEYS: `listen` as
 * listen_config_read_addresses() (at most `max_listen`; *listen_count gets
 * the number, the caller decides whether 0 is fine), `allowed_nets`,
 * `socket_mode`, `max_connections` (1-1000000) and the client limits. */
bool listen_config_read_server(const struct cfg_ctx *ctx, const struct ynode *node,
                               const char *section, size_t max_listen,
                               const struct listen_config_server *server, size_t *listen_count);

/* The request limits of an operator HTTP API (backend_api, director.api):
 * `max_body_bytes` (1024 to `body_max`), `max_connections` (1-1000000) and
 * `max_connections_per_ip` (0 = no cap, up to 1000000); absent keys keep
 * their values. */
bool listen_config_read_api_limits(const struct cfg_ctx *ctx, const struct ynode *node,
                                   const char *section, int64_t body_max, int64_t *max_body_bytes,
                                   int64_t *max_connections, int64_t *max_connections_per_ip);
/* Prints those and `allow_unauthenticated_remote` at `indent`. */
void listen_config_print_api_limits(FILE *out, const char *indent, int64_t max_body_bytes,
                                    int64_t max_connections, int64_t max_connections_per_ip,
                                    bool allow_unauthenticated_remote);

/* Prints `listen`, `allowed_nets` and `socket_mode` (quoted octal) at
 * `indent`, as --check-config shows every listener section. */
void listen_config_print(FILE *out, const char *indent, char **listen, char **allowed_nets,
                         int64_t socket_mode);
/* Prints LISTEN_CONFIG_SERVER_KEYS at `indent`: listen_config_print(), then
 * `max_connections`, `max_connections_per_ip` and `handshake_timeout`. */
void listen_config_print_server(FILE *out, const char *indent, char **listen, char **allowed_nets,
                                int64_t socket_mode, int64_t max_connections,
                                int64_t max_connections_per_ip, int64_t handshake_timeout_ms);

#endif
