/* The PostgreSQL executor: libpq in non-blocking mode, driven by a
 * libevent loop, with two ways to use it.
 *
 * - On the event loop (the dict): sql_pgconn, one connection whose
 *   connect, statements and results are events; nothing waits for the
 *   server. The caller schedules work (pools, queues) on top.
 * - Blocking on a worker thread (auth): sql_pgsql_blocking runs the same
 *   connection on a private event base until the answer is there, as
 *   Dovecot's lib-sql does for its synchronous queries, so that both ways
 *   share one connect, timeout and error path.
 *
 * Timeouts are ours, not the server's: connect_timeout bounds each
 * connection attempt, query_timeout each statement; a statement running
 * longer drops its connection (the server then rolls back). Messages are
 * one line (libpq's span several). */
#ifndef PETREL_SQL_PGSQL_H
#define PETREL_SQL_PGSQL_H

#include "sql/sql-row.h"
#include "sql/sql-stmt.h"

#include <stdbool.h>
#include <stdint.h>

struct event_base;

struct sql_pgsql_settings {
    const char *conninfo;         /* libpq keyword=value string or URI */
    const char *application_name; /* the conninfo may override it */
    int64_t connect_timeout_ms;
    int64_t query_timeout_ms;
};

/* Does libpq parse this conninfo string? (Checked without connecting.)
 * No message: libpq's would quote pieces of the string, which may hold a
 * password. Aborts on out of memory. */
bool sql_pgsql_conninfo_valid(const char *conninfo);

/* ---------- results ---------- */

struct sql_pgsql_result;

/* The statement succeeded (with or without rows). */
bool sql_pgsql_result_ok(const struct sql_pgsql_result *r);
/* It was a query that returned a row set (possibly empty). */
bool sql_pgsql_result_has_rows(const struct sql_pgsql_result *r);
size_t sql_pgsql_result_rows(const struct sql_pgsql_result *r);
/* Fills up to `max` values of row `i` (pointing into the result) and
 * returns how many columns the row has (at most `max`). */
size_t sql_pgsql_result_row(const struct sql_pgsql_result *r, size_t i, struct sql_value *values,
                            size_t max);
/* Hands every row (with the column names) to `fn` until it returns false;
 * false when it stopped early. */
bool sql_pgsql_result_deliver(const struct sql_pgsql_result *r, sql_row_fn *fn, void *ctx);
/* Rows an INSERT/UPDATE/DELETE changed. */
int64_t sql_pgsql_result_changes(const struct sql_pgsql_result *r);
/* The server's primary message of a failed statement, one line;
 * allocated. */
char *sql_pgsql_result_error(const struct sql_pgsql_result *r);
void sql_pgsql_result_free(struct sql_pgsql_result *r);

/* ---------- one connection on an event loop ---------- */

struct sql_pgconn;

/* Every handler runs from the loop, or synchronously from the call that
 * caused it (a failed connect start or send); `why` is one line. After
 * connect_failed and lost the connection is down (sql_pgconn_connect may
 * start it again). */
struct sql_pgconn_handlers {
    void (*connected)(void *ctx);
    void (*connect_failed)(void *ctx, const char *why);
    /* The statement in flight finished; the result is the handler's. */
    void (*result)(void *ctx, struct sql_pgsql_result *res);
    /* The connection broke, or a statement outlived query_timeout
     * (timed_out). */
    void (*lost)(void *ctx, const char *why, bool timed_out);
};

/* The settings' strings must outlive the connection. */
struct sql_pgconn *sql_pgconn_new(struct event_base *base, const struct sql_pgsql_settings *s,
                                  const struct sql_pgconn_handlers *h, void *ctx);
/* Closes without calling any handler. */
void sql_pgconn_free(struct sql_pgconn *c);
/* Starts connecting (the connection must be down). */
void sql_pgconn_connect(struct sql_pgconn *c);
/* Drops the connection now, without calling any handler. */
void sql_pgconn_close(struct sql_pgconn *c);
bool sql_pgconn_is_up(const struct sql_pgconn *c);

/* Sends one statement (the connection must be up and idle). Results come
 * in binary format unless `text_results`. False when the connection failed:
 * `lost` has run. */
bool sql_pgconn_send(struct sql_pgconn *c, const struct sql_stmt *st, bool text_results);
/* The same for SQL text without parameters; with text results it may hold
 * several statements (a schema). */
bool sql_pgconn_send_plain(struct sql_pgconn *c, const char *sql, bool text_results);
/* Inside a transaction block (BEGIN without COMMIT/ROLLBACK yet)? */
bool sql_pgconn_in_transaction(const struct sql_pgconn *c);

/* ---------- blocking, on a worker thread ---------- */

struct sql_pgsql_blocking;

/* Connects on first use; the settings' strings must outlive it. */
struct sql_pgsql_blocking *sql_pgsql_blocking_new(const struct sql_pgsql_settings *s);
void sql_pgsql_blocking_free(struct sql_pgsql_blocking *b);

/* Runs `st` (text results) and hands each row to `fn`. A connection that
 * was idle may have died since the last call (a server restart): a
 * statement that fails because of that is tried once more on a fresh
 * connection (a statement that timed out is not retried). *error:
 * "postgresql: connect: ..." or "postgresql: <what>:
 * ..."; a statement that returns no row set is an error. */
bool sql_pgsql_blocking_run(struct sql_pgsql_blocking *b, const struct sql_stmt *st,
                            const char *what, sql_row_fn *fn, void *ctx, char **error);

#endif
