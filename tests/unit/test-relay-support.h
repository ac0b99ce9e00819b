/* What the relay's unit tests share (test-relay, test-relay-tls): how a
 * relay ended, as its `done` callback reported it, and one pass of the
 * loop without waiting. */
#ifndef PETREL_TESTS_UNIT_TEST_RELAY_SUPPORT_H
#define PETREL_TESTS_UNIT_TEST_RELAY_SUPPORT_H

#include "net/relay.h"

#include <event2/event.h>
#include <stdbool.h>

struct ended {
    bool done;
    enum net_relay_end end;
    struct net_relay_stats stats;
};

/* A net_relay_done_fn for `arg` a struct ended: records the end (a cmocka
 * failure if it comes twice). */
void on_done(void *arg, enum net_relay_end end, const struct net_relay_stats *stats);

/* Runs the loop's ready callbacks once, without waiting. */
void turn(struct event_base *base);

#endif
