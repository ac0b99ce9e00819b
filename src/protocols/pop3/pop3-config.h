/* The `pop3:` configuration section (docs/configuration.md#pop3). */
#ifndef PETREL_PROTOCOLS_POP3_CONFIG_H
#define PETREL_PROTOCOLS_POP3_CONFIG_H

#include "core/cfg-read.h"
#include "protocols/common/mail-login-config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct pop3_config {
    /* listeners, TLS, auth, warden, plaintext policy, limits, timeouts
     * (idle_timeout: RFC 1939 asks for at least 10 minutes) */
    struct mail_login_config login;
    char **secure_nets; /* peers that count as secure without TLS (loopback) */
    int64_t max_line_length;
    int64_t max_auth_failures; /* failed logins before the connection is closed */
    char *uidl_format;         /* pop3-uidl.h */
    bool retr_sets_seen;       /* RETR marks the message \Seen */
};

/* The `pop3:` section's name, default listener and idle timeouts (the
 * login server's login.pop3 front reads the same keys with these). */
extern const struct mail_login_section pop3_config_section;

void pop3_config_defaults(struct pop3_config *cfg);
/* Reads the `pop3:` map (NULL keeps the defaults). `required`: the pop3
 * component runs, so a listener must exist and TLS files must be set for
 * listen_tls. */
bool pop3_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                      struct pop3_config *cfg);
void pop3_config_free(struct pop3_config *cfg);
void pop3_config_print(const struct pop3_config *cfg, FILE *out);

#endif
