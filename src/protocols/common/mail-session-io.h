/* The connection under a mail protocol session (imap, pop3): its
 * bufferevent (plain, implicit TLS, or upgraded by STARTTLS/STLS), the
 * inactivity timeout, output writes with the bytes metric, the close once
 * the output has left (freed from a timer, never inside the session's own
 * call chain), the per-user count and the warden registration of the
 * logged-in user.
 *
 * A protocol session embeds `struct mail_session_io` and hands it a table
 * of callbacks; the grammar, replies, states and metrics of the protocol
 * stay with the session. Life of a connection:
 *   mail_session_io_init()    linked into the listener set, peer and id known
 *   mail_session_io_set_timeout(), mail_session_io_enable()
 *   ... ops->input() as bytes arrive; mail_session_io_write() ...
 *   mail_session_io_close_after_output(), or EOF/error/the grace running out
 *   ops->free()               the owner frees itself and calls
 *   mail_session_io_free()    last, which frees the bufferevent.
 * The callbacks run from the loop only, never inside a call into this
 * module, so the session may free itself in them.
 *
 * For an owner without ops->drained, or with an output bound
 * (mail_session_io_set_output_limits), what it writes while handling input
 * is held back until ops->input returns and then sent with one system
 * call, directly on the socket when nothing is queued and the connection
 * is plain (replies of one command mostly fit; larger writes and whatever
 * the socket does not take go through the bufferevent as before). */
#ifndef PETREL_PROTOCOLS_COMMON_MAIL_SESSION_IO_H
#define PETREL_PROTOCOLS_COMMON_MAIL_SESSION_IO_H

#include "core/buf.h"
#include "protocols/common/mail-forward.h"
#include "protocols/common/mail-listeners.h"
#include "clients/warden/warden-client.h"
#include "net/relay.h"
#include "storage/mail-storage.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

struct mail_session_io_ops {
    /* Input arrived (read it from bufferevent_get_input(io->bev)). */
    void (*input)(void *owner);
    /* Optional: the output drained while the connection is not closing
     * (the moment to produce more of a long response). */
    void (*drained)(void *owner);
    /* Say goodbye with `reason` and mail_session_io_close_after_output(),
     * or finish what runs first: the inactivity timeout or the login
     * deadline passed ("Disconnected for inactivity.", logged here; never
     * while closing), or the server is going away (mail_listeners_shutdown():
     * "Server shutting down."). */
    void (*goodbye)(void *owner, const char *reason);
    /* The connection is over (EOF, error, closed and drained, or the server
     * freeing every session): free the session, ending with
     * mail_session_io_free(). */
    void (*free)(void *owner);
    /* Optional: the TLS handshake (implicit TLS or after STARTTLS) has
     * finished. */
    void (*tls_ready)(void *owner);
};

struct mail_session_io {
    /* Read-only for the owner. */
    struct bufferevent *bev; /* the top bufferevent (STARTTLS replaces it) */
    bool tls;                /* encrypted (implicit TLS or after STARTTLS) */
    bool closing;            /* freed once the output has drained */
    char peer_ip[64];        /* the client's IP ("unix" for a Unix socket), as forwarded */
    char peer[80];           /* ip:port, as forwarded */
    char conn_ip[64];        /* the socket's peer (a proxy's when forwarded): limits */
    char id[48];             /* session id for logs (hex, unique in the process, or the proxy's) */
    bool trusted;            /* the peer is in login_trusted_networks */
    bool forwarded;          /* peer_ip, peer (and maybe id) came from the proxy */
    int64_t connected_at;    /* Unix time of the connection */
    char *username;          /* after mail_session_io_login(): the counted user */
    /* Owned by the listener set (its connection list). */
    struct mail_session_io *next;
    struct mail_session_io *prev;
    /* Private to protocols/common/. */
    struct mail_listeners *listeners;
    struct mail_session_set *set; /* the loop's sessions this one is in */
    const struct mail_session_io_ops *ops;
    void *owner;
    struct net_linger *linger;     /* closing: the deferred free */
    struct net_deadline *deadline; /* mail_session_io_set_deadline() */
    size_t max_single_write;
    size_t input_high_water;
    bool input_wm_on; /* the read watermark is installed on io->bev */
    int64_t timeout_ms;
    bool timeout_on_output;
    size_t output_high_water; /* 0: no bound (mail_session_io_set_output_limits) */
    size_t output_low_water;
    bool output_waiting; /* mail_session_io_wait_output(): ops->drained wanted */
    struct warden_client_session *warden;
    /* Replies written while ops->input runs (owners without ops->drained)
     * wait here and leave in one send at its end, straight to the socket
     * when nothing else is queued: no write event to arm and disarm. */
    struct buf cork;
    bool corked;
    bool *alive;        /* while ops->input runs: cleared if the session is freed */
    bool user_released; /* mail_session_io_logout(): not counted any more */
    bool relayed;       /* mail_session_io_relay(): the relay owns the bufferevent */
    int forwarded_ttl;  /* the proxy's hop count (x-proxy-ttl, XCLIENT TTL); -1: none */
};

