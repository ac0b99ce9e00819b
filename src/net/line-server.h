/* The server side of a line protocol on a libevent loop (the auth service
 * and the warden are built on it; each keeps its verbs, its requests and
 * its per-connection state).
 *
 * It listens on TCP and Unix sockets ("host:port", "unix:/path"; a Unix
 * socket gets `socket_mode`), admits TCP clients from `allowed_nets` (a
 * Unix-socket client is governed by the socket's mode; both checked at
 * accept, net/listener.h, which also pauses accepting when descriptors run
 * out), at most `max_connections_per_ip` from one address, up to
 * `max_connections`. A connection that has not sent a line within
 * `handshake_timeout_ms` is closed; once a line was answered without
 * closing, only `idle_timeout_ms` applies. At max_connections the oldest
 * connection that has not sent a line yet is closed to make room, so idle
 * sockets cannot lock clients out; only when every connection has sent a
 * request is a newcomer refused. It reads each connection's input as LF-terminated
 * lines of at most `max_line` bytes, handing each to the owner. A line over
 * the limit goes to ops->bad_input. A client that sends without reading is
 * not read from while more than 1 MiB of output waits for it. Lines are
 * wiped after use (they may hold passwords). The gauges the owner passes
 * count open and accepted connections.
 *
 * Connections close on EOF, a read or write error, a timeout, or
 * line_conn_close() (after the output has drained); ops->close then frees
 * the owner's state. Nothing is closed under a running ops callback. */
#ifndef PETREL_NET_LINE_SERVER_H
#define PETREL_NET_LINE_SERVER_H

#include "core/error.h"
#include "core/metrics.h"
#include "net/readiness.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct line_server;
struct line_conn;

struct line_server_config {
    const char *component; /* log component and readiness names: "auth", "warden" */
    const char *section;   /* configuration section in messages: "auth", "warden_service" */
    const char *const *allowed_nets; /* CIDRs of admitted TCP clients, NULL-terminated */
    int64_t socket_mode;             /* permissions of Unix sockets */
    int64_t max_connections;
    int64_t max_connections_per_ip; /* TCP connections from one address; 0: no cap */
    size_t max_line;                /* longest line, without its LF */
    /* A new connection must send a line within this; 0: the idle timeout
     * applies from the start. */
    int64_t handshake_timeout_ms;
    /* After the first line answered: a connection silent this long is
     * closed; 0: never. */
    int64_t idle_timeout_ms;
    /* After line_conn_close(), read away input still in the kernel before
     * closing, so the close is a FIN and the last reply is not destroyed by
     * a reset. */
    bool drain_on_close;
    struct metric_series *connections;       /* gauge: open connections */
    struct metric_series *connections_total; /* counter: connections accepted */
};

struct line_server_ops {
    /* A connection was accepted: returns the owner's state for it. */
    void *(*open)(void *ctx, struct line_conn *conn);
    /* One line without its LF; line[len] is NUL and the buffer writable. */
    void (*line)(void *state, char *line, size_t len);
    /* The input cannot be framed (`reason`: "line too long"): answer and
     * call line_conn_close(). */
    void (*bad_input)(void *state, const char *reason);
    /* The connection is going away: free `state`. */
    void (*close)(void *state);
};

/* Registers the two series of line_server_config's `connections` and
 * `connections_total`: petrel_<name>_connections ("Open connections to
 * <what>.") and petrel_<name>_connections_total ("Connections accepted by
 * <what>."). */
void line_server_metrics(struct metrics_registry *reg, const char *name, const char *what,
                         struct metric_series **connections,
                         struct metric_series **connections_total);

/* Parses allowed_nets (err names what is wrong); listens nowhere yet. `cfg`
 * and `ops` are borrowed and must outlive the server. */
struct line_server *line_server_new(struct event_base *base, const struct line_server_config *cfg,
                                    const struct line_server_ops *ops, void *ctx,
                                    struct petrel_error *err);
/* Listens on every address of `listen` (NULL-terminated, may be NULL) and
 * registers each with `readiness` as "<component>-listener-<i>"; called
 * once per server. False with err at the first that fails. */
bool line_server_listen(struct line_server *srv, char *const *listen, struct readiness *readiness,
                        struct petrel_error *err);
/* Listeners bound. */
size_t line_server_listener_count(const struct line_server *srv);
/* The first listener's bound address ("127.0.0.1:10200", "unix:/path"), or "". */
const char *line_server_address(const struct line_server *srv);
/* Closes the listeners; open connections keep being served. */
void line_server_stop_accepting(struct line_server *srv);
/* Calls fn with each open connection's state. */
void line_server_each(const struct line_server *srv, void (*fn)(void *state, void *arg), void *arg);
/* Closes the listeners and every connection (ops->close), frees the server. */
void line_server_free(struct line_server *srv);

/* Queues bytes for the client; nothing once the connection is closing. */
void line_conn_write(struct line_conn *conn, const void *data, size_t len);
/* Stops reading; the connection closes once its output has drained. */
void line_conn_close(struct line_conn *conn);
bool line_conn_closing(const struct line_conn *conn);
/* The client's address, for logs ("192.0.2.7:51234", "unix:..."). */
const char *line_conn_peer(const struct line_conn *conn);

#endif
