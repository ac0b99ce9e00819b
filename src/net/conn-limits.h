/* Connection counts per client address, for the listeners of one
 * component (net/listener.h counts at accept; the owner of the connection
 * gives the count back when it closes).
 *
 * One address may hold at most `max_per_ip` connections at once, as
 * Postfix's anvil (smtpd_client_connection_count_limit) and HAProxy's
 * `sc_conn_cur` rules do: one client cannot take every slot of
 * max_connections. Unix-socket peers (governed by the socket's mode) and
 * addresses in `exempt` (a monitor, a proxy, a NAT gateway) are not
 * counted. Safe to use from several threads (the IMAP workers give counts
 * back from their own loops). */
#ifndef PETREL_NET_CONN_LIMITS_H
#define PETREL_NET_CONN_LIMITS_H

#include "net/cidr.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct conn_limits;

struct conn_limits_config {
    int64_t max_per_ip;             /* 0: no cap (nothing is counted) */
    const struct cidr_list *exempt; /* copied; NULL or empty: none */
};

struct conn_limits *conn_limits_new(const struct conn_limits_config *cfg);
void conn_limits_free(struct conn_limits *lim); /* NULL is ignored */

/* Counts a new connection from `peer`: false (nothing counted) when the
 * address already holds max_per_ip. Every true is matched by exactly one
 * conn_limits_release() with the same address. NULL `lim`: true. */
bool conn_limits_acquire(struct conn_limits *lim, const struct sockaddr *peer);
void conn_limits_release(struct conn_limits *lim, const struct sockaddr *peer);
/* Connections counted for the address now (tests, logs). */
size_t conn_limits_count(struct conn_limits *lim, const struct sockaddr *peer);
int64_t conn_limits_max_per_ip(const struct conn_limits *lim);

#endif
