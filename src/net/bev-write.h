/* Writing to a bufferevent without the write event's round through the
 * loop. bufferevent_write() queues the bytes and arms the write event; the
 * loop then reports the socket writable, the bytes leave, and the event is
 * disarmed: two epoll_ctl calls and a loop pass for every write. When
 * nothing is queued on a plain socket the bytes can leave with one send()
 * now instead, and only what the socket does not take is queued, in order.
 *
 * For a connection of one client session (a mail session's greeting, an
 * answer that waited for the auth service, the login proxy's login to a
 * backend), where nothing else would join the write. Not for a connection
 * many sessions share (to the auth service, the director, the warden):
 * there the write event gathers every request of a loop pass into one
 * write, and the peer reads them with one wake-up, which under load is
 * worth more than the two epoll_ctl calls (measured: the auth service and
 * the director spent twice the CPU per proxied login with a send per
 * request at 64 logins in flight). */
#ifndef PETREL_NET_BEV_WRITE_H
#define PETREL_NET_BEV_WRITE_H

#include <event2/bufferevent.h>
#include <stdbool.h>
#include <stddef.h>

/* True when `bev` is a bufferevent on a socket with nothing between it and
 * the descriptor (no TLS, no filter), whose descriptor is set. */
bool net_bev_plain_socket(struct bufferevent *bev);

/* Queues `len` bytes on `bev` as bufferevent_write() does, but first offers
 * them to the socket itself when `bev` is a plain socket with nothing
 * queued. A socket error leaves the bytes queued, so the bufferevent's own
 * write meets the error and reports it as it always does. */
void net_bev_write(struct bufferevent *bev, const void *data, size_t len);

#endif
