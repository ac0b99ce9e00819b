/* Unit tests for net/relay.h over real sockets (socketpairs) on a libevent
 * loop: bytes arrive intact both ways, a side that stops reading holds the
 * relay to its bound while the sender is held back by the kernel, an EOF
 * flushes what was queued first, a stop sends its farewell, idleness ends
 * it. Each test runs with every pairing of the relay's two kinds of side:
 * a plain socket (driven directly) and a filtering bufferevent over one
 * (standing in for TLS: read and written through the bufferevent). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net/relay.h"
#include "test-relay-support.h"

#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct app {
    int fd; /* the test's end */
    struct bufferevent *bev;
};


/* Which kind of side the client and the backend are (the test's state). */
struct kinds {
    bool client_filtered;
    bool backend_filtered;
};

static struct app make_side(struct event_base *base, bool filtered)
{
    int fds[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    evutil_make_socket_nonblocking(fds[1]);
    struct app a = {.fd = fds[0]};
    a.bev = bufferevent_socket_new(base, fds[1], BEV_OPT_CLOSE_ON_FREE);
    if (filtered) /* no filter functions: bytes pass unchanged */
        a.bev = bufferevent_filter_new(a.bev, NULL, NULL, BEV_OPT_CLOSE_ON_FREE, NULL, NULL);
    return a;
}

static void make_sides(void **state, struct event_base *base, struct app *c, struct app *b)
{
    const struct kinds *k = *state;
    *c = make_side(base, k->client_filtered);
    *b = make_side(base, k->backend_filtered);
}

static unsigned char pattern(size_t i)
{
    return (unsigned char)((i * 131u + (i >> 9)) & 0xff);
}

/* Writes as much of [*sent, total) as the socket takes. */
static void write_some(int fd, size_t *sent, size_t total)
{
    unsigned char chunk[8192];
    while (*sent < total) {
        size_t n = total - *sent < sizeof(chunk) ? total - *sent : sizeof(chunk);
        for (size_t i = 0; i < n; i++)
            chunk[i] = pattern(*sent + i);
        ssize_t w = write(fd, chunk, n);
        if (w <= 0)
            return;
        *sent += (size_t)w;
    }
}

/* Reads what is there, checking it against the pattern; true at EOF. */
static bool read_some(int fd, size_t *got)
{
    unsigned char buf[8192];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n == 0)
            return true;
        if (n < 0)
            return false;
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != pattern(*got + (size_t)i))
                fail_msg("byte %zu differs", *got + (size_t)i);
        *got += (size_t)n;
    }
}

/* Runs the loop in real time (a filtered side's last bytes and the linger
 * are looked at by a timer) until the relay is done, while `*peer` behaves
 * as a client does at the end: reads what comes, and closes at EOF. */
static void run_until_done(struct event_base *base, struct ended *e, int *peer)
{
    for (int i = 0; i < 400 && !e->done; i++) {
        struct timeval tick = {0, 10000};
        event_base_loopexit(base, &tick);
        event_base_loop(base, 0);
        char buf[8192];
        ssize_t n;
        while (*peer >= 0 && (n = read(*peer, buf, sizeof(buf))) > 0)
            ;
        if (*peer >= 0 && n == 0) {
            close(*peer);
            *peer = -1;
        }
    }
    assert_true(e->done);
}

static void close_app(int fd)
{
    if (fd >= 0)
        close(fd);
}

static const struct net_relay_config config = {
    .high_water = 64 * 1024, .idle_ms = 0, .linger_ms = 2000};

/* One test's loop, its two sides (of the kinds the state names) and the
 * relay between them. */
struct rig {
    struct event_base *base;
    struct app c, b;
    struct ended e;
    struct net_relay *r;
};

static void rig_start(void **state, struct rig *t, const struct net_relay_config *cfg)
{
    t->base = event_base_new();
    make_sides(state, t->base, &t->c, &t->b);
    memset(&t->e, 0, sizeof(t->e));
    t->r = net_relay_start(t->c.bev, t->b.bev, cfg, on_done, &t->e);
}

