/* The PostgreSQL executor of the sql dict: jobs and a connection pool on
 * top of the SQL layer's event-loop connection (sql/sql-pgsql.h), which
 * owns libpq, the socket events and the connect / statement timeouts.
 * Nothing here ever waits for the server.
 *
 * - Connections: a pool of up to pool_size, opened on demand (the layer's
 *   connect_timeout per attempt). A failed attempt starts a backoff (250 ms
 *   doubling to 10 s); while it runs and no connection is usable,
 *   operations fail at once with the last connection error ("postgresql
 *   unavailable: ..."). The first connection creates the default table
 *   when missing. Idle connections stay watched by the layer, so a server
 *   that goes away is noticed before the next operation. Host names in
 *   `connect` are resolved by libpq synchronously: prefer numeric
 *   addresses.
 * - Work is a queue of jobs (lookup, commit, expire-scan, iterate), each run
 *   on one connection as a chain of statements. A statement that outlives
 *   query_timeout drops its connection (the server then rolls back).
 * - Commit: BEGIN, each operation's statements, COMMIT; ROLLBACK after any
 *   failure. A connection lost while COMMIT is in flight reports
 *   WRITE_UNCERTAIN; lost before, FAILED (the server rolled back).
 *   atomic-inc is one UPDATE (value parsed as bigint by PostgreSQL): no row
 *   -> NOT_FOUND, not an integer -> the statement fails -> ROLLBACK.
 * - Iterate: BEGIN REPEATABLE READ READ ONLY, then per table a cursor
 *   (DECLARE ... NO SCROLL CURSOR) read with FETCH FORWARD 1000. Only one
 *   batch is in memory; the next FETCH is sent when the consumer has taken
 *   every row of the current one (DICT_ITER_WAIT meanwhile, then
 *   dict_iterate_notify), so any result streams in constant memory. An
 *   iteration holds its connection until it ends; iterations may hold at
 *   most pool_size - 1 connections so lookups and commits keep one. A lost
 *   connection ends the iteration with DICT_ITER_ERROR and the reason.
 * - Callbacks never run inside libpq processing of the same connection in a
 *   way that matters: a job leaves its connection idle before calling back,
 *   and iterator notifications go through a deferred event. */
#include "dict/dict-sql-private.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/backoff.h"
#include "sql/sql-pgsql.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMPONENT "dict"
#define PG_BACKOFF_MIN_MS 250
#define PG_BACKOFF_MAX_MS 10000

enum conn_state {
    CONN_DOWN,
    CONN_CONNECTING, /* PQconnectPoll in progress */
    CONN_SETUP,      /* creating the default table */
    CONN_IDLE,
    CONN_BUSY, /* a job runs on it */
    CONN_HELD, /* an iteration holds it between batches (no query in flight) */
};

enum job_kind { JOB_LOOKUP, JOB_COMMIT, JOB_EXPIRE, JOB_ITERATE };

enum job_phase {
    PH_START,
    /* commit */
    PH_BEGIN,
    PH_OPS,
    PH_COMMIT,
    PH_ROLLBACK,
    /* iterate */
    PH_DECLARE,
    PH_FETCH,
    PH_END,
    PH_ABORT,
};

struct pg_dict;
struct pg_iterate;

struct pg_job {
    enum job_kind kind;
    struct pg_dict *pd;
    struct pg_job *next; /* queue link */
    struct pg_conn *conn;
    enum job_phase phase;
    void *ctx;
    /* lookup */
    char *key;
    dict_lookup_cb *lookup_cb;
    /* commit */
    struct dict_tx_op *ops;
    size_t count;
    size_t index;
    int64_t expire_secs;
    int64_t now;
    struct sql_op_state op_state;
    enum dict_commit_result result;
    char *error;
    dict_commit_cb *commit_cb;
    /* expire-scan */
    dict_expire_cb *expire_cb;
    /* iterate */
    struct pg_iterate *it; /* NULL once the consumer let go */
    size_t source;
    bool source_more; /* the last FETCH was full */
    bool paused;
};

struct pg_conn {
    struct pg_dict *pd;
    enum conn_state state;
    struct sql_pgconn *conn;
    struct pg_job *job;
};

struct pg_dict {
    struct dict *dict;
    const struct sql_config *cfg;
    struct sql_pgsql_settings settings;
    struct pg_conn *conns;
    size_t conn_count;
    struct pg_job *queue;
    struct net_backoff backoff; /* no new connection before backoff.retry_at_ms */
    char *last_error;
    bool schema_ready;
    bool pumping;
    bool pump_again;
    bool closing;
    bool outage_logged;
};

