/* The `warden_service:` configuration section (docs/configuration.md,
 * docs/warden.md). `listen` is read by every process, not only by the one
 * running the warden: its first entry is where the backend-plane API finds
 * the warden, and an empty list means there is none (who answers 501). */
#ifndef PETREL_SERVICES_WARDEN_CONFIG_H
#define PETREL_SERVICES_WARDEN_CONFIG_H

#include "core/cfg-read.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct warden_config {
    char **listen;       /* NULL-terminated; "host:port" or "unix:/path"; may be empty */
    char **allowed_nets; /* TCP clients allowed to connect */
    int64_t socket_mode; /* permissions of Unix sockets */
    int64_t max_connections;
    int64_t max_connections_per_ip; /* 0 = no cap */
    int64_t handshake_timeout_ms;   /* until the first request; 0 = none */
    int64_t max_sessions;
    int64_t max_line_length;
    int64_t penalty_decay_ms;
    int64_t penalty_max_ips;
};

void warden_config_defaults(struct warden_config *cfg);
/* Reads `node` (the `warden_service:` map; NULL keeps the defaults).
 * `required`: the warden component runs here, so `listen` must name at
 * least one address. */
bool warden_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                        struct warden_config *cfg);
void warden_config_free(struct warden_config *cfg);
void warden_config_print(const struct warden_config *cfg, FILE *out);
/* Where clients connect: the first `listen` entry, or "" for no warden. */
const char *warden_config_client_address(const struct warden_config *cfg);

#endif
