/* The PostgreSQL executor of the sql dict: libpq in non-blocking mode on the
 * event loop. Nothing here ever waits for the server.
 *
 * - Connections: a pool of up to pool_size, opened on demand with
 *   PQconnectStartParams / PQconnectPoll (connect_timeout per attempt). A
 *   failed attempt starts a backoff (250 ms doubling to 10 s); while it runs
 *   and no connection is usable, operations fail at once with the last
 *   connection error ("postgresql unavailable: ..."). The first connection
 *   creates the default table when missing. Idle connections stay watched,
 *   so a server that goes away is noticed before the next operation.
 *   Host names in `connect` are resolved by libpq synchronously: prefer
 *   numeric addresses.
 * - Work is a queue of jobs (lookup, commit, expire-scan, iterate), each run
 *   on one connection as a chain of PQsendQueryParams statements; results
 *   are read when the socket is readable. A statement that outlives
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

#include "core/log.h"
#include "core/xalloc.h"

#include <event2/event.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COMPONENT "dict"
#define PG_BACKOFF_MIN_MS 250
#define PG_BACKOFF_MAX_MS 10000
#define PG_BYTEA_OID 17

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
    PGconn *pg;
    struct event *ev_connect; /* one-shot, per PQconnectPoll answer */
    struct event *ev_read;    /* persistent while connected */
    struct event *ev_write;   /* one-shot while libpq has unsent data */
    struct event *timer;      /* connect / statement deadline */
    struct pg_job *job;
    PGresult *result; /* being collected */
    bool in_query;
};

struct pg_dict {
    struct dict *dict;
    const struct sql_config *cfg;
    struct pg_conn *conns;
    size_t conn_count;
    struct pg_job *queue;
    int64_t backoff_ms;
    int64_t retry_at_ms;
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
    PGresult *batch;
    size_t batch_source;
    int row;
    int rows;
    bool finished; /* no batch will follow the current one */
    bool failed;
    bool waiting;
    struct event *notify;
    struct buf key;
    struct dict_value cols[SQL_MAX_COLUMNS];
    struct dict_value values[SQL_MAX_FIELDS];
};

static void pd_pump(struct pg_dict *pd);
static void conn_lost(struct pg_conn *c, const char *why);
static void job_start(struct pg_job *job, struct pg_conn *c);
static void job_result(struct pg_job *job, PGresult *res);
static void job_lost(struct pg_job *job, const char *why);
static void job_fail_unstarted(struct pg_job *job, const char *why);

/* ---------- helpers ---------- */

bool sql_pgsql_conninfo_check(const char *conninfo, char **error);

bool sql_pgsql_conninfo_check(const char *conninfo, char **error)
{
    char *msg = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &msg);
    if (opts == NULL) {
        *error = xasprintf("not a valid libpq conninfo: %s", msg != NULL ? msg : "out of memory");
        if (msg != NULL) {
            size_t len = strlen(*error);
            while (len > 0 && ((*error)[len - 1] == '\n' || (*error)[len - 1] == ' '))
                (*error)[--len] = '\0';
        }
        PQfreemem(msg);
        return false;
    }
    PQconninfoFree(opts);
    return true;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* libpq messages span lines ("...failed: ...\n\tIs the server running"). */
static char *one_line(const char *msg)
{
    char *s = xstrdup(msg != NULL && *msg != '\0' ? msg : "unknown error");
    size_t w = 0;
    bool space = false;
    for (size_t r = 0; s[r] != '\0'; r++) {
        char c = s[r];
        if (c == '\n' || c == '\t' || c == '\r' || c == ' ') {
            space = w > 0;
            continue;
        }
        if (space)
            s[w++] = ' ';
        space = false;
        s[w++] = c;
    }
    s[w] = '\0';
    return s;
}

static char *conn_error(const struct pg_conn *c)
{
    return one_line(c->pg != NULL ? PQerrorMessage(c->pg) : "no connection");
}

static bool result_ok(const PGresult *res)
{
    ExecStatusType st = PQresultStatus(res);
    return res != NULL && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK);
}

