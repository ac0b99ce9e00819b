/* The core of an asynchronous client for a line protocol on a libevent loop
 * (the auth and warden clients are built on it; each keeps its own
 * requests, replies and public API).
 *
 * One client keeps one connection to `address` (TCP "host:port" or
 * "unix:/path"), opened lazily by the first write. A connect that fails or
 * does not finish within `timeout_ms`, a read or write error, an EOF while
 * requests are out (or, with `handshake`, before the owner said the peer
 * is up), a reply line over `max_line`, output over `output_max` and a
 * protocol error reported by the owner take the connection down: every
 * request on it is failed with "<peer> unavailable: <reason>" and the next
 * connect waits out a backoff (100 ms doubling to 5 s, reset by
 * line_client_mark_up()). Until then writes fail at once, so a dead peer
 * costs callers nothing. With line_client_keep_connected(), a timer
 * reconnects after the backoff by itself.
 *
 * Requests: the owner embeds a struct line_request in its own request and
 * submits it with its line. The core gives it an id (a counter), a
 * deadline (`timeout_ms`), and a place in an id map until the owner takes
 * it out to answer it. Failures decided inside a call (closing, backoff,
 * a failed connect, the owner's own refusal) are answered from a
 * zero-delay event, never inside the call, through ops->fail.
 *
 * Lifetime: callbacks may free the client. The core counts references
 * around its callbacks (and the owner around its own with
 * line_client_hold/drop); line_client_free() takes effect at once, and the
 * memory (the core's and, through ops->release, the owner's) goes when the
 * outermost callback has returned. */
#ifndef PETREL_NET_LINE_CLIENT_H
#define PETREL_NET_LINE_CLIENT_H

#include "core/error.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct line_client;

enum line_request_state {
    LINE_REQUEST_NEW,       /* initialised, not submitted yet */
    LINE_REQUEST_WAITING,   /* sent (or queued behind the connect): a reply is due */
    LINE_REQUEST_HELD,      /* live, waiting for the caller, no deadline */
    LINE_REQUEST_FAILED,    /* to be failed from the loop */
    LINE_REQUEST_ANSWERING, /* out of every table: its final answer is being given */
};

/* Embed as the first member of the owner's request. Only `id` is for the
 * owner to read; the rest belongs to line-client.c. */
struct line_request {
    uint64_t id; /* 1, 2, 3, ... per client */
    struct line_client *client;
    enum line_request_state state;
    struct line_request *prev; /* in the live or the failed list */
    struct line_request *next;
    struct line_request *map_next; /* in the id map while live */
    struct event *deadline;
    char *error; /* FAILED: the reason */
};

struct line_client_config {
    /* "auth", "warden": log component "<protocol>-client", messages
     * "<protocol> client closed", "<protocol> protocol error". */
    const char *protocol;
    /* "auth service", "warden": "<peer> unavailable: ...", "<peer> %s did
     * not answer within N ms", "<peer> address '...' needs a port". */
    const char *peer;
    const char *address;
    int64_t timeout_ms; /* the connect and each request; > 0 */
    size_t max_line;    /* longest reply line, without its LF */
    size_t output_max;  /* output the peer has not taken before it counts as
                         * not reading (the connection goes down); 0: no cap */
    bool keepalive;     /* TCP keepalive, to notice a host that vanished */
    /* The connection is up only once the owner's handshake succeeded
     * (line_client_mark_up()); an EOF before that is a failure even with
     * nothing out. Without it an EOF with nothing out is a quiet close. */
    bool handshake;
};

struct line_client_ops {
    /* One reply line without its LF; line[len] is writable (and the LF's
     * place); the buffer lives until the line callback returns (or until
     * the client's memory goes, if it freed the client). False: stop
     * reading (the connection went down or the client is closing). */
    bool (*line)(void *owner, char *line, size_t len);
    /* `req`, taken out of every table, failed with `reason`: answer and free
     * it. Returns what line_client_drop() returned around the answer
     * (false: the client is closing). */
    bool (*fail)(void *owner, struct line_request *req, const char *reason);
    /* Optional: a new connection is being opened; write its first lines
     * (with line_client_write()). */
    void (*opened)(void *owner);
    /* Optional: extra log fields for the unavailable / available-again
     * lines, written to dst as " key=value...". */
    void (*log_fields)(void *owner, char *dst, size_t size);
    /* The client is gone and no callback is running: free the owner. */
    void (*release)(void *owner);
};

