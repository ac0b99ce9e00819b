/* Unit tests for net/relay.h with real TLS (OpenSSL on socketpairs, a
 * throwaway key made at test time): the relay takes a finished TLS
 * bufferevent's connection (tls_conn_detach) and drives SSL_read and
 * SSL_write itself. Bytes cross intact both ways while the sockets fill
 * (partial and retried writes), what the bufferevent had decrypted or not
 * yet sent at the takeover crosses exactly once and in order, bytes
 * OpenSSL holds decrypted with the socket quiet are not forgotten, a TLS
 * 1.3 KeyUpdate mid-stream (even with the socket full) changes nothing, a
 * stop or a backend's close sends what was queued then close_notify, a
 * client's FIN without close_notify is a close, and no descriptor or SSL
 * is left behind. The client side is TLS (tls_conn_accept); the backend is
 * a plain socket or TLS (tls_conn_connect), the test's state says which. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net/relay.h"
#include "test-relay-support.h"
#include "net/tls-conn.h"
#include "net/tls.h"
#include "test-pki.h"

#include <dirent.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---------- TLS material ---------- */

/* The contexts: the product's own (tls_server_ctx_new, tls_client_ctx_new)
 * for the relay's sides, a strict one for the test's ends: no option
 * forgives an EOF without close_notify there. */
struct ctxs {
    SSL_CTX *product_server;
    SSL_CTX *product_client;
    SSL_CTX *test_client;
    SSL_CTX *test_server;
};

static struct ctxs make_ctxs(const struct pki *k)
{
    struct ctxs c;
    struct petrel_error err = {0};
    struct tls_server_options so = {.cert_file = k->cert, .key_file = k->key};
    c.product_server = tls_server_ctx_new(&so, &err);
    assert_non_null(c.product_server);
    c.product_client = tls_client_ctx_new(k->cert, NULL, NULL, &err);
    assert_non_null(c.product_client);
    c.test_client = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(c.test_client, TLS1_3_VERSION);
    SSL_CTX_set_verify(c.test_client, SSL_VERIFY_NONE, NULL);
    c.test_server = SSL_CTX_new(TLS_server_method());
    assert_int_equal(SSL_CTX_use_certificate_file(c.test_server, k->cert, SSL_FILETYPE_PEM), 1);
    assert_int_equal(SSL_CTX_use_PrivateKey_file(c.test_server, k->key, SSL_FILETYPE_PEM), 1);
    return c;
}

static void free_ctxs(struct ctxs *c)
{
    SSL_CTX_free(c->product_server);
    SSL_CTX_free(c->product_client);
    SSL_CTX_free(c->test_client);
    SSL_CTX_free(c->test_server);
}

/* ---------- the test's ends ---------- */

/* The test's end of one side: a socket, with TLS or without. */
struct end {
    int fd;
    SSL *ssl;
    bool eof;         /* EOF seen (with close_notify when TLS) */
    bool dirty_eof;   /* TLS: EOF without close_notify, or a TLS error */
    uint64_t seed;    /* what this end sends: pattern(seed, i) */
    size_t sent, got; /* bytes sent, bytes received and checked */
    uint64_t peer_seed;
};

static unsigned char pattern(uint64_t seed, size_t i)
{
    return (unsigned char)((i * 131u + (i >> 9) + seed * 7u) & 0xff);
}