/* Sends the ACK of what was read now instead of after the kernel's
 * delayed-ACK timer (~40 ms), for a reader that took bytes, answers
 * nothing and waits for more of the same command: a client that wrote the
 * command's end as a separate small segment (imaplib sends a literal and
 * its closing CRLF in two writes) holds it under Nagle until that ACK.
 * Cheap (one setsockopt); nothing on a Unix socket. */
void mail_session_io_ack_now(struct mail_session_io *io);

/* Takes `bev` (from the listener set's accept callback, on the loop of
 * `set`) for `owner`: links the connection into `set` (giving it an id),
 * records the peer and the time. Nothing is read or written until
 * mail_session_io_enable(). Runs on the set's loop thread, as do all the
 * calls below. */
void mail_session_io_init(struct mail_session_io *io, struct mail_session_set *set,
                          struct bufferevent *bev, bool tls, const struct sockaddr *peer,
                          const struct mail_session_io_ops *ops, void *owner);
/* Takes the client's address (and session id, and hop count) a trusted
 * login proxy forwarded (io->trusted must be true; the caller checks): logs, the auth
 * service, the warden and `who` then see the real client. The per-address
 * count stays on the proxy's address (io->conn_ip). Only before login: a
 * registered session keeps the address it was registered with. */
void mail_session_io_forward(struct mail_session_io *io, const struct mail_forward *f);
/* Starts reading and writing. `max_single_write`: bytes written per loop
 * pass (big responses otherwise take many passes); `input_high_water`:
 * reading stops while this much input waits unparsed (0 = no limit). Both
 * hold across STARTTLS. */
void mail_session_io_enable(struct mail_session_io *io, size_t max_single_write,
                            size_t input_high_water);
/* The `input_high_water` for a protocol whose commands are lines of at
 * most `max_line` bytes: room for a whole line twice (a line and the next
 * one's start), at least 64 KiB. A client pipelining while its answers
 * wait to be read is then held back by TCP, not by the buffer growing. */
size_t mail_session_io_input_bound(size_t max_line);
/* The inactivity timeout: on input (no bytes from the client for `ms`:
 * ops->goodbye), or with `on_output` on the output making no progress (a
 * long response to a client that stopped reading: the session is freed at
 * once, since nothing more would reach the client). Kept across STARTTLS. */
void mail_session_io_set_timeout(struct mail_session_io *io, int64_t ms, bool on_output);
/* A deadline that input does not push back: ops->goodbye once `ms` have
 * passed (never while closing), unless cleared before. The login timeout:
 * a client that sends a byte or a NOOP now and then must not hold a
 * pre-login slot for ever (Dovecot's login processes likewise disconnect
 * a client that has not logged in after a fixed time). Kept across
 * STARTTLS. */
void mail_session_io_set_deadline(struct mail_session_io *io, int64_t ms);
/* Drops the deadline and frees it (a later set_deadline makes a new one). */
void mail_session_io_clear_deadline(struct mail_session_io *io);
/* Bounds the output for an owner that produces it step by step (IMAP):
 * mail_session_io_output_full() turns true once `high` bytes wait unsent;
 * the owner then stops producing, calls mail_session_io_wait_output() and
 * returns, and ops->drained (required) runs once the output is back down
 * to `low` bytes, the moment to go on. Reading goes on meanwhile (bounded
 * by `input_high_water`); what the owner writes in ops->input and in
 * ops->drained is held back and sent at its end, as for owners without
 * ops->drained. Kept across STARTTLS. */
void mail_session_io_set_output_limits(struct mail_session_io *io, size_t high, size_t low);
/* True when the owner should stop producing output until ops->drained:
 * the unsent bytes of this session reached the `high` bound (never true
 * without mail_session_io_set_output_limits()). */
bool mail_session_io_output_full(const struct mail_session_io *io);
/* Asks for one ops->drained call once the output is down to the low-water
 * mark (with output limits set; call it when mail_session_io_output_full()). */
void mail_session_io_wait_output(struct mail_session_io *io);
/* Queues bytes for the client (nothing for `len` 0) and counts them in the
 * listener set's bytes_out. */
