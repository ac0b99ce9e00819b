/* The listener keys of a line-protocol server's configuration section
 * (`listen`, `allowed_nets`, `socket_mode`, `max_connections_per_ip`,
 * `handshake_timeout`; docs/configuration.md), read
 * the same way for the auth service and the warden. Errors follow
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

/* Prints `listen`, `allowed_nets` and `socket_mode` (quoted octal) at
 * `indent`, as --check-config shows every listener section. */
void listen_config_print(FILE *out, const char *indent, char **listen, char **allowed_nets,
                         int64_t socket_mode);

#endif
