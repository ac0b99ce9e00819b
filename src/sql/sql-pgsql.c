/* PostgreSQL on an event loop (sql-pgsql.h): one libpq connection in
 * non-blocking mode. Connect with PQconnectStartParams / PQconnectPoll,
 * send with PQsendQueryParams, read with PQconsumeInput / PQgetResult when
 * the socket is readable; a persistent read event stays armed while the
 * connection is up so that a server going away is noticed while idle. */
#include "sql/sql-pgsql.h"

#include "core/clock.h"
#include "core/xalloc.h"
#include "net/endpoint.h"
#include "net/resolve.h"

#include <event2/event.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PG_BYTEA_OID 17

enum pgconn_state {
    PGCONN_DOWN,
    PGCONN_CONNECTING,
    PGCONN_UP,
};

struct sql_pgconn {
    struct event_base *base;
    const struct sql_pgsql_settings *settings;
    const struct sql_pgconn_handlers *h;
    void *ctx;
    enum pgconn_state state;
    PGconn *pg;
    struct event *ev_connect; /* one-shot, per PQconnectPoll answer */
    struct event *ev_read;    /* persistent while up */
    struct event *ev_write;   /* one-shot while libpq has unsent data */
    struct event *timer;      /* connect / statement deadline */
    PGresult *result;         /* being collected */
    bool in_query;
    struct net_resolver *resolver; /* host= names, looked up on the loop */
};

/* ---------- messages ---------- */

/* libpq messages span lines ("...failed: ...\n\tIs the server running"). */
static char *one_line(const char *msg)
{
    char *s = xstrdup(msg != NULL && *msg != '\0' ? msg : "unknown error");
    size_t w = 0;
    bool space = false;
    for (size_t r = 0; s[r] != '\0'; r++) {
        char ch = s[r];
        if (ch == '\n' || ch == '\t' || ch == '\r' || ch == ' ') {
            space = w > 0;
            continue;
        }
        if (space)
            s[w++] = ' ';
        space = false;
        s[w++] = ch;
    }
    s[w] = '\0';
    return s;
}

static char *conn_error(const struct sql_pgconn *c)
{
    return one_line(c->pg != NULL ? PQerrorMessage(c->pg) : "no connection");
}

bool sql_pgsql_conninfo_valid(const char *conninfo)
{
    char *msg = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &msg);
    PETREL_ASSERT(opts != NULL || msg != NULL); /* NULL and no message: out of memory */
    bool ok = opts != NULL;
    PQfreemem(msg);
    PQconninfoFree(opts);
    return ok;
}

/* ---------- results ---------- */

static const PGresult *pgres(const struct sql_pgsql_result *r)
{
    return (const PGresult *)r;
}

bool sql_pgsql_result_ok(const struct sql_pgsql_result *r)
{
    ExecStatusType st = PQresultStatus(pgres(r));
    return r != NULL && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK);
}

bool sql_pgsql_result_has_rows(const struct sql_pgsql_result *r)
{
    return r != NULL && PQresultStatus(pgres(r)) == PGRES_TUPLES_OK;
}

size_t sql_pgsql_result_rows(const struct sql_pgsql_result *r)
{
    int n = PQntuples(pgres(r));
    return n > 0 ? (size_t)n : 0;
}

size_t sql_pgsql_result_row(const struct sql_pgsql_result *r, size_t i, struct sql_value *values,
                            size_t max)
{
    const PGresult *res = pgres(r);
    int n = PQnfields(res);
    size_t ncols = n > 0 ? (size_t)n : 0;
    if (ncols > max)
        ncols = max;
    for (size_t k = 0; k < ncols; k++) {
        if (PQgetisnull(res, (int)i, (int)k)) {
            values[k].data = NULL;
            values[k].len = 0;
        } else {
            /* libpq NUL-terminates every value, binary ones too */
            values[k].data = PQgetvalue(res, (int)i, (int)k);
            values[k].len = (size_t)PQgetlength(res, (int)i, (int)k);
        }
    }
    return ncols;
}

