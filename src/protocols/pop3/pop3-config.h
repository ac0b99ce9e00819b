/* The `pop3:` configuration section (docs/configuration.md#pop3). */
#ifndef PETREL_PROTOCOLS_POP3_CONFIG_H
#define PETREL_PROTOCOLS_POP3_CONFIG_H

#include "core/cfg-read.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct pop3_config {
    char **listen;     /* plain listeners (STLS offered when a certificate is set) */
    char **listen_tls; /* implicit-TLS listeners (995-style) */
    char *tls_cert_file;
    char *tls_key_file;
    char *auth_addr;             /* the auth service */
    char *warden_addr;           /* the session registry; "" = no registration */
    bool disable_plaintext_auth; /* refuse USER/PASS/AUTH on plain connections from elsewhere */
    char **secure_nets;          /* peers that count as secure without TLS (loopback) */
    int64_t max_line_length;
    int64_t max_connections;
    int64_t max_connections_per_user;
    int64_t max_auth_failures; /* failed logins before the connection is closed */
    int64_t login_timeout_ms;  /* before authentication */
    int64_t idle_timeout_ms;   /* authenticated, between commands (RFC 1939: at least 10 min) */
    int64_t auth_timeout_ms;   /* one call to the auth service (or the warden) */
    char *uidl_format;         /* pop3-uidl.h */
    bool retr_sets_seen;       /* RETR marks the message \Seen */
};

void pop3_config_defaults(struct pop3_config *cfg);
/* Reads the `pop3:` map (NULL keeps the defaults). `required`: the pop3
 * component runs, so a listener must exist and TLS files must be set for
 * listen_tls. */
bool pop3_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                      struct pop3_config *cfg);
void pop3_config_free(struct pop3_config *cfg);
void pop3_config_print(const struct pop3_config *cfg, FILE *out);

#endif
