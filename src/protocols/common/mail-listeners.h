/* The listener set of a mail protocol server (imap, pop3): the plain and
 * implicit-TLS listeners of a `struct mail_login_config`, the TLS context
 * loaded from its certificate (also the one STARTTLS/STLS uses), accepting
 * under max_connections and max_connections_per_ip (counted from accept to
 * close; net/listener.h also pauses accepting when descriptors run out),
 * the list of open connections
 * (protocols/common/mail-session-io.h), session ids and the per-user
 * session counts behind max_connections_per_user.
 *
 * What stays with the protocol: its metrics families (it registers them and
 * hands the series this set updates), the auth and warden clients, its
 * greeting, and the session it builds on each accepted connection.
 *
 * Open connections live in session sets, one per event loop: the set's
 * own (mail_listeners_main_set(), on `base`) and any a protocol makes for
 * loops on other threads (imap workers). A set and its sessions belong to
 * their loop's thread; the listeners accept on `base`, and with `accept_fd`
 * the protocol hands each descriptor to a loop of its choice, which wraps it
 * with mail_listeners_bufferevent(). The counts behind max_connections and
 * max_connections_per_user and the session ids are shared by every loop
 * (under a lock).
 *
 * Ownership: the set owns its listeners, the TLS context and the counts; it
 * never frees a session. The protocol frees every session (each unlinks its
 * connection) before mail_listeners_free(). */
#ifndef PETREL_PROTOCOLS_COMMON_MAIL_LISTENERS_H
#define PETREL_PROTOCOLS_COMMON_MAIL_LISTENERS_H

#include "core/error.h"
#include "core/metrics.h"
#include "net/readiness.h"
#include "protocols/common/mail-login-config.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

struct mail_listeners;
struct mail_session_io;
struct mail_session_set;

/* An accepted connection under the limit. `bev` (owned by the callee from
 * now on) has TLS layered already, handshake pending, when `tls` (an
 * implicit-TLS listener). */
typedef void mail_listeners_accept_fn(void *arg, struct bufferevent *bev, bool tls,
                                      const struct sockaddr *peer);
/* The same, as a bare descriptor (owned by the callee) for a loop on
 * another thread: counted against max_connections already, so it must
 * become a session (mail_session_io_init()) or be given back with
 * mail_listeners_release(). `peer` is valid for the call only. */
typedef void mail_listeners_accept_fd_fn(void *arg, int fd, bool tls, const struct sockaddr *peer);

struct mail_listeners_params {
    const char *component; /* "imap": errors, log lines, readiness names */
    struct event_base *base;
    const struct mail_login_config *cfg; /* listeners, TLS files, limits; outlives the set */
    /* Written in clear text (even on a TLS port: no handshake is spent on
     * a refusal) to a connection over max_connections, which is closed. */
    const char *busy_reply;
    /* The same for a connection over max_connections_per_ip (the listener
     * writes it, net/listener.h); NULL: closed without a word. */
    const char *per_ip_reply;
    struct metric_series *connections_total; /* +1 per connection opened */
    struct metric_series *bytes_out;         /* bytes written by mail_session_io_write() */
    mail_listeners_accept_fn *accept;
    mail_listeners_accept_fd_fn *accept_fd; /* when set, used instead of `accept` */
    void *accept_arg;
};

/* Loads the TLS certificate and key when cfg->tls_cert_file is set; binds
 * nothing yet. NULL with `err` set (naming the file) when they fail. */
struct mail_listeners *mail_listeners_new(const struct mail_listeners_params *params,
                                          struct petrel_error *err);
/* Binds cfg->listen (plain) then cfg->listen_tls (implicit TLS) and starts
 * accepting. False with `err` set when an address cannot be bound or no
 * listener is configured ("<component>: no listener configured"). */
bool mail_listeners_open(struct mail_listeners *ls, struct petrel_error *err);
/* Adds a readiness check per listener, "<component>-listener-<n>" (a TLS
 * handshake for the implicit-TLS ones). */