bool sql_pgsql_result_deliver(const struct sql_pgsql_result *r, sql_row_fn *fn, void *ctx)
{
    const PGresult *res = pgres(r);
    int n = PQnfields(res);
    size_t ncols = n > 0 ? (size_t)n : 0;
    const char **names = xcalloc(ncols + 1, sizeof(*names));
    struct sql_value *values = xcalloc(ncols + 1, sizeof(*values));
    for (size_t k = 0; k < ncols; k++)
        names[k] = PQfname(res, (int)k);
    struct sql_row row = {.ncols = ncols, .names = names, .values = values};
    bool all = true;
    size_t rows = sql_pgsql_result_rows(r);
    for (size_t i = 0; i < rows && all; i++) {
        sql_pgsql_result_row(r, i, values, ncols);
        all = fn(&row, ctx);
    }
    free(names);
    free(values);
    return all;
}

int64_t sql_pgsql_result_changes(const struct sql_pgsql_result *r)
{
    const char *tuples = PQcmdTuples((PGresult *)pgres(r));
    return tuples != NULL && *tuples != '\0' ? strtoll(tuples, NULL, 10) : 0;
}

char *sql_pgsql_result_error(const struct sql_pgsql_result *r)
{
    const PGresult *res = pgres(r);
    const char *msg = res != NULL ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if ((msg == NULL || *msg == '\0') && res != NULL)
        msg = PQresultErrorMessage(res);
    if (res != NULL && (msg == NULL || *msg == '\0') && sql_pgsql_result_ok(r))
        msg = "not a query that returns rows";
    return one_line(msg);
}

void sql_pgsql_result_free(struct sql_pgsql_result *r)
{
    PQclear((PGresult *)r);
}

/* ---------- the connection ---------- */

static void timer_cb(evutil_socket_t fd, short what, void *arg);

struct sql_pgconn *sql_pgconn_new(struct event_base *base, const struct sql_pgsql_settings *s,
                                  const struct sql_pgconn_handlers *h, void *ctx)
{
    struct sql_pgconn *c = xcalloc(1, sizeof(*c));
    c->base = base;
    c->settings = s;
    c->h = h;
    c->ctx = ctx;
    c->state = PGCONN_DOWN;
    c->timer = evtimer_new(base, timer_cb, c);
    return c;
}

static void drop_event(struct event **ev)
{
    if (*ev != NULL)
        event_free(*ev);
    *ev = NULL;
}

void sql_pgconn_close(struct sql_pgconn *c)
{
    drop_event(&c->ev_connect);
    drop_event(&c->ev_read);
    drop_event(&c->ev_write);
    evtimer_del(c->timer);
    if (c->result != NULL)
        PQclear(c->result);
    c->result = NULL;
    if (c->pg != NULL)
        PQfinish(c->pg);
    c->pg = NULL;
    c->in_query = false;
    c->state = PGCONN_DOWN;
    if (c->resolver != NULL)
        net_resolve_cancel(c->resolver);
}

void sql_pgconn_free(struct sql_pgconn *c)
{
    if (c == NULL)
        return;
    sql_pgconn_close(c);
    event_free(c->timer);
    net_resolver_free(c->resolver);
    free(c);
}

bool sql_pgconn_is_up(const struct sql_pgconn *c)
{
    return c->state == PGCONN_UP;
}

bool sql_pgconn_in_transaction(const struct sql_pgconn *c)
{
    return c->pg != NULL && PQtransactionStatus(c->pg) != PQTRANS_IDLE;
}

static void arm_timer(struct sql_pgconn *c, int64_t ms)
{
    struct timeval tv = clock_ms_to_timeval(ms);
    evtimer_add(c->timer, &tv);
}

static void connect_failed(struct sql_pgconn *c, const char *why)
{
    sql_pgconn_close(c);
    c->h->connect_failed(c->ctx, why);
}

/* The connection is gone: close it, then tell the owner. */
static void lost(struct sql_pgconn *c, const char *why)
{
    sql_pgconn_close(c);
    c->h->lost(c->ctx, why, false);
}

static void lost_with_conn_error(struct sql_pgconn *c)
{
    char *msg = conn_error(c);
    lost(c, msg);
    free(msg);
}

static void connect_cb(evutil_socket_t fd, short what, void *arg);
static void read_cb(evutil_socket_t fd, short what, void *arg);
static void write_cb(evutil_socket_t fd, short what, void *arg);