/* "postgresql: <primary message>" of a failed result. */
static char *result_error(const PGresult *res, const struct pg_conn *c)
{
    const char *msg = res != NULL ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (msg == NULL && res != NULL)
        msg = PQresultErrorMessage(res);
    char *text = (msg != NULL && *msg != '\0') ? one_line(msg) : conn_error(c);
    char *out = xasprintf("postgresql: %s", text);
    free(text);
    return out;
}

static void fill_columns(const PGresult *res, int row, struct dict_value *cols, size_t *ncols)
{
    int n = PQnfields(res);
    if (n > SQL_MAX_COLUMNS)
        n = SQL_MAX_COLUMNS;
    for (int i = 0; i < n; i++) {
        if (PQgetisnull(res, row, i)) {
            cols[i].data = NULL;
            cols[i].len = 0;
        } else {
            cols[i].data = PQgetvalue(res, row, i);
            cols[i].len = (size_t)PQgetlength(res, row, i);
        }
    }
    *ncols = (size_t)n;
}

static void notice_ignore(void *arg, const char *message)
{
    (void)arg;
    char q[256];
    log_debug(COMPONENT, "postgresql notice", "message=%s", log_quote(q, sizeof(q), message));
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

static void conn_teardown(struct pg_conn *c)
{
    if (c->ev_connect != NULL)
        event_free(c->ev_connect);
    if (c->ev_read != NULL)
        event_free(c->ev_read);
    if (c->ev_write != NULL)
        event_free(c->ev_write);
    c->ev_connect = c->ev_read = c->ev_write = NULL;
    if (c->timer != NULL)
        evtimer_del(c->timer);
    if (c->result != NULL)
        PQclear(c->result);
    c->result = NULL;
    if (c->pg != NULL)
        PQfinish(c->pg);
    c->pg = NULL;
    c->in_query = false;
    c->state = CONN_DOWN;
}

static void arm_timer(struct pg_conn *c, int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(c->timer, &tv);
}

static void connect_failed(struct pg_conn *c, const char *why)
{
    struct pg_dict *pd = c->pd;
    conn_teardown(c);
    free(pd->last_error);
    pd->last_error = xasprintf("cannot connect to postgresql: %s", why);
    pd->backoff_ms = pd->backoff_ms == 0 ? PG_BACKOFF_MIN_MS : pd->backoff_ms * 2;
    if (pd->backoff_ms > PG_BACKOFF_MAX_MS)
        pd->backoff_ms = PG_BACKOFF_MAX_MS;
    pd->retry_at_ms = now_ms() + pd->backoff_ms;
    if (!pd->outage_logged) {
        pd->outage_logged = true;
        char q[512];
        log_warn(COMPONENT, "postgresql unavailable", "dict=%s error=%s", pd->dict->name,
                 log_quote(q, sizeof(q), why));
    }
    pd_pump(pd);
}

static void connect_cb(evutil_socket_t fd, short what, void *arg);

static void connect_wait(struct pg_conn *c, PostgresPollingStatusType st)
{
    int fd = PQsocket(c->pg);
    if (fd < 0) {
        char *msg = conn_error(c);
        connect_failed(c, msg);
        free(msg);
        return;
    }
    if (c->ev_connect != NULL)
        event_free(c->ev_connect);
    c->ev_connect = event_new(c->pd->dict->base, fd,
                              st == PGRES_POLLING_READING ? EV_READ : EV_WRITE, connect_cb, c);
    event_add(c->ev_connect, NULL);
}

static void read_cb(evutil_socket_t fd, short what, void *arg);
static void write_cb(evutil_socket_t fd, short what, void *arg);

static bool conn_flush(struct pg_conn *c)
{
    int r = PQflush(c->pg);
    if (r < 0)
        return false;
    if (r == 1)
        event_add(c->ev_write, NULL);
    return true;
}

static void conn_sent(struct pg_conn *c)
{
    c->in_query = true;
    arm_timer(c, c->pd->cfg->query_timeout_ms);
}

static void connected(struct pg_conn *c)
{
    struct pg_dict *pd = c->pd;
    event_free(c->ev_connect);
    c->ev_connect = NULL;
    evtimer_del(c->timer);
    PQsetnonblocking(c->pg, 1);
    int fd = PQsocket(c->pg);
    c->ev_read = event_new(pd->dict->base, fd, EV_READ | EV_PERSIST, read_cb, c);
    c->ev_write = event_new(pd->dict->base, fd, EV_WRITE, write_cb, c);
    event_add(c->ev_read, NULL);
    pd->backoff_ms = 0;
    pd->retry_at_ms = 0;
    if (pd->outage_logged) {
        pd->outage_logged = false;
        log_info(COMPONENT, "postgresql reachable again", "dict=%s", pd->dict->name);
    }
    if (pd->schema_ready) {
        c->state = CONN_IDLE;
        pd_pump(pd);
        return;
    }
    struct sql_query q;
    sql_query_init(&q, SQL_BACKEND_PGSQL);
    sql_build_schema(pd->cfg, &q);
    c->state = CONN_SETUP;
    bool ok = PQsendQuery(c->pg, buf_cstr(&q.sql)) == 1;
    sql_query_free(&q);
    if (ok) {
        conn_sent(c);
        ok = conn_flush(c);
    }
    if (!ok) {
        char *msg = conn_error(c);
        conn_lost(c, msg);
        free(msg);
    }
}

static void connect_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct pg_conn *c = arg;
    PostgresPollingStatusType st = PQconnectPoll(c->pg);
    if (st == PGRES_POLLING_OK) {
        connected(c);
    } else if (st == PGRES_POLLING_READING || st == PGRES_POLLING_WRITING) {
        connect_wait(c, st);
    } else {
        char *msg = conn_error(c);
        connect_failed(c, msg);
        free(msg);
    }
}