struct pg_iterate {
    struct dict_iterate head;
    struct pg_dict *pd;
    struct sql_iter_plan plan;
    struct pg_job *job;
    struct sql_pgsql_result *batch;
    size_t batch_source;
    int row;
    int rows;
    bool finished; /* no batch will follow the current one */
    bool failed;
    bool waiting;
    struct event *notify;
    struct buf key;
    struct sql_value cols[SQL_MAX_COLUMNS];
    struct dict_value values[SQL_MAX_FIELDS];
};

static void pd_pump(struct pg_dict *pd);
static void job_start(struct pg_job *job, struct pg_conn *c);
static void job_result(struct pg_job *job, struct sql_pgsql_result *res);
static void job_lost(struct pg_job *job, const char *why);
static void job_fail_unstarted(struct pg_job *job, const char *why);

/* ---------- helpers ---------- */

/* "postgresql: <primary message>" of a failed result. */
static char *result_error(const struct sql_pgsql_result *res)
{
    char *text = sql_pgsql_result_error(res);
    char *out = xasprintf("postgresql: %s", text);
    free(text);
    return out;
}

/* ---------- the queue ---------- */

static void queue_push(struct pg_dict *pd, struct pg_job *job)
{
    struct pg_job **p = &pd->queue;
    while (*p != NULL)
        p = &(*p)->next;
    job->next = NULL;
    *p = job;
}

static bool queue_remove(struct pg_dict *pd, struct pg_job *job)
{
    for (struct pg_job **p = &pd->queue; *p != NULL; p = &(*p)->next) {
        if (*p == job) {
            *p = job->next;
            job->next = NULL;
            return true;
        }
    }
    return false;
}

static void job_free(struct pg_job *job)
{
    if (job == NULL)
        return;
    free(job->key);
    for (size_t i = 0; i < job->count; i++) {
        free(job->ops[i].key);
        free(job->ops[i].value);
    }
    free(job->ops);
    free(job->error);
    free(job);
}

static struct pg_job *job_new(struct pg_dict *pd, enum job_kind kind, void *ctx)
{
    struct pg_job *job = xcalloc(1, sizeof(*job));
    job->pd = pd;
    job->kind = kind;
    job->ctx = ctx;
    job->phase = PH_START;
    return job;
}

static void pd_submit(struct pg_dict *pd, struct pg_job *job)
{
    queue_push(pd, job);
    pd_pump(pd);
}

/* ---------- connections ---------- */

static void conn_down(struct pg_conn *c)
{
    sql_pgconn_close(c->conn);
    c->state = CONN_DOWN;
}

static void on_connect_failed(void *arg, const char *why)
{
    struct pg_conn *c = arg;
    struct pg_dict *pd = c->pd;
    c->state = CONN_DOWN;
    free(pd->last_error);
    pd->last_error = xasprintf("cannot connect to postgresql: %s", why);
    net_backoff_failed(&pd->backoff, clock_mono_ms());
    if (!pd->outage_logged) {
        pd->outage_logged = true;
        char q[512];
        log_warn(COMPONENT, "postgresql unavailable", "dict=%s error=%s", pd->dict->name,
                 log_quote(q, sizeof(q), why));
    }
    pd_pump(pd);
}

static void on_connected(void *arg)
{
    struct pg_conn *c = arg;
    struct pg_dict *pd = c->pd;
    net_backoff_reset(&pd->backoff);
    if (pd->outage_logged) {
        pd->outage_logged = false;
        log_info(COMPONENT, "postgresql reachable again", "dict=%s", pd->dict->name);
    }
    if (pd->schema_ready) {
        c->state = CONN_IDLE;
        pd_pump(pd);
        return;
    }
    struct sql_stmt q;
    sql_stmt_init(&q, SQL_DIALECT_PGSQL);
    sql_build_schema(pd->cfg, &q);
    c->state = CONN_SETUP;
    sql_pgconn_send_plain(c->conn, buf_cstr(&q.sql), true); /* false: on_lost ran */
    sql_stmt_free(&q);
}

/* The connection is gone (already closed): fail its job. */
static void on_lost(void *arg, const char *why, bool timed_out)
{
    (void)timed_out;
    struct pg_conn *c = arg;
    struct pg_dict *pd = c->pd;
    struct pg_job *job = c->job;
    c->job = NULL;
    c->state = CONN_DOWN;
    if (job != NULL)
        job->conn = NULL;
    char q[512];
    log_warn(COMPONENT, "postgresql connection lost", "dict=%s error=%s", pd->dict->name,
             log_quote(q, sizeof(q), why));
    if (job != NULL)
        job_lost(job, why);
    pd_pump(pd);
}

