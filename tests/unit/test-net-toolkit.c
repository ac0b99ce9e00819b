/* Unit tests for the connection toolkit in net/: conn-slots.h (counting,
 * refusal, pause and resume of a listener set), listener-set.h (bind,
 * addresses, stop accepting) and tls-conn.h (a real handshake between
 * tls_conn_accept and tls_conn_connect over a socket pair, host name
 * verification, the handshake deadline), deadline.h and linger.h (close
 * after the output has left). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net/conn-slots.h"
#include "net/deadline.h"
#include "net/linger.h"
#include "net/listener-set.h"
#include "net/tls-conn.h"
#include "net/tls.h"
#include "test-pki.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---------- conn-slots ---------- */

static void test_slots_count_and_pressure(void **state)
{
    (void)state;
    struct conn_slots_config cfg = {.max = 4, .full = CONN_SLOTS_REFUSE};
    struct conn_slots *s = conn_slots_new(&cfg);
    for (int i = 0; i < 3; i++)
        assert_true(conn_slots_acquire(s));
    assert_true(conn_slots_pressed(s)); /* 3 of 4 */
    assert_true(conn_slots_acquire(s));
    assert_false(conn_slots_acquire(s)); /* full: nothing counted */
    assert_int_equal(conn_slots_used(s), 4);
    conn_slots_release(s);
    assert_int_equal(conn_slots_used(s), 3);
    assert_true(conn_slots_acquire(s));
    conn_slots_free(s);

    struct conn_slots_config unlimited = {.max = 0};
    s = conn_slots_new(&unlimited);
    for (int i = 0; i < 1000; i++)
        assert_true(conn_slots_acquire(s));
    assert_false(conn_slots_pressed(s));
    conn_slots_free(s);
}

static void never_accept(void *arg, struct net_listener *l, const struct net_accepted *a)
{
    (void)arg;
    net_listener_refuse(l, a, NULL);
}

static void test_slots_pause_and_resume_listeners(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct net_listener_set *set = net_listener_set_new(base);
    struct net_listener_config lcfg = {.component = "test", .accept = never_accept};
    struct petrel_error err = {0};
    assert_true(net_listener_set_listen(set, "127.0.0.1:0", 0, &lcfg, &err));
    assert_int_equal(net_listener_set_count(set), 1);
    assert_non_null(strstr(net_listener_set_address(set, 0), "127.0.0.1:"));
    assert_string_equal(net_listener_set_address(set, 1), "");
    struct conn_slots_config cfg = {.max = 2, .full = CONN_SLOTS_PAUSE, .listeners = set};
    struct conn_slots *s = conn_slots_new(&cfg);
    assert_true(conn_slots_acquire(s));
    assert_false(net_listener_set_paused(set));
    assert_true(conn_slots_acquire(s)); /* the last slot: accepting pauses */
    assert_true(net_listener_set_paused(set));
    /* A listener added while paused starts paused. */
    assert_true(net_listener_set_listen(set, "127.0.0.1:0", 0, &lcfg, &err));
    assert_true(net_listener_set_paused(set));
    conn_slots_release(s);
    assert_false(net_listener_set_paused(set));
    /* Once stopped, a freed slot does not resume anything. */
    assert_true(conn_slots_acquire(s));
    assert_true(net_listener_set_paused(set));
    net_listener_set_stop(set);
    assert_true(net_listener_set_stopped(set));
    conn_slots_release(s);
    assert_true(net_listener_set_paused(set));
    assert_non_null(strstr(net_listener_set_address(set, 1), "127.0.0.1:")); /* kept */
    conn_slots_free(s);
    net_listener_set_free(set);
    event_base_free(base);
}