void mail_session_io_write(struct mail_session_io *io, const void *data, size_t len);
/* True when mail_session_io_write_file() may be used now: the connection
 * is plain (TLS needs the bytes in memory) and nothing waits in the
 * bufferevent, so a session never has more than one file queued (a FETCH
 * of many messages cannot pile up descriptors). */
bool mail_session_io_file_ready(const struct mail_session_io *io);
/* After what was written before: `len` bytes of the file `fd` from
 * `offset`, sent by the kernel from the page cache (sendfile) with no copy
 * through this process; what the socket does not take at once waits in the
 * bufferevent as a file segment. Takes `fd` (closed once sent, or with the
 * connection). Only when mail_session_io_file_ready(). If the file turns
 * out shorter, the connection is closed: the client was promised `len`
 * bytes. */
void mail_session_io_write_file(struct mail_session_io *io, int fd, off_t offset, size_t len);
/* Queues one line: `prefix`, the formatted text (which must not contain CR
 * or LF), CRLF. */
void mail_session_io_vwritef(struct mail_session_io *io, const char *prefix, const char *fmt,
                             va_list ap) __attribute__((format(printf, 3, 0)));
/* STARTTLS/STLS, after the protocol's "go ahead" is queued: discards input
 * already buffered (it came in clear text and must not run as if
 * protected, CVE-2011-0411 class) and layers TLS over the connection with
 * the set's context; the plain bufferevent below keeps no timeout or
 * watermark of its own. False (connection unchanged) when TLS cannot be
 * set up. */
bool mail_session_io_starttls(struct mail_session_io *io);
/* Stops reading and frees the session (ops->free) from the loop once the
 * output has left: from the write callback, or (under TLS, or with nothing
 * queued) from a timer that polls for at most 5 s. */
void mail_session_io_close_after_output(struct mail_session_io *io);

/* The login steps every protocol shares. */
enum mail_session_login {
    MAIL_SESSION_LOGIN_OK,
    MAIL_SESSION_LOGIN_REFUSED,  /* the storage cannot serve the name (logged) */
    MAIL_SESSION_LOGIN_TOO_MANY, /* max_connections_per_user reached (logged) */
};
/* Admits `username` (canonical form): the storage's session user
 * (borrowed; take a reference to keep it; `groups` from the userdb, for
 * ACLs, NULL-terminated or NULL) in *user, and the session counted for the
 * user, whose name io->username then holds. */
enum mail_session_login mail_session_io_login(struct mail_session_io *io,
                                              struct mail_storage *storage, const char *username,
                                              const char *const *groups, struct mail_user **user);
/* The user leaves (IMAP LOGOUT, POP3 QUIT), before the protocol replies:
 * the per-user count and the warden registration are released now, so a
 * client that has seen the reply can log in again at once (the connection
 * itself is freed a little later, maybe on another thread's loop).
 * io->username stays for the session's logs and gauges. */
void mail_session_io_logout(struct mail_session_io *io);
/* Undoes an OK mail_session_io_login() the protocol could not complete. */
void mail_session_io_login_cancel(struct mail_session_io *io);
/* Registers the logged-in user's session with the warden as `service`
 * ("imap"); NULL `warden` does nothing. Unregistered by
 * mail_session_io_free(). */
void mail_session_io_register(struct mail_session_io *io, struct warden_client *warden,
                              const char *service);

/* Counts the session for `username` (canonical form) without a mail
 * storage (a login proxy): MAIL_SESSION_LOGIN_OK with io->username set,
 * or TOO_MANY (logged) when max_connections_per_user is reached. Undone
 * by mail_session_io_login_cancel() or mail_session_io_free(). */
enum mail_session_login mail_session_io_admit(struct mail_session_io *io, const char *username);

/* A login proxy's hand-off once it has logged in to the backend for the
 * client: what is held back is sent first, the session's timeouts,
 * deadline and watermarks are dropped, and a byte relay (net/relay.h)
 * takes the client's bufferevent (plain, implicit TLS or after STARTTLS)
 * with `backend`. The connection stays linked with its max_connections
 * slot, per-address and per-user counts, id and warden registration until
 * mail_session_io_free(), which the owner calls once `done` has run (the
 * relay has freed both bufferevents by then). No ops callback runs while
 * relaying but ops->goodbye (server shutdown) and ops->free. */
struct net_relay *mail_session_io_relay(struct mail_session_io *io, struct bufferevent *backend,
                                        const struct net_relay_config *cfg, net_relay_done_fn *done,
                                        void *arg);

/* Unregisters and uncounts the user, unlinks the connection and frees the
 * bufferevent and timer; `io` itself is the owner's memory. */
void mail_session_io_free(struct mail_session_io *io);

#endif