static void test_bytes_both_ways(void **state)
{
    struct rig t;
    rig_start(state, &t, &config);
    const size_t total = 4u << 20;
    size_t up_sent = 0, up_got = 0, down_sent = 0, down_got = 0;
    for (int i = 0; i < 200000 && (up_got < total || down_got < total); i++) {
        write_some(t.c.fd, &up_sent, total);
        write_some(t.b.fd, &down_sent, total);
        turn(t.base);
        read_some(t.b.fd, &up_got);
        read_some(t.c.fd, &down_got);
    }
    assert_int_equal(up_got, total);
    assert_int_equal(down_got, total);
    net_relay_stop(t.r, NULL, 0);
    run_until_done(t.base, &t.e, &t.c.fd);
    assert_int_equal(t.e.end, NET_RELAY_STOPPED);
    assert_int_equal(t.e.stats.to_backend, total);
    assert_int_equal(t.e.stats.to_client, total);
    close_app(t.c.fd);
    close(t.b.fd);
    event_base_free(t.base);
}

static void test_a_side_that_does_not_read_bounds_the_relay(void **state)
{
    struct rig t;
    rig_start(state, &t, &config);
    const size_t total = 32u << 20;
    size_t sent = 0, last = (size_t)-1;
    int still = 0;
    /* The backend reads nothing: the client soon cannot write any more. */
    for (int i = 0; i < 100000 && still < 200; i++) {
        write_some(t.c.fd, &sent, total);
        turn(t.base);
        still = sent == last ? still + 1 : 0;
        last = sent;
    }
    assert_true(sent < total);
    size_t held = net_relay_buffered(t.r);
    /* At most the high-water mark plus one read's worth. */
    assert_true(held <= config.high_water + 64 * 1024);
    /* Reading resumes: everything arrives, in order. */
    size_t got = 0;
    for (int i = 0; i < 400000 && got < total; i++) {
        write_some(t.c.fd, &sent, total);
        turn(t.base);
        read_some(t.b.fd, &got);
        assert_true(net_relay_buffered(t.r) <= config.high_water + 64 * 1024);
    }
    assert_int_equal(got, total);
    net_relay_stop(t.r, NULL, 0);
    run_until_done(t.base, &t.e, &t.c.fd);
    close_app(t.c.fd);
    close(t.b.fd);
    event_base_free(t.base);
}

static void test_eof_flushes_what_was_queued(void **state)
{
    struct rig t;
    rig_start(state, &t, &config);
    const size_t total = 1u << 20;
    size_t sent = 0, got = 0;
    bool eof = false;
    for (int i = 0; i < 200000 && !eof; i++) {
        if (sent < total) {
            write_some(t.c.fd, &sent, total);
            if (sent == total)
                shutdown(t.c.fd, SHUT_WR); /* the client is done */
        }
        turn(t.base);
        if (i % 3 == 0) /* a slow reader */
            eof = read_some(t.b.fd, &got);
    }
    assert_true(eof);
    assert_int_equal(got, total);
    close(t.b.fd); /* the backend closes in turn */
    t.b.fd = -1;
    run_until_done(t.base, &t.e, &t.b.fd);
    assert_int_equal(t.e.end, NET_RELAY_CLIENT_CLOSED);
    assert_int_equal(t.e.stats.to_backend, total);
    /* The client's side was closed too. */
    char x;
    assert_int_equal(read(t.c.fd, &x, 1), 0);
    close(t.c.fd);
    event_base_free(t.base);
}

static void test_stop_sends_the_farewell(void **state)
{
    struct rig t;
    rig_start(state, &t, &config);
    assert_int_equal(write(t.b.fd, "* 1 EXISTS\r\n", 12), 12);
    for (int i = 0; i < 100; i++)
        turn(t.base);
    static const char bye[] = "* BYE Kicked by an operator.\r\n";
    net_relay_stop(t.r, bye, sizeof(bye) - 1);
    net_relay_stop(t.r, bye, sizeof(bye) - 1); /* a second stop does nothing */
    assert_false(t.e.done);                    /* never from inside the call */
    /* A filtered side's last bytes may wait below the filter, where the
     * relay looks every few milliseconds: real time must pass. The client
     * reads only once the relay is done: by then all has left, and the
     * FIN after it (what lingers on must not hold the EOF back). */
    int none = -1;
    run_until_done(t.base, &t.e, &none);
    assert_int_equal(t.e.end, NET_RELAY_STOPPED);
    char buf[128] = {0};
    size_t n = 0;
    ssize_t k;
    while ((k = read(t.c.fd, buf + n, sizeof(buf) - 1 - n)) > 0)
        n += (size_t)k;
    assert_int_equal(k, 0); /* then EOF */
    assert_string_equal(buf, "* 1 EXISTS\r\n* BYE Kicked by an operator.\r\n");
    assert_int_equal(read(t.b.fd, buf, 1), 0);
    close(t.c.fd);
    close(t.b.fd);
    event_base_free(t.base);
}