static void test_listener_set_unix_socket_mode(void **state)
{
    (void)state;
    char dir[] = "/tmp/petrel-net-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char addr[160], path[128];
    snprintf(path, sizeof(path), "%s/sub/x.sock", dir); /* "sub" is created */
    snprintf(addr, sizeof(addr), "unix:%s", path);
    struct event_base *base = event_base_new();
    struct net_listener_set *set = net_listener_set_new(base);
    struct net_listener_config lcfg = {.component = "test", .accept = never_accept};
    struct petrel_error err = {0};
    assert_true(net_listener_set_listen(set, addr, 0600, &lcfg, &err));
    char mode[16];
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "stat -c %%a %s", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(fgets(mode, sizeof(mode), p));
    pclose(p);
    assert_string_equal(mode, "600\n");
    net_listener_set_free(set);
    event_base_free(base);
    unlink(path);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---------- tls-conn ---------- */

struct side {
    struct event_base *base;
    bool connected;
    bool error;
    char line[64];
};

static void side_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct side *s = arg;
    if (what & BEV_EVENT_CONNECTED)
        s->connected = true;
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_EOF))
        s->error = true;
}

static void side_read(struct bufferevent *bev, void *arg)
{
    struct side *s = arg;
    size_t n = evbuffer_copyout(bufferevent_get_input(bev), s->line, sizeof(s->line) - 1);
    s->line[n] = '\0';
}

static void stop_loop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

/* Runs the loop until `done` or 5 s. */
static void run_until(struct event_base *base, bool *done)
{
    struct event *guard = evtimer_new(base, stop_loop, base);
    struct timeval five = {5, 0}, tick = {0, 10000};
    evtimer_add(guard, &five);
    struct event *poll = event_new(base, -1, EV_PERSIST, stop_loop, base);
    evtimer_add(poll, &tick);
    for (int i = 0; i < 500 && !*done; i++)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(poll);
    event_free(guard);
}

struct handshake {
    struct side server, client;
    struct bufferevent *sbev, *cbev;
};

