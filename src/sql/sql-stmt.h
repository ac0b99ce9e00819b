/* SQL statements with bound parameters, for both dialects Petrel speaks
 * (SQLite and PostgreSQL).
 *
 * A statement is SQL text built only from trusted pieces (keywords, quoted
 * identifiers, placeholders) plus the values bound to its placeholders.
 * Values never enter the text: whatever a client sent travels as a
 * parameter, so no value can change what a statement means. The one place
 * that knows how the dialects write a placeholder ("?N" / "$N") or quote an
 * identifier is here. Executors: sql-sqlite.h (synchronous) and
 * sql-pgsql.h (libpq, on the event loop or blocking on a worker). */
#ifndef PETREL_SQL_STMT_H
#define PETREL_SQL_STMT_H

#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SQL_STMT_MAX_PARAMS 48

enum sql_dialect {
    SQL_DIALECT_SQLITE,
    SQL_DIALECT_PGSQL,
};

enum sql_param_kind {
    SQL_PARAM_NULL,
    SQL_PARAM_TEXT, /* NUL-terminated at data[len] */
    SQL_PARAM_BLOB, /* bytes; BLOB in SQLite, BYTEA in PostgreSQL */
    SQL_PARAM_INT,
};

struct sql_param {
    enum sql_param_kind kind;
    const char *data;
    size_t len;
    int64_t num;
};

/* Parameters point into the caller's strings (which must outlive the run)
 * or into copies the statement owns until sql_stmt_reset/free. */
struct sql_stmt {
    enum sql_dialect dialect;
    struct buf sql;
    struct sql_param params[SQL_STMT_MAX_PARAMS];
    size_t count;
    size_t columns;    /* result columns the builder expects (0: any) */
    bool text_results; /* PostgreSQL: results in text format, else binary */
    char *owned[SQL_STMT_MAX_PARAMS];
    size_t owned_count;
};

void sql_stmt_init(struct sql_stmt *st, enum sql_dialect dialect);
/* Empties text and parameters; keeps the dialect and the buffer. */
void sql_stmt_reset(struct sql_stmt *st);
void sql_stmt_free(struct sql_stmt *st);

/* Appends trusted SQL text (keywords, operators): never a value. */
void sql_stmt_append(struct sql_stmt *st, const char *text);
/* Appends "name" quoted as an identifier; `name` must already be a plain
 * identifier ([A-Za-z_][A-Za-z0-9_]*, see sql_identifier_valid). */
void sql_stmt_ident(struct sql_stmt *st, const char *name);

/* Each appends the next placeholder and binds a value to it. Borrowed
 * data must outlive the run; the _copy variant copies. */
void sql_stmt_text(struct sql_stmt *st, const char *s);
void sql_stmt_text_copy(struct sql_stmt *st, const char *s);
/* Text of `len` bytes (PostgreSQL reads text up to its first NUL: refuse
 * NUL bytes before binding, or bind a blob). */
void sql_stmt_text_len(struct sql_stmt *st, const char *s, size_t len);
void sql_stmt_blob(struct sql_stmt *st, const void *data, size_t len);
void sql_stmt_int(struct sql_stmt *st, int64_t v);
void sql_stmt_null(struct sql_stmt *st);

/* Binds the next parameter without writing a placeholder: for SQL text
 * that already holds its placeholders (sql_placeholder). NULL binds SQL
 * NULL. The string is borrowed. */
void sql_stmt_bind_text(struct sql_stmt *st, const char *s);

/* Writes placeholder number `n` (1-based) of `dialect` to `out`. */
void sql_placeholder(struct buf *out, enum sql_dialect dialect, size_t n);

/* True for [A-Za-z_][A-Za-z0-9_]* of 1 to 63 bytes: what sql_stmt_ident
 * may quote (63 is PostgreSQL's limit). */
bool sql_identifier_valid(const char *s);
#define SQL_MAX_IDENTIFIER 63

/* "sqlite" or "postgresql", for messages. */
const char *sql_dialect_name(enum sql_dialect dialect);

#endif