static void connect_wait(struct sql_pgconn *c, PostgresPollingStatusType st)
{
    int fd = PQsocket(c->pg);
    if (fd < 0) {
        char *msg = conn_error(c);
        connect_failed(c, msg);
        free(msg);
        return;
    }
    drop_event(&c->ev_connect);
    c->ev_connect =
        event_new(c->base, fd, st == PGRES_POLLING_READING ? EV_READ : EV_WRITE, connect_cb, c);
    event_add(c->ev_connect, NULL);
}

static void connected(struct sql_pgconn *c)
{
    drop_event(&c->ev_connect);
    evtimer_del(c->timer);
    PQsetnonblocking(c->pg, 1);
    int fd = PQsocket(c->pg);
    c->ev_read = event_new(c->base, fd, EV_READ | EV_PERSIST, read_cb, c);
    c->ev_write = event_new(c->base, fd, EV_WRITE, write_cb, c);
    event_add(c->ev_read, NULL);
    c->state = PGCONN_UP;
    c->h->connected(c->ctx);
}

static void connect_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sql_pgconn *c = arg;
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

static void notice_ignore(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* libpq looks a host= name up with a blocking getaddrinfo inside
 * PQconnectStart: the one host name of the conninfo, when there is one and
 * no hostaddr=, is looked up on the loop first (net/resolve.h) and handed
 * to libpq as hostaddr= (libpq still uses host= for TLS and .pgpass).
 * Allocated; NULL when libpq needs no lookup or has several hosts. */
static char *lookup_host(const char *conninfo)
{
    PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
    if (opts == NULL)
        return NULL;
    const char *host = NULL;
    bool has_hostaddr = false;
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (o->val == NULL || *o->val == '\0')
            continue;
        if (strcmp(o->keyword, "host") == 0)
            host = o->val;
        else if (strcmp(o->keyword, "hostaddr") == 0)
            has_hostaddr = true;
    }
    char *name = NULL;
    struct net_endpoint ep;
    if (host != NULL && !has_hostaddr && host[0] != '/' && strchr(host, ',') == NULL &&
        net_endpoint_parse(host, NET_ENDPOINT_PORT_OPTIONAL, 5432, &ep, NULL) && !ep.literal)
        name = xstrdup(host);
    PQconninfoFree(opts);
    return name;
}

static void start_libpq(struct sql_pgconn *c, const char *hostaddr)
{
    const struct sql_pgsql_settings *s = c->settings;
    /* Later keywords win: the operator's conninfo (expanded from dbname)
     * may name the application, but the encoding is ours (keys, values
     * and usernames are UTF-8 or bytes). The connect timeout is our timer,
     * in milliseconds, rather than libpq's whole seconds. An empty
     * hostaddr is ignored. */
    const char *const keys[] = {"application_name", "dbname", "client_encoding", "hostaddr", NULL};
    const char *const values[] = {s->application_name, s->conninfo, "UTF8",
                                  hostaddr != NULL ? hostaddr : "", NULL};
    c->pg = PQconnectStartParams(keys, values, 1);
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
    connect_wait(c, PGRES_POLLING_WRITING);
}

static void host_resolved(const struct net_addr *addr, const char *error, void *arg)
{
    struct sql_pgconn *c = arg;
    if (addr == NULL) {
        connect_failed(c, error);
        return;
    }
    char ip[64];
    net_addr_format_ip((const struct sockaddr *)&addr->ss, ip, sizeof(ip));
    start_libpq(c, ip);
}

void sql_pgconn_connect(struct sql_pgconn *c)
{
    PETREL_ASSERT(c->state == PGCONN_DOWN);
    c->state = PGCONN_CONNECTING;
    arm_timer(c, c->settings->connect_timeout_ms); /* the lookup counts too */
    char *name = lookup_host(c->settings->conninfo);
    if (name == NULL) {
        start_libpq(c, NULL);
        return;
    }
    struct net_endpoint ep;
    net_endpoint_parse(name, NET_ENDPOINT_PORT_OPTIONAL, 5432, &ep, NULL);
    free(name);
    if (c->resolver == NULL)
        c->resolver = net_resolver_new(c->base);
    struct net_addr addr;
    char error[300];
    switch (net_resolve_start(c->resolver, &ep, &addr, error, sizeof(error), host_resolved, c)) {
    case NET_RESOLVE_PENDING:
        return;
    case NET_RESOLVE_FAILED:
        connect_failed(c, error);
        return;
    case NET_RESOLVE_DONE:
        break;
    }
    char ip[64];
    net_addr_format_ip((const struct sockaddr *)&addr.ss, ip, sizeof(ip));
    start_libpq(c, ip);
}