static void handshake_run(struct handshake *h, struct event_base *base, SSL_CTX *sctx,
                          SSL_CTX *cctx, const char *host, bool starttls)
{
    memset(h, 0, sizeof(*h));
    int fds[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    evutil_make_socket_nonblocking(fds[0]);
    evutil_make_socket_nonblocking(fds[1]);
    if (starttls) {
        struct bufferevent *plain = bufferevent_socket_new(base, fds[0], BEV_OPT_CLOSE_ON_FREE);
        /* Clear text pipelined after STARTTLS: must not reach the TLS side. */
        evbuffer_add(bufferevent_get_input(plain), "INJECTED\r\n", 10);
        h->sbev = tls_conn_starttls(plain, sctx);
    } else {
        h->sbev = tls_conn_accept(base, fds[0], sctx);
    }
    assert_non_null(h->sbev);
    bufferevent_setcb(h->sbev, side_read, NULL, side_event, &h->server);
    bufferevent_enable(h->sbev, EV_READ | EV_WRITE);
    h->cbev = tls_conn_connect(base, fds[1], cctx, host);
    assert_non_null(h->cbev);
    bufferevent_setcb(h->cbev, side_read, NULL, side_event, &h->client);
    bufferevent_enable(h->cbev, EV_READ | EV_WRITE);
}

static void test_tls_accept_connect_and_starttls(void **state)
{
    (void)state;
    struct pki k;
    make_pki(&k);
    struct petrel_error err = {0};
    struct tls_server_options so = {.cert_file = k.cert, .key_file = k.key};
    SSL_CTX *sctx = tls_server_ctx_new(&so, &err);
    assert_non_null(sctx);
    SSL_CTX *cctx = tls_client_ctx_new(k.cert, NULL, NULL, &err);
    assert_non_null(cctx);
    struct event_base *base = event_base_new();
    static const char *const hosts[] = {"localhost", "127.0.0.1", NULL};
    for (int starttls = 0; starttls <= 1; starttls++) {
        for (size_t i = 0; i < 3; i++) {
            struct handshake h;
            handshake_run(&h, base, sctx, cctx, hosts[i], starttls);
            bufferevent_write(h.cbev, "hello\r\n", 7);
            run_until(base, &h.client.connected);
            assert_true(h.client.connected);
            assert_true(tls_conn_established(h.cbev));
            for (int n = 0; n < 500 && strcmp(h.server.line, "hello\r\n") != 0; n++)
                event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
            assert_string_equal(h.server.line, "hello\r\n"); /* not "INJECTED" */
            bufferevent_free(h.cbev);
            bufferevent_free(h.sbev);
        }
    }
    /* The certificate is not for this name: the client refuses it. */
    struct handshake h;
    handshake_run(&h, base, sctx, cctx, "mail.example.org", false);
    run_until(base, &h.client.error);
    assert_true(h.client.error);
    assert_false(h.client.connected);
    char reason[256];
    assert_non_null(
        strstr(tls_conn_error(h.cbev, reason, sizeof(reason)), "certificate verify failed"));
    bufferevent_free(h.cbev);
    bufferevent_free(h.sbev);
    event_base_free(base);
    SSL_CTX_free(sctx);
    SSL_CTX_free(cctx);
    free_pki(&k);
}

/* A listener set with an implicit-TLS port and a client that dials it
 * (fd -1 + bufferevent_socket_connect), as the login proxy dials a
 * backend: over TCP, the certificate verified for 127.0.0.1. */
struct tls_server {
    SSL_CTX *ctx;
    struct event_base *base;
    struct bufferevent *bev;
    struct side side;
    bool tls_flag;
};

static void tls_accept(void *arg, struct net_listener *l, const struct net_accepted *a)
{
    (void)l;
    struct tls_server *ts = arg;
    ts->tls_flag = a->tls;
    ts->bev = tls_conn_accept(ts->base, a->fd, ts->ctx);
    bufferevent_setcb(ts->bev, side_read, NULL, side_event, &ts->side);
    bufferevent_enable(ts->bev, EV_READ | EV_WRITE);
}

static void test_tls_dial_over_tcp(void **state)
{
    (void)state;
    struct pki k;
    make_pki(&k);
    struct petrel_error err = {0};
    struct tls_server_options so = {.cert_file = k.cert, .key_file = k.key};
    struct tls_server ts = {0};
    ts.ctx = tls_server_ctx_new(&so, &err);
    SSL_CTX *cctx = tls_client_ctx_new(k.cert, NULL, NULL, &err);
    ts.base = event_base_new();
    struct net_listener_set *set = net_listener_set_new(ts.base);
    struct net_listener_config lcfg = {
        .component = "test", .tls = true, .accept = tls_accept, .arg = &ts};
    assert_true(net_listener_set_listen(set, "127.0.0.1:0", 0, &lcfg, &err));
    assert_true(net_listener_set_tls(set, 0));
    const char *bound = net_listener_set_address(set, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    sin.sin_port = htons((uint16_t)atoi(strrchr(bound, ':') + 1));
    struct side client = {0};
    struct bufferevent *cbev = tls_conn_connect(ts.base, -1, cctx, "127.0.0.1");
    assert_non_null(cbev);
    bufferevent_setcb(cbev, side_read, NULL, side_event, &client);
    bufferevent_enable(cbev, EV_READ | EV_WRITE);
    assert_int_equal(bufferevent_socket_connect(cbev, (struct sockaddr *)&sin, sizeof(sin)), 0);
    run_until(ts.base, &client.connected);
    assert_true(client.connected);
    assert_true(ts.tls_flag);
    bufferevent_write(cbev, "ping\r\n", 6);
    for (int n = 0; n < 500 && strcmp(ts.side.line, "ping\r\n") != 0; n++)
        event_base_loop(ts.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_string_equal(ts.side.line, "ping\r\n");
    bufferevent_free(cbev);
    bufferevent_free(ts.bev);
    net_listener_set_free(set);
    event_base_free(ts.base);
    SSL_CTX_free(ts.ctx);
    SSL_CTX_free(cctx);
    free_pki(&k);
}

static void expired(void *arg)
{
    *(bool *)arg = true;
}

static void test_tls_handshake_deadline(void **state)
{
    (void)state;
    struct pki k;
    make_pki(&k);
    struct petrel_error err = {0};
    struct tls_server_options so = {.cert_file = k.cert, .key_file = k.key};
    SSL_CTX *sctx = tls_server_ctx_new(&so, &err);
    SSL_CTX *cctx = tls_client_ctx_new(k.cert, NULL, NULL, &err);
    struct event_base *base = event_base_new();

    /* A peer that never finishes: the deadline fires, though bytes came. */
    int fds[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    evutil_make_socket_nonblocking(fds[0]);
    struct bufferevent *sbev = tls_conn_accept(base, fds[0], sctx);
    bufferevent_enable(sbev, EV_READ | EV_WRITE);
    bool fired = false;
    struct tls_handshake_deadline *d = tls_handshake_deadline_new(sbev, 100, expired, &fired);
    assert_int_equal(write(fds[1], "\x16\x03\x01\x02\x00", 5), 5); /* a record header only */
    run_until(base, &fired);
    assert_true(fired);
    tls_handshake_deadline_free(d);
    bufferevent_free(sbev);
    close(fds[1]);

    /* A finished handshake: the deadline passes without a call. */
    struct handshake h;
    handshake_run(&h, base, sctx, cctx, "localhost", false);
    fired = false;
    d = tls_handshake_deadline_new(h.sbev, 300, expired, &fired);
    run_until(base, &h.client.connected);
    assert_true(h.client.connected);
    struct event *wait = evtimer_new(base, stop_loop, base);
    struct timeval half = {0, 500000};
    evtimer_add(wait, &half);
    event_base_dispatch(base);
    event_free(wait);
    assert_false(fired);
    tls_handshake_deadline_free(d);
    tls_handshake_deadline_free(NULL);
    bufferevent_free(h.cbev);
    bufferevent_free(h.sbev);
    event_base_free(base);
    SSL_CTX_free(sctx);
    SSL_CTX_free(cctx);
    free_pki(&k);
}

/* ---------- deadline ---------- */

static void count_expiry(void *arg)
{
    (*(int *)arg)++;
}

static void test_deadline(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    int fired = 0;
    struct net_deadline *d = net_deadline_new(base, count_expiry, &fired);
    assert_false(net_deadline_armed(d));
    net_deadline_arm(d, 5000);
    assert_true(net_deadline_armed(d));
    net_deadline_arm(d, 20); /* re-arming moves it */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    event_base_dispatch(base); /* returns once nothing is pending */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_int_equal(fired, 1);
    assert_true((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 2000);
    assert_false(net_deadline_armed(d));
    net_deadline_arm(d, 10);
    net_deadline_clear(d); /* nothing runs */
    event_base_dispatch(base);
    assert_int_equal(fired, 1);
    net_deadline_clear(NULL);
    net_deadline_free(d);
    net_deadline_free(NULL);
    event_base_free(base);
}

struct self_freeing {
    struct net_deadline *d;
    int fired;
    bool rearm; /* re-arm once from the callback, then free on the second run */
};

static void free_from_expiry(void *arg)
{
    struct self_freeing *s = arg;
    s->fired++;
    if (s->rearm && s->fired == 1) {
        net_deadline_arm(s->d, 5);
        return;
    }
    net_deadline_free(s->d); /* deadline.h: may be called from `expired` */
    s->d = NULL;
}

static void test_deadline_freed_while_armed_or_from_its_callback(void **state)
{
    /* The event lives inside the deadline's own allocation: freeing an
     * armed deadline must take it off the loop first, or the loop's timer
     * heap keeps a pointer into freed memory (ASan reports the dispatch
     * below as a heap-use-after-free). */
    (void)state;
    struct event_base *base = event_base_new();
    int fired_a = 0, fired_b = 0;
    struct net_deadline *a = net_deadline_new(base, count_expiry, &fired_a);
    struct net_deadline *b = net_deadline_new(base, count_expiry, &fired_b);
    net_deadline_arm(a, 10);
    net_deadline_arm(b, 30);
    net_deadline_free(a); /* armed, earlier in the heap than b */
    struct net_deadline *many[64];
    for (size_t i = 0; i < 64; i++) { /* freed armed, in and out of heap order */
        many[i] = net_deadline_new(base, count_expiry, &fired_a);
        net_deadline_arm(many[i], (int64_t)(i % 7) * 3);
    }
    for (size_t i = 0; i < 64; i += 2)
        net_deadline_free(many[i]);
    for (size_t i = 1; i < 64; i += 2)
        net_deadline_free(many[i]);
    event_base_dispatch(base);
    assert_int_equal(fired_a, 0);
    assert_int_equal(fired_b, 1);
    net_deadline_free(b);

    /* Freed from its own callback, once directly and once after a re-arm
     * from the callback. */
    struct self_freeing once = {.rearm = false};
    once.d = net_deadline_new(base, free_from_expiry, &once);
    net_deadline_arm(once.d, 0);
    struct self_freeing twice = {.rearm = true};
    twice.d = net_deadline_new(base, free_from_expiry, &twice);
    net_deadline_arm(twice.d, 1);
    event_base_dispatch(base);
    assert_int_equal(once.fired, 1);
    assert_null(once.d);
    assert_int_equal(twice.fired, 2);
    assert_null(twice.d);
    event_base_free(base);
}

/* ---------- linger ---------- */

static void linger_done(void *arg)
{
    (*(int *)arg)++;
}

static size_t always_pending(void *arg)
{
    (void)arg;
    return 1;
}

static void test_linger(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    int fds[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    evutil_make_socket_nonblocking(fds[0]);
    struct bufferevent *bev = bufferevent_socket_new(base, fds[0], BEV_OPT_CLOSE_ON_FREE);
    bufferevent_enable(bev, EV_WRITE);
    bufferevent_write(bev, "421 bye\r\n", 9);
    assert_int_equal(net_output_pending(bev), 9);
    int done = 0;
    struct net_linger *l = net_linger_start(bev, NULL, linger_done, &done);
    assert_int_equal(done, 0); /* never from inside the caller */
    for (int i = 0; i < 100 && done == 0; i++)
        event_base_loop(base, EVLOOP_ONCE); /* the poll timer wakes it */
    assert_int_equal(done, 1);
    assert_int_equal(net_output_pending(bev), 0);
    char got[16] = {0};
    assert_int_equal(read(fds[1], got, sizeof(got)), 9);
    assert_string_equal(got, "421 bye\r\n");
    net_linger_free(l);
    /* Stopped before it ran: done is never called. */
    l = net_linger_start(bev, always_pending, linger_done, &done);
    net_linger_free(l);
    net_linger_free(NULL);
    for (int i = 0; i < 20; i++)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_int_equal(done, 1);
    bufferevent_free(bev);
    close(fds[1]);
    event_base_free(base);
}

/* A peer that reads nothing: the linger gives up after NET_LINGER_GRACE_MS
 * (not sooner, not much later), however long the output stays queued. */
static void test_linger_gives_up_after_grace(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    int fds[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    evutil_make_socket_nonblocking(fds[0]);
    struct bufferevent *bev = bufferevent_socket_new(base, fds[0], BEV_OPT_CLOSE_ON_FREE);
    int done = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct net_linger *l = net_linger_start(bev, always_pending, linger_done, &done);
    struct event *guard = evtimer_new(base, stop_loop, base);
    struct timeval limit = {(NET_LINGER_GRACE_MS / 1000) * 3, 0};
    evtimer_add(guard, &limit);
    while (done == 0 && evtimer_pending(guard, NULL))
        event_base_loop(base, EVLOOP_ONCE);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int64_t ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    assert_int_equal(done, 1);
    assert_true(ms >= NET_LINGER_GRACE_MS - 100);
    event_free(guard);
    net_linger_free(l);
    bufferevent_free(bev);
    close(fds[1]);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_count_and_pressure),
        cmocka_unit_test(test_slots_pause_and_resume_listeners),
        cmocka_unit_test(test_listener_set_unix_socket_mode),
        cmocka_unit_test(test_tls_accept_connect_and_starttls),
        cmocka_unit_test(test_tls_dial_over_tcp),
        cmocka_unit_test(test_tls_handshake_deadline),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_deadline_freed_while_armed_or_from_its_callback),
        cmocka_unit_test(test_linger),
        cmocka_unit_test(test_linger_gives_up_after_grace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
