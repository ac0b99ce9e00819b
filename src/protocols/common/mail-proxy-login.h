/* Logging in to a backend on a client's behalf, the step of a login proxy
 * between the director's answer and the byte relay: what every protocol's
 * backend dialogue (imap-proxy-login.h, pop3-proxy-login.h) takes and
 * answers.
 *
 * A dialogue is a pure state machine: the proxy feeds it each line the
 * backend sends and writes whatever it appends to `out`; no I/O, so it is
 * unit-tested and fuzzed on its own. The client's real address and session
 * id go first (IMAP ID fields, POP3 XCLIENT when the backend offers it),
 * which the backend believes only from its login_trusted_networks; then
 * the login, with SASL PLAIN and an initial response (no quoting of the
 * password, one round trip). */
#ifndef PETREL_PROTOCOLS_COMMON_MAIL_PROXY_LOGIN_H
#define PETREL_PROTOCOLS_COMMON_MAIL_PROXY_LOGIN_H

#include "core/buf.h"
#include "protocols/common/mail-forward.h"

#include <stdbool.h>
#include <stddef.h>

struct mail_proxy_login_params {
    const char *user;           /* the login name the client used */
    const char *password;       /* the client's password (the backend checks it again) */
    struct mail_forward client; /* the real client: ip, port, session id, ttl */
};

enum mail_proxy_login_step {
    MAIL_PROXY_LOGIN_CONTINUE, /* send what was appended, feed the next line */
    MAIL_PROXY_LOGIN_OK,       /* logged in: relay from here on */
    MAIL_PROXY_LOGIN_REJECTED, /* the backend refused the login (its reply in `text`) */
    MAIL_PROXY_LOGIN_TEMPFAIL, /* the backend cannot now: a retry may work */
    MAIL_PROXY_LOGIN_PROTOCOL, /* the backend broke the protocol */
};

/* What the dialogue answers with a final step. `text` points into the
 * dialogue (valid until it is freed): the backend's reply after the tag or
 * status (e.g. "[CAPABILITY IMAP4rev1 ...] Logged in"), or why it failed. */
struct mail_proxy_login_result {
    enum mail_proxy_login_step step;
    const char *text;
};

/* The longest backend line a dialogue reads (without its CRLF). */
#define MAIL_PROXY_LOGIN_LINE_MAX 8192

/* What every dialogue keeps: its copy of the parameters and the last
 * backend line. */
struct mail_proxy_login_state {
    char *user;
    char *password;
    struct mail_forward client;
    char text[MAIL_PROXY_LOGIN_LINE_MAX + 1]; /* the last line, NUL-terminated */
};

/* Copies `params` into `st`. */
void mail_proxy_login_state_init(struct mail_proxy_login_state *st,
                                 const struct mail_proxy_login_params *params);
/* Overwrites the password and frees the copies. */
void mail_proxy_login_state_free(struct mail_proxy_login_state *st);

/* What every dialogue does with a backend line before reading it: false,
 * with *result set to PROTOCOL, after a final step (`finished`) or for a
 * line over MAIL_PROXY_LOGIN_LINE_MAX or holding a NUL (the dialogue then
 * ends); otherwise the line is copied NUL-terminated into `text` (at least
 * MAIL_PROXY_LOGIN_LINE_MAX + 1 bytes) and *result is CONTINUE. */
bool mail_proxy_login_take(bool finished, const char *line, size_t len, char *text,
                           struct mail_proxy_login_result *result);

/* Appends the base64 of a SASL PLAIN message for `user` and `password`
 * (RFC 4616: no authorisation id), wiping its clear-text copy. */
void mail_proxy_login_plain(struct buf *out, const char *user, const char *password);

/* The name of a step for logs: "ok", "rejected", ... */
const char *mail_proxy_login_step_name(enum mail_proxy_login_step step);

#endif
