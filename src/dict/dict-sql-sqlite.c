/* The SQLite executor of the sql dict, on sql/sql-sqlite.h: synchronous (a
 * local file), so every callback runs before the call returns.
 *
 * - One main connection for lookups, commits and expire-scan: WAL journal,
 *   busy_timeout, prepared statements cached by the sql layer.
 * - A commit runs in BEGIN IMMEDIATE ... COMMIT; any failure rolls back, so
 *   nothing of the batch is applied.
 * - An iteration steps a cursor on a read connection of its own (WAL lets
 *   it read while the main connection writes, and a rollback there cannot
 *   abort it), so memory stays constant whatever the result size. Idle
 *   read connections are kept for reuse (at most SQLITE_IDLE_READERS).
 *   While an iteration is open its snapshot keeps the WAL from being
 *   checkpointed past it, so a stalled client lets the -wal file grow
 *   until the iteration ends (or the request times out).
 * - busy_timeout bounds how long a call may wait for another process's
 *   write lock; that wait happens on the event loop. */
#include "dict/dict-sql-private.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "sql/sql-sqlite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMPONENT "dict"
#define SQLITE_IDLE_READERS 2

struct sqlite_dict {
    struct sql_sqlite *db;
    struct sql_sqlite *readers[SQLITE_IDLE_READERS];
    size_t reader_count;
};

struct sqlite_iterate {
    struct dict_iterate head;
    struct sql_iter_plan plan;
    size_t source;
    struct sql_sqlite *reader;
    struct sql_sqlite_cursor *cur;
    struct sql_stmt q;
    struct buf key;
    struct dict_value values[SQL_MAX_FIELDS];
    bool failed;
};

static const struct sql_config *config_of(const struct dict *dict)
{
    return dict->config;
}

static struct sql_sqlite *open_connection(const struct sql_config *cfg, bool main, char **error)
{
    struct sql_sqlite_settings s = {
        .path = cfg->path,
        .create = true,
        .wal = main,
        .busy_timeout_ms = cfg->busy_timeout_ms,
    };
    char *msg = NULL;
    struct sql_sqlite *db = sql_sqlite_open(&s, &msg);
    if (db == NULL) {
        *error = xasprintf("sqlite: %s", msg);
        free(msg);
    }
    return db;
}

static bool sqlite_open(struct dict *dict, struct petrel_error *err)
{
    const struct sql_config *cfg = config_of(dict);
    char *error = NULL;
    struct sql_sqlite *db = open_connection(cfg, true, &error);
    if (db == NULL) {
        petrel_error_set(err, PETREL_ERR_IO, "%s", error);
        free(error);
        return false;
    }
    if (!sql_sqlite_wal(db)) {
        char q[512];
        log_warn(COMPONENT, "sqlite: WAL journal not available", "dict=%s path=%s", dict->name,
                 log_quote(q, sizeof(q), cfg->path));
    }
    struct sql_stmt q;
    sql_stmt_init(&q, SQL_DIALECT_SQLITE);
    sql_build_schema(cfg, &q);
    bool ok = sql_sqlite_exec(db, buf_cstr(&q.sql), &error);
    sql_stmt_free(&q);
    if (!ok) {
        petrel_error_set(err, PETREL_ERR_IO, "sqlite: %s: cannot create table %s: %s", cfg->path,
                         cfg->table, error);
        free(error);
        sql_sqlite_close(db);
        return false;
    }
    struct sqlite_dict *sd = xcalloc(1, sizeof(*sd));
    sd->db = db;
    dict->driver_data = sd;
    return true;
}

static void sqlite_close(struct dict *dict)
{
    struct sqlite_dict *sd = dict->driver_data;
    for (size_t i = 0; i < sd->reader_count; i++)
        sql_sqlite_close(sd->readers[i]);
    sql_sqlite_close(sd->db);
    free(sd);
    dict->driver_data = NULL;
}

/* ---------- lookup ---------- */

struct lookup_row {
    size_t columns;
    struct dict_value values[SQL_MAX_FIELDS];
    char *copy;
};

