/* The SQLite executor of the sql dict: synchronous (a local file), so every
 * callback runs before the call returns.
 *
 * - One main connection for lookups, commits and expire-scan: WAL journal,
 *   busy_timeout, prepared statements cached by SQL text (at most
 *   SQLITE_STMT_CACHE; the cache is emptied when full).
 * - A commit runs in BEGIN IMMEDIATE ... COMMIT; any failure rolls back, so
 *   nothing of the batch is applied.
 * - An iteration steps one statement at a time on a read connection of its
 *   own (WAL lets it read while the main connection writes, and a rollback
 *   there cannot abort it), so memory stays constant whatever the result
 *   size. Idle read connections are kept for reuse (at most
 *   SQLITE_IDLE_READERS). While an iteration is open its snapshot keeps the
 *   WAL from being checkpointed past it, so a stalled client lets the -wal
 *   file grow until the iteration ends (or the request times out).
 * - busy_timeout bounds how long a call may wait for another process's
 *   write lock; that wait happens on the event loop. */
#include "dict/dict-sql-private.h"

#include "core/log.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMPONENT "dict"
#define SQLITE_STMT_CACHE 128
#define SQLITE_IDLE_READERS 2

struct sqlite_dict {
    sqlite3 *db;
    struct smap *stmts; /* SQL text -> sqlite3_stmt* on db */
    size_t stmt_count;
    sqlite3 *readers[SQLITE_IDLE_READERS];
    size_t reader_count;
};

struct sqlite_iterate {
    struct dict_iterate head;
    struct sql_iter_plan plan;
    size_t source;
    sqlite3 *reader;
    sqlite3_stmt *stmt;
    struct sql_query q;
    struct buf key;
    struct dict_value cols[SQL_MAX_COLUMNS];
    struct dict_value values[SQL_MAX_FIELDS];
    bool failed;
};

static const struct sql_config *config_of(const struct dict *dict)
{
    return dict->config;
}

static bool open_connection(const struct sql_config *cfg, sqlite3 **out, char **error)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(
        cfg->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        *error = xasprintf("sqlite: cannot open %s: %s", cfg->path,
                           db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return false;
    }
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, (int)cfg->busy_timeout_ms);
    *out = db;
    return true;
}

static int journal_mode_cb(void *ctx, int ncols, char **values, char **names)
{
    (void)names;
    if (ncols > 0 && values[0] != NULL)
        snprintf(ctx, 16, "%s", values[0]);
    return 0;
}

static void finalize_stmt(void *p)
{
    sqlite3_finalize(p);
}

static bool sqlite_open(struct dict *dict, struct petrel_error *err)
{
    const struct sql_config *cfg = config_of(dict);
    struct sqlite_dict *sd = xcalloc(1, sizeof(*sd));
    char *error = NULL;
    if (!open_connection(cfg, &sd->db, &error)) {
        petrel_error_set(err, PETREL_ERR_IO, "%s", error);
        free(error);
        free(sd);
        return false;
    }
    char mode[16] = "";
    char *msg = NULL;
    if (sqlite3_exec(sd->db, "PRAGMA journal_mode=WAL", journal_mode_cb, mode, &msg) != SQLITE_OK) {
        petrel_error_set(err, PETREL_ERR_IO, "sqlite: %s: cannot set WAL mode: %s", cfg->path,
                         msg != NULL ? msg : sqlite3_errmsg(sd->db));
        goto fail;
    }
    if (strcmp(mode, "wal") != 0) {
        char q[512];
        log_warn(COMPONENT, "sqlite: WAL journal not available", "dict=%s path=%s mode=%s",
                 dict->name, log_quote(q, sizeof(q), cfg->path), mode);
    }
    struct sql_query q;
    sql_query_init(&q, SQL_BACKEND_SQLITE);
    sql_build_schema(cfg, &q);
    int rc = sqlite3_exec(sd->db, buf_cstr(&q.sql), NULL, NULL, &msg);
    sql_query_free(&q);
    if (rc != SQLITE_OK) {
        petrel_error_set(err, PETREL_ERR_IO, "sqlite: %s: cannot create table %s: %s", cfg->path,
                         cfg->table, msg != NULL ? msg : sqlite3_errmsg(sd->db));
        goto fail;
    }
    sd->stmts = smap_new();
    dict->driver_data = sd;
    return true;
fail:
    sqlite3_free(msg);
    sqlite3_close(sd->db);
    free(sd);
    return false;
}

static void sqlite_close(struct dict *dict)
{
    struct sqlite_dict *sd = dict->driver_data;
    smap_free(sd->stmts, finalize_stmt);
    for (size_t i = 0; i < sd->reader_count; i++)
        sqlite3_close_v2(sd->readers[i]);
    sqlite3_close_v2(sd->db);
    free(sd);
    dict->driver_data = NULL;
}

