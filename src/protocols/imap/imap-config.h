/* The `imap:` configuration section (docs/configuration.md#imap). */
#ifndef PETREL_PROTOCOLS_IMAP_CONFIG_H
#define PETREL_PROTOCOLS_IMAP_CONFIG_H

#include "core/cfg-read.h"
#include "protocols/common/mail-login-config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct imap_config {
    /* listeners, TLS, auth, warden, plaintext policy, limits, timeouts
     * (idle_timeout: RFC 9051 asks for at least 30 minutes) */
    struct mail_login_config login;
    int64_t max_line_length;
    int64_t max_literal_size;
    int64_t workers; /* session loops on threads of their own (0: auto); 1: the process's loop */
    bool imap_quota; /* RFC 9208 QUOTA commands and capabilities (independent of quota.enabled) */
};

/* The `imap:` section's name, default listener and idle timeouts (the
 * login server's login.imap front reads the same keys with these). */
extern const struct mail_login_section imap_config_section;

void imap_config_defaults(struct imap_config *cfg);
/* Reads the `imap:` map (NULL keeps the defaults). `required`: the imap
 * component runs, so a listener must exist and TLS files must be set for
 * listen_tls. */
bool imap_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                      struct imap_config *cfg);
void imap_config_free(struct imap_config *cfg);
/* The session loops to run: `workers`, or with 0 (auto) eight per online CPU
 * (a loop waiting in fsync leaves the CPU to the others), at most 32. */
unsigned imap_config_workers(const struct imap_config *cfg);
void imap_config_print(const struct imap_config *cfg, FILE *out);

#endif
