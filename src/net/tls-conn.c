/* TLS layers on bufferevents and the handshake deadline (tls-conn.h). */
#include "net/tls-conn.h"

#include "core/xalloc.h"
#include "net/deadline.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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

/* True when all `plain` has queued (the go-ahead) left for its socket now.
 * A socket bufferevent keeps the front of its output frozen outside its
 * own callbacks (so that only it drains it); libevent's write callback
 * thaws it around its write the same way. */
static bool flushed_now(struct bufferevent *plain)
{
    struct evbuffer *out = bufferevent_get_output(plain);
    evutil_socket_t fd = bufferevent_getfd(plain);
    if (fd < 0 || bufferevent_get_underlying(plain) != NULL ||
        bufferevent_openssl_get_ssl(plain) != NULL)
        return false;
    evbuffer_unfreeze(out, 1);
    int n = 0;
    while (evbuffer_get_length(out) > 0 && ((n = evbuffer_write(out, fd)) > 0 || errno == EINTR))
        ;
    bool flushed = evbuffer_get_length(out) == 0;
    evbuffer_freeze(out, 1);
    return flushed; /* otherwise the filter sends the rest first */
}

struct bufferevent *tls_conn_starttls(struct bufferevent *plain, SSL_CTX *ctx)
{
    SSL *ssl = ctx != NULL ? SSL_new(ctx) : NULL;
    if (ssl == NULL)
        return NULL;
    if (!flushed_now(plain))
        return starttls_filter(plain, ssl, BUFFEREVENT_SSL_ACCEPTING);
    /* The go-ahead has left: the socket itself can carry the TLS layer, as
     * an implicit-TLS connection's does. Detaching the descriptor first
     * makes freeing `plain` (deferred by libevent) leave it open; the clear
     * text pipelined after the command goes with `plain`. */
    evutil_socket_t fd = bufferevent_getfd(plain);
    struct bufferevent *tls = bufferevent_openssl_socket_new(
        bufferevent_get_base(plain), fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
        BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (tls == NULL) {
        SSL_free(ssl);
        return NULL;
    }
    bufferevent_openssl_set_allow_dirty_shutdown(tls, 1);
    bufferevent_disable(plain, EV_READ | EV_WRITE);
    bufferevent_setcb(plain, NULL, NULL, NULL, NULL);
    bufferevent_setfd(plain, -1);
    bufferevent_free(plain);
    return tls;
}

/* A BIO that reads and writes a socket it does not own. OpenSSL's socket
 * BIO would do, but libevent closes whatever descriptor the SSL's BIO
 * reports when it frees a TLS bufferevent, and it does so later, from its
 * loop: after tls_conn_detach() the SSL must report none. Sends carry
 * MSG_NOSIGNAL, so a peer's reset is an error, never a SIGPIPE. */
static int fd_of(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

static bool retry_errno(void)
{
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

static int sock_write(BIO *b, const char *data, int len)
{
    BIO_clear_retry_flags(b);
    ssize_t n = send(fd_of(b), data, (size_t)len, MSG_NOSIGNAL);
    if (n < 0 && retry_errno())
        BIO_set_retry_write(b);
    return (int)n;
}

static int sock_read(BIO *b, char *out, int len)
{
    BIO_clear_retry_flags(b);
    ssize_t n = recv(fd_of(b), out, (size_t)len, 0);
    if (n < 0 && retry_errno())
        BIO_set_retry_read(b);
    if (n == 0)
        BIO_set_flags(b, BIO_FLAGS_IN_EOF);
    return (int)n;
}

static long sock_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    (void)ptr;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1; /* nothing is held here */
    case BIO_CTRL_EOF:
        /* What OpenSSL asks before taking a 0 from a read as the peer's
         * EOF: without it, an EOF without close_notify is an error even
         * under SSL_OP_IGNORE_UNEXPECTED_EOF (a client's plain close would
         * end its relay as client_error, and a client half-closing while
         * a kick's tail is sent would lose the tail). */
        return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    case BIO_C_GET_FD:
        return -1; /* what keeps libevent from closing the descriptor */
    default:
        return 0;
    }
}

static BIO_METHOD *sock_method;
static pthread_once_t sock_method_once = PTHREAD_ONCE_INIT;

/* The method is a constant once made; written only inside pthread_once. */
static void sock_method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "petrel socket");
    if (m == NULL || BIO_meth_set_write(m, sock_write) != 1 ||
        BIO_meth_set_read(m, sock_read) != 1 || BIO_meth_set_ctrl(m, sock_ctrl) != 1) {
        BIO_meth_free(m);
        return;
    }
    sock_method = m;
}

SSL *tls_conn_detach(struct bufferevent *bev, evutil_socket_t *fd, struct evbuffer *input,
                     struct evbuffer *output)
{
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    evutil_socket_t s = bufferevent_getfd(bev);
    if (ssl == NULL || s < 0 || bufferevent_get_underlying(bev) != NULL ||
        !SSL_is_init_finished(ssl))
        return NULL;
    pthread_once(&sock_method_once, sock_method_init);
    BIO *bio = sock_method != NULL ? BIO_new(sock_method) : NULL;
    if (bio == NULL || SSL_up_ref(ssl) != 1) {
        BIO_free(bio);
        return NULL;
    }
    BIO_set_data(bio, (void *)(intptr_t)s);
    BIO_set_init(bio, 1);
    bufferevent_disable(bev, EV_READ | EV_WRITE);
    bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
    /* Thawed in case libevent froze them as it does a socket's. */
    evbuffer_unfreeze(bufferevent_get_input(bev), 0);
    evbuffer_unfreeze(bufferevent_get_output(bev), 1);
    evbuffer_add_buffer(input, bufferevent_get_input(bev));
    evbuffer_add_buffer(output, bufferevent_get_output(bev));
    /* From here the SSL reports no descriptor, so the bufferevent's
     * (deferred) end closes nothing and drops only its reference. */
    SSL_set_bio(ssl, bio, bio);
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    bufferevent_free(bev);
    *fd = s;
    return ssl;
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