/* A prepared statement for `sql` on the main connection, from the cache. */
static sqlite3_stmt *prepare_cached(struct sqlite_dict *sd, const char *sql, char **error)
{
    sqlite3_stmt *st = smap_get(sd->stmts, sql);
    if (st != NULL)
        return st;
    if (sd->stmt_count >= SQLITE_STMT_CACHE) {
        smap_free(sd->stmts, finalize_stmt);
        sd->stmts = smap_new();
        sd->stmt_count = 0;
    }
    if (sqlite3_prepare_v3(sd->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
        *error = xasprintf("sqlite: %s", sqlite3_errmsg(sd->db));
        sqlite3_finalize(st);
        return NULL;
    }
    smap_put(sd->stmts, sql, st);
    sd->stmt_count++;
    return st;
}

/* Binds every parameter; the data must outlive the statement's run. */
static bool bind_params(sqlite3 *db, sqlite3_stmt *st, const struct sql_query *q, char **error)
{
    for (size_t i = 0; i < q->count; i++) {
        const struct sql_param *p = &q->params[i];
        int idx = (int)i + 1;
        int rc = SQLITE_OK;
        switch (p->kind) {
        case SQL_PARAM_NULL:
            rc = sqlite3_bind_null(st, idx);
            break;
        case SQL_PARAM_TEXT:
            rc = sqlite3_bind_text64(st, idx, p->data, p->len, SQLITE_STATIC, SQLITE_UTF8);
            break;
        case SQL_PARAM_BLOB:
            rc =
                sqlite3_bind_blob64(st, idx, p->data != NULL ? p->data : "", p->len, SQLITE_STATIC);
            break;
        case SQL_PARAM_INT:
            rc = sqlite3_bind_int64(st, idx, p->num);
            break;
        }
        if (rc != SQLITE_OK) {
            *error = xasprintf("sqlite: bind: %s", sqlite3_errmsg(db));
            return false;
        }
    }
    return true;
}

static void release_stmt(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

static void column_value(sqlite3_stmt *st, int i, struct dict_value *v)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL) {
        v->data = NULL;
        v->len = 0;
        return;
    }
    const void *data = sqlite3_column_blob(st, i);
    int len = sqlite3_column_bytes(st, i);
    v->data = data != NULL ? data : "";
    v->len = len > 0 ? (size_t)len : 0;
}

/* ---------- lookup ---------- */

static void sqlite_lookup(struct dict *dict, const char *key, dict_lookup_cb *cb, void *ctx)
{
    struct sqlite_dict *sd = dict->driver_data;
    struct dict_lookup_result r = {.ret = -1};
    struct sql_query q;
    sql_query_init(&q, SQL_BACKEND_SQLITE);
    sql_build_lookup(config_of(dict), key, dict_now(), &q);
    char *error = NULL;
    struct dict_value values[SQL_MAX_FIELDS];
    char *copy = NULL;
    sqlite3_stmt *st = prepare_cached(sd, buf_cstr(&q.sql), &error);
    if (st != NULL && bind_params(sd->db, st, &q, &error)) {
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            /* copied so that the callback may use the dict again */
            size_t n = q.columns;
            size_t total = 0;
            for (size_t i = 0; i < n; i++) {
                column_value(st, (int)i, &values[i]);
                total += values[i].len + 1;
            }
            copy = xmalloc(total + 1);
            char *at = copy;
            for (size_t i = 0; i < n; i++) {
                if (values[i].len > 0)
                    memcpy(at, values[i].data, values[i].len);
                at[values[i].len] = '\0';
                values[i].data = at;
                at += values[i].len + 1;
            }
            r.ret = 1;
            r.values = values;
            r.value_count = n;
        } else if (rc == SQLITE_DONE) {
            r.ret = 0;
        } else {
            error = xasprintf("sqlite: %s", sqlite3_errmsg(sd->db));
        }
    }
    if (st != NULL)
        release_stmt(st);
    sql_query_free(&q);
    if (error != NULL)
        r.error = error;
    cb(&r, ctx);
    free(copy);
    free(error);
}

/* ---------- iterate ---------- */

static sqlite3 *take_reader(struct dict *dict, char **error)
{
    struct sqlite_dict *sd = dict->driver_data;
    if (sd->reader_count > 0)
        return sd->readers[--sd->reader_count];
    sqlite3 *db = NULL;
    if (!open_connection(config_of(dict), &db, error))
        return NULL;
    return db;
}

static void give_back_reader(struct dict *dict, sqlite3 *db)
{
    struct sqlite_dict *sd = dict->driver_data;
    if (db == NULL)
        return;
    if (sd->reader_count < SQLITE_IDLE_READERS)
        sd->readers[sd->reader_count++] = db;
    else
        sqlite3_close_v2(db);
}

