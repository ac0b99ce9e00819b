/* The SQLite executor (sql-sqlite.h).
 *
 * - Statements are cached by SQL text (at most STMT_CACHE; the whole cache
 *   is dropped when full, which is simpler than LRU and rare: callers build
 *   a bounded set of texts).
 * - query_timeout is a progress handler checking a deadline every
 *   PROGRESS_STEPS virtual-machine steps; busy_timeout covers lock waits.
 * - Values are read with sqlite3_column_text, which NUL-terminates every
 *   value (a BLOB keeps its bytes, an INTEGER becomes its decimal text). */
#include "sql/sql-sqlite.h"

#include "core/clock.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define STMT_CACHE 128
#define PROGRESS_STEPS 1000
#define MAX_COLUMNS 256

struct sql_sqlite {
    sqlite3 *db;
    struct smap *stmts; /* SQL text -> sqlite3_stmt * */
    size_t stmt_count;
    int64_t query_timeout_ms;
    int64_t deadline_ms;
    bool wal;
};

struct row_buf {
    size_t cap;
    const char **names;
    struct sql_value *values;
};

struct sql_sqlite_cursor {
    struct sql_sqlite *db;
    sqlite3_stmt *stmt;
    struct row_buf rb;
};

static char *errmsg(struct sql_sqlite *db)
{
    return xstrdup(sqlite3_errmsg(db->db));
}

static int progress_cb(void *arg)
{
    const struct sql_sqlite *db = arg;
    return clock_mono_ms() > db->deadline_ms ? 1 : 0;
}

static void arm_deadline(struct sql_sqlite *db)
{
    if (db->query_timeout_ms > 0) /* else no progress handler reads it */
        db->deadline_ms = clock_mono_ms() + db->query_timeout_ms;
}

/* The message of a failed step: an interrupt is our deadline. */
static char *step_error(struct sql_sqlite *db, int rc)
{
    if (rc == SQLITE_INTERRUPT && db->query_timeout_ms > 0)
        return xasprintf("timed out after %lldms", (long long)db->query_timeout_ms);
    return errmsg(db);
}

static int journal_mode_cb(void *ctx, int ncols, char **values, char **names)
{
    (void)names;
    if (ncols > 0 && values[0] != NULL)
        *(bool *)ctx = strcasecmp(values[0], "wal") == 0;
    return 0;
}

struct sql_sqlite *sql_sqlite_open(const struct sql_sqlite_settings *s, char **error)
{
    sqlite3 *handle = NULL;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (s->create ? SQLITE_OPEN_CREATE : 0);
    int rc = sqlite3_open_v2(s->path, &handle, flags, NULL);
    if (rc != SQLITE_OK) {
        *error = xasprintf("cannot open %s: %s", s->path,
                           handle != NULL ? sqlite3_errmsg(handle) : sqlite3_errstr(rc));
        sqlite3_close_v2(handle);
        return NULL;
    }
    struct sql_sqlite *db = xcalloc(1, sizeof(*db));
    db->db = handle;
    db->stmts = smap_new();
    db->query_timeout_ms = s->query_timeout_ms;
    sqlite3_extended_result_codes(handle, 1);
    sqlite3_busy_timeout(handle, (int)s->busy_timeout_ms);
    if (s->query_timeout_ms > 0)
        sqlite3_progress_handler(handle, PROGRESS_STEPS, progress_cb, db);
    if (s->wal) {
        char *msg = NULL;
        arm_deadline(db);
        if (sqlite3_exec(handle, "PRAGMA journal_mode=WAL", journal_mode_cb, &db->wal, &msg) !=
            SQLITE_OK) {
            *error = xasprintf("%s: cannot set WAL mode: %s", s->path,
                               msg != NULL ? msg : sqlite3_errmsg(handle));
            sqlite3_free(msg);
            sql_sqlite_close(db);
            return NULL;
        }
    }
    return db;
}

static void finalize_stmt(void *p)
{
    sqlite3_finalize(p);
}

void sql_sqlite_close(struct sql_sqlite *db)
{
    if (db == NULL)
        return;
    smap_free(db->stmts, finalize_stmt);
    sqlite3_close_v2(db->db);
    free(db);
}

bool sql_sqlite_wal(const struct sql_sqlite *db)
{
    return db->wal;
}

bool sql_sqlite_exec(struct sql_sqlite *db, const char *sql, char **error)
{
    char *msg = NULL;
    arm_deadline(db);
    int rc = sqlite3_exec(db->db, sql, NULL, NULL, &msg);
    if (rc == SQLITE_OK)
        return true;
    sqlite3_free(msg);
    *error = step_error(db, rc);
    return false;
}

bool sql_sqlite_begin(struct sql_sqlite *db, char **error)
{
    return sql_sqlite_exec(db, "BEGIN IMMEDIATE", error);
}

bool sql_sqlite_commit(struct sql_sqlite *db, char **error)
{
    return sql_sqlite_exec(db, "COMMIT", error);
}

bool sql_sqlite_rollback(struct sql_sqlite *db, char **error)
{
    if (sqlite3_get_autocommit(db->db))
        return true; /* SQLite already rolled back (e.g. after SQLITE_FULL) */
    return sql_sqlite_exec(db, "ROLLBACK", error);
}

/* ---------- statements ---------- */

