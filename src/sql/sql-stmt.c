/* Statements and placeholders: the dialect differences in one place. */
#include "sql/sql-stmt.h"

#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

void sql_stmt_init(struct sql_stmt *st, enum sql_dialect dialect)
{
    memset(st, 0, sizeof(*st));
    st->dialect = dialect;
}

void sql_stmt_reset(struct sql_stmt *st)
{
    for (size_t i = 0; i < st->owned_count; i++)
        free(st->owned[i]);
    st->owned_count = 0;
    st->count = 0;
    st->columns = 0;
    st->text_results = false;
    buf_reset(&st->sql);
}

void sql_stmt_free(struct sql_stmt *st)
{
    sql_stmt_reset(st);
    buf_free(&st->sql);
}

void sql_stmt_append(struct sql_stmt *st, const char *text)
{
    buf_append_str(&st->sql, text);
}

void sql_stmt_ident(struct sql_stmt *st, const char *name)
{
    /* Both dialects quote identifiers the SQL-standard way. The name is
     * plain (checked when configured), so it needs no escaping. */
    buf_append_char(&st->sql, '"');
    buf_append_str(&st->sql, name);
    buf_append_char(&st->sql, '"');
}

void sql_placeholder(struct buf *out, enum sql_dialect dialect, size_t n)
{
    /* Numbered in both dialects, so a parameter may be used twice. */
    buf_append_char(out, dialect == SQL_DIALECT_PGSQL ? '$' : '?');
    buf_append_uint(out, n);
}

static struct sql_param *bind_next(struct sql_stmt *st, enum sql_param_kind kind)
{
    PETREL_ASSERT(st->count < SQL_STMT_MAX_PARAMS);
    struct sql_param *p = &st->params[st->count++];
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    return p;
}

void sql_stmt_bind_text(struct sql_stmt *st, const char *s)
{
    struct sql_param *p = bind_next(st, s != NULL ? SQL_PARAM_TEXT : SQL_PARAM_NULL);
    p->data = s;
    p->len = s != NULL ? strlen(s) : 0;
}

void sql_stmt_text(struct sql_stmt *st, const char *s)
{
    sql_stmt_bind_text(st, s);
    sql_placeholder(&st->sql, st->dialect, st->count);
}

void sql_stmt_text_len(struct sql_stmt *st, const char *s, size_t len)
{
    struct sql_param *p = bind_next(st, SQL_PARAM_TEXT);
    p->data = s;
    p->len = len;
    sql_placeholder(&st->sql, st->dialect, st->count);
}

void sql_stmt_text_copy(struct sql_stmt *st, const char *s)
{
    PETREL_ASSERT(st->owned_count < SQL_STMT_MAX_PARAMS);
    char *copy = xstrdup(s);
    st->owned[st->owned_count++] = copy;
    sql_stmt_text(st, copy);
}

void sql_stmt_blob(struct sql_stmt *st, const void *data, size_t len)
{
    struct sql_param *p = bind_next(st, SQL_PARAM_BLOB);
    p->data = data;
    p->len = len;
    sql_placeholder(&st->sql, st->dialect, st->count);
}

void sql_stmt_int(struct sql_stmt *st, int64_t v)
{
    struct sql_param *p = bind_next(st, SQL_PARAM_INT);
    p->num = v;
    sql_placeholder(&st->sql, st->dialect, st->count);
}

void sql_stmt_null(struct sql_stmt *st)
{
    bind_next(st, SQL_PARAM_NULL);
    sql_placeholder(&st->sql, st->dialect, st->count);
}

bool sql_identifier_valid(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len > SQL_MAX_IDENTIFIER)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        if (!alpha && (i == 0 || c < '0' || c > '9'))
            return false;
    }
    return true;
}

const char *sql_dialect_name(enum sql_dialect dialect)
{
    return dialect == SQL_DIALECT_PGSQL ? "postgresql" : "sqlite";
}
