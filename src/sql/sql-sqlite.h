/* The SQLite executor: one synchronous connection to a database file.
 *
 * Every call runs to completion before it returns (SQLite is a library on
 * a local file); a connection is used by one thread at a time. Statements
 * run through sql_sqlite_run are prepared once and cached by their SQL
 * text; cursors step a statement of their own so that a large result is
 * read in constant memory. Messages in *error are SQLite's own (or "timed
 * out after N ms"), without a prefix: the caller says what it was doing. */
#ifndef PETREL_SQL_SQLITE_H
#define PETREL_SQL_SQLITE_H

#include "sql/sql-row.h"
#include "sql/sql-stmt.h"

#include <stdbool.h>
#include <stdint.h>

struct sql_sqlite;
struct sql_sqlite_cursor;

struct sql_sqlite_settings {
    const char *path;
    bool create;              /* create the file when missing */
    bool wal;                 /* switch the database to the WAL journal */
    int64_t busy_timeout_ms;  /* wait for another writer's lock */
    int64_t query_timeout_ms; /* 0: none; else a longer statement is interrupted */
};

/* Opens the file. NULL with *error ("cannot open PATH: ...") on failure. */
struct sql_sqlite *sql_sqlite_open(const struct sql_sqlite_settings *s, char **error);
void sql_sqlite_close(struct sql_sqlite *db);
/* False when settings asked for WAL and the file could not switch to it
 * (an in-memory database, a read-only file): the caller may warn. */
bool sql_sqlite_wal(const struct sql_sqlite *db);

/* Runs SQL text without parameters (DDL; several statements allowed). */
bool sql_sqlite_exec(struct sql_sqlite *db, const char *sql, char **error);
/* BEGIN IMMEDIATE (takes the write lock now, waiting busy_timeout). */
bool sql_sqlite_begin(struct sql_sqlite *db, char **error);
bool sql_sqlite_commit(struct sql_sqlite *db, char **error);
/* Rolls back the open transaction, if SQLite has not already done so. */
bool sql_sqlite_rollback(struct sql_sqlite *db, char **error);

enum sql_sqlite_prepare {
    SQL_SQLITE_PREPARED,
    SQL_SQLITE_PREPARE_FAILED, /* *error: SQLite's message */
    SQL_SQLITE_FOREIGN_PARAMS, /* placeholders other than ?1..?nparams */
};

/* Prepares (and caches) `sql`, checking that its parameters are exactly
 * ?1..?nparams: a statement whose text came from an operator cannot bind
 * parameters of its own. *columns: its result columns. */
enum sql_sqlite_prepare sql_sqlite_prepare(struct sql_sqlite *db, const char *sql, size_t nparams,
                                           size_t *columns, char **error);
/* Case-insensitive: does prepared `sql` return a column called `name`? */
bool sql_sqlite_has_column(struct sql_sqlite *db, const char *sql, const char *name);

/* Runs `st` with its parameters bound, handing each row to `fn` (NULL:
 * rows are ignored). *changes (may be NULL): rows the statement changed. */
bool sql_sqlite_run(struct sql_sqlite *db, const struct sql_stmt *st, sql_row_fn *fn, void *ctx,
                    int64_t *changes, char **error);

/* A statement stepped one row at a time; the connection must not be used
 * for anything else while the cursor is open. */
struct sql_sqlite_cursor *sql_sqlite_cursor_open(struct sql_sqlite *db, const struct sql_stmt *st,
                                                 char **error);
/* 1: *row filled (valid until the next call); 0: no more rows; -1: error. */
int sql_sqlite_cursor_next(struct sql_sqlite_cursor *cur, struct sql_row *row, char **error);
void sql_sqlite_cursor_close(struct sql_sqlite_cursor *cur);

#endif
