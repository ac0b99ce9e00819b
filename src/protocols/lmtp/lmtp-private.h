/* Internals shared by the LMTP server's files: the session, the server
 * context and the command handlers. One session per client connection; a
 * session runs one command at a time: a RCPT waiting for the auth service
 * or a message being delivered parks it (reading stops; pipelined input
 * waits in the buffer) until the answer comes back on the loop. */
#ifndef PETREL_PROTOCOLS_LMTP_PRIVATE_H
#define PETREL_PROTOCOLS_LMTP_PRIVATE_H

#include "core/buf.h"
#include "core/metrics.h"
#include "net/cidr.h"
#include "protocols/lmtp/lmtp-config.h"
#include "protocols/lmtp/lmtp-data.h"
#include "protocols/lmtp/lmtp-deliver.h"
#include "protocols/lmtp/lmtp-parser.h"
#include "protocols/lmtp/lmtp-recipient.h"
#include "protocols/lmtp/lmtp-spool.h"
#include "clients/auth/auth-client.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <time.h>

#define LMTP_COMPONENT "lmtp"
/* Folders each delivery thread keeps open between deliveries
 * (lmtp-folder-cache.h): the busiest recipients' INBOXes. */
#define LMTP_OPEN_FOLDERS_PER_THREAD 16

struct lmtp_server;
struct lmtp_job;

/* An accepted recipient of the current transaction. */
struct lmtp_rcpt {
    struct lmtp_recipient_name name;
    char *username; /* canonical, from the userdb */
    size_t dup_of;  /* index of the earlier RCPT with the same address, or SIZE_MAX */
    char **quota_rule; /* the userdb's quota rules (NULL-terminated), NULL for a duplicate */
};

struct lmtp_session {
    struct lmtp_server *server;
    struct lmtp_session *next;
    struct lmtp_session *prev;
    struct bufferevent *bev;
    bool tls;
    bool busy;      /* waiting for the auth service or a delivery */
    bool closing;   /* free once the output has drained */
    bool stopping;  /* the server is shutting down: close after this transaction */
    bool skip_line; /* discarding the rest of an over-long line */
    struct net_linger *linger; /* closing: frees the session once the output has left */
    struct tls_handshake_deadline *handshake; /* after STARTTLS, until it is freed */
    char peer[80];
    char peer_ip[64];
    char id[48];
    bool trusted;      /* in login_trusted_networks: XCLIENT is offered and believed */
    int forwarded_ttl; /* XCLIENT TTL (hops left) from a trusted proxy, -1 when none */
    size_t errors;
    /* LHLO */
    char *helo;
    /* the transaction */
    bool has_mail;
    char *sender; /* canonical address without brackets ("" for <>) */
    bool smtputf8;
    struct lmtp_rcpt *rcpts;
    size_t rcpt_count;
    size_t rcpt_cap;
    /* RCPT waiting for its userdb lookup */
    struct auth_client_request *auth_req;
    struct lmtp_recipient_name pending;
    /* DATA */
    bool in_data;
    struct lmtp_data data;
    struct lmtp_spool message; /* in memory, or in lmtp.temp_dir once large */
    struct lmtp_job *job;      /* the delivery in progress */
    /* What a front (lmtp_server_start_front) keeps for the transaction. */
    void *front_state;
    bool body_8bit;     /* MAIL had BODY=8BITMIME (passed on by a front) */
    unsigned peer_port; /* 0 for a Unix socket (or as forwarded by XCLIENT) */
    bool output_full;   /* reading stopped until the client reads its replies */
    /* The address as accepted: its per-address count goes back with it. */
    struct sockaddr_storage peer_addr;
};

struct lmtp_server_metrics {
    struct metric_series *sessions;
    struct metric_series *connections_total;
    struct metric_series *bytes_in;
    struct metric_series *bytes_out;
    struct metric_family *deliveries;
    struct metric_series *delivery_seconds;
    struct metric_family *recipients;
};

/* A front: the same LMTP server (listeners, limits, parser, LHLO, MAIL,
 * DATA into the spool, STARTTLS, XCLIENT) with recipients and messages
 * handed to someone else instead of the userdb and the storage (the login
 * proxy, lmtp-proxy.h). Each hook answers the client itself. */
