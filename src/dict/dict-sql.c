/* sql: a dict in SQL tables, SQLite (embedded, the default) or PostgreSQL
 * (libpq, asynchronous on the event loop), with the same schema and the
 * same behaviour. Multi-value: lookups on a map with several value_fields
 * return all of them.
 *
 * Configuration (under `dicts: <name>:`):
 *
 *   driver: sql
 *   backend: sqlite | pgsql          default sqlite ("postgresql" = pgsql)
 *   path: ./var/dict.sqlite          sqlite: the database file (required;
 *                                    its directory must exist)
 *   busy_timeout: 5s                 sqlite: wait for another writer's lock
 *   connect: "host=127.0.0.1 port=5432 user=postgres dbname=petrel"
 *                                    pgsql: libpq conninfo (required)
 *   pool_size: 4                     pgsql: connections, 1-16, opened on demand
 *   connect_timeout: 5s              pgsql: per connection attempt
 *   query_timeout: 30s               pgsql: per statement; the connection is
 *                                    dropped when it runs longer
 *   table: dict                      the default table
 *   maps: [...]                      optional, below
 *
 * The default table is created when missing:
 *   key TEXT PRIMARY KEY (the storage key: "shared/..." or
 *   "priv/<username>/..."; COLLATE "C" in PostgreSQL so that ranges and
 *   ORDER BY are byte order), value BLOB / BYTEA (binary-safe),
 *   expires_at BIGINT NULL (seconds since the epoch; NULL = no TTL),
 *   plus a partial index on expires_at. Counters (atomic-inc) are stored as
 *   decimal text bytes.
 *
 * Table map (like Dovecot's dict-sql maps): keys matching a map's pattern
 * live in columns of the map's table instead of the default table.
 *
 *   maps:
 *     - pattern: "shared/quota/$user/$kind"
 *       table: quota_shared
 *       fields: {user: username, kind: kind}   # variable -> column ("$user" also accepted)
 *       value_field: amount
 *     - pattern: "priv/quota/storage"
 *       table: quota
 *       username_field: username               # required for priv/ patterns
 *       value_fields: [bytes, messages]        # several: lookup/iterate only
 *       expire_field: expires_at               # optional TTL column
 *
 * - A variable `$name` stands for one whole path segment (non-empty, no
 *   '/'); it must sit between slashes or at the end. Every variable needs a
 *   column in `fields`, and `fields` names no other variable.
 * - priv/ patterns are written without the user ("priv/quota/storage"); the
 *   user of the operation goes to username_field.
 * - A key belongs to the first map (configuration order) whose pattern it
 *   matches entirely; other keys go to the default table.
 * - A map with `value_field` is read-write: set updates the matching rows
 *   (or inserts one when none matched), unset deletes them, atomic-inc adds
 *   to the column as an integer. A unique index over the field columns (and
 *   username_field) is recommended so that concurrent first sets cannot
 *   insert twice.
 * - A map with `value_fields` (a list) is lookup/iterate only: lookups return
 *   every listed column of the first matching row; a write to it fails the
 *   whole transaction with a clear error.
 * - Map columns hold text or numbers: values are bound as text and the
 *   database converts them (a NUL byte in a value for a map is refused).
 *   Variable values are compared with the column's own type. A SQL NULL
 *   reads as an empty value.
 * - TTL on a map needs expire_field; without one a set with expire_secs
 *   fails.
 * - An iteration reads every map its prefix can match, in configuration
 *   order, then the default table; SortByKey / SortByValue order the rows of
 *   each table (maps: by the variable columns / the first value column, in
 *   the column's own order) and the tables follow each other. ExactKey on a
 *   map returns every row that matches the key.
 * - Identifiers (table and column names) are checked against
 *   [A-Za-z_][A-Za-z0-9_]* (at most 63 bytes) and quoted in SQL, so they are
 *   case-sensitive: use lower case for PostgreSQL tables created unquoted.
 *
 * SQL is built only from those identifiers and placeholders: keys, values,
 * usernames and times are always bound parameters.
 *
 * SQLite runs synchronously (a local file): WAL journal, busy_timeout,
 * cached prepared statements, each commit in BEGIN IMMEDIATE ... COMMIT
 * (ROLLBACK on any failure), iterations on their own read connection with a
 * stepping statement (constant memory). PostgreSQL runs on the event loop:
 * see dict-sql-pgsql.c. Prefix iterations use `key >= prefix AND key <
 * upper bound` (never LIKE); non-recursive ones filter deeper keys in SQL
 * and again with dict_iter_key_wanted. Expired rows are ignored on read and
 * removed by expire-scan. */
#include "dict/dict-sql-private.h"

#include "core/xalloc.h"
#include "sql/sql-pgsql.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SQL_MAX_PATTERN 1024

/* ---------- configuration ---------- */

/* A configuration key path for messages ("dicts.x.maps[0].table"). */
static void pathf(char *dst, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pathf(char *dst, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, size, fmt, ap);
    va_end(ap);
}

static bool is_var_char(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (!first && c >= '0' && c <= '9');
}

/* Reads an identifier-valued key; `required` reports its absence. */
static bool read_identifier(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                            const char *key, bool required, char **out)
{
    if (!cfg_string(ctx, map, path, key, out))
        return false;
    char full[256];
    pathf(full, sizeof(full), "%s.%s", path, key);
    if (*out == NULL) {
        if (required)
            return cfg_fail(ctx, map, full, "is required");
        return true;
    }
    if (!sql_identifier_valid(*out))
        return cfg_fail(ctx, ynode_get(map, key), full,
                        "'%s' is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*, at most %d "
                        "bytes)",
                        *out, SQL_MAX_IDENTIFIER);
    return true;
}

static void map_free(struct sql_map *m)
{
    free(m->pattern);
    free(m->table);
    for (size_t i = 0; i < m->var_count; i++) {
        free(m->vars[i]);
        free(m->var_columns[i]);
    }
    free(m->username_field);
    for (size_t i = 0; i < m->value_count; i++)
        free(m->value_fields[i]);
    free(m->expire_field);
}

