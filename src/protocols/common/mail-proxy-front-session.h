/* What the login proxy's IMAP and POP3 fronts keep per client connection
 * before and during the relay (docs/login-proxy.md): the name and password
 * the client gave, the local SASL exchange (it runs on the proxy since the
 * backend needs the password too), the auth check and the mail_proxy in
 * progress, and the TLS and preamble accounting. The functions say what
 * happened; each protocol writes its own reply lines, wording and counters. */
#ifndef PETREL_PROTOCOLS_COMMON_MAIL_PROXY_FRONT_SESSION_H
#define PETREL_PROTOCOLS_COMMON_MAIL_PROXY_FRONT_SESSION_H

#include "clients/auth/auth-sasl.h"
#include "core/buf.h"
#include "protocols/common/mail-proxy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mail_proxy_front_session {
    struct mail_proxy_auth *auth; /* the password check in progress */
    struct mail_proxy *proxy;     /* the backend set-up or relay */
    struct sasl_exchange sasl;
    bool sasl_running;
    char *login_name; /* what the client logged in as */
    char *password;
    int64_t tls_started_us; /* 0: no handshake pending */
    bool tls_done;
    bool preamble_counted; /* preamble_error counted for this connection */
    bool result_counted;   /* the login's outcome counted (no tls_error then) */
    unsigned bad_commands;
};

/* Overwrites and frees *secret, then sets it to NULL. NULL is ignored. */
void mail_proxy_front_session_wipe(char **secret);

/* The TLS handshake finished: times it once in LOGIN_PHASE_TLS_HANDSHAKE
 * if one was started. */
void mail_proxy_front_session_tls_ready(struct mail_proxy_front_session *fs,
                                        const struct login_metrics *lm);

/* An invalid command before login: counts preamble_error and logs it under
 * `component` once per connection. True when this was the `max`-th one
 * (the caller says goodbye and closes). */
bool mail_proxy_front_session_bad_command(struct mail_proxy_front_session *fs,
                                          const struct login_metrics *lm, const char *component,
                                          const struct mail_session_io *io, unsigned max);

/* Keeps copies of `user` and `password` (any earlier ones are wiped) and
 * starts their check with the auth service; `done` runs once, from the loop. */
void mail_proxy_front_session_login(struct mail_proxy_front_session *fs,
                                    struct mail_proxy_front *front, struct auth_client *auth,
                                    const char *user, const char *password, const char *ip,
                                    mail_proxy_auth_fn *done, void *arg);

enum mail_proxy_front_auth {
    MAIL_PROXY_FRONT_AUTH_CLOSING,  /* the client is going away: nothing to say */
    MAIL_PROXY_FRONT_AUTH_STARTED,  /* the backend set-up runs (fs->proxy) */
    MAIL_PROXY_FRONT_AUTH_TEMPFAIL, /* the auth service failed: try again later */
    MAIL_PROXY_FRONT_AUTH_FAILED,   /* wrong name or password */
};

/* The auth service answered the check started by _login(): on success
 * starts the backend set-up with `cb` and `arg`. The password is wiped in
 * every case (mail-proxy keeps its own copy until the backend answered). */
enum mail_proxy_front_auth mail_proxy_front_session_auth_done(
    struct mail_proxy_front_session *fs, const struct auth_client_reply *r,
    struct mail_proxy_front *front, struct mail_session_io *io, struct warden_client *warden,
    const struct mail_proxy_callbacks *cb, void *arg);

/* Starts the local SASL exchange for mechanism `mech` (the caller then
 * steps it with the initial response). */
void mail_proxy_front_session_sasl_begin(struct mail_proxy_front_session *fs, const char *mech);

enum mail_proxy_front_sasl {
    MAIL_PROXY_FRONT_SASL_CHALLENGE, /* send `challenge` ("+ " line), await the answer */
    MAIL_PROXY_FRONT_SASL_DONE,      /* *user and *password (the caller frees, wipes) */
    MAIL_PROXY_FRONT_SASL_SYNTAX,    /* undecodable base64: the client's syntax error */
    MAIL_PROXY_FRONT_SASL_FAILED,    /* decoded, but no valid name and password */
};

/* One step of the exchange with the client's base64 `response`. Every
 * result but CHALLENGE ends the exchange. `challenge` is appended to. */
enum mail_proxy_front_sasl mail_proxy_front_session_sasl_step(struct mail_proxy_front_session *fs,
                                                              const char *response,
                                                              struct buf *challenge, char **user,
                                                              char **password);

/* A client line answering a challenge: true if it goes to _sasl_step();
 * false (the exchange ended) for "*" (cancel), a NUL inside or no exchange
 * running: the caller answers "aborted" for a 1-byte line, else "invalid". */
bool mail_proxy_front_session_sasl_continue(struct mail_proxy_front_session *fs, const char *line,
                                            size_t len);

/* The backend said yes and the client has its reply: logs the session as
 * proxied under `component`, drops the login deadline, marks the outcome
 * counted and starts relaying the connection. */
void mail_proxy_front_session_relay(struct mail_proxy_front_session *fs, struct mail_session_io *io,
                                    const char *component);

/* Ends a running relay with `farewell` (a whole line with CRLF). False
 * when nothing is relayed (`fs` may be NULL). */
bool mail_proxy_front_session_shutdown(struct mail_proxy_front_session *fs, const char *farewell);

/* Releases what `fs` holds (not `fs` itself): counts tls_error for a TLS
 * connection on `io` whose handshake never finished, cancels the check and
 * the set-up, wipes the password. */
void mail_proxy_front_session_release(struct mail_proxy_front_session *fs,
                                      const struct mail_session_io *io,
                                      const struct login_metrics *lm);

#endif