/* The client had sent more (commands the relay will not pass on any more)
 * when the relay is stopped: it still gets what was relayed, the farewell,
 * then EOF. Closing a socket with unread input makes the kernel answer with
 * a reset, which over TCP drops at the client what is still in flight to
 * it (a unix socket reports it as ECONNRESET after the data). */
static void test_a_client_still_talking_at_the_stop_gets_eof_not_a_reset(void **state)
{
    struct rig t;
    rig_start(state, &t, &config);
    assert_int_equal(write(t.b.fd, "* 1 EXISTS\r\n", 12), 12);
    for (int i = 0; i < 100; i++)
        turn(t.base);
    char noise[4096];
    memset(noise, 'n', sizeof(noise));
    assert_int_equal(write(t.c.fd, noise, sizeof(noise)), (ssize_t)sizeof(noise));
    static const char bye[] = "* BYE Kicked by an operator.\r\n";
    net_relay_stop(t.r, bye, sizeof(bye) - 1);
    char buf[128] = {0};
    size_t n = 0;
    ssize_t k = -1;
    int err = 0;
    for (int i = 0; i < 400 && k != 0 && err == 0; i++) {
        struct timeval tick = {0, 10000};
        event_base_loopexit(t.base, &tick);
        event_base_loop(t.base, 0);
        while ((k = read(t.c.fd, buf + n, sizeof(buf) - 1 - n)) > 0)
            n += (size_t)k;
        if (k < 0 && errno != EAGAIN)
            err = errno;
        if (k < 0 && errno == EAGAIN) /* the client goes on talking */
            (void)!write(t.c.fd, noise, sizeof(noise));
    }
    assert_int_equal(err, 0); /* no reset */
    assert_int_equal(k, 0);   /* EOF */
    assert_string_equal(buf, "* 1 EXISTS\r\n* BYE Kicked by an operator.\r\n");
    close(t.c.fd);
    t.c.fd = -1;
    run_until_done(t.base, &t.e, &t.c.fd);
    assert_int_equal(t.e.end, NET_RELAY_STOPPED);
    assert_int_equal(t.e.stats.to_backend, 0); /* none of it went on */
    close(t.b.fd);
    event_base_free(t.base);
}

/* Stopped while a lot waits for a client that is still uploading: the
 * client finishes its upload (the relay reads and drops it, or the client
 * would block writing and never read), half-closes, and only then reads.
 * It gets every byte the relay took from the backend, the farewell, EOF:
 * its half-close does not cut the flush short. */
