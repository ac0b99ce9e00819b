/* The LMTP front of the login proxy (docs/login-proxy.md, `login.lmtp`):
 * the LMTP server's own session code (listeners, limits, LHLO, MAIL, DATA
 * into the spool, STARTTLS, XCLIENT from login_trusted_networks) in front
 * mode (lmtp-private.h), with each recipient routed instead of delivered:
 *
 *   RCPT   the auth service's USER lookup (canonical name, userdb extra
 *          field `director_tag`; unknown: 550 5.1.1 as a backend says),
 *          then a director LOOKUP (the shared director client), then the
 *          recipient goes to that backend's transaction, opened on first
 *          need (dial, TLS when configured, LHLO, XCLIENT when offered,
 *          MAIL FROM); the client gets the backend's answer.
 *   DATA   the message is spooled (lmtp-spool.h: a file once large), then
 *          sent to every backend transaction at once; the client gets one
 *          reply per accepted recipient in RCPT order, each its backend's.
 *
 * A backend that cannot be reached or set up is tried again
 * `transient_retries` times 150 ms apart (stage backend_session), then its
 * recipients get 451 4.4.1; a director that gives no answer within
 * director_timeout gives 451 4.4.3: temporary, so the MTA retries and
 * nothing is acknowledged that a backend did not accept. */
#ifndef PETREL_PROTOCOLS_LMTP_LMTP_PROXY_H
#define PETREL_PROTOCOLS_LMTP_LMTP_PROXY_H

#include "core/cfg-read.h"
#include "core/error.h"
#include "net/service-env.h"
#include "protocols/lmtp/lmtp-config.h"

#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct director_client;

struct lmtp_proxy_config {
    bool enabled;             /* `login.lmtp` is present */
    struct lmtp_config front; /* listen, allowed_nets, limits, timeouts, auth_addr, ... */
    int64_t backend_port;     /* the backends' LMTP port (default 24) */
};

void lmtp_proxy_config_defaults(struct lmtp_proxy_config *cfg);
/* Reads the `login.lmtp` map (NULL: no LMTP front); errors name
 * login.lmtp.<key>. With the map present, listen and auth_addr must be set. */
bool lmtp_proxy_config_read(const struct cfg_ctx *ctx, const struct ynode *node,
                            struct lmtp_proxy_config *cfg);
/* Prints `  lmtp:` and its keys (indented under `login:`); nothing when
 * disabled. */
void lmtp_proxy_config_print(const struct lmtp_proxy_config *cfg, FILE *out);
void lmtp_proxy_config_free(struct lmtp_proxy_config *cfg);

struct lmtp_proxy_deps {
    struct director_client *directors; /* shared with the IMAP/POP3 fronts */
    SSL_CTX *backend_tls;              /* NULL: plain; else implicit TLS to the backend */
    int transient_retries;             /* login.transient_retries (< 0: none) */
    int64_t director_timeout_ms, backend_timeout_ms;
};

struct lmtp_proxy;

/* Binds the listeners. `cfg` and `deps` (the director client, the TLS
 * context) must outlive the proxy. NULL with err set on failure. */
struct lmtp_proxy *lmtp_proxy_start(const struct service_env *env,
                                    const struct lmtp_proxy_config *cfg,
                                    const struct lmtp_proxy_deps *deps, struct petrel_error *err);
/* The first listener's address. */
const char *lmtp_proxy_address(const struct lmtp_proxy *p);
/* Closes the listeners; idle sessions get "421" now, the others once their
 * transaction is over. */
void lmtp_proxy_stop_accepting(struct lmtp_proxy *p);
/* Client sessions still open. */
size_t lmtp_proxy_sessions(const struct lmtp_proxy *p);
/* Ends every session (backend transactions are abandoned: their
 * recipients were not acknowledged) and frees. NULL is ignored. */
void lmtp_proxy_free(struct lmtp_proxy *p);

#endif