/* Parses the address (it needs a port unless it is a Unix socket); does
 * not connect. NULL with err set for a bad address or timeout. The address
 * is copied; `protocol`, `peer` and `ops` are borrowed (string literals and a
 * static table in practice) and must outlive the client. */
struct line_client *line_client_new(struct event_base *base, const struct line_client_config *cfg,
                                    const struct line_client_ops *ops, void *owner,
                                    struct petrel_error *err);
/* Closes the connection and fails every pending request through ops->fail
 * ("<protocol> client closed"); a second call, or one from inside those
 * callbacks, does nothing. The owner is released (ops->release) once no
 * callback is running. */
void line_client_free(struct line_client *lc);
/* True from line_client_free() on. */
bool line_client_closing(const struct line_client *lc);
const char *line_client_address(const struct line_client *lc);
/* Requests live or waiting to be failed. */
size_t line_client_pending(const struct line_client *lc);

/* Keeps the client alive across a callback the owner runs. */
void line_client_hold(struct line_client *lc);
/* Ends a hold. False when the client is closing: the caller must not touch
 * it (or its owner) again. */
bool line_client_drop(struct line_client *lc);

/* ---------- the connection ---------- */

/* A connection exists (connecting or connected). */
bool line_client_is_open(const struct line_client *lc);
/* The peer proved it works on this connection (line_client_mark_up()). */
bool line_client_is_up(const struct line_client *lc);
/* Marks the connection up: the backoff resets; after a failure that was
 * logged, "<peer> available again" is logged. Returns whether it was
 * (false also when already up). */
bool line_client_mark_up(struct line_client *lc);
/* A connection to write on: the current one or a new one; false while
 * closing, during the backoff (then, with keep_connected, a reconnect is
 * scheduled) or when the connect failed at once. */
bool line_client_ensure(struct line_client *lc);
/* Writes on the current connection; false when there is none, or when the
 * output is over output_max (the connection is taken down). */
bool line_client_write(struct line_client *lc, const char *data, size_t len);
/* While true, a connection lost is re-opened after the backoff without a
 * write asking for it. False also cancels a scheduled reconnect. */
void line_client_keep_connected(struct line_client *lc, bool keep);
/* A reply that breaks the protocol: logs "<protocol> protocol error" and
 * takes the connection down as a failure, with the message as the reason. */
void line_client_protocol_error(struct line_client *lc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---------- requests ---------- */

/* Gives `req` the next id and its deadline timer (state NEW). The client
 * must not have been freed (callbacks run during line_client_free() may
 * still start requests: they fail). */
void line_request_init(struct line_client *lc, struct line_request *req);
/* Frees what line_request_init() set up; `req` is in no table. */
void line_request_cleanup(struct line_request *req);
enum line_request_state line_request_state(const struct line_request *req);

/* Writes `req`'s line and makes it WAITING with its deadline running; or
 * fails it from the loop: "<protocol> client closed" while closing, "<peer>
 * unavailable: <reason>" when no connection can be had or written to. */
void line_client_submit(struct line_client *lc, struct line_request *req, const char *data,
                        size_t len);
/* Fails `req` from the loop with `reason` (taking it out of the live
 * tables first if it is there). */
void line_client_fail_later(struct line_client *lc, struct line_request *req, const char *reason);
/* The live (WAITING or HELD) request with this id, or NULL (answered,
 * cancelled, or its deadline passed). */
struct line_request *line_client_find(const struct line_client *lc, uint64_t id);
/* Takes a live request out of the tables to answer it (ANSWERING). */
void line_client_detach(struct line_client *lc, struct line_request *req);
/* A live request made progress: its deadline starts again (WAITING). */
void line_request_touch(struct line_request *req);
/* A live request waits for the caller (HELD): no deadline until touched. */
void line_request_hold(struct line_request *req);
/* Forgets a request: out of whatever table holds it. False when it is
 * ANSWERING (inside its final callback): the caller must not free it. */
bool line_client_cancel(struct line_client *lc, struct line_request *req);

#endif