static void setup_done(struct pg_conn *c, struct sql_pgsql_result *res)
{
    struct pg_dict *pd = c->pd;
    if (sql_pgsql_result_ok(res)) {
        pd->schema_ready = true;
    } else {
        char *msg = result_error(res);
        char q[512];
        log_warn(COMPONENT, "cannot create the default table", "dict=%s table=%s error=%s",
                 pd->dict->name, pd->cfg->table, log_quote(q, sizeof(q), msg));
        free(msg);
    }
    sql_pgsql_result_free(res);
    c->state = CONN_IDLE;
    pd_pump(pd);
}

static void on_result(void *arg, struct sql_pgsql_result *res)
{
    struct pg_conn *c = arg;
    if (c->state == CONN_SETUP)
        setup_done(c, res);
    else if (c->job != NULL)
        job_result(c->job, res);
    else
        sql_pgsql_result_free(res);
}

static const struct sql_pgconn_handlers conn_handlers = {
    .connected = on_connected,
    .connect_failed = on_connect_failed,
    .result = on_result,
    .lost = on_lost,
};

static void conn_start(struct pg_conn *c)
{
    c->state = CONN_CONNECTING;
    sql_pgconn_connect(c->conn); /* may fail at once */
}

/* Sends one statement for the connection's job. False when the connection
 * failed (it is gone and the job has been answered: touch neither). */
static bool conn_send(struct pg_conn *c, const struct sql_stmt *q, bool text_results)
{
    return sql_pgconn_send(c->conn, q, text_results);
}

static bool conn_send_plain(struct pg_conn *c, const char *sql, bool text_results)
{
    return sql_pgconn_send_plain(c->conn, sql, text_results);
}

/* ---------- scheduling ---------- */

static size_t iterations_holding(const struct pg_dict *pd)
{
    size_t n = 0;
    for (size_t i = 0; i < pd->conn_count; i++) {
        const struct pg_conn *c = &pd->conns[i];
        n += c->job != NULL && c->job->kind == JOB_ITERATE;
    }
    return n;
}

static bool may_hold(const struct pg_dict *pd)
{
    return pd->conn_count == 1 || iterations_holding(pd) + 1 < pd->conn_count;
}

static struct pg_conn *find_conn(struct pg_dict *pd, enum conn_state state)
{
    for (size_t i = 0; i < pd->conn_count; i++) {
        if (pd->conns[i].state == state)
            return &pd->conns[i];
    }
    return NULL;
}

static struct pg_job *first_runnable(struct pg_dict *pd)
{
    bool hold_ok = may_hold(pd);
    for (struct pg_job *job = pd->queue; job != NULL; job = job->next) {
        if (job->kind != JOB_ITERATE || hold_ok)
            return job;
    }
    return NULL;
}

/* Will some connection take `job` later without a new connection attempt? */
static bool job_will_run(const struct pg_dict *pd, const struct pg_job *job)
{
    bool iterating = false;
    bool down = false;
    for (size_t i = 0; i < pd->conn_count; i++) {
        const struct pg_conn *c = &pd->conns[i];
        if (c->state == CONN_CONNECTING || c->state == CONN_SETUP)
            return true;
        if (c->state == CONN_DOWN)
            down = true;
        else if (c->job != NULL && c->job->kind == JOB_ITERATE)
            iterating = true;
        else if (c->state == CONN_BUSY)
            return true;
    }
    /* only iterations hold connections: an iteration may wait for one of
     * them; other work too, unless a connection slot is free but backing off */
    return iterating && (job->kind == JOB_ITERATE || !down);
}