static void conn_start(struct pg_conn *c)
{
    const struct sql_config *cfg = c->pd->cfg;
    /* later keywords win: the conninfo may name the application, but the
     * encoding is ours (keys and values are UTF-8 / bytes) */
    const char *const keys[] = {"application_name", "dbname", "client_encoding", NULL};
    const char *const values[] = {"petrel", cfg->connect, "UTF8", NULL};
    c->pg = PQconnectStartParams(keys, values, 1);
    c->state = CONN_CONNECTING;
    if (c->pg == NULL) {
        connect_failed(c, "out of memory");
        return;
    }
    if (PQstatus(c->pg) == CONNECTION_BAD) {
        char *msg = conn_error(c);
        connect_failed(c, msg);
        free(msg);
        return;
    }
    PQsetNoticeProcessor(c->pg, notice_ignore, NULL);
    arm_timer(c, cfg->connect_timeout_ms);
    connect_wait(c, PGRES_POLLING_WRITING);
}

/* The connection is gone: fail its job and free it. */
static void conn_lost(struct pg_conn *c, const char *why)
{
    struct pg_dict *pd = c->pd;
    struct pg_job *job = c->job;
    c->job = NULL;
    if (job != NULL)
        job->conn = NULL;
    char q[512];
    log_warn(COMPONENT, "postgresql connection lost", "dict=%s error=%s", pd->dict->name,
             log_quote(q, sizeof(q), why));
    conn_teardown(c);
    if (job != NULL)
        job_lost(job, why);
    pd_pump(pd);
}

static void setup_done(struct pg_conn *c, PGresult *res)
{
    struct pg_dict *pd = c->pd;
    if (result_ok(res)) {
        pd->schema_ready = true;
    } else {
        char *msg = result_error(res, c);
        char q[512];
        log_warn(COMPONENT, "cannot create the default table", "dict=%s table=%s error=%s",
                 pd->dict->name, pd->cfg->table, log_quote(q, sizeof(q), msg));
        free(msg);
    }
    PQclear(res);
    c->state = CONN_IDLE;
    pd_pump(pd);
}