struct lmtp_front_ops {
    /* A RCPT passed every check (not a repeat of an earlier address): the
     * session is parked; `name` is the front's now. The front answers, adds
     * an accepted recipient with lmtp_session_rcpt_add() and calls
     * lmtp_session_resume() from the loop. */
    void (*rcpt)(void *arg, struct lmtp_session *s, struct lmtp_recipient_name *name);
    /* The message is complete in s->message (settled, not too big): the
     * session is parked; the front answers once per RCPT (RFC 2033 4.2)
     * and calls lmtp_session_transaction_done() from the loop. */
    void (*data)(void *arg, struct lmtp_session *s);
    /* The transaction is forgotten (RSET, LHLO, its end, the session
     * going away): whatever the front keeps for it goes, callbacks in
     * flight included. */
    void (*reset)(void *arg, struct lmtp_session *s);
};

/* What the server gives its sessions. */
struct lmtp_server_ctx {
    const struct lmtp_config *cfg;
    /* LMTP_COMPONENT, or the front's. */
    const char *component;
    /* NULL: the userdb and the storage. */
    const struct lmtp_front_ops *front;
    void *front_arg;
    struct event_base *base;
    struct auth_client *auth;
    SSL_CTX *tls;
    char hostname[256];
    /* The storage enforces a quota: recipients' quota_rule fields are kept
     * for their delivery (copied for nothing otherwise). */
    bool quota_rules;
    struct lmtp_server_metrics m;
};

const struct lmtp_server_ctx *lmtp_server_context(const struct lmtp_server *srv);
/* Whether `peer` is in lmtp.login_trusted_networks (may use XCLIENT). */
bool lmtp_server_peer_trusted(const struct lmtp_server *srv, const struct sockaddr *peer);
unsigned long long lmtp_server_next_session_id(struct lmtp_server *srv);
void lmtp_server_session_added(struct lmtp_server *srv, struct lmtp_session *s);
void lmtp_server_session_gone(struct lmtp_server *srv, struct lmtp_session *s);
/* Hands `d` to a delivery thread; lmtp_session_delivered() runs on the loop
 * when it is done. False (nothing queued, `d` still the caller's) when the
 * queue is full. */
bool lmtp_server_submit(struct lmtp_server *srv, struct lmtp_session *s, struct lmtp_delivery *d);
/* The session is going away: its delivery (if any) finishes without it. */
void lmtp_server_detach_job(struct lmtp_job *job);

/* ---------- session (lmtp-session.c) ---------- */

/* Starts a session on an accepted connection: greeting, then commands. */
void lmtp_session_start(struct lmtp_server *srv, struct bufferevent *bev,
                        const struct sockaddr *peer);
/* The server is going away: "421" now when idle, else after the current
 * transaction. */
void lmtp_session_shutdown(struct lmtp_session *s);
void lmtp_session_free(struct lmtp_session *s);
/* One reply line ("250 2.1.0 Sender OK"); `fmt` must not produce CR/LF. */
void lmtp_reply(struct lmtp_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same for a syntax or sequence error, which also counts toward
 * max_errors: at the limit "421" follows and the session closes. */
void lmtp_reply_client_error(struct lmtp_session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Writes a multi-line reply: lines[0..n) with "code-" / "code " prefixes. */
void lmtp_reply_lines(struct lmtp_session *s, int code, const char *const *lines, size_t n);
/* Closes after the output has drained. */
void lmtp_session_close_after_output(struct lmtp_session *s);
/* The asynchronous step (lookup, delivery) is over: read on. Called from
 * the loop (a callback), never from inside the session's input handling. */
void lmtp_session_resume(struct lmtp_session *s);
/* The same from inside the input handling: the caller's loop reads on. */
void lmtp_session_unpark(struct lmtp_session *s);
/* Parks the session (stops reading) while an asynchronous step runs. */
void lmtp_session_park(struct lmtp_session *s);
/* STARTTLS: layers TLS over the connection after "220" is queued. */
bool lmtp_session_starttls(struct lmtp_session *s);
/* Forgets the transaction (MAIL, RCPTs, data). */
void lmtp_session_reset_transaction(struct lmtp_session *s);
/* Adds an accepted recipient (`name` is taken; `username` copied). */
void lmtp_session_rcpt_add(struct lmtp_session *s, struct lmtp_recipient_name *name,
                           const char *username, size_t dup_of);
/* A front answered every recipient after DATA: the transaction ends and
 * the session reads on (from the loop). */
void lmtp_session_transaction_done(struct lmtp_session *s);

/* ---------- commands (lmtp-commands.c) ---------- */

/* Runs one command line (without CRLF; modified in place). */
void lmtp_command_run(struct lmtp_session *s, char *line, size_t len);
/* The DATA stream: the message is complete in s->message (settled). */
void lmtp_command_data_done(struct lmtp_session *s);
/* A delivery finished: one reply per recipient, metrics, next command. */
void lmtp_session_delivered(struct lmtp_session *s, struct lmtp_delivery *d);

#endif