static void sql_config_free(void *p)
{
    struct sql_config *cfg = p;
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < cfg->map_count; i++)
        map_free(&cfg->maps[i]);
    free(cfg->maps);
    free(cfg->dict_name);
    free(cfg->path);
    free(cfg->connect);
    free(cfg->table);
    free(cfg);
}

/* Splits the pattern into its variables; checks the shape. */
static bool parse_pattern(const struct cfg_ctx *ctx, const struct ynode *node, const char *path,
                          struct sql_map *m)
{
    const char *p = m->pattern;
    size_t len = strlen(p);
    if (strncmp(p, "shared/", 7) == 0)
        m->priv = false;
    else if (strncmp(p, "priv/", 5) == 0)
        m->priv = true;
    else
        return cfg_fail(ctx, node, path, "must start with shared/ or priv/");
    if (len > SQL_MAX_PATTERN)
        return cfg_fail(ctx, node, path, "longer than %d bytes", SQL_MAX_PATTERN);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c == 0x7f)
            return cfg_fail(ctx, node, path, "contains a control character");
        if (c != '$')
            continue;
        if (p[i - 1] != '/')
            return cfg_fail(ctx, node, path,
                            "a variable must start a path segment (…/$name/…), at offset %zu", i);
        size_t start = i + 1;
        size_t end = start;
        while (end < len && is_var_char(p[end], end == start))
            end++;
        if (end == start)
            return cfg_fail(ctx, node, path, "'$' must be followed by a variable name");
        if (end < len && p[end] != '/')
            return cfg_fail(ctx, node, path,
                            "a variable must fill its whole path segment (…/$name/…)");
        if (m->var_count == SQL_MAX_FIELDS)
            return cfg_fail(ctx, node, path, "more than %d variables", SQL_MAX_FIELDS);
        char *name = xstrndup(p + start, end - start);
        for (size_t k = 0; k < m->var_count; k++) {
            if (strcmp(m->vars[k], name) == 0) {
                cfg_fail(ctx, node, path, "variable $%s appears twice", name);
                free(name);
                return false;
            }
        }
        m->vars[m->var_count++] = name;
        i = end - 1;
    }
    return true;
}

static bool read_fields(const struct cfg_ctx *ctx, const struct ynode *item, const char *path,
                        struct sql_map *m)
{
    char full[256];
    pathf(full, sizeof(full), "%s.fields", path);
    const struct ynode *fields = ynode_get(item, "fields");
    if (fields != NULL && !cfg_expect_map(ctx, fields, full))
        return false;
    if (fields != NULL && fields->type == YNODE_MAP) {
        for (size_t i = 0; i < fields->count; i++) {
            const char *name = fields->keys[i];
            if (name[0] == '$')
                name++;
            size_t k = 0;
            while (k < m->var_count && strcmp(m->vars[k], name) != 0)
                k++;
            if (k == m->var_count)
                return cfg_fail(ctx, fields->items[i], full,
                                "'%s' is not a variable of the pattern", fields->keys[i]);
            const struct ynode *col = fields->items[i];
            if (col->type != YNODE_SCALAR || !sql_identifier_valid(col->scalar))
                return cfg_fail(ctx, col, full,
                                "the column of '%s' must be a plain SQL identifier "
                                "([A-Za-z_][A-Za-z0-9_]*)",
                                fields->keys[i]);
            if (m->var_columns[k] != NULL)
                return cfg_fail(ctx, col, full, "variable '%s' given twice", name);
            m->var_columns[k] = xstrdup(col->scalar);
        }
    }
    for (size_t k = 0; k < m->var_count; k++) {
        if (m->var_columns[k] == NULL)
            return cfg_fail(ctx, fields != NULL ? fields : item, full,
                            "variable $%s of the pattern has no column", m->vars[k]);
    }
    return true;
}

static bool read_map(const struct cfg_ctx *ctx, const struct ynode *item, const char *path,
                     struct sql_map *m)
{
    static const char *const keys[] = {"pattern",        "table",       "fields",
                                       "username_field", "value_field", "value_fields",
                                       "expire_field",   NULL};
    if (item->type != YNODE_MAP)
        return cfg_fail(ctx, item, path, "expected a mapping with pattern, table, fields, ...");
    if (!cfg_check_keys(ctx, item, path, keys))
        return false;
    char full[256];
    pathf(full, sizeof(full), "%s.pattern", path);
    if (!cfg_string(ctx, item, path, "pattern", &m->pattern))
        return false;
    if (m->pattern == NULL)
        return cfg_fail(ctx, item, full, "is required");
    if (!parse_pattern(ctx, ynode_get(item, "pattern"), full, m))
        return false;
    if (!read_identifier(ctx, item, path, "table", true, &m->table) ||
        !read_fields(ctx, item, path, m) ||
        !read_identifier(ctx, item, path, "username_field", false, &m->username_field) ||
        !read_identifier(ctx, item, path, "expire_field", false, &m->expire_field))
        return false;
    pathf(full, sizeof(full), "%s.username_field", path);
    if (m->priv && m->username_field == NULL)
        return cfg_fail(ctx, item, full, "is required for a priv/ pattern");
    if (!m->priv && m->username_field != NULL)
        return cfg_fail(ctx, ynode_get(item, "username_field"), full,
                        "only priv/ patterns have a username");

