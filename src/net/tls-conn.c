/* TLS layers on bufferevents and the handshake deadline (tls-conn.h). */
#include "net/tls-conn.h"

#include "core/xalloc.h"
#include "net/deadline.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A TLS bufferevent over the socket `fd` (-1: connected later), or NULL
 * with `ssl` and `fd` freed: libevent frees neither on failure. */
static struct bufferevent *socket_bev(struct event_base *base, evutil_socket_t fd, SSL *ssl,
                                      enum bufferevent_ssl_state state)
{
    struct bufferevent *bev =
        ssl == NULL ? NULL
                    : bufferevent_openssl_socket_new(
                          base, fd, ssl, state, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (bev == NULL) {
        SSL_free(ssl); /* NULL is ignored */
        if (fd >= 0)
            evutil_closesocket(fd);
        return NULL;
    }
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

struct bufferevent *tls_conn_accept(struct event_base *base, evutil_socket_t fd, SSL_CTX *ctx)
{
    return socket_bev(base, fd, ctx != NULL ? SSL_new(ctx) : NULL, BUFFEREVENT_SSL_ACCEPTING);
}

/* A TLS filter over the clear-text `plain` for `ssl` (freed on failure).
 * Whatever the peer sent after its STARTTLS exchange came in clear text and
 * is dropped; the timeouts and watermarks move to the TLS layer. */
static struct bufferevent *starttls_filter(struct bufferevent *plain, SSL *ssl,
                                           enum bufferevent_ssl_state state)
{
    struct bufferevent *tls =
        bufferevent_openssl_filter_new(bufferevent_get_base(plain), plain, ssl, state,
                                       BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (tls == NULL) {
        SSL_free(ssl);
        return NULL;
    }
    struct evbuffer *in = bufferevent_get_input(plain);
    evbuffer_drain(in, evbuffer_get_length(in));
    bufferevent_set_timeouts(plain, NULL, NULL);
    bufferevent_setwatermark(plain, EV_READ, 0, 0);
    /* Only the client side ever reset the write watermark; kept as it was. */
    if (state == BUFFEREVENT_SSL_CONNECTING)
        bufferevent_setwatermark(plain, EV_WRITE, 0, 0);
    bufferevent_openssl_set_allow_dirty_shutdown(tls, 1);
    return tls;
}

struct bufferevent *tls_conn_starttls(struct bufferevent *plain, SSL_CTX *ctx)
{
    SSL *ssl = ctx != NULL ? SSL_new(ctx) : NULL;
    if (ssl == NULL)
        return NULL;
    return starttls_filter(plain, ssl, BUFFEREVENT_SSL_ACCEPTING);
}

/* The name the certificate must carry: a host name (also sent as SNI) or
 * an IP address (SNI carries host names only, RFC 6066 3). */
static bool expect_peer(SSL *ssl, const char *host)
{
    unsigned char ip[16];
    if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1)
        return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1;
    return SSL_set_tlsext_host_name(ssl, host) == 1 && SSL_set1_host(ssl, host) == 1;
}

struct bufferevent *tls_conn_connect(struct event_base *base, evutil_socket_t fd, SSL_CTX *ctx,
                                     const char *verify_host)
{
    SSL *ssl = ctx != NULL ? SSL_new(ctx) : NULL;
    if (ssl != NULL && verify_host != NULL && *verify_host != '\0' &&
        !expect_peer(ssl, verify_host)) {
        SSL_free(ssl);
        ssl = NULL;
    }
    return socket_bev(base, fd, ssl, BUFFEREVENT_SSL_CONNECTING);
}

struct bufferevent *tls_conn_starttls_client(struct bufferevent *plain, SSL_CTX *ctx,
                                             const char *verify_host)
{
    SSL *ssl = ctx != NULL ? SSL_new(ctx) : NULL;
    if (ssl == NULL)
        return NULL;
    if (verify_host != NULL && *verify_host != '\0' && !expect_peer(ssl, verify_host)) {
        SSL_free(ssl);
        return NULL;
    }
    return starttls_filter(plain, ssl, BUFFEREVENT_SSL_CONNECTING);
}

const char *tls_conn_error(struct bufferevent *bev, char *out, size_t size)
{
    if (size == 0)
        return out;
    out[0] = '\0';
    unsigned long e = bufferevent_get_openssl_error(bev);
    if (e != 0) {
        ERR_error_string_n(e, out, size);
        /* "error:0A000086:SSL routines::certificate verify failed": the
         * reason is what an operator needs. */
        const char *reason = strrchr(out, ':');
        if (reason != NULL && reason[1] != '\0')
            memmove(out, reason + 1, strlen(reason + 1) + 1);
    }
    return out;
}

bool tls_conn_established(struct bufferevent *bev)
{
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    return ssl != NULL && SSL_is_init_finished(ssl);
}

struct tls_handshake_deadline {
    struct bufferevent *bev;
    struct net_deadline *deadline;
    tls_handshake_expired_fn *expired;
    void *arg;
};

static void deadline_cb(void *arg)
{
    struct tls_handshake_deadline *d = arg;
    if (!tls_conn_established(d->bev))
        d->expired(d->arg);
}

struct tls_handshake_deadline *tls_handshake_deadline_new(struct bufferevent *bev, int64_t ms,
                                                          tls_handshake_expired_fn *expired,
                                                          void *arg)
{
    struct tls_handshake_deadline *d = xcalloc(1, sizeof(*d));
    d->bev = bev;
    d->expired = expired;
    d->arg = arg;
    d->deadline = net_deadline_new(bufferevent_get_base(bev), deadline_cb, d);
    net_deadline_arm(d->deadline, ms > 0 ? ms : TLS_CONN_HANDSHAKE_MS);
    return d;
}

void tls_handshake_deadline_free(struct tls_handshake_deadline *d)
{
    if (d != NULL) {
        net_deadline_free(d->deadline);
        free(d);
    }
}