/* Reads every complete result of the statement in flight. */
static void process(struct sql_pgconn *c)
{
    while (c->pg != NULL && c->in_query && !PQisBusy(c->pg)) {
        PGresult *r = PQgetResult(c->pg);
        if (r != NULL) {
            /* several statements in one text: keep the first error, else
             * the last result */
            if (c->result == NULL) {
                c->result = r;
            } else if (!sql_pgsql_result_ok((struct sql_pgsql_result *)c->result)) {
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
            char *msg = sql_pgsql_result_error((struct sql_pgsql_result *)res);
            PQclear(res);
            lost(c, msg);
            free(msg);
            return;
        }
        c->h->result(c->ctx, (struct sql_pgsql_result *)res);
        return; /* the handler may have freed or reused the connection */
    }
    if (c->pg != NULL && PQstatus(c->pg) == CONNECTION_BAD)
        lost_with_conn_error(c);
}

static void read_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sql_pgconn *c = arg;
    if (!PQconsumeInput(c->pg)) {
        lost_with_conn_error(c);
        return;
    }
    PGnotify *n;
    while ((n = PQnotifies(c->pg)) != NULL)
        PQfreemem(n);
    process(c);
}

static bool flush(struct sql_pgconn *c)
{
    int r = PQflush(c->pg);
    if (r < 0)
        return false;
    if (r == 1)
        event_add(c->ev_write, NULL);
    return true;
}

static void write_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sql_pgconn *c = arg;
    if (!flush(c))
        lost_with_conn_error(c);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sql_pgconn *c = arg;
    char msg[128];
    if (c->state == PGCONN_CONNECTING) {
        snprintf(msg, sizeof(msg), "connection timed out after %" PRId64 " ms",
                 c->settings->connect_timeout_ms);
        connect_failed(c, msg);
    } else if (c->in_query) {
        snprintf(msg, sizeof(msg), "statement timed out after %" PRId64 " ms",
                 c->settings->query_timeout_ms);
        sql_pgconn_close(c);
        c->h->lost(c->ctx, msg, true);
    }
}

bool sql_pgconn_send(struct sql_pgconn *c, const struct sql_stmt *st, bool text_results)
{
    PETREL_ASSERT(c->state == PGCONN_UP && !c->in_query);
    const char *values[SQL_STMT_MAX_PARAMS];
    int lengths[SQL_STMT_MAX_PARAMS];
    int formats[SQL_STMT_MAX_PARAMS];
    Oid types[SQL_STMT_MAX_PARAMS];
    char ints[SQL_STMT_MAX_PARAMS][24];
    for (size_t i = 0; i < st->count; i++) {
        const struct sql_param *p = &st->params[i];
        /* Untyped (0): the server infers each type from where the
         * parameter stands, as it would for a quoted literal. */
        types[i] = 0;
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
    /* The simple protocol (PQsendQuery) runs several statements in one
     * text (a schema); the extended one, which binds, runs only one. */
    int sent = st->count == 0 && text_results
                   ? PQsendQuery(c->pg, buf_cstr(&st->sql))
                   : PQsendQueryParams(c->pg, buf_cstr(&st->sql), (int)st->count, types, values,
                                       lengths, formats, text_results ? 0 : 1);
    if (sent == 1) {
        c->in_query = true;
        arm_timer(c, c->settings->query_timeout_ms);
        if (flush(c))
            return true;
    }
    lost_with_conn_error(c);
    return false;
}

bool sql_pgconn_send_plain(struct sql_pgconn *c, const char *sql, bool text_results)
{
    struct sql_stmt st;
    sql_stmt_init(&st, SQL_DIALECT_PGSQL);
    sql_stmt_append(&st, sql);
    bool ok = sql_pgconn_send(c, &st, text_results);
    sql_stmt_free(&st);
    return ok;
}