    char *single = NULL;
    if (!read_identifier(ctx, item, path, "value_field", false, &single)) {
        free(single); /* set even when it is not a valid identifier */
        return false;
    }
    char **list = NULL;
    size_t n = 0;
    if (!cfg_string_list(ctx, item, path, "value_fields", SQL_MAX_FIELDS, &list, &n)) {
        free(single);
        return false;
    }
    pathf(full, sizeof(full), "%s.value_fields", path);
    bool ok = true;
    if (single != NULL && list != NULL) {
        ok = cfg_fail(ctx, ynode_get(item, "value_fields"), full,
                      "give value_field or value_fields, not both");
    } else if (single != NULL) {
        m->value_fields[0] = single;
        m->value_count = 1;
        single = NULL;
    } else if (list == NULL || n == 0) {
        ok = cfg_fail(ctx, item, path, "value_field (or a non-empty value_fields) is required");
    } else {
        for (size_t i = 0; i < n && ok; i++) {
            if (!sql_identifier_valid(list[i]))
                ok = cfg_fail(ctx, ynode_get(item, "value_fields"), full,
                              "'%s' is not a plain SQL identifier", list[i]);
        }
        for (size_t i = 0; i < n && ok; i++)
            m->value_fields[m->value_count++] = xstrdup(list[i]);
    }
    free(single);
    cfg_strv_free(list);
    return ok;
}

static bool read_maps(const struct cfg_ctx *ctx, const struct ynode *node, const char *path,
                      struct sql_config *cfg)
{
    char full[256];
    pathf(full, sizeof(full), "%s.maps", path);
    if (node == NULL || (node->type == YNODE_SCALAR && !node->quoted &&
                         (node->scalar[0] == '\0' || strcmp(node->scalar, "~") == 0 ||
                          strcmp(node->scalar, "null") == 0)))
        return true;
    if (node->type != YNODE_SEQ)
        return cfg_fail(ctx, node, full, "expected a list of mappings, found %s",
                        ynode_type_name(node->type));
    if (node->count > SQL_MAX_MAPS)
        return cfg_fail(ctx, node, full, "more than %d maps", SQL_MAX_MAPS);
    cfg->maps = xcalloc(node->count + 1, sizeof(*cfg->maps));
    for (size_t i = 0; i < node->count; i++) {
        char item_path[256];
        pathf(item_path, sizeof(item_path), "%s[%zu]", full, i);
        cfg->map_count = i + 1; /* so that config_free frees a half-read map */
        if (!read_map(ctx, node->items[i], item_path, &cfg->maps[i]))
            return false;
    }
    return true;
}

/* Refuses a key that belongs to the other backend. */
static bool not_for_backend(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                            const char *key, const char *backend)
{
    const struct ynode *n = ynode_get(map, key);
    if (n == NULL)
        return true;
    char full[256];
    pathf(full, sizeof(full), "%s.%s", path, key);
    return cfg_fail(ctx, n, full, "only applies to backend %s", backend);
}

static void *sql_config_read(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                             const char *dict_name)
{
    static const char *const keys[] = {
        "driver",          "backend",       "path",  "busy_timeout", "connect", "pool_size",
        "connect_timeout", "query_timeout", "table", "maps",         NULL};
    if (!cfg_check_keys(ctx, map, path, keys))
        return NULL;
    struct sql_config *cfg = xcalloc(1, sizeof(*cfg));
    cfg->dict_name = xstrdup(dict_name);
    cfg->busy_timeout_ms = 5000;
    cfg->pool_size = 4;
    cfg->connect_timeout_ms = 5000;
    cfg->query_timeout_ms = 30000;
    char *backend = NULL;
    char full[256];
    if (!cfg_string(ctx, map, path, "backend", &backend))
        goto fail;
    if (backend == NULL || strcmp(backend, "sqlite") == 0) {
        cfg->dialect = SQL_DIALECT_SQLITE;
    } else if (strcmp(backend, "pgsql") == 0 || strcmp(backend, "postgresql") == 0) {
        cfg->dialect = SQL_DIALECT_PGSQL;
    } else {
        pathf(full, sizeof(full), "%s.backend", path);
        cfg_fail(ctx, ynode_get(map, "backend"), full, "expected sqlite or pgsql, found '%s'",
                 backend);
        free(backend);
        goto fail;
    }
    free(backend);
    if (!cfg_string(ctx, map, path, "path", &cfg->path) ||
        !cfg_string(ctx, map, path, "connect", &cfg->connect) ||
        !cfg_duration_ms(ctx, map, path, "busy_timeout", 0, 600000, &cfg->busy_timeout_ms) ||
        !cfg_int(ctx, map, path, "pool_size", 1, 16, &cfg->pool_size) ||
        !cfg_duration_ms(ctx, map, path, "connect_timeout", 100, 600000,
                         &cfg->connect_timeout_ms) ||
        !cfg_duration_ms(ctx, map, path, "query_timeout", 100, 86400000, &cfg->query_timeout_ms) ||
        !read_identifier(ctx, map, path, "table", false, &cfg->table))
        goto fail;
    if (cfg->table == NULL)
        cfg->table = xstrdup(SQL_DEFAULT_TABLE);
    if (cfg->dialect == SQL_DIALECT_SQLITE) {
        if (!not_for_backend(ctx, map, path, "connect", "pgsql") ||
            !not_for_backend(ctx, map, path, "pool_size", "pgsql") ||
            !not_for_backend(ctx, map, path, "connect_timeout", "pgsql") ||
            !not_for_backend(ctx, map, path, "query_timeout", "pgsql"))
            goto fail;
        if (cfg->path == NULL || cfg->path[0] == '\0') {
            pathf(full, sizeof(full), "%s.path", path);
            cfg_fail(ctx, map, full, "is required with backend sqlite (e.g. ./var/dict.sqlite)");
            goto fail;
        }
    } else {
        if (!not_for_backend(ctx, map, path, "path", "sqlite") ||
            !not_for_backend(ctx, map, path, "busy_timeout", "sqlite"))
            goto fail;
        pathf(full, sizeof(full), "%s.connect", path);
        if (cfg->connect == NULL || cfg->connect[0] == '\0') {
            cfg_fail(ctx, map, full,
                     "is required with backend pgsql (a libpq conninfo such as \"host=127.0.0.1 "
                     "port=5432 user=postgres dbname=petrel\")");
            goto fail;
        }
        if (!sql_pgsql_conninfo_valid(cfg->connect)) {
            cfg_fail(ctx, ynode_get(map, "connect"), full,
                     "not a valid libpq conninfo (keyword=value pairs or a postgresql:// URI)");
            goto fail;
        }
    }
    if (!read_maps(ctx, ynode_get(map, "maps"), path, cfg))
        goto fail;
    return cfg;
fail:
    sql_config_free(cfg);
    return NULL;
}