static void test_a_client_uploading_then_half_closing_at_the_stop_gets_everything(void **state)
{
    struct rig t;
    rig_start(state, &t, &config);
    size_t sent = 0, up = 0, last = (size_t)-1;
    int still = 0;
    /* Neither reads: both are held back, and each side's reading paused. */
    for (int i = 0; i < 100000 && still < 200; i++) {
        write_some(t.b.fd, &sent, 32u << 20);
        write_some(t.c.fd, &up, 32u << 20);
        turn(t.base);
        still = sent == last ? still + 1 : 0;
        last = sent;
    }
    static const char bye[] = "* BYE Kicked by an operator.\r\n";
    net_relay_stop(t.r, bye, sizeof(bye) - 1);
    char noise[4096];
    memset(noise, 'n', sizeof(noise));
    size_t uploaded = 0;
    for (int i = 0; i < 100000 && uploaded < (1u << 20); i++) {
        ssize_t w = write(t.c.fd, noise, sizeof(noise));
        if (w > 0)
            uploaded += (size_t)w;
        turn(t.base);
    }
    assert_int_equal(uploaded, 1u << 20);
    shutdown(t.c.fd, SHUT_WR);
    size_t got = 0, room = sent + sizeof(bye);
    unsigned char *all = malloc(room);
    ssize_t k = -1;
    for (int i = 0; i < 400 && k != 0; i++) {
        struct timeval tick = {0, 10000};
        event_base_loopexit(t.base, &tick);
        event_base_loop(t.base, 0);
        while (got < room && (k = read(t.c.fd, all + got, room - got)) > 0)
            got += (size_t)k;
        assert_true(k == 0 || errno == EAGAIN); /* no reset */
    }
    assert_int_equal(k, 0);
    run_until_done(t.base, &t.e, &t.c.fd);
    assert_int_equal(t.e.end, NET_RELAY_STOPPED);
    assert_int_equal(got, t.e.stats.to_client + sizeof(bye) - 1);
    for (size_t i = 0; i < t.e.stats.to_client; i++)
        if (all[i] != pattern(i))
            fail_msg("byte %zu differs", i);
    assert_memory_equal(all + t.e.stats.to_client, bye, sizeof(bye) - 1);
    free(all);
    close_app(t.c.fd);
    close(t.b.fd);
    event_base_free(t.base);
}

static void test_a_client_that_never_reads_is_dropped_after_the_linger(void **state)
{
    struct net_relay_config cfg = config;
    cfg.linger_ms = 200;
    cfg.idle_ms = 300;
    struct rig t;
    rig_start(state, &t, &cfg);
    size_t sent = 0, last = (size_t)-1;
    int still = 0;
    for (int i = 0; i < 100000 && still < 200; i++) {
        write_some(t.b.fd, &sent, 32u << 20);
        turn(t.base);
        still = sent == last ? still + 1 : 0;
        last = sent;
    }
    /* The backend says goodbye, but it is not being read (the client's
     * queue is full), so nothing moves: the idle timer ends the relay and
     * the client, still not reading, is dropped after the linger. */
    close(t.b.fd);
    for (int i = 0; i < 400 && !t.e.done; i++) {
        struct timeval tick = {0, 10000};
        event_base_loopexit(t.base, &tick);
        event_base_loop(t.base, 0);
    }
    assert_true(t.e.done);
    assert_int_equal(t.e.end, NET_RELAY_IDLE);
    assert_true(t.e.stats.to_client <= sent);
    close(t.c.fd);
    event_base_free(t.base);
}

/* Bytes one way or the other every 10 ms, for three times idle_ms: the
 * relay goes on (idle means no byte either way). */
static void test_traffic_keeps_the_relay_from_idling(void **state)
{
    struct net_relay_config cfg = config;
    cfg.idle_ms = 500; /* far above a tick, even on a loaded machine */
    struct rig t;
    rig_start(state, &t, &cfg);
    size_t up = 0, down = 0, up_got = 0, down_got = 0;
    for (int i = 0; i < 150 && !t.e.done; i++) { /* 1.5 s */
        struct timeval tick = {0, 10000};
        if (i % 2 == 0)
            write_some(t.c.fd, &up, up + 10);
        else
            write_some(t.b.fd, &down, down + 10);
        event_base_loopexit(t.base, &tick);
        event_base_loop(t.base, 0);
        read_some(t.b.fd, &up_got);
        read_some(t.c.fd, &down_got);
    }
    assert_false(t.e.done);
    assert_int_equal(up_got, up);
    assert_int_equal(down_got, down);
    net_relay_stop(t.r, NULL, 0);
    run_until_done(t.base, &t.e, &t.c.fd);
    assert_int_equal(t.e.end, NET_RELAY_STOPPED);
    close_app(t.c.fd);
    close(t.b.fd);
    event_base_free(t.base);
}

static void test_idle_ends_the_relay(void **state)
{
    struct net_relay_config cfg = config;
    cfg.idle_ms = 50;
    struct rig t;
    rig_start(state, &t, &cfg);
    run_until_done(t.base, &t.e, &t.c.fd);
    assert_int_equal(t.e.end, NET_RELAY_IDLE);
    close_app(t.c.fd);
    close(t.b.fd);
    event_base_free(t.base);
}