static void pump_once(struct pg_dict *pd)
{
    /* 1. idle connections take runnable jobs */
    for (;;) {
        struct pg_conn *idle = find_conn(pd, CONN_IDLE);
        struct pg_job *job = idle != NULL ? first_runnable(pd) : NULL;
        if (job == NULL)
            break;
        queue_remove(pd, job);
        job_start(job, idle);
    }
    /* 2. open connections for jobs that wait */
    size_t waiting = 0;
    bool hold_ok = may_hold(pd);
    for (struct pg_job *job = pd->queue; job != NULL; job = job->next)
        waiting += job->kind != JOB_ITERATE || hold_ok;
    size_t opening = 0;
    for (size_t i = 0; i < pd->conn_count; i++)
        opening += pd->conns[i].state == CONN_CONNECTING || pd->conns[i].state == CONN_SETUP;
    while (waiting > opening && net_backoff_remaining(&pd->backoff, clock_mono_ms()) == 0) {
        struct pg_conn *down = find_conn(pd, CONN_DOWN);
        if (down == NULL)
            break;
        conn_start(down); /* may fail at once and set a backoff */
        opening++;
    }
    /* 3. fail what nothing will serve */
    struct pg_job *failed = NULL;
    struct pg_job **tail = &failed;
    for (struct pg_job **p = &pd->queue; *p != NULL;) {
        struct pg_job *job = *p;
        if (job_will_run(pd, job)) {
            p = &job->next;
            continue;
        }
        *p = job->next;
        job->next = NULL;
        *tail = job;
        tail = &job->next;
    }
    if (failed == NULL)
        return;
    char *why;
    int64_t wait = net_backoff_remaining(&pd->backoff, clock_mono_ms());
    if (pd->last_error != NULL && wait > 0)
        why = xasprintf("postgresql unavailable: %s (next attempt in %" PRId64 " ms)",
                        pd->last_error, wait);
    else
        why = xasprintf("postgresql unavailable: %s",
                        pd->last_error != NULL ? pd->last_error : "no connection");
    while (failed != NULL) {
        struct pg_job *job = failed;
        failed = job->next;
        job_fail_unstarted(job, why);
    }
    free(why);
}

static void pd_pump(struct pg_dict *pd)
{
    if (pd->closing)
        return;
    if (pd->pumping) {
        pd->pump_again = true;
        return;
    }
    pd->pumping = true;
    do {
        pd->pump_again = false;
        pump_once(pd);
    } while (pd->pump_again);
    pd->pumping = false;
}

/* The job is done with its connection, which becomes idle -- or is closed
 * if, against expectations, it is still inside a transaction. */
static void job_release(struct pg_job *job)
{
    struct pg_conn *c = job->conn;
    if (c == NULL)
        return;
    c->job = NULL;
    c->state = CONN_IDLE;
    job->conn = NULL;
    if (sql_pgconn_in_transaction(c->conn)) {
        log_warn(COMPONENT, "postgresql connection left inside a transaction, closing it",
                 "dict=%s", c->pd->dict->name);
        conn_down(c);
    }
}

/* ---------- lookup ---------- */

static void lookup_start(struct pg_job *job)
{
    struct sql_stmt q;
    sql_stmt_init(&q, SQL_DIALECT_PGSQL);
    sql_build_lookup(job->pd->cfg, job->key, dict_now(), &q);
    conn_send(job->conn, &q, q.text_results);
    sql_stmt_free(&q);
}

static void lookup_answer(struct pg_job *job, int ret, const char *error,
                          struct sql_pgsql_result *res)
{
    struct dict_lookup_result r = {.ret = ret, .error = error};
    struct sql_value cols[SQL_MAX_COLUMNS];
    struct dict_value values[SQL_MAX_COLUMNS];
    size_t n = 0;
    if (ret > 0) {
        n = sql_pgsql_result_row(res, 0, cols, SQL_MAX_COLUMNS);
        for (size_t i = 0; i < n; i++) {
            values[i].data = cols[i].data != NULL ? cols[i].data : "";
            values[i].len = cols[i].len;
        }
        r.values = values;
        r.value_count = n;
    }
    struct pg_dict *pd = job->pd;
    job->lookup_cb(&r, job->ctx);
    job_free(job);
    pd_pump(pd);
}

static void lookup_result(struct pg_job *job, struct sql_pgsql_result *res)
{
    job_release(job);
    if (sql_pgsql_result_ok(res)) {
        lookup_answer(job, sql_pgsql_result_rows(res) > 0 ? 1 : 0, NULL, res);
    } else {
        char *msg = result_error(res);
        lookup_answer(job, -1, msg, res);
        free(msg);
    }
    sql_pgsql_result_free(res);
}

/* ---------- commit ---------- */

static void commit_finish(struct pg_job *job, enum dict_commit_result result, const char *error)
{
    struct pg_dict *pd = job->pd;
    job_release(job);
    job->commit_cb(result, error, job->ctx);
    job_free(job);
    pd_pump(pd);
}

/* A failure inside the transaction: roll back, then answer FAILED. */
static void commit_abort(struct pg_job *job, char *error)
{
    free(job->error);
    job->error = error;
    job->phase = PH_ROLLBACK;
    conn_send_plain(job->conn, "ROLLBACK", true);
}