/* ---------- statements ---------- */

static bool pg(const struct sql_stmt *q)
{
    return q->dialect == SQL_DIALECT_PGSQL;
}

/* " WHERE " for the first condition, " AND " after it. */
static void q_and(struct sql_stmt *q, bool *first)
{
    sql_stmt_append(q, *first ? " WHERE " : " AND ");
    *first = false;
}

/* The default table's key column in range comparisons and ORDER BY. */
static void q_key_order(struct sql_stmt *q)
{
    sql_stmt_ident(q, "key");
    if (pg(q))
        sql_stmt_append(q, " COLLATE \"C\"");
}

/* ("col" IS NULL OR "col" > now): rows still alive. */
static void q_live(struct sql_stmt *q, bool *first, const char *column, int64_t now)
{
    if (column == NULL)
        return;
    q_and(q, first);
    sql_stmt_append(q, "(");
    sql_stmt_ident(q, column);
    sql_stmt_append(q, " IS NULL OR ");
    sql_stmt_ident(q, column);
    sql_stmt_append(q, " > ");
    sql_stmt_int(q, now);
    sql_stmt_append(q, ")");
}

/* The smallest string above every string starting with `prefix`, or NULL.
 * Only an ASCII byte is incremented, so the bound stays valid UTF-8 (it may
 * be looser than the tightest one; rows are checked again in C). */
static char *prefix_upper_bound(const char *prefix)
{
    size_t len = strlen(prefix);
    while (len > 0) {
        unsigned char c = (unsigned char)prefix[len - 1];
        if (c < 0x7f) {
            char *upper = xstrndup(prefix, len);
            upper[len - 1] = (char)(c + 1);
            return upper;
        }
        len--;
    }
    return NULL;
}

/* `col >= prefix AND col < upper` on text. */
static void q_prefix_range(struct sql_stmt *q, bool *first, const char *column_sql,
                           const char *prefix)
{
    q_and(q, first);
    sql_stmt_append(q, column_sql);
    sql_stmt_append(q, " >= ");
    sql_stmt_text_copy(q, prefix);
    char *upper = prefix_upper_bound(prefix);
    if (upper != NULL) {
        q_and(q, first);
        sql_stmt_append(q, column_sql);
        sql_stmt_append(q, " < ");
        sql_stmt_text_copy(q, upper);
        free(upper);
    }
}

/* Characters (not bytes) in a UTF-8 string: SQL substr() counts those. */
static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if ((*p & 0xc0) != 0x80)
            n++;
    }
    return n;
}

void sql_build_schema(const struct sql_config *cfg, struct sql_stmt *q)
{
    sql_stmt_reset(q);
    sql_stmt_append(q, "CREATE TABLE IF NOT EXISTS ");
    sql_stmt_ident(q, cfg->table);
    if (pg(q))
        sql_stmt_append(q, " (\"key\" TEXT COLLATE \"C\" PRIMARY KEY, \"value\" BYTEA NOT NULL, "
                           "\"expires_at\" BIGINT NULL)");
    else
        sql_stmt_append(q, " (\"key\" TEXT PRIMARY KEY NOT NULL, \"value\" BLOB NOT NULL, "
                           "\"expires_at\" BIGINT NULL) WITHOUT ROWID");
    sql_stmt_append(q, ";\nCREATE INDEX IF NOT EXISTS ");
    buf_printf(&q->sql, "\"%s_expires_at\"", cfg->table);
    sql_stmt_append(q, " ON ");
    sql_stmt_ident(q, cfg->table);
    sql_stmt_append(q, " (\"expires_at\") WHERE \"expires_at\" IS NOT NULL");
}

/* ---------- the table map ---------- */

static void source_clear(struct sql_iter_source *s)
{
    for (size_t i = 0; i < SQL_MAX_FIELDS; i++)
        free(s->values[i]);
    free(s->partial);
    free(s->username);
    memset(s, 0, sizeof(*s));
}

/* Matches storage key (or prefix, when !full) `key` against the map. On
 * success fills `out` (bound values, a partial value, the username) and
 * `*rest` (the pattern text after the point where a prefix ended; "" for a
 * whole match). */
static bool map_match(const struct sql_map *m, const char *key, bool full,
                      struct sql_iter_source *out, const char **rest)
{
    memset(out, 0, sizeof(*out));
    out->map = m;
    const char *k = key;
    const char *p = m->pattern;
    if (m->priv) {
        if (strncmp(key, "priv/", 5) != 0)
            return false;
        const char *user = key + 5;
        const char *slash = strchr(user, '/');
        if (slash == NULL || slash == user)
            return false;
        out->username = xstrndup(user, (size_t)(slash - user));
        k = slash + 1;
        p = m->pattern + 5;
    } else if (strncmp(key, "shared/", 7) != 0) {
        return false;
    }
    while (*p != '\0') {
        if (*p == '$') {
            const char *name_end = p + 1;
            while (is_var_char(*name_end, name_end == p + 1))
                name_end++;
            if (*k == '\0') {
                if (full)
                    goto no;
                *rest = p;
                return true;
            }
            size_t seg = strcspn(k, "/");
            if (k[seg] == '\0' && !full) {
                out->partial = xstrndup(k, seg);
                *rest = name_end;
                return true;
            }
            if (seg == 0)
                goto no;
            out->values[out->bound++] = xstrndup(k, seg);
            k += seg;
            p = name_end;
            continue;
        }
        if (*k == '\0') {
            if (full)
                goto no;
            *rest = p;
            return true;
        }
        if (*p != *k)
            goto no;
        p++;
        k++;
    }
    if (*k != '\0')
        goto no;
    *rest = p;
    return true;
no:
    source_clear(out);
    return false;
}