/* Copies the first row so that the callback may use the dict again. */
static bool lookup_row(const struct sql_row *row, void *ctx)
{
    struct lookup_row *lr = ctx;
    size_t n = lr->columns < row->ncols ? lr->columns : row->ncols;
    size_t total = 1;
    for (size_t i = 0; i < n; i++)
        total += row->values[i].len + 1;
    lr->copy = xmalloc(total);
    char *at = lr->copy;
    for (size_t i = 0; i < n; i++) {
        size_t len = row->values[i].len;
        if (len > 0)
            memcpy(at, row->values[i].data, len);
        at[len] = '\0';
        lr->values[i] = (struct dict_value){.data = at, .len = len};
        at += len + 1;
    }
    lr->columns = n;
    return false;
}

static void sqlite_lookup(struct dict *dict, const char *key, dict_lookup_cb *cb, void *ctx)
{
    struct sqlite_dict *sd = dict->driver_data;
    struct dict_lookup_result r = {.ret = -1};
    struct sql_stmt q;
    sql_stmt_init(&q, SQL_DIALECT_SQLITE);
    sql_build_lookup(config_of(dict), key, dict_now(), &q);
    struct lookup_row lr = {.columns = q.columns};
    char *msg = NULL;
    char *error = NULL;
    if (sql_sqlite_run(sd->db, &q, lookup_row, &lr, NULL, &msg)) {
        r.ret = lr.copy != NULL ? 1 : 0;
        if (lr.copy != NULL) {
            r.values = lr.values;
            r.value_count = lr.columns;
        }
    } else {
        error = xasprintf("sqlite: %s", msg);
        free(msg);
        r.error = error;
    }
    sql_stmt_free(&q);
    cb(&r, ctx);
    free(lr.copy);
    free(error);
}

/* ---------- iterate ---------- */

static struct sql_sqlite *take_reader(struct dict *dict, char **error)
{
    struct sqlite_dict *sd = dict->driver_data;
    if (sd->reader_count > 0)
        return sd->readers[--sd->reader_count];
    return open_connection(config_of(dict), false, error);
}

static void give_back_reader(struct dict *dict, struct sql_sqlite *db)
{
    struct sqlite_dict *sd = dict->driver_data;
    if (db == NULL)
        return;
    if (sd->reader_count < SQLITE_IDLE_READERS)
        sd->readers[sd->reader_count++] = db;
    else
        sql_sqlite_close(db);
}

static struct dict_iterate *sqlite_iterate_init(struct dict *dict, const char *prefix,
                                                unsigned flags)
{
    struct sqlite_iterate *it = xcalloc(1, sizeof(*it));
    dict_iterate_head_init(&it->head, dict, prefix, flags);
    sql_stmt_init(&it->q, SQL_DIALECT_SQLITE);
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
    char *error = NULL;
    while (!it->failed) {
        if (it->cur == NULL) {
            if (it->source >= it->plan.count)
                return DICT_ITER_DONE;
            sql_build_iterate(&it->plan, it->source, dict_now(), &it->q);
            it->cur = sql_sqlite_cursor_open(it->reader, &it->q, &error);
            if (it->cur == NULL)
                break;
        }
        struct sql_row r;
        int rc = sql_sqlite_cursor_next(it->cur, &r, &error);
        if (rc < 0)
            break;
        if (rc == 0) {
            sql_sqlite_cursor_close(it->cur);
            it->cur = NULL;
            it->source++;
            continue;
        }
        size_t ncols = r.ncols < SQL_MAX_COLUMNS ? r.ncols : SQL_MAX_COLUMNS;
        if (sql_iter_row(&it->plan, it->source, r.values, ncols, &it->key, it->values, row))
            return DICT_ITER_ROW;
    }
    if (error != NULL) {
        dict_iterate_set_error(head, "sqlite: %s", error);
        free(error);
        it->failed = true;
    }
    return DICT_ITER_ERROR;
}

static void sqlite_iterate_deinit(struct dict_iterate *head)
{
    struct sqlite_iterate *it = (struct sqlite_iterate *)head;
    sql_sqlite_cursor_close(it->cur);
    give_back_reader(head->dict, it->reader);
    sql_iter_plan_free(&it->plan);
    sql_stmt_free(&it->q);
    buf_free(&it->key);
    free(it);
}

/* ---------- transactions ---------- */

static void rollback(struct sqlite_dict *sd)
{
    char *error = NULL;
    if (!sql_sqlite_rollback(sd->db, &error)) {
        char q[512];
        log_warn(COMPONENT, "sqlite rollback failed", "error=%s", log_quote(q, sizeof(q), error));
        free(error);
    }
}

/* The first column of a step's first row (if any). */
struct step_row {
    bool has_row;
    struct sql_value first;
    char *copy;
};

