/* The `lmtp:` configuration section (docs/configuration.md#lmtp). */
#ifndef PETREL_PROTOCOLS_LMTP_CONFIG_H
#define PETREL_PROTOCOLS_LMTP_CONFIG_H

#include "core/cfg-read.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct lmtp_config {
    char **listen; /* "host:port" and "unix:/path" (NULL-terminated) */
    char *
        *allowed_nets; /* TCP clients allowed (default loopback; empty: any); Unix sockets always */
    int64_t socket_mode; /* permissions of Unix sockets */
    /* CIDRs of login proxies whose XCLIENT (the client's real address) is
     * believed (Dovecot's login_trusted_networks); empty by default. */
    char **login_trusted_networks;
    char *tls_cert_file; /* STARTTLS offered when set */
    char *tls_key_file;
    char *auth_addr;           /* the auth service (userdb lookups) */
    char *hostname;            /* greeting, LHLO reply, Received header ("" = the system's) */
    char *recipient_delimiter; /* characters that start the address detail ("" = none) */
    char *username_format;     /* userdb name from the address: %u, %n, %d */
    bool add_received_header;
    int64_t max_message_size; /* bytes; advertised as SIZE */
    int64_t max_recipients;   /* per transaction */
    int64_t max_line_length;  /* command lines */
    int64_t max_connections;
    /* 0: no cap (the lmtp component's default) */
    int64_t max_connections_per_ip;
    int64_t max_errors;         /* bad commands before the connection is closed */
    int64_t command_timeout_ms; /* inactivity, also inside DATA */
    int64_t auth_timeout_ms;    /* one userdb lookup */
    int64_t delivery_threads;   /* storage writes run on these */
    int64_t delivery_queue;     /* deliveries waiting for a thread */
    char *temp_dir;             /* where large DATA is spooled (absolute; lmtp-spool.h) */
    /* Folders the delivery threads keep open between deliveries: bytes
     * for all threads together, and how long an unused one stays open. */
    int64_t folder_cache_bytes;
    int64_t folder_cache_idle_ms;
};

void lmtp_config_defaults(struct lmtp_config *cfg);
/* Reads the `lmtp:` map (NULL keeps the defaults). `required`: the lmtp
 * component runs, so a listener and auth_addr must be set. */
bool lmtp_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                      struct lmtp_config *cfg);
/* The keys `lmtp:` shares with the login proxy's `login.lmtp` front, for
 * their cfg_check_keys() lists. */
#define LMTP_CONFIG_SHARED_KEYS                                                                    \
    "listen", "allowed_nets", "socket_mode", "login_trusted_networks", "tls_cert_file",            \
        "tls_key_file", "auth_addr", "hostname", "recipient_delimiter", "username_format",         \
        "max_message_size", "max_recipients", "max_line_length", "max_connections",                \
        "max_connections_per_ip", "max_errors", "command_timeout", "auth_timeout", "temp_dir"
/* The values of the keys present in `node` (a map whose keys the caller
 * has checked), errors named `path`.<key>; no requirement checks. The
 * login proxy's `login.lmtp` front reads its share of the keys with it. */
bool lmtp_config_read_values(const struct cfg_ctx *ctx, const struct ynode *node, const char *path,
                             struct lmtp_config *cfg);
/* What a running LMTP listener (lmtp or the login proxy's front) needs: a
 * listen address and auth_addr; errors named `path`. */
bool lmtp_config_check_required(const struct cfg_ctx *ctx, const struct ynode *node,
                                const char *path, const struct lmtp_config *cfg);
/* Prints the listener, TLS and address keys the two share, in the order
 * both print them, each line indented by `indent`. */
void lmtp_config_print_shared_head(const struct lmtp_config *cfg, FILE *out, const char *indent);
void lmtp_config_free(struct lmtp_config *cfg);
void lmtp_config_print(const struct lmtp_config *cfg, FILE *out);

#endif