/* Sends the current step of the current op, or COMMIT after the last. */
static void commit_step(struct pg_job *job)
{
    if (job->index >= job->count) {
        job->phase = PH_COMMIT;
        conn_send_plain(job->conn, "COMMIT", true);
        return;
    }
    struct sql_stmt q;
    sql_stmt_init(&q, SQL_DIALECT_PGSQL);
    sql_op_build(job->pd->cfg, &job->ops[job->index], &job->op_state, job->expire_secs, job->now,
                 &q);
    job->phase = PH_OPS;
    conn_send(job->conn, &q, true);
    sql_stmt_free(&q);
}

static void commit_result(struct pg_job *job, struct sql_pgsql_result *res)
{
    bool ok = sql_pgsql_result_ok(res);
    char *error = ok ? NULL : result_error(res);
    switch (job->phase) {
    case PH_BEGIN:
        if (ok)
            commit_step(job);
        else
            commit_abort(job, xasprintf("begin: %s", error));
        break;
    case PH_OPS: {
        const struct dict_tx_op *op = &job->ops[job->index];
        if (!ok) {
            char *what = sql_op_describe(op);
            commit_abort(job, xasprintf("%s: %s", what, error));
            free(what);
            break;
        }
        struct sql_value first;
        size_t n = 0;
        struct sql_value cols[SQL_MAX_COLUMNS];
        bool has_row = sql_pgsql_result_rows(res) > 0;
        if (has_row) {
            n = sql_pgsql_result_row(res, 0, cols, SQL_MAX_COLUMNS);
            first = cols[0];
        }
        int64_t changes = sql_pgsql_result_changes(res);
        char *op_error = NULL;
        enum sql_op_next next = sql_op_result(job->pd->cfg, op, &job->op_state, changes,
                                              has_row && n > 0 ? &first : NULL, &op_error);
        if (next == SQL_OP_FAILED) {
            commit_abort(job, op_error);
            break;
        }
        if (next == SQL_OP_NOT_FOUND)
            job->result = DICT_COMMIT_NOT_FOUND;
        if (next != SQL_OP_AGAIN) {
            job->index++;
            memset(&job->op_state, 0, sizeof(job->op_state));
        }
        commit_step(job);
        break;
    }
    case PH_COMMIT:
        if (ok) {
            commit_finish(job, job->result, NULL);
        } else {
            char *msg = xasprintf("commit: %s", error);
            commit_finish(job, DICT_COMMIT_FAILED, msg);
            free(msg);
        }
        break;
    case PH_ROLLBACK:
        commit_finish(job, DICT_COMMIT_FAILED, job->error);
        break;
    default:
        PETREL_ASSERT(!"commit job in an unexpected phase");
    }
    free(error);
    sql_pgsql_result_free(res);
}

/* ---------- expire-scan ---------- */

static void expire_step(struct pg_job *job)
{
    struct sql_stmt q;
    sql_stmt_init(&q, SQL_DIALECT_PGSQL);
    sql_build_expire(job->pd->cfg, job->index, job->now, &q);
    conn_send(job->conn, &q, true);
    sql_stmt_free(&q);
}

static void expire_finish(struct pg_job *job, bool ok, const char *error)
{
    struct pg_dict *pd = job->pd;
    job_release(job);
    job->expire_cb(ok, error, job->ctx);
    job_free(job);
    pd_pump(pd);
}

static void expire_result(struct pg_job *job, struct sql_pgsql_result *res)
{
    if (!sql_pgsql_result_ok(res)) {
        char *msg = result_error(res);
        sql_pgsql_result_free(res);
        expire_finish(job, false, msg);
        free(msg);
        return;
    }
    sql_pgsql_result_free(res);
    if (++job->index < sql_expire_count(job->pd->cfg))
        expire_step(job);
    else
        expire_finish(job, true, NULL);
}

/* ---------- iterate (the job side) ---------- */

static void iter_notify_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct pg_iterate *it = arg;
    it->waiting = false;
    dict_iterate_notify(&it->head);
}

/* Wakes a consumer that got DICT_ITER_WAIT (from the loop, never nested). */
static void iter_wake(struct pg_iterate *it)
{
    if (it->waiting)
        event_active(it->notify, EV_TIMEOUT, 0);
}

static void iter_fail(struct pg_iterate *it, const char *fmt, const char *why)
{
    if (!it->failed) {
        it->failed = true;
        dict_iterate_set_error(&it->head, fmt, why);
    }
    iter_wake(it);
}

/* The iteration's job ends and frees itself (the connection is idle). */
static void iter_job_end(struct pg_job *job)
{
    struct pg_dict *pd = job->pd;
    job_release(job);
    if (job->it != NULL)
        job->it->job = NULL;
    job_free(job);
    pd_pump(pd);
}