/* The map a storage key belongs to (t->map NULL: the default table). */
static void resolve(const struct sql_config *cfg, const char *key, struct sql_iter_source *t)
{
    const char *rest;
    for (size_t i = 0; i < cfg->map_count; i++) {
        if (map_match(&cfg->maps[i], key, true, t, &rest))
            return;
    }
    memset(t, 0, sizeof(*t));
}

/* WHERE over the map's bound variables (and username). */
static void q_map_where(struct sql_stmt *q, bool *first, const struct sql_iter_source *t)
{
    const struct sql_map *m = t->map;
    for (size_t i = 0; i < t->bound; i++) {
        q_and(q, first);
        sql_stmt_ident(q, m->var_columns[i]);
        sql_stmt_append(q, " = ");
        sql_stmt_text_copy(q, t->values[i]);
    }
    if (m->priv) {
        q_and(q, first);
        sql_stmt_ident(q, m->username_field);
        sql_stmt_append(q, " = ");
        sql_stmt_text_copy(q, t->username);
    }
}

static void q_value_columns(struct sql_stmt *q, const struct sql_map *m)
{
    for (size_t i = 0; i < m->value_count; i++) {
        if (i > 0)
            sql_stmt_append(q, ", ");
        sql_stmt_ident(q, m->value_fields[i]);
    }
}

/* ---------- lookup ---------- */

void sql_build_lookup(const struct sql_config *cfg, const char *key, int64_t now,
                      struct sql_stmt *q)
{
    sql_stmt_reset(q);
    struct sql_iter_source t;
    resolve(cfg, key, &t);
    bool first = true;
    sql_stmt_append(q, "SELECT ");
    if (t.map != NULL) {
        q_value_columns(q, t.map);
        sql_stmt_append(q, " FROM ");
        sql_stmt_ident(q, t.map->table);
        q_map_where(q, &first, &t);
        q_live(q, &first, t.map->expire_field, now);
        sql_stmt_append(q, " LIMIT 1");
        q->columns = t.map->value_count;
        q->text_results = true;
    } else {
        sql_stmt_append(q, "\"value\" FROM ");
        sql_stmt_ident(q, cfg->table);
        q_and(q, &first);
        sql_stmt_append(q, "\"key\" = ");
        sql_stmt_text_copy(q, key);
        q_live(q, &first, "expires_at", now);
        q->columns = 1;
    }
    source_clear(&t);
}

/* ---------- iterate ---------- */

void sql_iter_plan_init(struct sql_iter_plan *p, const struct sql_config *cfg, const char *prefix,
                        unsigned flags)
{
    memset(p, 0, sizeof(*p));
    p->cfg = cfg;
    p->prefix = xstrdup(prefix);
    p->flags = flags;
    bool exact = (flags & DICT_ITER_EXACT_KEY) != 0;
    bool recurse = (flags & DICT_ITER_RECURSE) != 0;
    for (size_t i = 0; i < cfg->map_count; i++) {
        struct sql_iter_source *s = &p->sources[p->count];
        const char *rest = "";
        if (!map_match(&cfg->maps[i], prefix, exact, s, &rest))
            continue;
        /* Non-recursive: a '/' still to come in the pattern means every key
         * of this map is deeper than a direct child. */
        if (!exact && !recurse && strchr(rest, '/') != NULL) {
            source_clear(s);
            continue;
        }
        p->count++;
    }
    memset(&p->sources[p->count], 0, sizeof(p->sources[0]));
    p->count++; /* the default table */
}

void sql_iter_plan_free(struct sql_iter_plan *p)
{
    for (size_t i = 0; i < p->count; i++)
        source_clear(&p->sources[i]);
    free(p->prefix);
    memset(p, 0, sizeof(*p));
}

bool sql_iter_text_results(const struct sql_iter_plan *p, size_t i)
{
    return p->sources[i].map != NULL;
}

static void build_iterate_default(const struct sql_iter_plan *p, int64_t now, struct sql_stmt *q)
{
    const char *key_col = pg(q) ? "\"key\" COLLATE \"C\"" : "\"key\"";
    bool first = true;
    bool no_value = (p->flags & DICT_ITER_NO_VALUE) != 0;
    sql_stmt_append(q, no_value ? "SELECT \"key\" FROM " : "SELECT \"key\", \"value\" FROM ");
    sql_stmt_ident(q, p->cfg->table);
    if (p->flags & DICT_ITER_EXACT_KEY) {
        q_and(q, &first);
        sql_stmt_append(q, "\"key\" = ");
        sql_stmt_text_copy(q, p->prefix);
    } else {
        q_prefix_range(q, &first, key_col, p->prefix);
        if ((p->flags & DICT_ITER_RECURSE) == 0) {
            /* no '/' after the prefix: direct children only */
            q_and(q, &first);
            sql_stmt_append(q, pg(q) ? "strpos(substr(\"key\", " : "instr(substr(\"key\", ");
            sql_stmt_int(q, (int64_t)utf8_chars(p->prefix) + 1);
            sql_stmt_append(q, "), '/') = 0");
        }
    }
    q_live(q, &first, "expires_at", now);
    if (p->flags & DICT_ITER_SORT_BY_KEY) {
        sql_stmt_append(q, " ORDER BY ");
        q_key_order(q);
    } else if (p->flags & DICT_ITER_SORT_BY_VALUE) {
        sql_stmt_append(q, " ORDER BY \"value\", ");
        q_key_order(q);
    }
    q->columns = no_value ? 1 : 2;
}