static void end_write_mode(SSL *ssl)
{
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

/* Sends from [sent, total) at most `budget` bytes, as far as the socket
 * takes them. A TLS write not taken is offered again from the same offset
 * with at least as many bytes (OpenSSL's rule). */
static void end_send(struct end *e, size_t total, size_t budget)
{
    unsigned char chunk[16384];
    while (e->sent < total && budget > 0) {
        size_t n = total - e->sent;
        if (n > sizeof(chunk))
            n = sizeof(chunk);
        if (n > budget && budget >= sizeof(chunk))
            n = budget;
        for (size_t i = 0; i < n; i++)
            chunk[i] = pattern(e->seed, e->sent + i);
        size_t w = 0;
        if (e->ssl != NULL) {
            ERR_clear_error();
            if (SSL_write_ex(e->ssl, chunk, n, &w) != 1) {
                int err = SSL_get_error(e->ssl, 0);
                if (err != SSL_ERROR_WANT_WRITE && err != SSL_ERROR_WANT_READ)
                    fail_msg("test end: SSL_write failed (%d)", err);
                return;
            }
        } else {
            ssize_t s = send(e->fd, chunk, n, MSG_NOSIGNAL);
            if (s <= 0)
                return;
            w = (size_t)s;
        }
        e->sent += w;
        budget = budget > w ? budget - w : 0;
    }
}

/* Reads at most `budget` bytes, checking them against the peer's pattern;
 * `tail` (may be NULL), once the pattern's `expect` bytes have come,
 * receives what follows. */
static void end_recv(struct end *e, size_t budget, size_t expect, char *tail, size_t tail_size,
                     size_t *tail_len)
{
    unsigned char buf[16384];
    while (budget > 0 && !e->eof && !e->dirty_eof) {
        size_t n = budget < sizeof(buf) ? budget : sizeof(buf);
        size_t r = 0;
        if (e->ssl != NULL) {
            ERR_clear_error();
            if (SSL_read_ex(e->ssl, buf, n, &r) != 1) {
                int err = SSL_get_error(e->ssl, 0);
                if (err == SSL_ERROR_ZERO_RETURN)
                    e->eof = true;
                else if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
                    e->dirty_eof = true;
                return;
            }
        } else {
            ssize_t s = recv(e->fd, buf, n, 0);
            if (s == 0)
                e->eof = true;
            if (s <= 0)
                return;
            r = (size_t)s;
        }
        for (size_t i = 0; i < r; i++) {
            if (e->got < expect || tail == NULL) {
                if (buf[i] != pattern(e->peer_seed, e->got))
                    fail_msg("byte %zu differs", e->got);
                e->got++;
            } else {
                if (*tail_len + 1 >= tail_size)
                    fail_msg("more than expected after %zu bytes", expect);
                tail[(*tail_len)++] = (char)buf[i];
                tail[*tail_len] = '\0';
            }
        }
        budget -= r;
    }
}

static void end_close(struct end *e)
{
    SSL_free(e->ssl);
    e->ssl = NULL;
    if (e->fd >= 0)
        close(e->fd);
    e->fd = -1;
}

/* ---------- the relay's sides ---------- */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

/* Runs the loop's callbacks `n` times, without waiting. */
static void turns(struct event_base *base, int n)
{
    for (int i = 0; i < n; i++)
        turn(base);
}

/* Runs the loop in real time for `usec` (timers fire, the lingering
 * closes wait on their sockets). */
static void tick(struct event_base *base, long usec)
{
    struct timeval tv = {0, usec};
    event_base_loopexit(base, &tv);
    event_base_loop(base, 0);
}

/* Turns the loop until `bev` has read at least `n` bytes (5 s at most). */
static void turn_until_input_holds(struct event_base *base, struct bufferevent *bev, size_t n)
{
    int64_t until = mono_ms() + 5000;
    while (evbuffer_get_length(bufferevent_get_input(bev)) < n) {
        turn(base);
        assert_true(mono_ms() < until);
    }
}

/* BACKEND_TLS12: a TLS 1.2 backend (one that may renegotiate). */
enum backend_kind { BACKEND_PLAIN, BACKEND_TLS, BACKEND_TLS12 };

/* One case's world: the TLS material, the loop, the test's two ends and
 * the relay's bufferevents (theirs until the relay takes them). The
 * starttls cases use the client's side alone (backend.fd -1). */
struct rig {
    struct pki pki;
    struct ctxs ctxs;
    struct event_base *base;
    struct end client;  /* the mail client */
    struct end backend; /* the backend server */
    struct bufferevent *cbev, *bbev;
    int relay_client_fd, relay_backend_fd; /* the relay's sockets */
    struct ended e;
    struct net_relay *r;
    int fds_before;
};

static void pair(int fds[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    evutil_make_socket_nonblocking(fds[0]);
    evutil_make_socket_nonblocking(fds[1]);
}

/* The descriptors counted first (rig_free compares), then the key, the
 * contexts and the loop; no ends yet. */
static void rig_open(struct rig *t)
{
    memset(t, 0, sizeof(*t));
    t->fds_before = open_fds();
    make_pki(&t->pki);
    t->ctxs = make_ctxs(&t->pki);
    t->base = event_base_new();
    t->client.fd = t->backend.fd = -1;
}

/* Both sides connected, their handshakes (if any) finished, no relay yet. */
static void rig_connect(struct rig *t, enum backend_kind kind)
{
    rig_open(t);
    int c[2], b[2];
    pair(c);
    pair(b);
    t->client = (struct end){.fd = c[0], .seed = 1, .peer_seed = 2};
    t->backend = (struct end){.fd = b[0], .seed = 2, .peer_seed = 1};
    t->client.ssl = SSL_new(t->ctxs.test_client);
    SSL_set_fd(t->client.ssl, c[0]);
    SSL_set_connect_state(t->client.ssl);
    end_write_mode(t->client.ssl);
    t->cbev = tls_conn_accept(t->base, c[1], t->ctxs.product_server);
    assert_non_null(t->cbev);
    bufferevent_enable(t->cbev, EV_READ | EV_WRITE);
    if (kind != BACKEND_PLAIN) {
        t->backend.ssl = SSL_new(t->ctxs.test_server);
        if (kind == BACKEND_TLS12)
            SSL_set_max_proto_version(t->backend.ssl, TLS1_2_VERSION);
        SSL_set_fd(t->backend.ssl, b[0]);
        SSL_set_accept_state(t->backend.ssl);
        end_write_mode(t->backend.ssl);
        t->bbev = tls_conn_connect(t->base, b[1], t->ctxs.product_client, "localhost");
    } else {
        t->bbev = bufferevent_socket_new(t->base, b[1], BEV_OPT_CLOSE_ON_FREE);
    }
    assert_non_null(t->bbev);
    bufferevent_enable(t->bbev, EV_READ | EV_WRITE);
    int64_t until = mono_ms() + 5000;
    for (;;) {
        turn(t->base);
        ERR_clear_error();
        SSL_do_handshake(t->client.ssl);
        if (t->backend.ssl != NULL)
            SSL_do_handshake(t->backend.ssl);
        bool done = SSL_is_init_finished(t->client.ssl) && tls_conn_established(t->cbev) &&
                    (t->backend.ssl == NULL ||
                     (SSL_is_init_finished(t->backend.ssl) && tls_conn_established(t->bbev)));
        if (done)
            break;
        assert_true(mono_ms() < until);
    }
    t->relay_client_fd = bufferevent_getfd(t->cbev);
    t->relay_backend_fd = bufferevent_getfd(t->bbev);
}

static const struct net_relay_config relay_config = {
    .high_water = 256 * 1024, .idle_ms = 0, .linger_ms = 3000};

static void rig_relay(struct rig *t, const struct net_relay_config *config)
{
    t->r = net_relay_start(t->cbev, t->bbev, config, on_done, &t->e);
    t->cbev = t->bbev = NULL; /* the relay's now */
}

/* Runs the loop in real time until the relay is done, the ends reading
 * (and checking) what comes; it must have ended as `end` says. */
static void run_until_the_relay_ends(struct rig *t, enum net_relay_end end)
{
    int64_t until = mono_ms() + 8000;
    while (!t->e.done && mono_ms() < until) {
        tick(t->base, 5000);
        if (t->client.fd >= 0)
            end_recv(&t->client, SIZE_MAX, SIZE_MAX, NULL, 0, NULL);
        if (t->backend.fd >= 0)
            end_recv(&t->backend, SIZE_MAX, SIZE_MAX, NULL, 0, NULL);
    }
    assert_true(t->e.done);
    assert_int_equal(t->e.end, end);
}

/* The ends are closed, the lingering closes see their EOF: nothing the
 * relay made is left open. */
static void rig_free(struct rig *t)
{
    end_close(&t->client);
    end_close(&t->backend);
    if (t->cbev != NULL)
        bufferevent_free(t->cbev);
    if (t->bbev != NULL)
        bufferevent_free(t->bbev);
    for (int i = 0; i < 20; i++)
        tick(t->base, 5000);
    event_base_free(t->base);
    free_ctxs(&t->ctxs);
    free_pki(&t->pki);
    assert_int_equal(open_fds(), t->fds_before);
}

/* Per-case fixtures: main() gives each case its backend's kind as the
 * state; the set-up replaces it with the rig, connected (the case starts
 * the relay itself) or already relaying. The tear-down frees the rig
 * whatever the case did: a descriptor left open fails the case. */
static int connected(void **state)
{
    enum backend_kind kind = *(enum backend_kind *)*state;
    struct rig *t = malloc(sizeof(*t));
    assert_non_null(t);
    *state = t;
    rig_connect(t, kind);
    return 0;
}

static int relaying(void **state)
{
    connected(state);
    rig_relay(*state, &relay_config);
    return 0;
}

static int rig_teardown(void **state)
{
    rig_free(*state);
    free(*state);
    return 0;
}

/* Moves bytes both ways until `up` reached the backend and `down` the
 * client, the ends reading less than they write so that sockets fill. */
static void pump(struct rig *t, size_t up, size_t down, size_t read_step)
{
    int64_t until = mono_ms() + 20000;
    while ((t->backend.got < up || t->client.got < down) && mono_ms() < until) {
        end_send(&t->client, up, 64 * 1024);
        end_send(&t->backend, down, 64 * 1024);
        turn(t->base);
        end_recv(&t->client, read_step, SIZE_MAX, NULL, 0, NULL);
        end_recv(&t->backend, read_step, SIZE_MAX, NULL, 0, NULL);
        assert_false(t->e.done);
        assert_false(t->client.dirty_eof);
        assert_false(t->backend.dirty_eof);
    }
    assert_int_equal(t->backend.got, up);
    assert_int_equal(t->client.got, down);
}

/* The client uploads toward `total`, `budget` bytes a loop pass, and the
 * backend reads `read_step` a pass, until the backend has had all of it
 * (`ms` at most); the relay must not end meanwhile. */
static void upload(struct rig *t, size_t total, size_t budget, size_t read_step, int ms)
{
    int64_t until = mono_ms() + ms;
    while (t->backend.got < total && mono_ms() < until) {
        end_send(&t->client, total, budget);
        turn(t->base);
        end_recv(&t->backend, read_step, SIZE_MAX, NULL, 0, NULL);
        assert_false(t->e.done);
    }
    assert_int_equal(t->backend.got, total);
}

/* Runs the loop in 5 ms ticks until the backend has read (and checked)
 * all `n` bytes the client sent, `ms` at most: nothing more comes on the
 * client's socket to wake the relay. */
static void run_until_the_backend_got(struct rig *t, size_t n, int ms)
{
    int64_t until = mono_ms() + ms;
    while (t->backend.got < n && mono_ms() < until) {
        tick(t->base, 5000);
        end_recv(&t->backend, SIZE_MAX, SIZE_MAX, NULL, 0, NULL);
    }
    assert_int_equal(t->backend.got, n);
}

/* What a client keeps unchecked as it comes (end_recv's tail). */
struct capture {
    char *raw;
    size_t cap, len;
};

/* Runs the loop in 2 ms ticks, the client reading `read_step` bytes a
 * tick (checked, or kept in `c` when not NULL), until its end sees EOF
 * (`ms` at most): a clean one, with close_notify. */
static void run_until_client_eof(struct rig *t, size_t read_step, int ms, struct capture *c)
{
    int64_t until = mono_ms() + ms;
    while (!t->client.eof && !t->client.dirty_eof && mono_ms() < until) {
        tick(t->base, 2000);
        if (c != NULL)
            end_recv(&t->client, read_step, 0, c->raw, c->cap, &c->len);
        else
            end_recv(&t->client, read_step, SIZE_MAX, NULL, 0, NULL);
    }
    assert_false(t->client.dirty_eof);
    assert_true(t->client.eof);
}

/* The client closes with close_notify: the relay ends as a client close. */
static void client_says_goodbye(struct rig *t)
{
    ERR_clear_error();
    SSL_shutdown(t->client.ssl);
    run_until_the_relay_ends(t, NET_RELAY_CLIENT_CLOSED);
}

/* ---------- tests ---------- */

/* Small writes from `e`, each relayed at once as a record of its own,
 * until the relay's socket `relay_fd` toward the other end holds all it
 * takes (a unix socket takes a write while what it holds is under its
 * buffer size): the socket is full and nothing waits in the relay. */
static void fill_socket(struct rig *t, struct end *e, int relay_fd)
{
    int sndbuf = 0;
    socklen_t len = sizeof(sndbuf);
    assert_int_equal(getsockopt(relay_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len), 0);
    int64_t until = mono_ms() + 8000;
    for (;;) {
        int outq = 0;
        assert_int_equal(ioctl(relay_fd, SIOCOUTQ, &outq), 0);
        if (outq >= sndbuf)
            break;
        end_send(e, e->sent + 200, SIZE_MAX);
        turns(t->base, 3);
        assert_true(mono_ms() < until);
    }
}

/* `e` sends toward `total`, `budget` bytes per loop pass, until its
 * socket and the relay take no more for 100 passes in a row (the peer
 * reads nothing). */
static void send_until_stuck(struct rig *t, struct end *e, size_t total, size_t budget)
{
    size_t last = SIZE_MAX;
    for (int still = 0; still < 100;) {
        end_send(e, total, budget);
        turn(t->base);
        still = e->sent == last ? still + 1 : 0;
        last = e->sent;
    }
}

/* The TLS 1.2 backend asks for a renegotiation: its HelloRequest leaves
 * now, the rest of the handshake comes as the relay reads. */
static void backend_asks_to_renegotiate(struct rig *t)
{
    assert_int_equal(SSL_renegotiate(t->backend.ssl), 1);
    ERR_clear_error();
    SSL_do_handshake(t->backend.ssl);
}

static const char bye[] = "* BYE kicked\r\n";

/* After a stop with the farewell `bye` in the middle of a download of
 * `down` bytes: the client reads to a clean end, and what it got is the
 * download's first bytes, as many as the relay counts, then the farewell
 * (bytes still in the backend's socket are dropped with it). */
static void client_gets_the_tail_the_farewell_then_close_notify(struct rig *t, size_t down)
{
    struct capture c = {.raw = malloc(down + 64), .cap = down + 64};
    assert_non_null(c.raw);
    run_until_client_eof(t, 32768, 8000, &c);
    run_until_the_relay_ends(t, NET_RELAY_STOPPED);
    assert_true(t->e.stats.to_client > 0);
    assert_int_equal(c.len, t->e.stats.to_client + strlen(bye));
    for (size_t i = 0; i < t->e.stats.to_client; i++)
        if ((unsigned char)c.raw[i] != pattern(2, i))
            fail_msg("byte %zu differs", i);
    assert_memory_equal(c.raw + t->e.stats.to_client, bye, strlen(bye));
    free(c.raw);
}

static void test_bytes_cross_intact_both_ways_while_sockets_fill(void **state)
{
    struct rig *t = *state;
    const size_t total = 6u << 20;
    pump(t, total, total, 4096);
    client_says_goodbye(t);
    assert_int_equal(t->e.stats.to_backend, total);
    assert_int_equal(t->e.stats.to_client, total);
}

/* Before the takeover the client's bufferevent has decrypted a pipelined
 * command and holds encrypted bytes the socket did not take (the client
 * was not reading): both cross exactly once, in order, and the retried
 * write the bufferevent left pending is one OpenSSL accepts. */
static void test_what_the_bufferevent_held_crosses_once_in_order(void **state)
{
    struct rig *t = *state;
    /* Pipelined by the client, read by the bufferevent. */
    const size_t early_up = 3000;
    end_send(&t->client, early_up, SIZE_MAX);
    turn_until_input_holds(t->base, t->cbev, early_up);
    /* A big answer the client does not read: libevent hands it to one
     * SSL_write, which sends records until the socket is full and then
     * waits (the bytes sent stay in the output until the whole write is
     * done), so what OpenSSL already sent is still at the output's front. */
    const size_t early_down = 2u << 20;
    unsigned char *big = malloc(early_down);
    for (size_t i = 0; i < early_down; i++)
        big[i] = pattern(2, i);
    bufferevent_write(t->cbev, big, early_down);
    free(big);
    BIO *wbio = SSL_get_wbio(bufferevent_openssl_get_ssl(t->cbev));
    uint64_t last = UINT64_MAX;
    for (int still = 0; still < 50;) {
        turn(t->base);
        uint64_t now = BIO_number_written(wbio);
        still = now == last ? still + 1 : 0;
        last = now;
    }
    assert_true(last > 128 * 1024); /* more than one relay step went out */
    t->backend.sent = early_down;   /* the backend's stream goes on from there */
    rig_relay(t, &relay_config);
    const size_t total = early_down + (1u << 20);
    pump(t, early_up + (1u << 20), total, 16384);
    client_says_goodbye(t);
    assert_int_equal(t->e.stats.to_backend, early_up + (1u << 20));
}

/* Decrypted bytes OpenSSL holds with nothing more on the socket: one
 * record, only part of which the bufferevent took (its read watermark
 * stopped it). The relay must hand the rest over without a socket event. */
static void test_bytes_openssl_holds_at_the_takeover_cross(void **state)
{
    struct rig *t = *state;
    bufferevent_setwatermark(t->cbev, EV_READ, 0, 100);
    const size_t n = 12000; /* one record */
    end_send(&t->client, n, SIZE_MAX);
    assert_int_equal(t->client.sent, n);
    turn_until_input_holds(t->base, t->cbev, 1);
    assert_true(SSL_has_pending(bufferevent_openssl_get_ssl(t->cbev)));
    rig_relay(t, &relay_config);
    run_until_the_backend_got(t, n, 3000);
    client_says_goodbye(t);
}

/* Five records at once whose last ends past one read's 64 KiB: its tail
 * stays decrypted in OpenSSL while the socket has nothing more. */
static void test_a_record_split_by_a_full_read_is_not_forgotten(void **state)
{
    struct rig *t = *state;
    end_send(&t->client, 1000, SIZE_MAX);
    for (int i = 1; i <= 4; i++)
        end_send(&t->client, 1000 + (size_t)i * 16384, SIZE_MAX);
    const size_t n = 1000 + 4 * 16384;
    assert_int_equal(t->client.sent, n);
    run_until_the_backend_got(t, n, 3000);
    client_says_goodbye(t);
}

/* The client that stopped reading is paused on the backend's behalf while
 * OpenSSL holds part of a record: reading again must take that part. The
 * backend reads nothing until the client's upload has filled the relay. */
static void test_bytes_held_by_openssl_while_paused_cross_on_resume(void **state)
{
    struct rig *t = *state;
    /* Fill: the backend does not read, the client writes until it can't. */
    const size_t total = 4u << 20;
    send_until_stuck(t, &t->client, total, 1000);
    assert_true(t->client.sent < total);
    upload(t, total, 1000, 1000, 10000);
    client_says_goodbye(t);
}

/* TLS 1.3 KeyUpdate asking for ours in return, sent by the client in the
 * middle of a transfer both ways: nothing is lost, nothing fails. */
static void test_a_key_update_mid_transfer_changes_nothing(void **state)
{
    struct rig *t = *state;
    pump(t, 1u << 20, 1u << 20, 16384);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(SSL_key_update(t->client.ssl, SSL_KEY_UPDATE_REQUESTED), 1);
        pump(t, (2u + (size_t)k) << 20, (2u + (size_t)k) << 20, 16384);
    }
    client_says_goodbye(t);
}

/* The same while the relay's socket to the client is full (the client
 * reads nothing): the relay's answer to the KeyUpdate cannot leave at once
 * and a write of application data is waiting in OpenSSL. */
static void test_a_key_update_with_the_client_socket_full(void **state)
{
    struct rig *t = *state;
    const size_t down = 8u << 20;
    send_until_stuck(t, &t->backend, down, 64 * 1024);
    assert_true(t->backend.sent < down);
    assert_int_equal(SSL_key_update(t->client.ssl, SSL_KEY_UPDATE_REQUESTED), 1);
    end_send(&t->client, 100, SIZE_MAX); /* carries the KeyUpdate first */
    assert_int_equal(t->client.sent, 100);
    turns(t->base, 50);
    assert_false(t->e.done);
    pump(t, 200, down, 16384);
    client_says_goodbye(t);
}

/* A kick in the middle of a big download: the client gets every byte,
 * the farewell, then close_notify (a clean TLS end, no truncation). */
static void test_a_stop_sends_the_tail_the_farewell_then_close_notify(void **state)
{
    struct rig *t = *state;
    const size_t down = 3u << 20;
    send_until_stuck(t, &t->backend, down, 64 * 1024);
    net_relay_stop(t->r, bye, strlen(bye));
    client_gets_the_tail_the_farewell_then_close_notify(t, down);
}

/* The backend closes after its last bytes: the client gets them, then
 * close_notify. */
static void test_a_backend_close_ends_with_close_notify(void **state)
{
    struct rig *t = *state;
    const size_t down = 1u << 20;
    int64_t until = mono_ms() + 8000;
    while (t->backend.sent < down && mono_ms() < until) {
        end_send(&t->backend, down, 64 * 1024);
        turn(t->base);
        end_recv(&t->client, 4096, SIZE_MAX, NULL, 0, NULL);
    }
    assert_int_equal(t->backend.sent, down);
    if (t->backend.ssl != NULL)
        SSL_shutdown(t->backend.ssl);
    shutdown(t->backend.fd, SHUT_WR);
    run_until_client_eof(t, 32768, 8000, NULL);
    assert_int_equal(t->client.got, down);
    run_until_the_relay_ends(t, NET_RELAY_BACKEND_CLOSED);
}

/* A client that just closes its socket (no close_notify, as many do):
 * a close, not an error, and its last bytes still cross. */
static void test_a_client_fin_without_close_notify_is_a_close(void **state)
{
    struct rig *t = *state;
    pump(t, 100000, 100000, 16384);
    end_send(&t->client, 100500, SIZE_MAX);
    shutdown(t->client.fd, SHUT_WR);
    run_until_the_relay_ends(t, NET_RELAY_CLIENT_CLOSED);
    assert_int_equal(t->backend.got, 100500);
}

/* A kick while the client's queue is still full, and the client half-
 * closes (FIN, no close_notify) before reading its tail: the relay keeps
 * sending until the queue is empty, as it does for a plain client. */
static void test_a_client_fin_during_the_stop_still_gets_the_tail(void **state)
{
    struct rig *t = *state;
    const size_t down = 3u << 20;
    send_until_stuck(t, &t->backend, down, 64 * 1024);
    net_relay_stop(t->r, bye, strlen(bye));
    turn(t->base);
    shutdown(t->client.fd, SHUT_WR);
    turns(t->base, 20);
    client_gets_the_tail_the_farewell_then_close_notify(t, down);
}

/* Idleness ends the relay as a stop does: the client gets close_notify,
 * the backend its EOF, and nothing is left open. */
static void test_idleness_ends_with_close_notify(void **state)
{
    struct rig *t = *state;
    const struct net_relay_config idle = {
        .high_water = 256 * 1024, .idle_ms = 100, .linger_ms = 3000};
    rig_relay(t, &idle);
    pump(t, 5000, 5000, 16384);
    run_until_the_relay_ends(t, NET_RELAY_IDLE);
    run_until_client_eof(t, SIZE_MAX, 3000, NULL);
}

/* A TLS 1.2 backend renegotiates in the middle of transfers both ways
 * (the relay is its client and follows): the relay's SSL_write may then
 * want a read (the handshake's answer) and its SSL_read a write. Every
 * byte still arrives and nothing stalls. */
static void test_a_backend_renegotiation_mid_transfer(void **state)
{
    struct rig *t = *state;
    for (int k = 1; k <= 4; k++) {
        pump(t, (size_t)k << 20, (size_t)k << 20, 4096);
        backend_asks_to_renegotiate(t);
    }
    pump(t, 6u << 20, 6u << 20, 4096);
    assert_int_equal(SSL_num_renegotiations(t->backend.ssl), 4);
    assert_false(SSL_renegotiate_pending(t->backend.ssl)); /* the last one finished */
    client_says_goodbye(t);
}

/* The backend renegotiates while it reads nothing (the relay's socket to
 * it full, a write waiting in OpenSSL), then reads slowly: the relay's
 * write starts the handshake, wants its answer (a read), then the socket
 * again (a write). The upload must go on to its end. */
static void test_a_backend_renegotiating_while_not_reading(void **state)
{
    struct rig *t = *state;
    const size_t total = 4u << 20;
    send_until_stuck(t, &t->client, total, 64 * 1024);
    assert_true(t->client.sent < total);
    backend_asks_to_renegotiate(t);
    upload(t, total, 64 * 1024, 2048, 20000);
    assert_false(SSL_renegotiate_pending(t->backend.ssl));
    client_says_goodbye(t);
}

/* The backend asks for a renegotiation when the relay's socket to it is
 * full and nothing waits in OpenSSL (the last record filled it): the
 * relay's SSL_read must send the ClientHello, cannot, and must go on
 * reading once the socket takes it. */
static void test_a_backend_renegotiating_with_the_socket_full(void **state)
{
    struct rig *t = *state;
    fill_socket(t, &t->client, t->relay_backend_fd);
    assert_int_equal(net_relay_buffered(t->r), 0);
    backend_asks_to_renegotiate(t);
    turns(t->base, 20);
    int64_t until = mono_ms() + 8000;
    while ((t->backend.got < t->client.sent || SSL_renegotiate_pending(t->backend.ssl)) &&
           mono_ms() < until) {
        turn(t->base);
        end_recv(&t->backend, 4096, SIZE_MAX, NULL, 0, NULL);
        assert_false(t->e.done);
    }
    assert_int_equal(t->backend.got, t->client.sent);
    assert_false(SSL_renegotiate_pending(t->backend.ssl));
    pump(t, t->client.sent + (1u << 20), 1u << 20, 16384);
    client_says_goodbye(t);
}

/* The relay's socket to the client is full the moment its queue empties
 * (the last record went in and filled it): close_notify cannot leave at
 * once. A stop must not cut it with the FIN: it waits for the socket. */
static void test_close_notify_waits_for_a_full_socket(void **state)
{
    struct rig *t = *state;
    fill_socket(t, &t->backend, t->relay_client_fd);
    assert_int_equal(net_relay_buffered(t->r), 0);
    net_relay_stop(t->r, NULL, 0);
    turns(t->base, 5);
    run_until_client_eof(t, 4096, 8000, NULL);
    assert_int_equal(t->client.got, t->backend.sent);
    run_until_the_relay_ends(t, NET_RELAY_STOPPED);
}

/* ---------- tls_conn_starttls ---------- */

/* A server's clear-text connection that answered STARTTLS, in a rig with
 * the client's side alone: `cbev` (a socket bufferevent) holds the clear
 * text the client pipelined behind the command and, queued, the go-ahead
 * (after `before` bytes of earlier answers, 0: none). */
static const char go_ahead[] = "s OK Begin TLS negotiation now\r\n";

static void starttls_setup(struct rig *t, size_t before)
{
    rig_open(t);
    int c[2];
    pair(c);
    t->client = (struct end){.fd = c[0], .seed = 1, .peer_seed = 2};
    t->cbev = bufferevent_socket_new(t->base, c[1], BEV_OPT_CLOSE_ON_FREE);
    bufferevent_enable(t->cbev, EV_READ | EV_WRITE);
    const char pipelined[] = "s STARTTLS\r\nx LOGIN mallory secret\r\n";
    assert_int_equal(send(c[0], pipelined, strlen(pipelined), 0), (ssize_t)strlen(pipelined));
    turn_until_input_holds(t->base, t->cbev, strlen(pipelined));
    /* The command is taken; the rest is what a client injected. */
    evbuffer_drain(bufferevent_get_input(t->cbev), strlen("s STARTTLS\r\n"));
    if (before > 0) {
        unsigned char *big = malloc(before);
        for (size_t i = 0; i < before; i++)
            big[i] = pattern(2, i);
        bufferevent_write(t->cbev, big, before);
        free(big);
    }
    bufferevent_write(t->cbev, go_ahead, strlen(go_ahead));
}

/* The client reads the `before` bytes and the go-ahead in clear text, then
 * makes its handshake and sends a command over TLS: the server's side sees
 * that command alone, nothing of what was pipelined in clear text. */
static void starttls_finish(struct rig *t, struct bufferevent *tls, size_t before)
{
    t->cbev = tls; /* the plain one is tls_conn_starttls's now */
    bufferevent_enable(tls, EV_READ | EV_WRITE);
    size_t want = before + strlen(go_ahead);
    unsigned char *got = malloc(want);
    size_t have = 0;
    int64_t until = mono_ms() + 8000;
    while (have < want) {
        turn(t->base);
        ssize_t n = recv(t->client.fd, got + have, want - have, 0);
        if (n > 0)
            have += (size_t)n;
        assert_true(mono_ms() < until);
    }
    for (size_t i = 0; i < before; i++)
        if (got[i] != pattern(2, i))
            fail_msg("byte %zu differs", i);
    assert_memory_equal(got + before, go_ahead, strlen(go_ahead));
    free(got);
    t->client.ssl = SSL_new(t->ctxs.test_client);
    SSL_set_fd(t->client.ssl, t->client.fd);
    SSL_set_connect_state(t->client.ssl);
    const char cmd[] = "c NOOP\r\n";
    size_t w = 0;
    while (!SSL_is_init_finished(t->client.ssl) || !tls_conn_established(tls)) {
        turn(t->base);
        ERR_clear_error();
        SSL_do_handshake(t->client.ssl);
        assert_true(mono_ms() < until);
    }
    assert_int_equal(SSL_write_ex(t->client.ssl, cmd, strlen(cmd), &w), 1);
    struct evbuffer *in = bufferevent_get_input(tls);
    while (evbuffer_get_length(in) < strlen(cmd)) {
        turn(t->base);
        assert_true(mono_ms() < until);
    }
    turns(t->base, 20);
    assert_int_equal(evbuffer_get_length(in), strlen(cmd));
    assert_memory_equal(evbuffer_pullup(in, -1), cmd, strlen(cmd));
    rig_free(t);
}

/* The usual case: the go-ahead leaves at once, the plain bufferevent is
 * freed and TLS goes on the socket itself (no filter: the relay can take
 * such a session's connection later). */
static void test_starttls_goes_on_the_socket_when_the_go_ahead_left(void **state)
{
    (void)state;
    struct rig t;
    starttls_setup(&t, 0);
    evutil_socket_t fd = bufferevent_getfd(t.cbev);
    struct bufferevent *tls = tls_conn_starttls(t.cbev, t.ctxs.product_server);
    assert_non_null(tls);
    assert_null(bufferevent_get_underlying(tls));
    assert_int_equal(bufferevent_getfd(tls), fd);
    starttls_finish(&t, tls, 0);
}

/* A client that did not read what came before: the go-ahead cannot leave
 * at once, and TLS goes on as a filter that sends it first. */
static void test_starttls_falls_back_to_a_filter_behind_unsent_answers(void **state)
{
    (void)state;
    struct rig t;
    const size_t before = 4u << 20; /* more than the socket pair holds */
    starttls_setup(&t, before);
    struct bufferevent *plain = t.cbev;
    struct bufferevent *tls = tls_conn_starttls(plain, t.ctxs.product_server);
    assert_non_null(tls);
    assert_ptr_equal(bufferevent_get_underlying(tls), plain);
    starttls_finish(&t, tls, before);
}

int main(void)
{
    /* As the daemons do: a write to a closed peer is an error, not a
     * signal (the test's own ends write with OpenSSL's socket BIO). */
    signal(SIGPIPE, SIG_IGN);
    static enum backend_kind plain = BACKEND_PLAIN, tls = BACKEND_TLS, tls12 = BACKEND_TLS12;
    /* `setup`: relaying, or connected for a case that starts the relay. */
#define ON(kind, f, setup) cmocka_unit_test_prestate_setup_teardown(f, setup, rig_teardown, &kind)
#define BOTH(f, setup) ON(plain, f, setup), ON(tls, f, setup)
    const struct CMUnitTest tests[] = {
        BOTH(test_bytes_cross_intact_both_ways_while_sockets_fill, relaying),
        BOTH(test_what_the_bufferevent_held_crosses_once_in_order, connected),
        BOTH(test_bytes_openssl_holds_at_the_takeover_cross, connected),
        BOTH(test_a_record_split_by_a_full_read_is_not_forgotten, relaying),
        BOTH(test_bytes_held_by_openssl_while_paused_cross_on_resume, relaying),
        BOTH(test_a_key_update_mid_transfer_changes_nothing, relaying),
        BOTH(test_a_key_update_with_the_client_socket_full, relaying),
        BOTH(test_a_stop_sends_the_tail_the_farewell_then_close_notify, relaying),
        BOTH(test_a_backend_close_ends_with_close_notify, relaying),
        BOTH(test_a_client_fin_without_close_notify_is_a_close, relaying),
        BOTH(test_a_client_fin_during_the_stop_still_gets_the_tail, relaying),
        BOTH(test_close_notify_waits_for_a_full_socket, relaying),
        BOTH(test_idleness_ends_with_close_notify, connected),
        ON(tls12, test_a_backend_renegotiation_mid_transfer, relaying),
        ON(tls12, test_a_backend_renegotiating_while_not_reading, relaying),
        ON(tls12, test_a_backend_renegotiating_with_the_socket_full, relaying),
        cmocka_unit_test(test_starttls_goes_on_the_socket_when_the_go_ahead_left),
        cmocka_unit_test(test_starttls_falls_back_to_a_filter_behind_unsent_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
