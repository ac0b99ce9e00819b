/* TLS on a connection: the one place a bufferevent gets its TLS layer, for
 * every server (implicit TLS at accept, STARTTLS/STLS upgrade) and for
 * clients that dial a TLS peer (a backend behind the login proxy, verified
 * against an internal CA), each with a bounded handshake.
 *
 * The contexts come from net/tls.h (tls_server_ctx_new, tls_client_ctx_new);
 * these functions only make connections of them.
 *
 * Why a separate handshake bound: a bufferevent read timeout restarts with
 * every byte, so a peer that sends its ClientHello one byte at a time keeps
 * a connection in the handshake for as long as it likes (a slow-loris on
 * TLS). The bound here is a deadline from the start of the handshake that
 * input does not push back, as nginx's ssl_handshake_timeout and HAProxy's
 * `timeout client` during the handshake are. */
#ifndef PETREL_NET_TLS_CONN_H
#define PETREL_NET_TLS_CONN_H

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stdint.h>

/* The default bound when the owner has no tighter one (nginx's
 * ssl_handshake_timeout default is 60 s; a mail or HTTP client on a real
 * network finishes in well under a second). */
#define TLS_CONN_HANDSHAKE_MS 10000

/* Implicit TLS, server side: a bufferevent accepting a handshake on `fd`
 * with `ctx`. Takes `fd` (closed on failure too); NULL on failure.
 * Callbacks are deferred (BEV_OPT_DEFER_CALLBACKS) and an unclean EOF is
 * not an error (clients often close without close_notify). */
struct bufferevent *tls_conn_accept(struct event_base *base, evutil_socket_t fd, SSL_CTX *ctx);

/* STARTTLS/STLS: the TLS layer over the plain bufferevent `plain`,
 * accepting a handshake with `ctx`; the result replaces `plain`, which the
 * caller no longer uses. Whatever the client pipelined after the command
 * is dropped first: it arrived in clear text and must not be taken as if
 * it came over TLS (RFC 3207 5, CVE-2011-0411). When the go-ahead queued on
 * `plain` leaves at once (the usual case), `plain` is freed and the result
 * is a TLS bufferevent on the socket itself, as tls_conn_accept() makes
 * (one bufferevent less per session for its whole life); otherwise it is a
 * TLS filter over `plain`, which then owns it, with `plain`'s timeouts and
 * read watermark cleared (they would fire under the filter whatever the
 * session's own say). The caller sets callbacks, timeouts and enables the
 * result. NULL on failure, `plain` untouched. */
struct bufferevent *tls_conn_starttls(struct bufferevent *plain, SSL_CTX *ctx);

/* Client side: a bufferevent starting a handshake over the connected (or
 * connecting) socket `fd` with `ctx` (tls_client_ctx_new: the peer's
 * certificate is verified against its CA). With `verify_host` the name is
 * sent as SNI when it is a host name, and the certificate must be for it
 * (a name or an IP address, RFC 6125); NULL checks the chain only. Takes
 * `fd` (closed on failure too); NULL on failure. `fd` may be -1: then
 * bufferevent_socket_connect() on the result dials, and the handshake
 * starts once the TCP connection is up (what a proxy dialling a backend
 * does; bound the whole with tls_handshake_deadline_new()). The owner sees
 * BEV_EVENT_CONNECTED once the handshake succeeded, BEV_EVENT_ERROR when
 * it failed (the reason in tls_conn_error()). */
struct bufferevent *tls_conn_connect(struct event_base *base, evutil_socket_t fd, SSL_CTX *ctx,
                                     const char *verify_host);

/* STARTTLS, client side (a proxy upgrading its connection to a backend
 * after the backend's "220"): wraps the connected plain bufferevent in a
 * TLS filter starting a handshake with `ctx`, the peer checked as for
 * tls_conn_connect(). Input that arrived in clear text after the "220" is
 * dropped. The filter owns `plain`; the caller sets callbacks and enables
 * the result, and sees BEV_EVENT_CONNECTED once the handshake is done.
 * NULL on failure, `plain` untouched. */
struct bufferevent *tls_conn_starttls_client(struct bufferevent *plain, SSL_CTX *ctx,
                                             const char *verify_host);

/* Takes the TLS connection out of `bev`, a TLS bufferevent on a socket
 * (tls_conn_accept, tls_conn_connect, or tls_conn_starttls when it did not
 * need a filter) whose handshake has finished, so that its owner can drive
 * it with SSL_read/SSL_write itself and hold no bufferevent while idle (the
 * login proxy's relay). On success returns the SSL, which from now on reads
 * and writes `*fd` directly (recv/send, never SIGPIPE) and is the caller's
 * to SSL_free; `*fd` (non-blocking) is the caller's to close; what `bev`
 * had decrypted and not yet handed over is appended to `input` and what it
 * had not yet encrypted to `output`, in order; `bev` is freed. A write
 * libevent left waiting for the socket is among `output`'s first bytes, so
 * the caller's first SSL_write must offer at least those again (OpenSSL's
 * retry rule): writing from the front of `output` in one piece does.
 * NULL, with `bev` untouched, when `bev` is no such bufferevent (a filter,
 * plain, still in its handshake). */
SSL *tls_conn_detach(struct bufferevent *bev, evutil_socket_t *fd, struct evbuffer *input,
                     struct evbuffer *output);

/* The TLS reason of the last error on `bev` ("certificate verify failed"),
 * or "" when there is none; `out` is returned. */
const char *tls_conn_error(struct bufferevent *bev, char *out, size_t size);

/* True when `bev` (a TLS bufferevent from above) has finished its handshake. */
bool tls_conn_established(struct bufferevent *bev);

/* A handshake deadline. After `ms` (<= 0: TLS_CONN_HANDSHAKE_MS) `expired`
 * runs once, unless the handshake on `bev` has finished by then; the
 * deadline is not pushed back by input. The owner frees it (at the latest
 * with the connection; freeing it first is fine, freeing it after the
 * bufferevent too). `expired` may free the connection and the deadline. */
struct tls_handshake_deadline;
typedef void tls_handshake_expired_fn(void *arg);
struct tls_handshake_deadline *tls_handshake_deadline_new(struct bufferevent *bev, int64_t ms,
                                                          tls_handshake_expired_fn *expired,
                                                          void *arg);
void tls_handshake_deadline_free(struct tls_handshake_deadline *d); /* NULL is ignored */

#endif