int main(void)
{
    static struct kinds plain_plain = {false, false}, tls_plain = {true, false},
                        plain_tls = {false, true}, tls_tls = {true, true};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_bytes_both_ways, &plain_plain),
        cmocka_unit_test_prestate(test_bytes_both_ways, &tls_plain),
        cmocka_unit_test_prestate(test_bytes_both_ways, &plain_tls),
        cmocka_unit_test_prestate(test_bytes_both_ways, &tls_tls),
        cmocka_unit_test_prestate(test_a_side_that_does_not_read_bounds_the_relay, &plain_plain),
        cmocka_unit_test_prestate(test_a_side_that_does_not_read_bounds_the_relay, &tls_plain),
        cmocka_unit_test_prestate(test_a_side_that_does_not_read_bounds_the_relay, &plain_tls),
        cmocka_unit_test_prestate(test_a_side_that_does_not_read_bounds_the_relay, &tls_tls),
        cmocka_unit_test_prestate(test_eof_flushes_what_was_queued, &plain_plain),
        cmocka_unit_test_prestate(test_eof_flushes_what_was_queued, &tls_plain),
        cmocka_unit_test_prestate(test_eof_flushes_what_was_queued, &plain_tls),
        cmocka_unit_test_prestate(test_eof_flushes_what_was_queued, &tls_tls),
        cmocka_unit_test_prestate(test_stop_sends_the_farewell, &plain_plain),
        cmocka_unit_test_prestate(test_stop_sends_the_farewell, &tls_plain),
        cmocka_unit_test_prestate(test_stop_sends_the_farewell, &plain_tls),
        cmocka_unit_test_prestate(test_stop_sends_the_farewell, &tls_tls),
        cmocka_unit_test_prestate(test_a_client_still_talking_at_the_stop_gets_eof_not_a_reset,
                                  &plain_plain),
        cmocka_unit_test_prestate(test_a_client_still_talking_at_the_stop_gets_eof_not_a_reset,
                                  &tls_plain),
        cmocka_unit_test_prestate(test_a_client_still_talking_at_the_stop_gets_eof_not_a_reset,
                                  &plain_tls),
        cmocka_unit_test_prestate(test_a_client_still_talking_at_the_stop_gets_eof_not_a_reset,
                                  &tls_tls),
        cmocka_unit_test_prestate(
            test_a_client_uploading_then_half_closing_at_the_stop_gets_everything, &plain_plain),
        cmocka_unit_test_prestate(
            test_a_client_uploading_then_half_closing_at_the_stop_gets_everything, &tls_plain),
        cmocka_unit_test_prestate(
            test_a_client_uploading_then_half_closing_at_the_stop_gets_everything, &plain_tls),
        cmocka_unit_test_prestate(
            test_a_client_uploading_then_half_closing_at_the_stop_gets_everything, &tls_tls),
        cmocka_unit_test_prestate(test_a_client_that_never_reads_is_dropped_after_the_linger,
                                  &plain_plain),
        cmocka_unit_test_prestate(test_a_client_that_never_reads_is_dropped_after_the_linger,
                                  &tls_plain),
        cmocka_unit_test_prestate(test_a_client_that_never_reads_is_dropped_after_the_linger,
                                  &plain_tls),
        cmocka_unit_test_prestate(test_a_client_that_never_reads_is_dropped_after_the_linger,
                                  &tls_tls),
        cmocka_unit_test_prestate(test_traffic_keeps_the_relay_from_idling, &plain_plain),
        cmocka_unit_test_prestate(test_traffic_keeps_the_relay_from_idling, &tls_plain),
        cmocka_unit_test_prestate(test_traffic_keeps_the_relay_from_idling, &plain_tls),
        cmocka_unit_test_prestate(test_traffic_keeps_the_relay_from_idling, &tls_tls),
        cmocka_unit_test_prestate(test_idle_ends_the_relay, &plain_plain),
        cmocka_unit_test_prestate(test_idle_ends_the_relay, &tls_plain),
        cmocka_unit_test_prestate(test_idle_ends_the_relay, &plain_tls),
        cmocka_unit_test_prestate(test_idle_ends_the_relay, &tls_tls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