/* Reads every complete result of the query in flight. */
static void conn_process(struct pg_conn *c)
{
    while (c->pg != NULL && c->in_query && !PQisBusy(c->pg)) {
        PGresult *r = PQgetResult(c->pg);
        if (r != NULL) {
            /* keep the first error, else the last result */
            if (c->result == NULL) {
                c->result = r;
            } else if (!result_ok(c->result)) {
                PQclear(r);
            } else {
                PQclear(c->result);
                c->result = r;
            }
            continue;
        }
        c->in_query = false;
        evtimer_del(c->timer);
        PGresult *res = c->result;
        c->result = NULL;
        if (PQstatus(c->pg) == CONNECTION_BAD) {
            char *msg = result_error(res, c);
            PQclear(res);
            conn_lost(c, msg);
            free(msg);
            return;
        }
        if (c->state == CONN_SETUP)
            setup_done(c, res);
        else if (c->job != NULL)
            job_result(c->job, res);
        else
            PQclear(res);
    }
    if (c->pg != NULL && PQstatus(c->pg) == CONNECTION_BAD) {
        char *msg = conn_error(c);
        conn_lost(c, msg);
        free(msg);
    }
}

static void read_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct pg_conn *c = arg;
    if (!PQconsumeInput(c->pg)) {
        char *msg = conn_error(c);
        conn_lost(c, msg);
        free(msg);
        return;
    }
    PGnotify *n;
    while ((n = PQnotifies(c->pg)) != NULL)
        PQfreemem(n);
    conn_process(c);
}

static void write_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct pg_conn *c = arg;
    if (!conn_flush(c)) {
        char *msg = conn_error(c);
        conn_lost(c, msg);
        free(msg);
    }
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct pg_conn *c = arg;
    char msg[128];
    if (c->state == CONN_CONNECTING) {
        snprintf(msg, sizeof(msg), "connection timed out after %" PRId64 " ms",
                 c->pd->cfg->connect_timeout_ms);
        connect_failed(c, msg);
    } else if (c->in_query) {
        snprintf(msg, sizeof(msg), "statement timed out after %" PRId64 " ms",
                 c->pd->cfg->query_timeout_ms);
        conn_lost(c, msg);
    }
}

/* Sends one statement for the connection's job. False when the connection
 * failed (it is gone and the job has been answered: touch neither). */
static bool conn_send(struct pg_conn *c, const struct sql_query *q, int result_format)
{
    const char *values[SQL_MAX_PARAMS];
    int lengths[SQL_MAX_PARAMS];
    int formats[SQL_MAX_PARAMS];
    Oid types[SQL_MAX_PARAMS];
    char ints[SQL_MAX_PARAMS][24];
    for (size_t i = 0; i < q->count; i++) {
        const struct sql_param *p = &q->params[i];
        types[i] = 0; /* the server infers the type from the context */
        formats[i] = 0;
        lengths[i] = 0;
        switch (p->kind) {
        case SQL_PARAM_NULL:
            values[i] = NULL;
            break;
        case SQL_PARAM_TEXT:
            values[i] = p->data;
            break;
        case SQL_PARAM_BLOB:
            values[i] = p->data != NULL ? p->data : "";
            lengths[i] = (int)p->len;
            formats[i] = 1;
            types[i] = PG_BYTEA_OID;
            break;
        case SQL_PARAM_INT:
            snprintf(ints[i], sizeof(ints[i]), "%" PRId64, p->num);
            values[i] = ints[i];
            break;
        }
    }
    if (PQsendQueryParams(c->pg, buf_cstr(&q->sql), (int)q->count, types, values, lengths, formats,
                          result_format) == 1) {
        conn_sent(c);
        if (conn_flush(c))
            return true;
    }
    char *msg = conn_error(c);
    conn_lost(c, msg);
    free(msg);
    return false;
}

