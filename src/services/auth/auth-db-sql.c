/* The `sql` passdb/userdb driver, SQLite or PostgreSQL.
 *
 * Queries. The operator writes SQL with %u (full username), %d (domain:
 * after the last '@', "" when there is none), %n (local part: before the
 * last '@', the whole name when there is none) and %% (a literal '%').
 * Each query is converted once, at open, into SQL with bound parameters
 * (`?N` for SQLite, `$N` for PostgreSQL): values never enter the SQL text,
 * so no username can change what a query means. Conversion rules:
 *  - a variable alone inside a string literal ('%u') or a quoted
 *    identifier ("%u", MySQL habit) becomes the bare parameter: the
 *    quotes are removed;
 *  - a string literal mixing text and variables ('%n@%d', 'x%%y%u')
 *    becomes a concatenation: ('x%y' || CAST(?1 AS TEXT)); `''` inside a
 *    literal stays a quote;
 *  - a quoted identifier mixing text and variables is refused;
 *  - -- and C-style comments are copied unchanged (variables in them are
 *    not expanded);
 *  - any other '%' sequence is refused, and so are parameters of the
 *    operator's own (`?` in SQLite, `$1` in PostgreSQL).
 * Parameters are sent untyped, so PostgreSQL infers their type from where
 * they stand, as it would for the quoted literal they replace (`citext_col
 * = '%u'` stays case-insensitive). Where nothing gives a type (a variable
 * alone in the SELECT list) PostgreSQL refuses the query: write
 * `CAST(%u AS TEXT)` or `%u::text` there.
 *
 * Results. password_query must return a column named `password`; every
 * other non-NULL column is a userdb field set by its name through
 * userdb_entry_set (uid, gid, home, mail, quota_rule, allow_nets, ...;
 * unknown names become extra fields). Columns named `user` or `username`
 * are skipped: the lookup key is the username asked for. A userdb lookup
 * uses user_query, or password_query without its password when there is no
 * user_query. Zero rows: NOT_FOUND. More than one row: the first is used
 * and a warning is logged once per query. A field that does not parse (a
 * bad CIDR in allow_nets) is an error, never a silently wider record.
 * iterate_query returns usernames in its first column; NULLs and names
 * auth_username_valid refuses are skipped; the list is sorted and
 * deduplicated here.
 *
 * Connections. Lookups run on worker threads and block: one connection per
 * worker, opened on first use, dropped after a failure and opened again on
 * the next lookup; a PostgreSQL query that fails because the connection
 * died is retried once on a fresh connection. Each connection has a mutex
 * so a caller that shares a worker index by mistake is still safe.
 *  - SQLite: opened read-write (a reader of a WAL database operators write
 *    to must be able to create the -wal/-shm files; a file the OS makes
 *    read-only still opens, read-only) but without CREATE, so a mistyped
 *    path fails instead of making an empty database; busy_timeout =
 *    query_timeout waits out an operator's write lock, and a progress
 *    handler interrupts a statement running past query_timeout.
 *    At open the file is opened and every query prepared, so a missing
 *    file, table or `password` column stops start-up.
 *  - PostgreSQL: PQconnectdbParams with connect_timeout (whole seconds,
 *    rounded up; the conninfo may override it), then
 *    SET statement_timeout = query_timeout. A server that is down is an
 *    error per lookup, not at start. */
#include "services/auth/auth-db-private.h"

#include "core/buf.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "services/auth/passwd-file.h"
#include "sql/sql-pgsql.h"
#include "sql/sql-sqlite.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define COMPONENT "auth"
#define SQL_MAX_USERS PASSWD_FILE_MAX_USERS

enum sql_query_kind {
    Q_PASSWORD,
    Q_USER,
    Q_ITERATE,
    QUERY_KINDS,
};

static const char *const query_names[QUERY_KINDS] = {"password_query", "user_query",
                                                     "iterate_query"};

struct sql_conn {
    pthread_mutex_t lock;
    struct sql_sqlite *lite;
    bool checked[QUERY_KINDS]; /* on lite */
    struct sql_pgsql_blocking *pg;
};