static bool step_row(const struct sql_row *row, void *ctx)
{
    struct step_row *sr = ctx;
    if (row->ncols > 0) {
        sr->has_row = true;
        sr->copy =
            row->values[0].data != NULL ? xstrndup(row->values[0].data, row->values[0].len) : NULL;
        sr->first = (struct sql_value){.data = sr->copy, .len = row->values[0].len};
    }
    return false;
}

/* Runs every step of one operation. */
static enum sql_op_next run_op(struct sqlite_dict *sd, const struct sql_config *cfg,
                               const struct dict_tx_op *op, int64_t expire_secs, int64_t now,
                               char **error)
{
    struct sql_op_state st = {0};
    struct sql_stmt q;
    sql_stmt_init(&q, SQL_DIALECT_SQLITE);
    enum sql_op_next next = SQL_OP_AGAIN;
    while (next == SQL_OP_AGAIN) {
        sql_op_build(cfg, op, &st, expire_secs, now, &q);
        struct step_row sr = {0};
        int64_t changes = 0;
        char *msg = NULL;
        if (!sql_sqlite_run(sd->db, &q, step_row, &sr, &changes, &msg)) {
            char *what = sql_op_describe(op);
            *error = xasprintf("%s: sqlite: %s", what, msg);
            free(what);
            free(msg);
            next = SQL_OP_FAILED;
        } else {
            next = sql_op_result(cfg, op, &st, sr.has_row ? 0 : changes,
                                 sr.has_row ? &sr.first : NULL, error);
        }
        free(sr.copy);
    }
    sql_stmt_free(&q);
    return next;
}

static void commit_fail(struct sqlite_dict *sd, const char *what, char *error, dict_commit_cb *cb,
                        void *ctx)
{
    rollback(sd);
    char *msg = what != NULL ? xasprintf("sqlite: %s: %s", what, error) : xstrdup(error);
    cb(DICT_COMMIT_FAILED, msg, ctx);
    free(msg);
    free(error);
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
    if (!sql_sqlite_begin(sd->db, &error)) {
        commit_fail(sd, "BEGIN IMMEDIATE", error, cb, ctx);
        return;
    }
    int64_t now = dict_now();
    enum dict_commit_result result = DICT_COMMIT_OK;
    for (size_t i = 0; i < count; i++) {
        enum sql_op_next next = run_op(sd, cfg, &ops[i], expire_secs, now, &error);
        if (next == SQL_OP_NOT_FOUND)
            result = DICT_COMMIT_NOT_FOUND;
        if (next == SQL_OP_FAILED) {
            commit_fail(sd, NULL, error, cb, ctx);
            return;
        }
    }
    if (!sql_sqlite_commit(sd->db, &error)) {
        commit_fail(sd, "COMMIT", error, cb, ctx);
        return;
    }
    cb(result, NULL, ctx);
}

static void sqlite_expire_scan(struct dict *dict, dict_expire_cb *cb, void *ctx)
{
    struct sqlite_dict *sd = dict->driver_data;
    const struct sql_config *cfg = config_of(dict);
    char *error = NULL;
    const char *what = "BEGIN IMMEDIATE";
    if (sql_sqlite_begin(sd->db, &error)) {
        what = "expire-scan";
        int64_t now = dict_now();
        struct sql_stmt q;
        sql_stmt_init(&q, SQL_DIALECT_SQLITE);
        size_t n = sql_expire_count(cfg);
        for (size_t i = 0; i < n && error == NULL; i++) {
            sql_build_expire(cfg, i, now, &q);
            sql_sqlite_run(sd->db, &q, NULL, NULL, NULL, &error);
        }
        sql_stmt_free(&q);
        if (error == NULL) {
            what = "COMMIT";
            sql_sqlite_commit(sd->db, &error);
        }
    }
    if (error != NULL) {
        rollback(sd);
        char *msg = xasprintf("sqlite: %s: %s", what, error);
        cb(false, msg, ctx);
        free(msg);
        free(error);
        return;
    }
    cb(true, NULL, ctx);
}

const struct dict_driver_ops sql_executor_sqlite = {
    .open = sqlite_open,
    .close = sqlite_close,
    .lookup = sqlite_lookup,
    .iterate_init = sqlite_iterate_init,
    .iterate_next = sqlite_iterate_next,
    .iterate_deinit = sqlite_iterate_deinit,
    .commit = sqlite_commit,
    .expire_scan = sqlite_expire_scan,
};