/* Prepares the statement of the current source on the read connection. */
static bool start_source(struct sqlite_iterate *it)
{
    char *error = NULL;
    sql_build_iterate(&it->plan, it->source, dict_now(), &it->q);
    if (sqlite3_prepare_v2(it->reader, buf_cstr(&it->q.sql), -1, &it->stmt, NULL) != SQLITE_OK) {
        dict_iterate_set_error(&it->head, "sqlite: %s", sqlite3_errmsg(it->reader));
        sqlite3_finalize(it->stmt);
        it->stmt = NULL;
        return false;
    }
    if (!bind_params(it->reader, it->stmt, &it->q, &error)) {
        dict_iterate_set_error(&it->head, "%s", error);
        free(error);
        return false;
    }
    return true;
}

static struct dict_iterate *sqlite_iterate_init(struct dict *dict, const char *prefix,
                                                unsigned flags)
{
    struct sqlite_iterate *it = xcalloc(1, sizeof(*it));
    dict_iterate_head_init(&it->head, dict, prefix, flags);
    sql_query_init(&it->q, SQL_BACKEND_SQLITE);
    sql_iter_plan_init(&it->plan, config_of(dict), prefix, flags);
    char *error = NULL;
    it->reader = take_reader(dict, &error);
    if (it->reader == NULL) {
        dict_iterate_set_error(&it->head, "%s", error);
        free(error);
        it->failed = true;
    }
    return &it->head;
}

static enum dict_iter_status sqlite_iterate_next(struct dict_iterate *head, struct dict_row *row)
{
    struct sqlite_iterate *it = (struct sqlite_iterate *)head;
    while (!it->failed) {
        if (it->stmt == NULL) {
            if (it->source >= it->plan.count)
                return DICT_ITER_DONE;
            if (!start_source(it)) {
                it->failed = true;
                break;
            }
        }
        int rc = sqlite3_step(it->stmt);
        if (rc == SQLITE_ROW) {
            int ncols = sqlite3_column_count(it->stmt);
            if (ncols > SQL_MAX_COLUMNS)
                ncols = SQL_MAX_COLUMNS;
            for (int i = 0; i < ncols; i++)
                column_value(it->stmt, i, &it->cols[i]);
            size_t value_count = 0;
            if (!sql_iter_row(&it->plan, it->source, it->cols, (size_t)ncols, &it->key, it->values,
                              &value_count))
                continue;
            row->key = buf_cstr(&it->key);
            row->values = it->values;
            row->value_count = value_count;
            return DICT_ITER_ROW;
        }
        if (rc == SQLITE_DONE) {
            sqlite3_finalize(it->stmt);
            it->stmt = NULL;
            it->source++;
            continue;
        }
        dict_iterate_set_error(head, "sqlite: %s", sqlite3_errmsg(it->reader));
        it->failed = true;
    }
    return DICT_ITER_ERROR;
}

static void sqlite_iterate_deinit(struct dict_iterate *head)
{
    struct sqlite_iterate *it = (struct sqlite_iterate *)head;
    sqlite3_finalize(it->stmt);
    give_back_reader(head->dict, it->reader);
    sql_iter_plan_free(&it->plan);
    sql_query_free(&it->q);
    buf_free(&it->key);
    free(it);
}

/* ---------- transactions ---------- */

static bool exec_simple(struct sqlite_dict *sd, const char *sql, char **error)
{
    char *msg = NULL;
    if (sqlite3_exec(sd->db, sql, NULL, NULL, &msg) == SQLITE_OK)
        return true;
    *error = xasprintf("sqlite: %s: %s", sql, msg != NULL ? msg : sqlite3_errmsg(sd->db));
    sqlite3_free(msg);
    return false;
}

static void rollback(struct sqlite_dict *sd)
{
    if (sqlite3_get_autocommit(sd->db))
        return; /* SQLite already rolled back (e.g. after SQLITE_FULL) */
    char *error = NULL;
    if (!exec_simple(sd, "ROLLBACK", &error)) {
        char q[512];
        log_warn(COMPONENT, "sqlite rollback failed", "error=%s", log_quote(q, sizeof(q), error));
        free(error);
    }
}

/* Runs every step of one operation. */
/* Runs one step's statement: *first is the first column of the first row
 * (has_row), *changes the rows it changed. False with *msg on failure. */