static void iter_declare(struct pg_job *job)
{
    struct pg_iterate *it = job->it;
    struct sql_stmt q;
    sql_stmt_init(&q, SQL_DIALECT_PGSQL);
    sql_build_iterate(&it->plan, job->source, dict_now(), &q);
    struct sql_stmt declare;
    sql_stmt_init(&declare, SQL_DIALECT_PGSQL);
    buf_printf(&declare.sql, "DECLARE petrel_c%zu NO SCROLL CURSOR FOR %s", job->source,
               buf_cstr(&q.sql));
    memcpy(declare.params, q.params, q.count * sizeof(q.params[0]));
    declare.count = q.count;
    job->phase = PH_DECLARE;
    conn_send(job->conn, &declare, true);
    sql_stmt_free(&declare);
    sql_stmt_free(&q); /* owns the parameters' copies */
}

static void iter_fetch(struct pg_job *job)
{
    char sql[96];
    snprintf(sql, sizeof(sql), "FETCH FORWARD %d FROM petrel_c%zu", SQL_FETCH_ROWS, job->source);
    job->phase = PH_FETCH;
    bool text = sql_iter_text_results(&job->it->plan, job->source);
    conn_send_plain(job->conn, sql, text);
}

/* Ends the read-only transaction; the connection goes back to the pool. */
static void iter_end(struct pg_job *job, enum job_phase phase)
{
    job->phase = phase;
    job->paused = false;
    job->conn->state = CONN_BUSY;
    conn_send_plain(job->conn, phase == PH_END ? "COMMIT" : "ROLLBACK", true);
}