/* A statement without parameters. */
static bool conn_send_plain(struct pg_conn *c, const char *sql, int result_format)
{
    struct sql_query q;
    sql_query_init(&q, SQL_BACKEND_PGSQL);
    buf_append_str(&q.sql, sql);
    bool ok = conn_send(c, &q, result_format);
    sql_query_free(&q);
    return ok;
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
    while (waiting > opening && now_ms() >= pd->retry_at_ms) {
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
    int64_t wait = pd->retry_at_ms - now_ms();
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
    if (c->pg != NULL && PQtransactionStatus(c->pg) != PQTRANS_IDLE) {
        log_warn(COMPONENT, "postgresql connection left inside a transaction, closing it",
                 "dict=%s", c->pd->dict->name);
        conn_teardown(c);
    }
}

/* ---------- lookup ---------- */

static void lookup_start(struct pg_job *job)
{
    struct sql_query q;
    sql_query_init(&q, SQL_BACKEND_PGSQL);
    sql_build_lookup(job->pd->cfg, job->key, dict_now(), &q);
    conn_send(job->conn, &q, q.text_results ? 0 : 1);
    sql_query_free(&q);
}

static void lookup_answer(struct pg_job *job, int ret, const char *error, PGresult *res)
{
    struct dict_lookup_result r = {.ret = ret, .error = error};
    struct dict_value values[SQL_MAX_COLUMNS];
    size_t n = 0;
    if (ret > 0) {
        fill_columns(res, 0, values, &n);
        for (size_t i = 0; i < n; i++) {
            if (values[i].data == NULL)
                values[i].data = "";
        }
        r.values = values;
        r.value_count = n;
    }
    struct pg_dict *pd = job->pd;
    job->lookup_cb(&r, job->ctx);
    job_free(job);
    pd_pump(pd);
}

static void lookup_result(struct pg_job *job, PGresult *res)
{
    struct pg_conn *c = job->conn;
    job_release(job);
    if (result_ok(res)) {
        lookup_answer(job, PQntuples(res) > 0 ? 1 : 0, NULL, res);
    } else {
        char *msg = result_error(res, c);
        lookup_answer(job, -1, msg, res);
        free(msg);
    }
    PQclear(res);
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
    conn_send_plain(job->conn, "ROLLBACK", 0);
}

/* Sends the current step of the current op, or COMMIT after the last. */
static void commit_step(struct pg_job *job)
{
    if (job->index >= job->count) {
        job->phase = PH_COMMIT;
        conn_send_plain(job->conn, "COMMIT", 0);
        return;
    }
    struct sql_query q;
    sql_query_init(&q, SQL_BACKEND_PGSQL);
    sql_op_build(job->pd->cfg, &job->ops[job->index], &job->op_state, job->expire_secs, job->now,
                 &q);
    job->phase = PH_OPS;
    conn_send(job->conn, &q, 0);
    sql_query_free(&q);
}

static void commit_result(struct pg_job *job, PGresult *res)
{
    bool ok = result_ok(res);
    char *error = ok ? NULL : result_error(res, job->conn);
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
        struct dict_value first;
        size_t n = 0;
        struct dict_value cols[SQL_MAX_COLUMNS];
        bool has_row = PQntuples(res) > 0;
        if (has_row) {
            fill_columns(res, 0, cols, &n);
            first = cols[0];
        }
        const char *tuples = PQcmdTuples(res);
        int64_t changes = tuples != NULL && *tuples != '\0' ? strtoll(tuples, NULL, 10) : 0;
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
    PQclear(res);
}

/* ---------- expire-scan ---------- */

static void expire_step(struct pg_job *job)
{
    struct sql_query q;
    sql_query_init(&q, SQL_BACKEND_PGSQL);
    sql_build_expire(job->pd->cfg, job->index, job->now, &q);
    conn_send(job->conn, &q, 0);
    sql_query_free(&q);
}

static void expire_finish(struct pg_job *job, bool ok, const char *error)
{
    struct pg_dict *pd = job->pd;
    job_release(job);
    job->expire_cb(ok, error, job->ctx);
    job_free(job);
    pd_pump(pd);
}

static void expire_result(struct pg_job *job, PGresult *res)
{
    if (!result_ok(res)) {
        char *msg = result_error(res, job->conn);
        PQclear(res);
        expire_finish(job, false, msg);
        free(msg);
        return;
    }
    PQclear(res);
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
    struct sql_query q;
    sql_query_init(&q, SQL_BACKEND_PGSQL);
    sql_build_iterate(&it->plan, job->source, dict_now(), &q);
    struct sql_query declare;
    sql_query_init(&declare, SQL_BACKEND_PGSQL);
    buf_printf(&declare.sql, "DECLARE petrel_c%zu NO SCROLL CURSOR FOR %s", job->source,
               buf_cstr(&q.sql));
    memcpy(declare.params, q.params, q.count * sizeof(q.params[0]));
    declare.count = q.count;
    job->phase = PH_DECLARE;
    conn_send(job->conn, &declare, 0);
    sql_query_free(&declare);
    sql_query_free(&q); /* owns the parameters' copies */
}

static void iter_fetch(struct pg_job *job)
{
    char sql[96];
    snprintf(sql, sizeof(sql), "FETCH FORWARD %d FROM petrel_c%zu", SQL_FETCH_ROWS, job->source);
    job->phase = PH_FETCH;
    bool text = sql_iter_text_results(&job->it->plan, job->source);
    conn_send_plain(job->conn, sql, text ? 0 : 1);
}

/* Ends the read-only transaction; the connection goes back to the pool. */
static void iter_end(struct pg_job *job, enum job_phase phase)
{
    job->phase = phase;
    job->paused = false;
    job->conn->state = CONN_BUSY;
    conn_send_plain(job->conn, phase == PH_END ? "COMMIT" : "ROLLBACK", 0);
}

static void iter_start(struct pg_job *job)
{
    job->phase = PH_BEGIN;
    conn_send_plain(job->conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0);
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

static void iter_result(struct pg_job *job, PGresult *res)
{
    struct pg_iterate *it = job->it;
    bool ok = result_ok(res);
    if (job->phase == PH_END || job->phase == PH_ABORT) {
        PQclear(res);
        iter_job_end(job);
        return;
    }
    if (it == NULL) { /* the consumer let go mid-way */
        PQclear(res);
        iter_end(job, PH_ABORT);
        return;
    }
    if (!ok) {
        char *msg = result_error(res, job->conn);
        PQclear(res);
        iter_fail(it, "iterate: %s", msg);
        free(msg);
        iter_end(job, PH_ABORT);
        return;
    }
    switch (job->phase) {
    case PH_BEGIN:
        PQclear(res);
        job->source = 0;
        iter_declare(job);
        return;
    case PH_DECLARE:
        PQclear(res);
        iter_fetch(job);
        return;
    case PH_FETCH:
        break;
    default:
        PETREL_ASSERT(!"iterate job in an unexpected phase");
    }
    int rows = PQntuples(res);
    bool last_table = job->source + 1 >= it->plan.count;
    job->source_more = rows >= SQL_FETCH_ROWS;
    if (rows == 0) {
        PQclear(res);
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
        PQclear(it->batch);
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
        conn_send_plain(c, "BEGIN", 0);
        break;
    case JOB_EXPIRE:
        expire_step(job);
        break;
    case JOB_ITERATE:
        iter_start(job);
        break;
    }
}

static void job_result(struct pg_job *job, PGresult *res)
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
    pd->conn_count = (size_t)pd->cfg->pool_size;
    pd->conns = xcalloc(pd->conn_count, sizeof(*pd->conns));
    for (size_t i = 0; i < pd->conn_count; i++) {
        struct pg_conn *c = &pd->conns[i];
        c->pd = pd;
        c->state = CONN_DOWN;
        c->timer = evtimer_new(dict->base, timer_cb, c);
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
        conn_teardown(c);
        if (job != NULL) {
            job->conn = NULL;
            job_lost(job, "dict closed (shutting down)");
        }
        event_free(c->timer);
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
            size_t ncols = 0;
            size_t value_count = 0;
            fill_columns(it->batch, it->row++, it->cols, &ncols);
            if (!sql_iter_row(&it->plan, it->batch_source, it->cols, ncols, &it->key, it->values,
                              &value_count))
                continue;
            row->key = buf_cstr(&it->key);
            row->values = it->values;
            row->value_count = value_count;
            return DICT_ITER_ROW;
        }
        if (it->batch != NULL) {
            PQclear(it->batch);
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
        PQclear(it->batch);
    event_free(it->notify);
    sql_iter_plan_free(&it->plan);
    buf_free(&it->key);
    free(it);
}

const struct sql_executor sql_executor_pgsql = {
    .open = pg_open,
    .close = pg_close,
    .lookup = pg_lookup,
    .iterate_init = pg_iterate_init,
    .iterate_next = pg_iterate_next,
    .iterate_deinit = pg_iterate_deinit,
    .commit = pg_commit,
    .expire_scan = pg_expire_scan,
};
