/* The last turns of an event loop before event_base_free().
 *
 * libevent finishes some work through deferred callbacks queued on the
 * loop (a DNS lookup failed or cancelled when its resolver is freed, and
 * the evdns state that answer releases); event_base_free() drops them
 * unrun, and what they would free leaks. */
#ifndef PETREL_NET_LOOP_DRAIN_H
#define PETREL_NET_LOOP_DRAIN_H

struct event_base;

/* Runs `base` without blocking until nothing on it is active (at most a
 * few turns: one deferred answer may queue another). Call it once every
 * object with an event on `base` is freed, right before event_base_free(),
 * and not from inside the loop. */
void net_loop_drain(struct event_base *base);

#endif