static bool run_step(struct sqlite_dict *sd, const struct sql_config *cfg,
                     const struct dict_tx_op *op, struct sql_op_state *st,
                     const struct sql_query *q, enum sql_op_next *next, char **error, char **msg)
{
    sqlite3_stmt *stmt = prepare_cached(sd, buf_cstr(&q->sql), msg);
    if (stmt == NULL)
        return false;
    bool ok = bind_params(sd->db, stmt, q, msg);
    if (ok) {
        int rc = sqlite3_step(stmt);
        if (rc == SQLITE_ROW) {
            struct dict_value first;
            column_value(stmt, 0, &first);
            *next = sql_op_result(cfg, op, st, 0, &first, error);
        } else if (rc == SQLITE_DONE) {
            *next = sql_op_result(cfg, op, st, sqlite3_changes64(sd->db), NULL, error);
        } else {
            *msg = xasprintf("sqlite: %s", sqlite3_errmsg(sd->db));
            ok = false;
        }
    }
    release_stmt(stmt);
    return ok;
}

/* Runs every step of one operation. */
static enum sql_op_next run_op(struct sqlite_dict *sd, const struct sql_config *cfg,
                               const struct dict_tx_op *op, int64_t expire_secs, int64_t now,
                               char **error)
{
    struct sql_op_state st = {0};
    struct sql_query q;
    sql_query_init(&q, SQL_BACKEND_SQLITE);
    enum sql_op_next next = SQL_OP_AGAIN;
    while (next == SQL_OP_AGAIN) {
        sql_op_build(cfg, op, &st, expire_secs, now, &q);
        char *msg = NULL;
        if (!run_step(sd, cfg, op, &st, &q, &next, error, &msg)) {
            char *what = sql_op_describe(op);
            *error = xasprintf("%s: %s", what, msg);
            free(what);
            free(msg);
            next = SQL_OP_FAILED;
        }
    }
    sql_query_free(&q);
    return next;
}

static void sqlite_commit(struct dict *dict, const struct dict_tx_op *ops, size_t count,
                          int64_t expire_secs, dict_commit_cb *cb, void *ctx)
{
    struct sqlite_dict *sd = dict->driver_data;
    const struct sql_config *cfg = config_of(dict);
    char *error = NULL;
    if (!sql_ops_check(cfg, ops, count, expire_secs, &error)) {
        cb(DICT_COMMIT_FAILED, error, ctx);
        free(error);
        return;
    }
    if (!exec_simple(sd, "BEGIN IMMEDIATE", &error)) {
        cb(DICT_COMMIT_FAILED, error, ctx);
        free(error);
        return;
    }
    int64_t now = dict_now();
    enum dict_commit_result result = DICT_COMMIT_OK;
    for (size_t i = 0; i < count; i++) {
        enum sql_op_next next = run_op(sd, cfg, &ops[i], expire_secs, now, &error);
        if (next == SQL_OP_NOT_FOUND)
            result = DICT_COMMIT_NOT_FOUND;
        if (next == SQL_OP_FAILED) {
            rollback(sd);
            cb(DICT_COMMIT_FAILED, error, ctx);
            free(error);
            return;
        }
    }
    if (!exec_simple(sd, "COMMIT", &error)) {
        rollback(sd);
        cb(DICT_COMMIT_FAILED, error, ctx);
        free(error);
        return;
    }
    cb(result, NULL, ctx);
}

static void sqlite_expire_scan(struct dict *dict, dict_expire_cb *cb, void *ctx)
{
    struct sqlite_dict *sd = dict->driver_data;
    const struct sql_config *cfg = config_of(dict);
    char *error = NULL;
    if (!exec_simple(sd, "BEGIN IMMEDIATE", &error)) {
        cb(false, error, ctx);
        free(error);
        return;
    }
    int64_t now = dict_now();
    struct sql_query q;
    sql_query_init(&q, SQL_BACKEND_SQLITE);
    size_t n = sql_expire_count(cfg);
    for (size_t i = 0; i < n && error == NULL; i++) {
        sql_build_expire(cfg, i, now, &q);
        sqlite3_stmt *st = prepare_cached(sd, buf_cstr(&q.sql), &error);
        if (st == NULL)
            break;
        if (bind_params(sd->db, st, &q, &error) && sqlite3_step(st) != SQLITE_DONE)
            error = xasprintf("sqlite: expire-scan: %s", sqlite3_errmsg(sd->db));
        release_stmt(st);
    }
    sql_query_free(&q);
    if (error == NULL && !exec_simple(sd, "COMMIT", &error)) {
        /* error set */
    }
    if (error != NULL) {
        rollback(sd);
        cb(false, error, ctx);
        free(error);
        return;
    }
    cb(true, NULL, ctx);
}

const struct sql_executor sql_executor_sqlite = {
    .open = sqlite_open,
    .close = sqlite_close,
    .lookup = sqlite_lookup,
    .iterate_init = sqlite_iterate_init,
    .iterate_next = sqlite_iterate_next,
    .iterate_deinit = sqlite_iterate_deinit,
    .commit = sqlite_commit,
    .expire_scan = sqlite_expire_scan,
};