static void build_iterate_map(const struct sql_iter_plan *p, const struct sql_iter_source *s,
                              int64_t now, struct sql_stmt *q)
{
    const struct sql_map *m = s->map;
    bool first = true;
    bool no_value = (p->flags & DICT_ITER_NO_VALUE) != 0;
    sql_stmt_append(q, "SELECT ");
    size_t cols = 0;
    for (size_t i = 0; i < m->var_count; i++) {
        sql_stmt_append(q, cols++ > 0 ? ", " : "");
        sql_stmt_ident(q, m->var_columns[i]);
    }
    if (m->priv) {
        sql_stmt_append(q, cols++ > 0 ? ", " : "");
        sql_stmt_ident(q, m->username_field);
    }
    if (!no_value) {
        sql_stmt_append(q, cols > 0 ? ", " : "");
        q_value_columns(q, m);
        cols += m->value_count;
    }
    if (cols == 0)
        sql_stmt_append(q, "1"); /* a shared pattern without variables, NO_VALUE */
    sql_stmt_append(q, " FROM ");
    sql_stmt_ident(q, m->table);
    q_map_where(q, &first, s);
    if (s->partial != NULL) {
        struct buf col = {0};
        buf_append_str(&col, "CAST(\"");
        buf_append_str(&col, m->var_columns[s->bound]);
        buf_append_str(&col, pg(q) ? "\" AS TEXT) COLLATE \"C\"" : "\" AS TEXT)");
        q_prefix_range(q, &first, buf_cstr(&col), s->partial);
        buf_free(&col);
    }
    q_live(q, &first, m->expire_field, now);
    if ((p->flags & DICT_ITER_SORT_BY_VALUE) && m->value_count > 0) {
        sql_stmt_append(q, " ORDER BY ");
        sql_stmt_ident(q, m->value_fields[0]);
        for (size_t i = 0; i < m->var_count; i++) {
            sql_stmt_append(q, ", ");
            sql_stmt_ident(q, m->var_columns[i]);
        }
    } else if ((p->flags & (DICT_ITER_SORT_BY_KEY | DICT_ITER_SORT_BY_VALUE)) && m->var_count > 0) {
        sql_stmt_append(q, " ORDER BY ");
        for (size_t i = 0; i < m->var_count; i++) {
            sql_stmt_append(q, i > 0 ? ", " : "");
            sql_stmt_ident(q, m->var_columns[i]);
        }
    }
    q->columns = cols == 0 ? 1 : cols;
    q->text_results = true;
}

void sql_build_iterate(const struct sql_iter_plan *p, size_t i, int64_t now, struct sql_stmt *q)
{
    sql_stmt_reset(q);
    if (p->sources[i].map == NULL)
        build_iterate_default(p, now, q);
    else
        build_iterate_map(p, &p->sources[i], now, q);
}

static void append_value(struct buf *b, const struct sql_value *v)
{
    if (v->data != NULL)
        buf_append(b, v->data, v->len);
}

bool sql_iter_row(const struct sql_iter_plan *p, size_t i, const struct sql_value *cols,
                  size_t ncols, struct buf *key, struct dict_value *values, struct dict_row *row)
{
    size_t count = 0;
    size_t *value_count = &count;
    const struct sql_map *m = p->sources[i].map;
    bool no_value = (p->flags & DICT_ITER_NO_VALUE) != 0;
    buf_reset(key);
    *value_count = 0;
    if (m == NULL) {
        if (ncols < 1 || cols[0].data == NULL)
            return false;
        append_value(key, &cols[0]);
        if (!no_value && ncols >= 2) {
            values[0] = (struct dict_value){.data = cols[1].data, .len = cols[1].len};
            *value_count = 1;
        }
    } else {
        size_t fixed = m->var_count + (m->priv ? 1 : 0);
        if (ncols < fixed + (no_value ? 0 : m->value_count))
            return false;
        const char *pat = m->pattern;
        if (m->priv) {
            buf_append_str(key, "priv/");
            append_value(key, &cols[m->var_count]);
            buf_append_char(key, '/');
            pat += 5;
        }
        size_t var = 0;
        while (*pat != '\0') {
            if (*pat == '$') {
                const char *end = pat + 1;
                while (is_var_char(*end, end == pat + 1))
                    end++;
                append_value(key, &cols[var++]);
                pat = end;
            } else {
                buf_append_char(key, *pat++);
            }
        }
        if (!no_value) {
            for (size_t v = 0; v < m->value_count; v++)
                values[v] =
                    (struct dict_value){.data = cols[fixed + v].data, .len = cols[fixed + v].len};
            *value_count = m->value_count;
        }
    }
    if (memchr(buf_cstr(key), '\0', key->len) != NULL)
        return false;
    for (size_t v = 0; v < *value_count; v++) {
        if (values[v].data == NULL) {
            values[v].data = "";
            values[v].len = 0;
        }
    }
    row->key = buf_cstr(key);
    row->values = values;
    row->value_count = count;
    return dict_iter_key_wanted(p->prefix, row->key, p->flags);
}

/* ---------- transactions ---------- */

char *sql_op_describe(const struct dict_tx_op *op)
{
    const char *kind = op->kind == DICT_OP_SET     ? "set"
                       : op->kind == DICT_OP_UNSET ? "unset"
                                                   : "atomic-inc";
    size_t len = strlen(op->key);
    if (len > 160)
        return xasprintf("%s %.160s...", kind, op->key);
    return xasprintf("%s %s", kind, op->key);
}

bool sql_ops_check(const struct sql_config *cfg, const struct dict_tx_op *ops, size_t count,
                   int64_t expire_secs, char **error)
{
    for (size_t i = 0; i < count; i++) {
        const struct dict_tx_op *op = &ops[i];
        struct sql_iter_source t;
        resolve(cfg, op->key, &t);
        const struct sql_map *m = t.map;
        source_clear(&t);
        if (m == NULL)
            continue;
        char *what = NULL;
        if (m->value_count > 1) {
            what = sql_op_describe(op);
            *error = xasprintf("%s: the map '%s' has several value_fields, so it is read-only "
                               "(lookup and iterate)",
                               what, m->pattern);
        } else if (op->kind == DICT_OP_SET && expire_secs > 0 && m->expire_field == NULL) {
            what = sql_op_describe(op);
            *error = xasprintf("%s: the map '%s' has no expire_field, so it cannot store a TTL",
                               what, m->pattern);
        } else if (op->kind == DICT_OP_SET && memchr(op->value, '\0', op->value_len) != NULL) {
            what = sql_op_describe(op);
            *error = xasprintf("%s: the value contains a NUL byte; the map '%s' stores text", what,
                               m->pattern);
        } else {
            continue;
        }
        free(what);
        return false;
    }
    return true;
}