static sqlite3_stmt *prepare_cached(struct sql_sqlite *db, const char *sql, char **error)
{
    sqlite3_stmt *st = smap_get(db->stmts, sql);
    if (st != NULL)
        return st;
    if (db->stmt_count >= STMT_CACHE) {
        smap_free(db->stmts, finalize_stmt);
        db->stmts = smap_new();
        db->stmt_count = 0;
    }
    /* preparing may read the schema, which the progress handler watches */
    arm_deadline(db);
    if (sqlite3_prepare_v3(db->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
        *error = errmsg(db);
        sqlite3_finalize(st);
        return NULL;
    }
    if (st == NULL) {
        *error = xstrdup("no SQL statement");
        return NULL;
    }
    smap_put(db->stmts, sql, st);
    db->stmt_count++;
    return st;
}

enum sql_sqlite_prepare sql_sqlite_prepare(struct sql_sqlite *db, const char *sql, size_t nparams,
                                           size_t *columns, char **error)
{
    sqlite3_stmt *st = prepare_cached(db, sql, error);
    if (st == NULL)
        return SQL_SQLITE_PREPARE_FAILED;
    bool ok = (size_t)sqlite3_bind_parameter_count(st) == nparams;
    for (size_t i = 0; ok && i < nparams; i++) {
        char want[24];
        snprintf(want, sizeof(want), "?%zu", i + 1);
        const char *name = sqlite3_bind_parameter_name(st, (int)i + 1);
        ok = name != NULL && strcmp(name, want) == 0;
    }
    if (!ok)
        return SQL_SQLITE_FOREIGN_PARAMS;
    *columns = (size_t)sqlite3_column_count(st);
    return SQL_SQLITE_PREPARED;
}

bool sql_sqlite_has_column(struct sql_sqlite *db, const char *sql, const char *name)
{
    sqlite3_stmt *st = smap_get(db->stmts, sql);
    int n = st != NULL ? sqlite3_column_count(st) : 0;
    for (int i = 0; i < n; i++) {
        const char *col = sqlite3_column_name(st, i);
        if (col != NULL && strcasecmp(col, name) == 0)
            return true;
    }
    return false;
}

/* Binds every parameter; the data must outlive the statement's run. */
static bool bind_params(struct sql_sqlite *db, sqlite3_stmt *st, const struct sql_stmt *q,
                        char **error)
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
            *error = xasprintf("bind: %s", sqlite3_errmsg(db->db));
            return false;
        }
    }
    return true;
}

/* Fills `rb` from the current row. Names and count are read per row: the
 * first step may have re-prepared the statement (schema change), which
 * invalidates names read before it. */
static void read_row(sqlite3_stmt *st, struct row_buf *rb, struct sql_row *row)
{
    size_t n = (size_t)sqlite3_column_count(st);
    if (n > MAX_COLUMNS)
        n = MAX_COLUMNS;
    if (n > rb->cap) {
        rb->names = xrealloc(rb->names, n * sizeof(*rb->names));
        rb->values = xrealloc(rb->values, n * sizeof(*rb->values));
        rb->cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        int c = (int)i;
        rb->names[i] = sqlite3_column_name(st, c);
        if (sqlite3_column_type(st, c) == SQLITE_NULL) {
            rb->values[i].data = NULL;
            rb->values[i].len = 0;
            continue;
        }
        const char *text = (const char *)sqlite3_column_text(st, c);
        int len = sqlite3_column_bytes(st, c);
        rb->values[i].data = text != NULL ? text : "";
        rb->values[i].len = text != NULL && len > 0 ? (size_t)len : 0;
    }
    row->ncols = n;
    row->names = rb->names;
    row->values = rb->values;
}

static void row_buf_free(struct row_buf *rb)
{
    free(rb->names);
    free(rb->values);
}

bool sql_sqlite_run(struct sql_sqlite *db, const struct sql_stmt *q, sql_row_fn *fn, void *ctx,
                    int64_t *changes, char **error)
{
    sqlite3_stmt *st = prepare_cached(db, buf_cstr(&q->sql), error);
    if (st == NULL)
        return false;
    bool ok = bind_params(db, st, q, error);
    struct row_buf rb = {0};
    arm_deadline(db);
    while (ok) {
        int rc = sqlite3_step(st);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            *error = step_error(db, rc);
            ok = false;
            break;
        }
        if (fn == NULL)
            continue;
        struct sql_row row;
        read_row(st, &rb, &row);
        if (!fn(&row, ctx))
            break;
    }
    if (ok && changes != NULL)
        *changes = sqlite3_changes64(db->db);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    row_buf_free(&rb);
    return ok;
}

/* ---------- cursors ---------- */

struct sql_sqlite_cursor *sql_sqlite_cursor_open(struct sql_sqlite *db, const struct sql_stmt *q,
                                                 char **error)
{
    sqlite3_stmt *st = NULL;
    arm_deadline(db);
    if (sqlite3_prepare_v2(db->db, buf_cstr(&q->sql), -1, &st, NULL) != SQLITE_OK) {
        *error = errmsg(db);
        sqlite3_finalize(st);
        return NULL;
    }
    if (!bind_params(db, st, q, error)) {
        sqlite3_finalize(st);
        return NULL;
    }
    struct sql_sqlite_cursor *cur = xcalloc(1, sizeof(*cur));
    cur->db = db;
    cur->stmt = st;
    return cur;
}

int sql_sqlite_cursor_next(struct sql_sqlite_cursor *cur, struct sql_row *row, char **error)
{
    arm_deadline(cur->db);
    int rc = sqlite3_step(cur->stmt);
    if (rc == SQLITE_ROW) {
        read_row(cur->stmt, &cur->rb, row);
        return 1;
    }
    if (rc == SQLITE_DONE)
        return 0;
    *error = step_error(cur->db, rc);
    return -1;
}

void sql_sqlite_cursor_close(struct sql_sqlite_cursor *cur)
{
    if (cur == NULL)
        return;
    sqlite3_finalize(cur->stmt);
    row_buf_free(&cur->rb);
    free(cur);
}
