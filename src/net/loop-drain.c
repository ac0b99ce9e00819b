/* The last turns of an event loop (loop-drain.h). */
#include "net/loop-drain.h"

#include <event2/event.h>

/* Each turn may activate the next deferred answer; a chain longer than this
 * is not one libevent makes (a lookup's answer, then the probes the freed
 * resolver state cancels). */
#define LOOP_DRAIN_TURNS_MAX 8

void net_loop_drain(struct event_base *base)
{
    for (int turn = 0; turn < LOOP_DRAIN_TURNS_MAX; turn++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        if (event_base_get_num_events(base, EVENT_BASE_COUNT_ACTIVE) == 0)
            return;
    }
}