/* The TTL parameter of a set: now + expire_secs, or NULL. */
static void q_expiry(struct sql_stmt *q, int64_t expire_secs, int64_t now)
{
    if (expire_secs > 0)
        sql_stmt_int(q, now + expire_secs);
    else
        sql_stmt_null(q);
}

static void build_set(const struct sql_config *cfg, const struct dict_tx_op *op,
                      const struct sql_iter_source *t, const struct sql_op_state *st,
                      int64_t expire_secs, int64_t now, struct sql_stmt *q)
{
    const struct sql_map *m = t->map;
    if (m == NULL) {
        sql_stmt_append(q, "INSERT INTO ");
        sql_stmt_ident(q, cfg->table);
        sql_stmt_append(q, " (\"key\", \"value\", \"expires_at\") VALUES (");
        sql_stmt_text_copy(q, op->key);
        sql_stmt_append(q, ", ");
        sql_stmt_blob(q, op->value != NULL ? op->value : "", op->value_len);
        sql_stmt_append(q, ", ");
        q_expiry(q, expire_secs, now);
        sql_stmt_append(q, ") ON CONFLICT (\"key\") DO UPDATE SET \"value\" = excluded.\"value\", "
                           "\"expires_at\" = excluded.\"expires_at\"");
        return;
    }
    if (st->step == 0) {
        /* update the matching rows; insert when there were none */
        bool first = true;
        sql_stmt_append(q, "UPDATE ");
        sql_stmt_ident(q, m->table);
        sql_stmt_append(q, " SET ");
        sql_stmt_ident(q, m->value_fields[0]);
        sql_stmt_append(q, " = ");
        sql_stmt_text_len(q, op->value, op->value_len);
        if (m->expire_field != NULL) {
            sql_stmt_append(q, ", ");
            sql_stmt_ident(q, m->expire_field);
            sql_stmt_append(q, " = ");
            q_expiry(q, expire_secs, now);
        }
        q_map_where(q, &first, t);
        return;
    }
    sql_stmt_append(q, "INSERT INTO ");
    sql_stmt_ident(q, m->table);
    sql_stmt_append(q, " (");
    for (size_t i = 0; i < m->var_count; i++) {
        sql_stmt_ident(q, m->var_columns[i]);
        sql_stmt_append(q, ", ");
    }
    if (m->priv) {
        sql_stmt_ident(q, m->username_field);
        sql_stmt_append(q, ", ");
    }
    sql_stmt_ident(q, m->value_fields[0]);
    if (m->expire_field != NULL) {
        sql_stmt_append(q, ", ");
        sql_stmt_ident(q, m->expire_field);
    }
    sql_stmt_append(q, ") VALUES (");
    for (size_t i = 0; i < m->var_count; i++) {
        sql_stmt_text_copy(q, t->values[i]);
        sql_stmt_append(q, ", ");
    }
    if (m->priv) {
        sql_stmt_text_copy(q, t->username);
        sql_stmt_append(q, ", ");
    }
    sql_stmt_text_len(q, op->value, op->value_len);
    if (m->expire_field != NULL) {
        sql_stmt_append(q, ", ");
        q_expiry(q, expire_secs, now);
    }
    sql_stmt_append(q, ")");
}

/* WHERE of the row(s) an op addresses, alive rows only when `live`. */
static void q_target_where(struct sql_stmt *q, const struct sql_iter_source *t, const char *key,
                           bool live, int64_t now)
{
    bool first = true;
    if (t->map != NULL) {
        q_map_where(q, &first, t);
        if (live)
            q_live(q, &first, t->map->expire_field, now);
    } else {
        q_and(q, &first);
        sql_stmt_append(q, "\"key\" = ");
        sql_stmt_text_copy(q, key);
        if (live)
            q_live(q, &first, "expires_at", now);
    }
}

static void build_inc(const struct sql_config *cfg, const struct dict_tx_op *op,
                      const struct sql_iter_source *t, const struct sql_op_state *st, int64_t now,
                      struct sql_stmt *q)
{
    const char *table = t->map != NULL ? t->map->table : cfg->table;
    const char *column = t->map != NULL ? t->map->value_fields[0] : "value";
    if (pg(q)) {
        /* one statement; a non-integer value makes PostgreSQL fail it */
        sql_stmt_append(q, "UPDATE ");
        sql_stmt_ident(q, table);
        sql_stmt_append(q, " SET ");
        sql_stmt_ident(q, column);
        if (t->map == NULL) {
            sql_stmt_append(q, " = convert_to((convert_from(\"value\", 'UTF8')::bigint + ");
            sql_stmt_int(q, op->delta);
            sql_stmt_append(q, ")::text, 'UTF8')");
        } else {
            sql_stmt_append(q, " = CAST(CAST(");
            sql_stmt_ident(q, column);
            sql_stmt_append(q, " AS TEXT) AS BIGINT) + ");
            sql_stmt_int(q, op->delta);
        }
        q_target_where(q, t, op->key, true, now);
        return;
    }
    /* SQLite converts leniently ('12abc' + 1 = 13): read, check in C, write */
    if (st->step == 0) {
        sql_stmt_append(q, "SELECT ");
        sql_stmt_ident(q, column);
        sql_stmt_append(q, " FROM ");
        sql_stmt_ident(q, table);
        q_target_where(q, t, op->key, true, now);
        sql_stmt_append(q, " LIMIT 1");
        q->columns = 1;
        return;
    }
    sql_stmt_append(q, "UPDATE ");
    sql_stmt_ident(q, table);
    sql_stmt_append(q, " SET ");
    sql_stmt_ident(q, column);
    sql_stmt_append(q, " = ");
    if (t->map != NULL)
        sql_stmt_text(q, st->number);
    else
        sql_stmt_blob(q, st->number, strlen(st->number));
    q_target_where(q, t, op->key, true, now);
}