struct sql_db {
    struct auth_db head;
    enum auth_sql_engine engine;
    char *connect;
    int64_t query_timeout_ms;
    struct sql_pgsql_settings pg_settings;
    bool has_query[QUERY_KINDS];
    struct auth_sql_query queries[QUERY_KINDS];
    atomic_bool warned_rows[QUERY_KINDS];
    struct sql_conn *conns;
    unsigned conn_count;
};

/* ---------- query conversion ---------- */

struct converter {
    enum auth_sql_engine engine;
    struct auth_sql_query *q;
    struct buf out;
    char *error;
};

/* A piece of a string literal: text, or a variable. */
struct piece {
    bool is_var;
    enum auth_sql_var var;
    struct buf text;
};

static bool convert_fail(struct converter *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static bool convert_fail(struct converter *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    c->error = xvasprintf(fmt, ap);
    va_end(ap);
    return false;
}

static enum sql_dialect dialect_of(enum auth_sql_engine engine)
{
    return engine == AUTH_SQL_PGSQL ? SQL_DIALECT_PGSQL : SQL_DIALECT_SQLITE;
}

/* The parameter number (1-based) of `var`, added on first use. */
static size_t param_of(struct converter *c, enum auth_sql_var var)
{
    for (size_t i = 0; i < c->q->param_count; i++) {
        if (c->q->vars[i] == var)
            return i + 1;
    }
    c->q->vars[c->q->param_count++] = var;
    return c->q->param_count;
}

static void put_param(struct converter *c, enum auth_sql_var var)
{
    sql_placeholder(&c->out, dialect_of(c->engine), param_of(c, var));
}

/* Reads the %-sequence at p: a variable (*is_var), or %% (a '%'). Returns
 * its length (2) or 0 when it is not one of ours. */
static size_t read_percent(const char *p, bool *is_var, enum auth_sql_var *var)
{
    *is_var = true;
    switch (p[1]) {
    case 'u':
        *var = AUTH_SQL_VAR_USER;
        return 2;
    case 'd':
        *var = AUTH_SQL_VAR_DOMAIN;
        return 2;
    case 'n':
        *var = AUTH_SQL_VAR_LOCAL;
        return 2;
    case '%':
        *is_var = false;
        return 2;
    default:
        return 0;
    }
}

static bool bad_percent(struct converter *c, const char *p)
{
    char next = p[1];
    if ((next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z'))
        return convert_fail(c,
                            "unknown variable '%%%c' (only %%u %%d %%n, and %%%% for a "
                            "literal %%)",
                            next);
    return convert_fail(c, "a lone '%%' %s (write %%%% for a literal %%, the modulo operator too)",
                        next == '\0' ? "at the end of the query" : "in the query");
}

/* Splits the quoted text starting after the opening `quote` into pieces.
 * Returns the position after the closing quote, or NULL (error set). */
static const char *read_quoted(struct converter *c, const char *p, char quote, struct piece *pieces,
                               size_t *count, size_t max)
{
    *count = 0;
    struct piece *cur = NULL;
    for (;;) {
        if (*p == '\0') {
            convert_fail(c, "unterminated %s", quote == '\'' ? "string literal" : "identifier");
            return NULL;
        }
        if (*p == quote && p[1] != quote)
            return p + 1;
        bool is_var = false;
        enum auth_sql_var var = AUTH_SQL_VAR_USER;
        size_t n = *p == '%' ? read_percent(p, &is_var, &var) : 0;
        if (*p == '%' && n == 0) {
            bad_percent(c, p);
            return NULL;
        }
        if ((is_var || cur == NULL) && *count >= max) {
            convert_fail(c, "too many variables in one quoted string");
            return NULL;
        }
        if (is_var) {
            struct piece *v = &pieces[(*count)++];
            v->is_var = true;
            v->var = var;
            cur = NULL;
            p += n;
            continue;
        }
        if (cur == NULL) {
            cur = &pieces[(*count)++];
            cur->is_var = false;
        }
        if (*p == quote) { /* doubled quote: one quote character */
            buf_append_char(&cur->text, quote);
            p += 2;
        } else if (n == 2) { /* %% */
            buf_append_char(&cur->text, '%');
            p += 2;
        } else {
            buf_append_char(&cur->text, *p++);
        }
    }
}

static void put_quoted_text(struct converter *c, const char *text, char quote)
{
    buf_append_char(&c->out, quote);
    for (const char *t = text; *t != '\0'; t++) {
        if (*t == quote)
            buf_append_char(&c->out, quote);
        buf_append_char(&c->out, *t);
    }
    buf_append_char(&c->out, quote);
}

static void free_pieces(struct piece *pieces, size_t count)
{
    for (size_t i = 0; i < count; i++)
        buf_free(&pieces[i].text);
}

/* A '...' or "..." at p (p points at the quote); returns the position after it. */
static const char *convert_quoted(struct converter *c, const char *p)
{
    char quote = *p;
    struct piece pieces[64];
    memset(pieces, 0, sizeof(pieces));
    size_t count = 0;
    const char *end = read_quoted(c, p + 1, quote, pieces, &count, 64);
    size_t vars = 0;
    for (size_t i = 0; i < count; i++)
        vars += pieces[i].is_var ? 1 : 0;
    if (end == NULL) {
        /* error set */
    } else if (vars == 0) {
        put_quoted_text(c, count > 0 ? buf_cstr(&pieces[0].text) : "", quote);
    } else if (count == 1) {
        put_param(c, pieces[0].var);
    } else if (quote == '"') {
        convert_fail(c, "a variable inside a quoted identifier must stand alone (\"%%u\")");
        end = NULL;
    } else {
        buf_append_char(&c->out, '(');
        for (size_t i = 0; i < count; i++) {
            if (i > 0)
                buf_append_str(&c->out, " || ");
            if (pieces[i].is_var) {
                buf_append_str(&c->out, "CAST(");
                put_param(c, pieces[i].var);
                buf_append_str(&c->out, " AS TEXT)");
            } else {
                put_quoted_text(c, buf_cstr(&pieces[i].text), '\'');
            }
        }
        buf_append_char(&c->out, ')');
    }
    free_pieces(pieces, count);
    return end;
}

/* A comment at p, copied unchanged; returns the position after it. */
static const char *copy_comment(struct converter *c, const char *p)
{
    const char *end;
    if (p[0] == '-') {
        end = strchr(p, '\n');
        end = end != NULL ? end + 1 : p + strlen(p);
    } else {
        end = strstr(p + 2, "*/");
        end = end != NULL ? end + 2 : p + strlen(p);
    }
    buf_append(&c->out, p, (size_t)(end - p));
    return end;
}

static bool is_ident_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '$';
}

bool auth_sql_query_convert(const char *text, enum auth_sql_engine engine,
                            struct auth_sql_query *out, char **error)
{
    memset(out, 0, sizeof(*out));
    struct converter c = {.engine = engine, .q = out};
    const char *p = text;
    bool ok = true;
    while (ok && *p != '\0') {
        if (*p == '\'' || *p == '"') {
            p = convert_quoted(&c, p);
            ok = p != NULL;
        } else if ((p[0] == '-' && p[1] == '-') || (p[0] == '/' && p[1] == '*')) {
            p = copy_comment(&c, p);
        } else if (*p == '%') {
            bool is_var;
            enum auth_sql_var var;
            size_t n = read_percent(p, &is_var, &var);
            if (n == 0) {
                ok = bad_percent(&c, p);
            } else {
                if (is_var)
                    put_param(&c, var);
                else
                    buf_append_char(&c.out, '%');
                p += n;
            }
        } else if (engine == AUTH_SQL_SQLITE && *p == '?') {
            ok = convert_fail(&c, "the query must not use parameters of its own ('?'): "
                                  "use %%u %%d %%n");
        } else if (engine == AUTH_SQL_PGSQL && *p == '$' && p[1] >= '0' && p[1] <= '9' &&
                   (p == text || !is_ident_char(p[-1]))) {
            ok = convert_fail(&c,
                              "the query must not use parameters of its own ('$%c'): "
                              "use %%u %%d %%n",
                              p[1]);
        } else {
            buf_append_char(&c.out, *p++);
        }
    }
    if (!ok) {
        buf_free(&c.out);
        memset(out, 0, sizeof(*out));
        *error = c.error;
        return false;
    }
    out->sql = buf_steal(&c.out);
    return true;
}

void auth_sql_query_free(struct auth_sql_query *q)
{
    free(q->sql);
    memset(q, 0, sizeof(*q));
}

char *auth_sql_var_value(enum auth_sql_var var, const char *username)
{
    const char *at = strrchr(username, '@');
    switch (var) {
    case AUTH_SQL_VAR_DOMAIN:
        return xstrdup(at != NULL ? at + 1 : "");
    case AUTH_SQL_VAR_LOCAL:
        return at != NULL ? xstrndup(username, (size_t)(at - username)) : xstrdup(username);
    case AUTH_SQL_VAR_USER:
        break;
    }
    return xstrdup(username);
}

bool auth_sql_conninfo_check(const char *conninfo, char **error)
{
    if (sql_pgsql_conninfo_valid(conninfo))
        return true;
    *error = xstrdup("not a valid libpq connection string "
                     "(keyword=value pairs or a postgresql:// URI)");
    return false;
}

/* ---------- SQLite ---------- */

static void lite_close(struct sql_conn *c)
{
    sql_sqlite_close(c->lite);
    c->lite = NULL;
    memset(c->checked, 0, sizeof(c->checked));
}

static bool lite_open(struct sql_db *db, struct sql_conn *c, char **error)
{
    if (c->lite != NULL)
        return true;
    struct sql_sqlite_settings s = {
        .path = db->connect,
        .busy_timeout_ms = db->query_timeout_ms,
        .query_timeout_ms = db->query_timeout_ms,
    };
    char *msg = NULL;
    c->lite = sql_sqlite_open(&s, &msg);
    if (c->lite == NULL) {
        *error = xasprintf("sqlite: %s", msg);
        free(msg);
        return false;
    }
    return true;
}

/* Prepares query `kind` and checks it: its parameters are ours exactly,
 * it returns rows, and password_query has a `password` column. */
static bool lite_check(struct sql_db *db, struct sql_conn *c, enum sql_query_kind kind,
                       char **error)
{
    if (c->checked[kind])
        return true;
    const struct auth_sql_query *q = &db->queries[kind];
    const char *name = query_names[kind];
    size_t columns = 0;
    char *msg = NULL;
    switch (sql_sqlite_prepare(c->lite, q->sql, q->param_count, &columns, &msg)) {
    case SQL_SQLITE_PREPARED:
        break;
    case SQL_SQLITE_PREPARE_FAILED:
        *error = xasprintf("sqlite: %s: %s", name, msg);
        free(msg);
        return false;
    case SQL_SQLITE_FOREIGN_PARAMS:
        *error = xasprintf("sqlite: %s: the query must not use parameters of its own "
                           "(:name, @name, $name): use %%u %%d %%n",
                           name);
        return false;
    }
    if (columns == 0) {
        *error = xasprintf("sqlite: %s: not a query that returns rows", name);
        return false;
    }
    if (kind == Q_PASSWORD && !sql_sqlite_has_column(c->lite, q->sql, "password")) {
        *error = xasprintf("sqlite: %s: returns no column named `password`", name);
        return false;
    }
    c->checked[kind] = true;
    return true;
}

/* Runs query `kind` with `st`'s values bound, feeding each row to `fn`. */
static bool lite_run(struct sql_db *db, struct sql_conn *c, enum sql_query_kind kind,
                     const struct sql_stmt *st, sql_row_fn *fn, void *ctx, char **error)
{
    char *msg = NULL;
    bool ok = lite_open(db, c, error) && lite_check(db, c, kind, error);
    if (ok && !sql_sqlite_run(c->lite, st, fn, ctx, NULL, &msg)) {
        *error = xasprintf("sqlite: %s: %s", query_names[kind], msg);
        free(msg);
        ok = false;
    }
    if (!ok)
        lite_close(c);
    return ok;
}

/* ---------- running a query ---------- */

static bool run_query(struct sql_db *db, unsigned worker, enum sql_query_kind kind,
                      const char *username, sql_row_fn *fn, void *ctx, char **error)
{
    const struct auth_sql_query *q = &db->queries[kind];
    char *values[AUTH_SQL_MAX_PARAMS + 1] = {NULL};
    struct sql_stmt st;
    sql_stmt_init(&st, dialect_of(db->engine));
    sql_stmt_append(&st, q->sql); /* converted at open: placeholders only */
    for (size_t i = 0; i < q->param_count; i++) {
        values[i] = auth_sql_var_value(q->vars[i], username);
        sql_stmt_bind_text(&st, values[i]);
    }
    struct sql_conn *c = &db->conns[worker];
    pthread_mutex_lock(&c->lock);
    bool ok;
    if (db->engine == AUTH_SQL_SQLITE) {
        ok = lite_run(db, c, kind, &st, fn, ctx, error);
    } else {
        if (c->pg == NULL)
            c->pg = sql_pgsql_blocking_new(&db->pg_settings);
        ok = sql_pgsql_blocking_run(c->pg, &st, query_names[kind], fn, ctx, error);
    }
    pthread_mutex_unlock(&c->lock);
    sql_stmt_free(&st);
    for (size_t i = 0; i < q->param_count; i++)
        free(values[i]);
    return ok;
}

struct lookup_ctx {
    enum sql_query_kind kind;
    bool want_password;
    const char *username;
    size_t rows;
    struct userdb_entry *entry;
    char *error;
};

/* Turns the first row into an entry; stops at the second. */
static bool lookup_row(const struct sql_row *row, void *arg)
{
    struct lookup_ctx *lc = arg;
    if (++lc->rows > 1)
        return false;
    struct userdb_entry *e = userdb_entry_new(lc->username);
    bool saw_password = false;
    for (size_t i = 0; i < row->ncols; i++) {
        const char *name = row->names[i] != NULL ? row->names[i] : "";
        bool is_password = strcasecmp(name, "password") == 0;
        saw_password = saw_password || is_password;
        const char *value = row->values[i].data;
        if (value == NULL || strcasecmp(name, "user") == 0 || strcasecmp(name, "username") == 0)
            continue;
        if (memchr(value, '\0', row->values[i].len) != NULL) {
            lc->error =
                xasprintf("sql: %s: column %s holds a NUL byte", query_names[lc->kind], name);
            break;
        }
        if (is_password) {
            if (lc->want_password && e->password == NULL)
                e->password = xstrdup(value);
            continue;
        }
        char *error = NULL;
        if (!userdb_entry_set(e, name, value, &error)) {
            lc->error = xasprintf("sql: %s: column %s: %s", query_names[lc->kind], name, error);
            free(error);
            break;
        }
    }
    if (lc->error == NULL && lc->want_password && !saw_password)
        lc->error = xasprintf("sql: %s: returns no column named `password`", query_names[lc->kind]);
    if (lc->error != NULL) {
        userdb_entry_free(e);
        return false;
    }
    lc->entry = e;
    return true;
}

static void warn_rows_once(struct sql_db *db, enum sql_query_kind kind)
{
    if (atomic_exchange(&db->warned_rows[kind], true))
        return;
    log_warn(COMPONENT, "sql query returned more than one row: using the first (logged once)",
             "query=%s", query_names[kind]);
}

static enum auth_db_status sql_lookup(struct auth_db *head, unsigned worker, const char *username,
                                      bool want_password, struct userdb_entry **out, char **error)
{
    struct sql_db *db = (struct sql_db *)head;
    enum sql_query_kind kind = want_password || !db->has_query[Q_USER] ? Q_PASSWORD : Q_USER;
    if (!db->has_query[kind]) {
        *error = xasprintf("sql: no %s configured", query_names[kind]);
        return AUTH_DB_ERROR;
    }
    struct lookup_ctx lc = {.kind = kind, .want_password = want_password, .username = username};
    if (!run_query(db, worker, kind, username, lookup_row, &lc, error)) {
        userdb_entry_free(lc.entry);
        return AUTH_DB_ERROR;
    }
    if (lc.error != NULL) {
        *error = lc.error;
        return AUTH_DB_ERROR;
    }
    if (lc.entry == NULL)
        return AUTH_DB_NOT_FOUND;
    if (lc.rows > 1)
        warn_rows_once(db, kind);
    *out = lc.entry;
    return AUTH_DB_OK;
}

struct iterate_ctx {
    char **users;
    size_t count;
    size_t cap;
    char *error;
};

static bool iterate_row(const struct sql_row *row, void *arg)
{
    struct iterate_ctx *ic = arg;
    const char *name = row->ncols > 0 ? row->values[0].data : NULL;
    if (name == NULL || strlen(name) != row->values[0].len || !auth_username_valid(name))
        return true;
    if (ic->count >= SQL_MAX_USERS) {
        ic->error = xasprintf("sql: iterate_query: more than %d users", SQL_MAX_USERS);
        return false;
    }
    ic->users = xgrow(ic->users, &ic->cap, ic->count + 1, sizeof(*ic->users));
    ic->users[ic->count++] = xstrdup(name);
    return true;
}

static bool sql_iterate(struct auth_db *head, unsigned worker, char ***users, size_t *count,
                        char **error)
{
    struct sql_db *db = (struct sql_db *)head;
    if (!db->has_query[Q_ITERATE]) {
        *error = xstrdup("sql: no iterate_query configured");
        return false;
    }
    struct iterate_ctx ic = {0};
    bool ok = run_query(db, worker, Q_ITERATE, "", iterate_row, &ic, error);
    if (ok && ic.error != NULL) {
        *error = ic.error;
        ok = false;
    } else {
        free(ic.error);
    }
    if (!ok) {
        auth_db_users_free(ic.users, ic.count);
        return false;
    }
    auth_db_users_sort_unique(ic.users, &ic.count);
    *users = ic.users;
    *count = ic.count;
    return true;
}

/* ---------- open / close ---------- */

static void sql_close(struct auth_db *head)
{
    struct sql_db *db = (struct sql_db *)head;
    for (unsigned i = 0; i < db->conn_count; i++) {
        struct sql_conn *c = &db->conns[i];
        lite_close(c);
        sql_pgsql_blocking_free(c->pg);
        pthread_mutex_destroy(&c->lock);
    }
    free(db->conns);
    for (size_t k = 0; k < QUERY_KINDS; k++)
        auth_sql_query_free(&db->queries[k]);
    free(db->connect);
    free(db);
}

/* SQLite: open the file on worker 0's connection and prepare every query. */
static bool lite_check_all(struct sql_db *db, struct petrel_error *err)
{
    char *error = NULL;
    struct sql_conn *c = &db->conns[0];
    bool ok = lite_open(db, c, &error);
    for (size_t k = 0; ok && k < QUERY_KINDS; k++) {
        if (db->has_query[k])
            ok = lite_check(db, c, (enum sql_query_kind)k, &error);
    }
    if (!ok) {
        petrel_error_set(err, PETREL_ERR_IO, "sql: %s", error);
        free(error);
    }
    return ok;
}

static struct auth_db *sql_open(const struct auth_db_config *cfg, unsigned workers,
                                struct petrel_error *err)
{
    struct sql_db *db = xcalloc(1, sizeof(*db));
    db->engine = cfg->engine;
    db->connect = xstrdup(cfg->connect != NULL ? cfg->connect : "");
    db->query_timeout_ms = cfg->query_timeout_ms;
    db->pg_settings = (struct sql_pgsql_settings){
        .conninfo = db->connect,
        .application_name = "petrel-auth",
        .connect_timeout_ms = cfg->connect_timeout_ms,
        .query_timeout_ms = cfg->query_timeout_ms,
    };
    db->conns = xcalloc(workers, sizeof(*db->conns));
    db->conn_count = workers;
    for (unsigned i = 0; i < workers; i++)
        pthread_mutex_init(&db->conns[i].lock, NULL);
    const char *texts[QUERY_KINDS] = {cfg->password_query, cfg->user_query, cfg->iterate_query};
    for (size_t k = 0; k < QUERY_KINDS; k++) {
        atomic_init(&db->warned_rows[k], false);
        if (texts[k] == NULL)
            continue;
        char *error = NULL;
        if (!auth_sql_query_convert(texts[k], db->engine, &db->queries[k], &error)) {
            petrel_error_set(err, PETREL_ERR_INVALID, "sql: %s: %s", query_names[k], error);
            free(error);
            sql_close(&db->head);
            return NULL;
        }
        db->has_query[k] = true;
    }
    if (!db->has_query[Q_PASSWORD] && !db->has_query[Q_USER]) {
        petrel_error_set(err, PETREL_ERR_INVALID, "sql: needs password_query or user_query");
        sql_close(&db->head);
        return NULL;
    }
    if (db->engine == AUTH_SQL_SQLITE && !lite_check_all(db, err)) {
        sql_close(&db->head);
        return NULL;
    }
    return &db->head;
}

const struct auth_db_vfuncs auth_db_sql_vfuncs = {
    .name = "sql",
    .open = sql_open,
    .close = sql_close,
    .lookup = sql_lookup,
    .iterate = sql_iterate,
};
