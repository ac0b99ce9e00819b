/* PostgreSQL blocking on a worker thread (sql-pgsql.h): the event-loop
 * connection driven on a private event base until its answer is there. */
#include "sql/sql-pgsql.h"

#include "core/xalloc.h"

#include <event2/event.h>
#include <stdlib.h>

enum wait_for {
    WAIT_NOTHING,
    WAIT_CONNECT,
    WAIT_RESULT,
};

struct sql_pgsql_blocking {
    struct event_base *base;
    struct sql_pgconn *conn;
    enum wait_for waiting;
    bool done;
    char *failure; /* connect_failed / lost */
    bool timed_out;
    struct sql_pgsql_result *result;
};

static void on_connected(void *ctx)
{
    struct sql_pgsql_blocking *b = ctx;
    b->done = true;
}

static void on_failure(void *ctx, const char *why)
{
    struct sql_pgsql_blocking *b = ctx;
    free(b->failure);
    b->failure = xstrdup(why);
    b->done = true;
}

static void on_lost(void *ctx, const char *why, bool timed_out)
{
    struct sql_pgsql_blocking *b = ctx;
    b->timed_out = timed_out;
    on_failure(ctx, why);
}

static void on_result(void *ctx, struct sql_pgsql_result *res)
{
    struct sql_pgsql_blocking *b = ctx;
    if (b->waiting != WAIT_RESULT) {
        sql_pgsql_result_free(res);
        return;
    }
    b->result = res;
    b->done = true;
}

static const struct sql_pgconn_handlers handlers = {
    .connected = on_connected,
    .connect_failed = on_failure,
    .result = on_result,
    .lost = on_lost,
};

struct sql_pgsql_blocking *sql_pgsql_blocking_new(const struct sql_pgsql_settings *s)
{
    struct sql_pgsql_blocking *b = xcalloc(1, sizeof(*b));
    b->base = event_base_new();
    PETREL_ASSERT(b->base != NULL);
    b->conn = sql_pgconn_new(b->base, s, &handlers, b);
    return b;
}

void sql_pgsql_blocking_free(struct sql_pgsql_blocking *b)
{
    if (b == NULL)
        return;
    sql_pgconn_free(b->conn);
    event_base_free(b->base);
    free(b->failure);
    free(b);
}

/* Runs the private loop until a handler says done. The connection's own
 * timers bound the wait. */
static void wait_done(struct sql_pgsql_blocking *b, enum wait_for what)
{
    b->waiting = what;
    while (!b->done)
        event_base_loop(b->base, EVLOOP_ONCE);
    b->waiting = WAIT_NOTHING;
    b->done = false;
}

static bool ensure_connected(struct sql_pgsql_blocking *b, char **error)
{
    if (sql_pgconn_is_up(b->conn))
        return true;
    free(b->failure);
    b->failure = NULL;
    b->done = false;
    sql_pgconn_connect(b->conn); /* may fail at once */
    if (!b->done)
        wait_done(b, WAIT_CONNECT);
    b->done = false;
    if (b->failure != NULL) {
        *error = xasprintf("postgresql: connect: %s", b->failure);
        return false;
    }
    return true;
}

bool sql_pgsql_blocking_run(struct sql_pgsql_blocking *b, const struct sql_stmt *st,
                            const char *what, sql_row_fn *fn, void *ctx, char **error)
{
    struct sql_pgsql_result *res = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        bool fresh = !sql_pgconn_is_up(b->conn);
        if (!ensure_connected(b, error))
            return false;
        free(b->failure);
        b->failure = NULL;
        b->timed_out = false;
        b->done = false;
        if (sql_pgconn_send(b->conn, st, true) || b->done) {
            if (!b->done)
                wait_done(b, WAIT_RESULT);
            b->done = false;
        }
        res = b->result;
        b->result = NULL;
        if (res != NULL)
            break;
        /* lost: a connection that was idle since the last call may have
         * died with a server restart; one fresh attempt hides that */
        if (fresh || attempt == 1 || b->timed_out) {
            *error = xasprintf("postgresql: %s: %s", what,
                               b->failure != NULL ? b->failure : "connection lost");
            return false;
        }
    }
    bool ok = sql_pgsql_result_has_rows(res);
    if (!ok) {
        char *msg = sql_pgsql_result_error(res);
        *error = xasprintf("postgresql: %s: %s", what, msg);
        free(msg);
    } else if (fn != NULL) {
        sql_pgsql_result_deliver(res, fn, ctx);
    }
    sql_pgsql_result_free(res);
    if (sql_pgconn_in_transaction(b->conn))
        sql_pgconn_close(b->conn); /* never leave an operator's BEGIN open */
    return ok;
}