void mail_listeners_add_readiness(const struct mail_listeners *ls, struct readiness *r);
/* Stops accepting (idempotent); open connections are not touched. */
void mail_listeners_close(struct mail_listeners *ls);
/* Stops accepting and asks every session of the main set to end (its
 * ops->goodbye); they close once their output has left. */
void mail_listeners_shutdown(struct mail_listeners *ls);
/* Stops accepting and frees every session of the main set now (its
 * ops->free), for the server's own free; NULL is ignored. */
void mail_listeners_free_sessions(struct mail_listeners *ls);
/* Frees the set (NULL is ignored); closes the listeners if still open.
 * Every connection must have been freed. */
void mail_listeners_free(struct mail_listeners *ls);

/* The parameters the set was made with (a copy; the strings and series
 * are the caller's). */
const struct mail_listeners_params *mail_listeners_params(const struct mail_listeners *ls);
/* The TLS context (NULL without a certificate); owned by the set. */
SSL_CTX *mail_listeners_tls(const struct mail_listeners *ls);
/* The first listener's bound address ("" before mail_listeners_open()). */
const char *mail_listeners_address(const struct mail_listeners *ls);
size_t mail_listeners_count(const struct mail_listeners *ls);
/* The warden instance name "<component>@<host>:<first listener>", cut to
 * `size` - 1 bytes (pass WARDEN_INSTANCE_MAX + 1): stable across restarts,
 * so a new process's HELLO reaps the old one's sessions. */
void mail_listeners_instance(const struct mail_listeners *ls, char *out, size_t size);

/* Wraps an accepted descriptor in a bufferevent on `base` (the loop that
 * will run the session), TLS layered when `tls`; NULL (descriptor closed)
 * when libevent fails. Any thread, for its own loop. */
struct bufferevent *mail_listeners_bufferevent(struct mail_listeners *ls, struct event_base *base,
                                               int fd, bool tls);
/* Gives back the counts (max_connections and, for `peer`,
 * max_connections_per_ip) of an accepted descriptor that never became a
 * session (closed by the caller). */
void mail_listeners_release(struct mail_listeners *ls, const struct sockaddr *peer);
/* The login timeout to apply now: `configured_ms`, or 10 s when 3/4 of
 * max_connections are open (pre-login connections make room sooner). */
/* Whether `peer` is in login_trusted_networks (a login proxy whose
 * forwarding of the client's address is believed). */
bool mail_listeners_peer_trusted(const struct mail_listeners *ls, const struct sockaddr *peer);
int64_t mail_listeners_login_timeout(const struct mail_listeners *ls, int64_t configured_ms);

/* ---------- open connections ---------- */

/* How many connections are open (and handed to a loop, not yet sessions). */
size_t mail_listeners_sessions(const struct mail_listeners *ls);
/* The set on the listeners' own loop. */
struct mail_session_set *mail_listeners_main_set(struct mail_listeners *ls);
/* A set for the loop `base` on another thread; used and freed (empty) on
 * that thread. */
struct mail_session_set *mail_session_set_new(struct mail_listeners *ls, struct event_base *base);
void mail_session_set_free(struct mail_session_set *set);
struct event_base *mail_session_set_base(const struct mail_session_set *set);
struct mail_listeners *mail_session_set_listeners(const struct mail_session_set *set);
/* Sessions in the set. */
size_t mail_session_set_count(const struct mail_session_set *set);
/* Asks every session of the set to end (its ops->goodbye). */
void mail_session_set_shutdown(struct mail_session_set *set);
/* Frees every session of the set now (its ops->free). */
void mail_session_set_free_sessions(struct mail_session_set *set);
/* For mail-session-io.c: links a new connection (with a fresh session id)
 * into `set`; unlinks a connection being freed, which ends its count. */
void mail_listeners_attach(struct mail_session_set *set, struct mail_session_io *io);
void mail_listeners_detach(struct mail_session_set *set, struct mail_session_io *io);
/* Per-user session counts: false (nothing counted) when `username`
 * already has max_connections_per_user sessions (0 = no limit). Every
 * successful add is matched by one remove. */
bool mail_listeners_user_add(struct mail_listeners *ls, const char *username);
void mail_listeners_user_remove(struct mail_listeners *ls, const char *username);

#endif
