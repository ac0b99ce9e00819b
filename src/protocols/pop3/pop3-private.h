/* Internals shared by the POP3 server's files: the session, the maildrop,
 * the command table and the response writers. One session per client
 * connection; a session runs one command at a time: a command that waits
 * for the auth service, or a RETR/TOP still streaming its message, parks
 * the session, and pipelined input (RFC 2449 PIPELINING) waits in the
 * buffer. */
#ifndef PETREL_PROTOCOLS_POP3_PRIVATE_H
#define PETREL_PROTOCOLS_POP3_PRIVATE_H

#include "core/buf.h"
#include "core/metrics.h"
#include "net/cidr.h"
#include "protocols/common/mail-proxy.h"
#include "protocols/common/mail-session-io.h"
#include "protocols/pop3/pop3-body.h"
#include "protocols/pop3/pop3-config.h"
#include "protocols/pop3/pop3-parser.h"
#include "clients/auth/auth-client.h"
#include "storage/mail-storage.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define POP3_COMPONENT "pop3"

/* RFC 1939 states; UPDATE is entered by QUIT and ends with the connection. */
enum pop3_state {
    POP3_STATE_AUTHORIZATION,
    POP3_STATE_TRANSACTION,
    POP3_STATE_LOGOUT, /* closing: nothing more is read */
};

struct pop3_server;
struct warden_client;

/* One message of the maildrop: the INBOX as it was at login. */
struct pop3_message {
    uint32_t uid;
    bool deleted;  /* DELE: expunged at QUIT */
    bool seen;     /* \Seen as of login or set by this session */
    uint64_t size; /* octets as RETR sends them (CRLF line ends) */
};

/* The INBOX snapshot a session works on (pop3-maildrop.c). */
struct pop3_maildrop {
    struct mailbox *box;
    struct pop3_message *msgs;
    size_t count;
    uint32_t uid_validity;
    size_t deleted_count;
    uint64_t deleted_size;
    uint64_t total_size;
};

/* A RETR or TOP being sent. */
struct pop3_stream {
    struct mailbox_message_data *msg;
    struct pop3_body_writer writer;
};

struct pop3_session {
    struct pop3_server *server;
    struct mail_session_io io; /* the connection: bev, tls, closing, peer, id, username */
    struct pop3_parser *parser;
    enum pop3_state state;
    bool secured; /* TLS or a secure_nets peer: plaintext authentication allowed */
    bool busy;    /* a command waits (auth service, message streaming) */
    /* pipelined commands wait for the replies queued to drain */
    bool output_wait;
    /* the command being run */
    char command[16];
    struct timespec command_started;
    /* authorization */
    char *user_arg; /* USER's argument until PASS */
    struct auth_client_request *auth_req;
    bool sasl_waiting_client; /* AUTH: a "+ " challenge is out, the client's line is next */
    size_t auth_failures;
    /* transaction (the name is io.username; the warden registration, with
     * pop3.warden_addr, is io's too) */
    struct mail_user *user;
    struct pop3_maildrop drop;
    struct pop3_stream *stream;
    size_t retrieved; /* RETR commands answered (for the logout log line) */
    uint64_t retrieved_bytes;
    /* proxy mode (pop3-proxy.c): the login in progress or relayed */
    struct pop3_proxy_session *proxy;
};

struct pop3_server_metrics {
    struct metric_series *sessions_authorization;
    struct metric_series *sessions_transaction;
    struct metric_series *connections_total;
    struct metric_family *command_seconds;
    struct metric_series *bytes_in;
    struct metric_series *bytes_out;
    struct metric_family *logins;
};

/* What the server gives its sessions. */
struct pop3_server_ctx {
    const struct pop3_config *cfg;
    struct event_base *base;
    struct mail_listeners *listeners; /* listeners, connection list, per-user counts */
    struct mail_storage *storage;
    struct auth_client *auth;
    struct warden_client *warden; /* NULL when warden_addr is empty */
    SSL_CTX *tls;                 /* the listeners' (NULL: no STLS) */
    struct cidr_list secure_nets; /* cfg->secure_nets, parsed */
    struct pop3_parser_limits limits;
    struct pop3_server_metrics m;
    /* Proxy mode (a login proxy's front, pop3-proxy.c): no storage; after
     * the password check the session is routed to its backend. */
    struct mail_proxy_front *proxy;
};

/* ---------- proxy mode (pop3-proxy.c) ---------- */

struct pop3_proxy_session;
/* A proxy-mode session starts (`tls`: implicit TLS, handshake pending). */
void pop3_proxy_session_start(struct pop3_session *s, bool tls);
/* STLS: the handshake starts now. */
void pop3_proxy_starttls(struct pop3_session *s);
void pop3_proxy_tls_ready(struct pop3_session *s);
/* PASS: checks the password (with retries), then the backend. */
void pop3_proxy_cmd_pass(struct pop3_session *s, const char *user, const char *password);
/* AUTH: the SASL exchange runs here, then as PASS. `initial` NULL: none. */
void pop3_proxy_cmd_auth(struct pop3_session *s, const char *mech, const char *initial);
void pop3_proxy_auth_continue(struct pop3_session *s, const char *line, size_t len);
/* A command before login that is garbage: preamble_error once. */
void pop3_proxy_bad_command(struct pop3_session *s);
/* True (and the relay told to end with an -ERR) when the session is relayed. */
bool pop3_proxy_shutdown(struct pop3_session *s, const char *reason);
void pop3_proxy_session_free(struct pop3_session *s);

