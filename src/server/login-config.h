/* The `login:` configuration section (docs/configuration.md#login,
 * docs/login-proxy.md): the login proxy's directors and ring secret, its
 * retry budget, how it reaches the backends, and one subsection per front
 * (`imap:`, `pop3:`, and `lmtp:` read by protocols/lmtp) holding the mail
 * keys every login server has (protocols/common/mail-login-config.h) plus
 * `backend_port`. Errors read `file:line: login.<key>: message` and
 * `login.imap.<key>: ...`. */
#ifndef PETREL_SERVER_LOGIN_CONFIG_H
#define PETREL_SERVER_LOGIN_CONFIG_H

#include "core/cfg-read.h"
#include "core/error.h"
#include "protocols/common/mail-login-config.h"
#include "protocols/lmtp/lmtp-proxy.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define LOGIN_MAX_DIRECTORS 16

/* One IMAP or POP3 front: absent (enabled false) means no listener. */
struct login_front_config {
    bool enabled;
    struct mail_login_config login; /* listeners, TLS, auth, warden, limits, timeouts */
    int64_t max_line_length;
    int64_t max_auth_failures; /* pop3 only: failed logins before the connection is closed */
    int64_t backend_port;      /* 0: the port of the director's answer */
};

struct login_config {
    char **directors; /* ring ports "host:port", NULL-terminated */
    char *ring_secret_file;
    char *ring_secret_env;
    int64_t director_timeout_ms;
    int64_t transient_retries; /* < 0: never retry */
    bool backend_tls;
    char *backend_tls_ca_file; /* "": the internal CA */
    int64_t backend_timeout_ms;
    int64_t idle_timeout_ms; /* a relayed session with no byte either way */
    struct login_front_config imap;
    struct login_front_config pop3;
    struct lmtp_proxy_config lmtp; /* the LMTP front (protocols/lmtp/lmtp-proxy.h) */
    bool lmtp_present;             /* a `lmtp:` subsection was given */
};

void login_config_defaults(struct login_config *cfg);
/* Reads the `login:` map (NULL keeps the defaults). `required`: the login
 * component runs, so directors and at least one front must be given. */
bool login_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                       struct login_config *cfg);
/* The ring secret (ring_secret_file, else ring_secret_env, as the
 * director's); *out "" when none. False with err when it cannot be read. */
bool login_config_ring_secret(const struct login_config *cfg, char **out, struct petrel_error *err);
void login_config_print(const struct login_config *cfg, FILE *out);
void login_config_free(struct login_config *cfg);

#endif