void sql_op_build(const struct sql_config *cfg, const struct dict_tx_op *op,
                  const struct sql_op_state *st, int64_t expire_secs, int64_t now,
                  struct sql_stmt *q)
{
    sql_stmt_reset(q);
    struct sql_iter_source t;
    resolve(cfg, op->key, &t);
    switch (op->kind) {
    case DICT_OP_SET:
        build_set(cfg, op, &t, st, expire_secs, now, q);
        break;
    case DICT_OP_UNSET:
        sql_stmt_append(q, "DELETE FROM ");
        sql_stmt_ident(q, t.map != NULL ? t.map->table : cfg->table);
        q_target_where(q, &t, op->key, false, now);
        break;
    case DICT_OP_INC:
        build_inc(cfg, op, &t, st, now, q);
        break;
    }
    source_clear(&t);
}

enum sql_op_next sql_op_result(const struct sql_config *cfg, const struct dict_tx_op *op,
                               struct sql_op_state *st, int64_t changes,
                               const struct sql_value *first, char **error)
{
    bool is_map = false;
    if (op->kind != DICT_OP_UNSET) {
        struct sql_iter_source t;
        resolve(cfg, op->key, &t);
        is_map = t.map != NULL;
        source_clear(&t);
    }
    switch (op->kind) {
    case DICT_OP_UNSET:
        return SQL_OP_DONE;
    case DICT_OP_SET:
        if (is_map && st->step == 0 && changes == 0) {
            st->step = 1;
            return SQL_OP_AGAIN;
        }
        return SQL_OP_DONE;
    case DICT_OP_INC:
        break;
    }
    if (cfg->dialect == SQL_DIALECT_PGSQL)
        return changes > 0 ? SQL_OP_DONE : SQL_OP_NOT_FOUND;
    if (st->step == 1)
        return SQL_OP_DONE;
    if (first == NULL)
        return SQL_OP_NOT_FOUND;
    int64_t v;
    int64_t sum;
    char *what = sql_op_describe(op);
    if (!dict_parse_counter(first->data, first->len, &v)) {
        *error = xasprintf("%s: the value is not an integer", what);
        free(what);
        return SQL_OP_FAILED;
    }
    if (__builtin_add_overflow(v, op->delta, &sum)) {
        *error = xasprintf("%s: the counter would overflow", what);
        free(what);
        return SQL_OP_FAILED;
    }
    free(what);
    snprintf(st->number, sizeof(st->number), "%" PRId64, sum);
    st->step = 1;
    return SQL_OP_AGAIN;
}

/* ---------- expiry ---------- */

size_t sql_expire_count(const struct sql_config *cfg)
{
    size_t n = 1;
    for (size_t i = 0; i < cfg->map_count; i++)
        n += cfg->maps[i].expire_field != NULL;
    return n;
}

void sql_build_expire(const struct sql_config *cfg, size_t i, int64_t now, struct sql_stmt *q)
{
    sql_stmt_reset(q);
    const char *table = cfg->table;
    const char *column = "expires_at";
    if (i > 0) {
        size_t k = 0;
        for (size_t m = 0; m < cfg->map_count; m++) {
            if (cfg->maps[m].expire_field == NULL)
                continue;
            if (++k == i) {
                table = cfg->maps[m].table;
                column = cfg->maps[m].expire_field;
                break;
            }
        }
    }
    sql_stmt_append(q, "DELETE FROM ");
    sql_stmt_ident(q, table);
    sql_stmt_append(q, " WHERE ");
    sql_stmt_ident(q, column);
    sql_stmt_append(q, " IS NOT NULL AND ");
    sql_stmt_ident(q, column);
    sql_stmt_append(q, " <= ");
    sql_stmt_int(q, now);
}

/* ---------- the driver ---------- */

static const struct dict_driver_ops *executor(const struct dict *dict)
{
    const struct sql_config *cfg = dict->config;
    return cfg->dialect == SQL_DIALECT_PGSQL ? &sql_executor_pgsql : &sql_executor_sqlite;
}

static bool sql_open(struct dict *dict, struct petrel_error *err)
{
    return executor(dict)->open(dict, err);
}

static void sql_close(struct dict *dict)
{
    executor(dict)->close(dict);
}

static void sql_lookup(struct dict *dict, const char *key, dict_lookup_cb *cb, void *ctx)
{
    executor(dict)->lookup(dict, key, cb, ctx);
}

static struct dict_iterate *sql_iterate_init(struct dict *dict, const char *prefix, unsigned flags)
{
    return executor(dict)->iterate_init(dict, prefix, flags);
}

static enum dict_iter_status sql_iterate_next(struct dict_iterate *it, struct dict_row *row)
{
    return executor(it->dict)->iterate_next(it, row);
}

static void sql_iterate_deinit(struct dict_iterate *it)
{
    executor(it->dict)->iterate_deinit(it);
}

static void sql_commit(struct dict *dict, const struct dict_tx_op *ops, size_t count,
                       int64_t expire_secs, dict_commit_cb *cb, void *ctx)
{
    executor(dict)->commit(dict, ops, count, expire_secs, cb, ctx);
}

static void sql_expire_scan(struct dict *dict, dict_expire_cb *cb, void *ctx)
{
    executor(dict)->expire_scan(dict, cb, ctx);
}

const struct dict_driver_ops dict_driver_sql = {
    .name = "sql",
    .multi_value = true,
    .config_read = sql_config_read,
    .config_free = sql_config_free,
    .open = sql_open,
    .close = sql_close,
    .lookup = sql_lookup,
    .iterate_init = sql_iterate_init,
    .iterate_next = sql_iterate_next,
    .iterate_deinit = sql_iterate_deinit,
    .commit = sql_commit,
    .expire_scan = sql_expire_scan,
};