static void iter_start(struct pg_job *job)
{
    job->phase = PH_BEGIN;
    conn_send_plain(job->conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", true);
}

/* The consumer took the whole batch: fetch more, or the next table. */
static void iter_resume(struct pg_job *job)
{
    job->paused = false;
    job->conn->state = CONN_BUSY;
    if (job->source_more) {
        iter_fetch(job);
    } else {
        job->source++;
        iter_declare(job);
    }
}

static void iter_result(struct pg_job *job, struct sql_pgsql_result *res)
{
    struct pg_iterate *it = job->it;
    bool ok = sql_pgsql_result_ok(res);
    if (job->phase == PH_END || job->phase == PH_ABORT) {
        sql_pgsql_result_free(res);
        iter_job_end(job);
        return;
    }
    if (it == NULL) { /* the consumer let go mid-way */
        sql_pgsql_result_free(res);
        iter_end(job, PH_ABORT);
        return;
    }
    if (!ok) {
        char *msg = result_error(res);
        sql_pgsql_result_free(res);
        iter_fail(it, "iterate: %s", msg);
        free(msg);
        iter_end(job, PH_ABORT);
        return;
    }
    switch (job->phase) {
    case PH_BEGIN:
        sql_pgsql_result_free(res);
        job->source = 0;
        iter_declare(job);
        return;
    case PH_DECLARE:
        sql_pgsql_result_free(res);
        iter_fetch(job);
        return;
    case PH_FETCH:
        break;
    default:
        PETREL_ASSERT(!"iterate job in an unexpected phase");
    }
    int rows = (int)sql_pgsql_result_rows(res);
    bool last_table = job->source + 1 >= it->plan.count;
    job->source_more = rows >= SQL_FETCH_ROWS;
    if (rows == 0) {
        sql_pgsql_result_free(res);
        if (last_table) {
            it->finished = true;
            iter_wake(it);
            iter_end(job, PH_END);
        } else {
            job->source++;
            iter_declare(job);
        }
        return;
    }
    if (it->batch != NULL)
        sql_pgsql_result_free(it->batch);
    it->batch = res;
    it->batch_source = job->source;
    it->row = 0;
    it->rows = rows;
    iter_wake(it);
    if (!job->source_more && last_table) {
        it->finished = true;
        iter_end(job, PH_END);
        return;
    }
    job->paused = true;
    job->conn->state = CONN_HELD;
}

/* ---------- jobs ---------- */

static void job_start(struct pg_job *job, struct pg_conn *c)
{
    c->job = job;
    c->state = CONN_BUSY;
    job->conn = c;
    switch (job->kind) {
    case JOB_LOOKUP:
        lookup_start(job);
        break;
    case JOB_COMMIT:
        job->phase = PH_BEGIN;
        conn_send_plain(c, "BEGIN", true);
        break;
    case JOB_EXPIRE:
        expire_step(job);
        break;
    case JOB_ITERATE:
        iter_start(job);
        break;
    }
}

static void job_result(struct pg_job *job, struct sql_pgsql_result *res)
{
    switch (job->kind) {
    case JOB_LOOKUP:
        lookup_result(job, res);
        break;
    case JOB_COMMIT:
        commit_result(job, res);
        break;
    case JOB_EXPIRE:
        expire_result(job, res);
        break;
    case JOB_ITERATE:
        iter_result(job, res);
        break;
    }
}

/* Answers a job with an error: never started, or its connection is gone. */
static void job_answer_error(struct pg_job *job, enum dict_commit_result commit_result,
                             const char *why)
{
    switch (job->kind) {
    case JOB_LOOKUP: {
        struct dict_lookup_result r = {.ret = -1, .error = why};
        job->lookup_cb(&r, job->ctx);
        break;
    }
    case JOB_COMMIT:
        job->commit_cb(commit_result, why, job->ctx);
        break;
    case JOB_EXPIRE:
        job->expire_cb(false, why, job->ctx);
        break;
    case JOB_ITERATE:
        if (job->it != NULL) {
            job->it->job = NULL;
            iter_fail(job->it, "%s", why);
        }
        break;
    }
    job_free(job);
}

static void job_fail_unstarted(struct pg_job *job, const char *why)
{
    job_answer_error(job, DICT_COMMIT_FAILED, why);
}

static void job_lost(struct pg_job *job, const char *why)
{
    char *msg;
    enum dict_commit_result result = DICT_COMMIT_FAILED;
    if (job->kind == JOB_COMMIT && job->phase == PH_COMMIT) {
        result = DICT_COMMIT_WRITE_UNCERTAIN;
        msg = xasprintf("postgresql connection lost during COMMIT, the batch may or may not "
                        "have been applied: %s",
                        why);
    } else if (job->kind == JOB_COMMIT && job->phase == PH_ROLLBACK && job->error != NULL) {
        msg = xstrdup(job->error);
    } else if (job->kind == JOB_COMMIT) {
        msg = xasprintf("postgresql connection lost, nothing applied: %s", why);
    } else if (job->kind == JOB_ITERATE) {
        msg = xasprintf("postgresql connection lost during iterate: %s", why);
    } else {
        msg = xasprintf("postgresql connection lost: %s", why);
    }
    job_answer_error(job, result, msg);
    free(msg);
}

/* ---------- the executor ---------- */

static bool pg_open(struct dict *dict, struct petrel_error *err)
{
    if (dict->base == NULL)
        return petrel_error_set(err, PETREL_ERR_INVALID, "sql backend pgsql needs the event loop");
    struct pg_dict *pd = xcalloc(1, sizeof(*pd));
    pd->dict = dict;
    pd->cfg = dict->config;
    net_backoff_init(&pd->backoff, PG_BACKOFF_MIN_MS, PG_BACKOFF_MAX_MS);
    pd->settings = (struct sql_pgsql_settings){
        .conninfo = pd->cfg->connect,
        .application_name = "petrel",
        .connect_timeout_ms = pd->cfg->connect_timeout_ms,
        .query_timeout_ms = pd->cfg->query_timeout_ms,
    };
    pd->conn_count = (size_t)pd->cfg->pool_size;
    pd->conns = xcalloc(pd->conn_count, sizeof(*pd->conns));
    for (size_t i = 0; i < pd->conn_count; i++) {
        struct pg_conn *c = &pd->conns[i];
        c->pd = pd;
        c->state = CONN_DOWN;
        c->conn = sql_pgconn_new(dict->base, &pd->settings, &conn_handlers, c);
    }
    dict->driver_data = pd;
    return true; /* connections open on first use */
}

static void pg_close(struct dict *dict)
{
    struct pg_dict *pd = dict->driver_data;
    pd->closing = true;
    while (pd->queue != NULL) {
        struct pg_job *job = pd->queue;
        pd->queue = job->next;
        job_fail_unstarted(job, "dict closed (shutting down)");
    }
    for (size_t i = 0; i < pd->conn_count; i++) {
        struct pg_conn *c = &pd->conns[i];
        struct pg_job *job = c->job;
        c->job = NULL;
        conn_down(c);
        if (job != NULL) {
            job->conn = NULL;
            job_lost(job, "dict closed (shutting down)");
        }
        sql_pgconn_free(c->conn);
    }
    free(pd->conns);
    free(pd->last_error);
    free(pd);
    dict->driver_data = NULL;
}

static void pg_lookup(struct dict *dict, const char *key, dict_lookup_cb *cb, void *ctx)
{
    struct pg_dict *pd = dict->driver_data;
    struct pg_job *job = job_new(pd, JOB_LOOKUP, ctx);
    job->key = xstrdup(key);
    job->lookup_cb = cb;
    pd_submit(pd, job);
}

static void pg_commit(struct dict *dict, const struct dict_tx_op *ops, size_t count,
                      int64_t expire_secs, dict_commit_cb *cb, void *ctx)
{
    struct pg_dict *pd = dict->driver_data;
    char *error = NULL;
    if (!sql_ops_check(pd->cfg, ops, count, expire_secs, &error)) {
        cb(DICT_COMMIT_FAILED, error, ctx);
        free(error);
        return;
    }
    struct pg_job *job = job_new(pd, JOB_COMMIT, ctx);
    job->commit_cb = cb;
    job->expire_secs = expire_secs;
    job->now = dict_now();
    job->result = DICT_COMMIT_OK;
    job->ops = xcalloc(count, sizeof(*job->ops));
    for (size_t i = 0; i < count; i++) {
        struct dict_tx_op *op = &job->ops[i];
        *op = ops[i];
        op->key = xstrdup(ops[i].key);
        op->value = NULL;
        if (ops[i].value != NULL) {
            op->value = xmalloc(ops[i].value_len + 1);
            memcpy(op->value, ops[i].value, ops[i].value_len);
            op->value[ops[i].value_len] = '\0';
        }
        job->count = i + 1;
    }
    pd_submit(pd, job);
}

static void pg_expire_scan(struct dict *dict, dict_expire_cb *cb, void *ctx)
{
    struct pg_dict *pd = dict->driver_data;
    struct pg_job *job = job_new(pd, JOB_EXPIRE, ctx);
    job->expire_cb = cb;
    job->now = dict_now();
    pd_submit(pd, job);
}

static struct dict_iterate *pg_iterate_init(struct dict *dict, const char *prefix, unsigned flags)
{
    struct pg_dict *pd = dict->driver_data;
    struct pg_iterate *it = xcalloc(1, sizeof(*it));
    dict_iterate_head_init(&it->head, dict, prefix, flags);
    it->pd = pd;
    sql_iter_plan_init(&it->plan, pd->cfg, prefix, flags);
    it->notify = event_new(dict->base, -1, 0, iter_notify_cb, it);
    struct pg_job *job = job_new(pd, JOB_ITERATE, NULL);
    job->it = it;
    it->job = job;
    pd_submit(pd, job); /* may fail it at once: next() then reports the error */
    return &it->head;
}

static enum dict_iter_status pg_iterate_next(struct dict_iterate *head, struct dict_row *row)
{
    struct pg_iterate *it = (struct pg_iterate *)head;
    for (;;) {
        while (it->batch != NULL && it->row < it->rows) {
            size_t ncols =
                sql_pgsql_result_row(it->batch, (size_t)it->row++, it->cols, SQL_MAX_COLUMNS);
            if (sql_iter_row(&it->plan, it->batch_source, it->cols, ncols, &it->key, it->values,
                             row))
                return DICT_ITER_ROW;
        }
        if (it->batch != NULL) {
            sql_pgsql_result_free(it->batch);
            it->batch = NULL;
        }
        if (it->failed)
            return DICT_ITER_ERROR;
        if (it->finished)
            return DICT_ITER_DONE;
        if (it->job != NULL && it->job->paused) {
            iter_resume(it->job); /* may fail the iteration at once */
            continue;
        }
        it->waiting = true;
        return DICT_ITER_WAIT;
    }
}

static void pg_iterate_deinit(struct dict_iterate *head)
{
    struct pg_iterate *it = (struct pg_iterate *)head;
    struct pg_job *job = it->job;
    if (job != NULL) {
        job->it = NULL;
        it->job = NULL;
        if (job->conn == NULL) {
            queue_remove(it->pd, job);
            job_free(job);
        } else if (job->paused) {
            iter_end(job, PH_ABORT);
        }
        /* else a statement is in flight: its result ends the job */
    }
    if (it->batch != NULL)
        sql_pgsql_result_free(it->batch);
    event_free(it->notify);
    sql_iter_plan_free(&it->plan);
    buf_free(&it->key);
    free(it);
}

const struct dict_driver_ops sql_executor_pgsql = {
    .open = pg_open,
    .close = pg_close,
    .lookup = pg_lookup,
    .iterate_init = pg_iterate_init,
    .iterate_next = pg_iterate_next,
    .iterate_deinit = pg_iterate_deinit,
    .commit = pg_commit,
    .expire_scan = pg_expire_scan,
};