const struct pop3_server_ctx *pop3_server_context(const struct pop3_server *srv);

/* ---------- session (pop3-session.c) ---------- */

/* Starts a session on an accepted connection (TLS already layered when
 * `tls`): greeting, then commands. */
void pop3_session_start(struct pop3_server *srv, struct bufferevent *bev, bool tls,
                        const struct sockaddr *peer);
/* Ends the session now (the server is going away, the client was idle too
 * long): "-ERR <reason>" unless a response is being streamed, then close.
 * Deleted messages stay. */
void pop3_session_shutdown(struct pop3_session *s, const char *reason);
void pop3_session_free(struct pop3_session *s);
/* STLS: layers TLS over the connection after "+OK" is queued; input
 * pipelined after STLS is discarded. */
bool pop3_session_starttls(struct pop3_session *s);

/* Responses; `fmt` must not produce CR or LF. Each ends the current command
 * (metrics) and lets the session read the next one. */
void pop3_reply_ok(struct pop3_session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void pop3_reply_err(struct pop3_session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A multi-line response: "+OK <first>\r\n", the `body` lines as given (each
 * ending in CRLF, already byte-stuffed), then ".\r\n". */
void pop3_reply_multiline(struct pop3_session *s, const char *first, const struct buf *body);
/* Raw bytes (a "+ " SASL challenge, a streamed message piece). */
void pop3_send_raw(struct pop3_session *s, const void *data, size_t len);
/* Sends a RETR/TOP response: "+OK" line, then the message in pieces as
 * the output drains; the command ends with the terminator. Takes `msg`. */
void pop3_session_stream(struct pop3_session *s, const char *first,
                         struct mailbox_message_data *msg, bool top, uint64_t lines);
/* AUTH: sends the "+ <challenge>" line and takes the client's next line as
 * the SASL response (pop3_auth_continue()), also when it is already
 * buffered. Called from the auth client's callback, never inside a command. */
void pop3_session_sasl_challenge(struct pop3_session *s, const char *challenge);
/* Closes after the output has drained (the last reply already queued). */
void pop3_session_close_after_output(struct pop3_session *s);
/* Enters the TRANSACTION state as `username` (canonical form): opens the
 * INBOX and takes the maildrop snapshot. False with an -ERR sent (the
 * session stays in AUTHORIZATION) when the user cannot be served. */
bool pop3_session_login(struct pop3_session *s, const char *username, const char *const *groups);

/* ---------- the maildrop (pop3-maildrop.c) ---------- */

/* Opens the personal INBOX of `user` and snapshots its messages. */
bool pop3_maildrop_open(struct pop3_maildrop *drop, struct mail_user *user,
                        struct petrel_error *err);
/* Closes the folder; deletions not applied are forgotten. */
void pop3_maildrop_close(struct pop3_maildrop *drop);
/* Message `number` (1-based) when it exists and is not deleted; otherwise
 * NULL with the reason in `why` ("no such message", "already deleted"). */
struct pop3_message *pop3_maildrop_get(struct pop3_maildrop *drop, uint64_t number,
                                       const char **why);
void pop3_maildrop_delete(struct pop3_maildrop *drop, struct pop3_message *msg);
/* RSET: every deletion mark goes. */
void pop3_maildrop_undelete_all(struct pop3_maildrop *drop);
/* QUIT (the UPDATE state): sets \Deleted on the marked messages and
 * expunges exactly those. Messages someone else expunged meanwhile count as
 * done. False when the folder could not be changed. */
bool pop3_maildrop_commit(struct pop3_maildrop *drop, size_t *expunged, struct petrel_error *err);
/* Marks one message \Seen (RETR). */
bool pop3_maildrop_set_seen(struct pop3_maildrop *drop, struct pop3_message *msg,
                            struct petrel_error *err);

/* ---------- commands ---------- */

typedef void pop3_command_fn(struct pop3_session *s, const struct pop3_command *cmd);

struct pop3_command_def {
    const char *name;
    unsigned states; /* bit per enum pop3_state allowed */
    pop3_command_fn *run;
};

#define POP3_IN(state) (1u << (state))
#define POP3_ANY_STATE (POP3_IN(POP3_STATE_AUTHORIZATION) | POP3_IN(POP3_STATE_TRANSACTION))

/* Command tables, one per file; NULL-name terminated. */
extern const struct pop3_command_def pop3_commands_any[];  /* pop3-cmd-any.c: CAPA, QUIT, NOOP */
extern const struct pop3_command_def pop3_commands_auth[]; /* pop3-cmd-auth.c */
extern const struct pop3_command_def pop3_commands_mail[]; /* pop3-cmd-mail.c */

/* The CAPA lines for the session's state, each ending in CRLF. */
void pop3_capabilities(const struct pop3_session *s, struct buf *out);
/* AUTH: the client's line after a "+ " challenge (pop3-cmd-auth.c). */
void pop3_auth_continue(struct pop3_session *s, const char *line, size_t len);

#endif
