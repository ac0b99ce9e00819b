/* The relay tests' shared pieces (test-relay-support.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test-relay-support.h"

void on_done(void *arg, enum net_relay_end end, const struct net_relay_stats *stats)
{
    struct ended *e = arg;
    assert_false(e->done);
    e->done = true;
    e->end = end;
    e->stats = *stats;
}

void turn(struct event_base *base)
{
    event_base_loop(base, EVLOOP_NONBLOCK);
}
