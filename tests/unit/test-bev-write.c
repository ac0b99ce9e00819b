/* Unit tests for net/bev-write.h over real sockets (socketpairs) on a
 * libevent loop: a short write on an idle plain socket leaves at once and
 * queues nothing; bytes behind queued ones, and bytes for a filtered
 * bufferevent, are queued in order; what a full socket does not take is
 * queued and follows in order; a write to a closed peer is reported by the
 * bufferevent as an error. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net/bev-write.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct pair {
    struct event_base *base;
    struct bufferevent *bev; /* on fds[0] */
    int peer;                /* fds[1], the test's end */
    short events;            /* what the event callback saw */
};

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct pair *p = arg;
    p->events |= what;
}

static void pair_open(struct pair *p, bool filtered)
{
    int fds[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    assert_int_equal(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
    p->base = event_base_new();
    p->bev = bufferevent_socket_new(p->base, fds[0], BEV_OPT_CLOSE_ON_FREE);
    if (filtered)
        p->bev = bufferevent_filter_new(p->bev, NULL, NULL, BEV_OPT_CLOSE_ON_FREE, NULL, NULL);
    bufferevent_setcb(p->bev, NULL, NULL, event_cb, p);
    bufferevent_enable(p->bev, EV_READ | EV_WRITE);
    p->peer = fds[1];
    p->events = 0;
}

static void pair_close(struct pair *p)
{
    bufferevent_free(p->bev);
    if (p->peer >= 0)
        close(p->peer);
    event_base_free(p->base);
}

static size_t queued(struct pair *p)
{
    return evbuffer_get_length(bufferevent_get_output(p->bev));
}

/* Reads what the peer has now (without waiting) into `out`. */
static size_t peer_read(struct pair *p, char *out, size_t size)
{
    size_t got = 0;
    for (;;) {
        ssize_t n = recv(p->peer, out + got, size - got, MSG_DONTWAIT);
        if (n <= 0)
            return got;
        got += (size_t)n;
    }
}

static void test_an_idle_plain_socket_takes_the_bytes_at_once(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, false);
    assert_true(net_bev_plain_socket(p.bev));
    net_bev_write(p.bev, "a1 OK done\r\n", 12);
    assert_int_equal(queued(&p), 0); /* no loop pass needed */
    char buf[64];
    assert_int_equal(peer_read(&p, buf, sizeof(buf)), 12);
    assert_memory_equal(buf, "a1 OK done\r\n", 12);
    pair_close(&p);
}

static void test_bytes_behind_queued_ones_wait_their_turn(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, false);
    bufferevent_write(p.bev, "first ", 6); /* queued, the loop has not run */
    net_bev_write(p.bev, "second", 6);
    assert_int_equal(queued(&p), 12);
    char buf[64];
    assert_int_equal(peer_read(&p, buf, sizeof(buf)), 0);
    event_base_loop(p.base, EVLOOP_NONBLOCK);
    assert_int_equal(peer_read(&p, buf, sizeof(buf)), 12);
    assert_memory_equal(buf, "first second", 12);
    pair_close(&p);
}

static void test_a_filtered_bufferevent_is_written_through_its_buffer(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, true);
    assert_false(net_bev_plain_socket(p.bev));
    net_bev_write(p.bev, "over the filter", 15);
    char buf[64];
    assert_int_equal(peer_read(&p, buf, sizeof(buf)), 0); /* not sent around the filter */
    size_t n = 0;
    for (int i = 0; i < 10 && n < 15; i++) {
        event_base_loop(p.base, EVLOOP_NONBLOCK);
        n += peer_read(&p, buf + n, sizeof(buf) - n);
    }
    assert_int_equal(n, 15);
    assert_memory_equal(buf, "over the filter", 15);
    pair_close(&p);
}

static void test_what_a_full_socket_does_not_take_follows_in_order(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, false);
    enum { TOTAL = 4 * 1024 * 1024 };
    char *data = malloc(TOTAL);
    for (size_t i = 0; i < TOTAL; i++)
        data[i] = (char)(i * 7 + i / 4096);
    net_bev_write(p.bev, data, TOTAL);
    size_t left = queued(&p);
    assert_true(left > 0 && left < TOTAL); /* some left at once, the rest waits */
    net_bev_write(p.bev, "tail", 4);        /* behind the rest, not before it */
    assert_int_equal(queued(&p), left + 4);
    char *got = malloc(TOTAL + 4);
    size_t n = 0;
    for (int i = 0; i < 100000 && n < TOTAL + 4; i++) {
        n += peer_read(&p, got + n, TOTAL + 4 - n);
        event_base_loop(p.base, EVLOOP_NONBLOCK);
    }
    assert_int_equal(n, TOTAL + 4);
    assert_memory_equal(got, data, TOTAL);
    assert_memory_equal(got + TOTAL, "tail", 4);
    free(got);
    free(data);
    pair_close(&p);
}

static void test_a_write_to_a_closed_peer_is_reported_by_the_bufferevent(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, false);
    close(p.peer);
    p.peer = -1;
    net_bev_write(p.bev, "lost", 4); /* EPIPE: left to the bufferevent */
    assert_int_equal(queued(&p), 4);
    for (int i = 0; i < 10 && !(p.events & (BEV_EVENT_ERROR | BEV_EVENT_EOF)); i++)
        event_base_loop(p.base, EVLOOP_NONBLOCK);
    assert_true(p.events & (BEV_EVENT_ERROR | BEV_EVENT_EOF));
    pair_close(&p);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as petreld: a closed peer is an error, not a signal */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_idle_plain_socket_takes_the_bytes_at_once),
        cmocka_unit_test(test_bytes_behind_queued_ones_wait_their_turn),
        cmocka_unit_test(test_a_filtered_bufferevent_is_written_through_its_buffer),
        cmocka_unit_test(test_what_a_full_socket_does_not_take_follows_in_order),
        cmocka_unit_test(test_a_write_to_a_closed_peer_is_reported_by_the_bufferevent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
