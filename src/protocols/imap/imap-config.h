/* The `imap:` configuration section (docs/configuration.md#imap). */
#ifndef PETREL_PROTOCOLS_IMAP_CONFIG_H
#define PETREL_PROTOCOLS_IMAP_CONFIG_H

#include "core/cfg-read.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct imap_config {
    char **listen;     /* plain listeners (STARTTLS offered when a certificate is set) */
    char **listen_tls; /* implicit-TLS listeners (993-style) */
    char *tls_cert_file;
    char *tls_key_file;
    char *auth_addr;             /* the auth service */
    char *warden_addr;           /* the warden ("" = sessions are not registered) */
    bool disable_plaintext_auth; /* refuse LOGIN/AUTHENTICATE on plain non-loopback connections */
    int64_t max_line_length;
    int64_t max_literal_size;
    int64_t max_connections;
    int64_t max_connections_per_user;
    int64_t login_timeout_ms; /* before authentication */
    int64_t idle_timeout_ms;  /* authenticated, between commands (RFC 9051: at least 30 min) */
    int64_t auth_timeout_ms;  /* one call to the auth service */
};

void imap_config_defaults(struct imap_config *cfg);
/* Reads the `imap:` map (NULL keeps the defaults). `required`: the imap
 * component runs, so a listener must exist and TLS files must be set for
 * listen_tls. */
bool imap_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                      struct imap_config *cfg);
void imap_config_free(struct imap_config *cfg);
void imap_config_print(const struct imap_config *cfg, FILE *out);

#endif
