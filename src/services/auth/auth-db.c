/* passdb/userdb sections: configuration (read, check, print), dispatch to
 * the driver tables of auth-db-private.h, and the username rule every
 * driver relies on.
 *
 * Configuration keys and defaults (one `passdb:` or `userdb:` map):
 *   driver           passwd-file | sql          required
 *   default_scheme   a password scheme name     CRYPT (as Dovecot)
 *   path             passwd-file: the file      required for passwd-file
 *   engine           sqlite | pgsql             sqlite ("postgresql" = pgsql)
 *   connect          sqlite: the database file; pgsql: a libpq conninfo;
 *                                               required for sql
 *   password_query   passdb: returns `password` (+ userdb fields)
 *                                               required for a sql passdb
 *   user_query       userdb fields by column name
 *                                               a sql userdb needs it or password_query
 *   iterate_query    first column: usernames    none (ITERATE then fails)
 *   connect_timeout  duration, 100ms..5m        5s
 *   query_timeout    duration, 100ms..1h        5s
 * Keys of the other driver are refused, so a typo'd section fails at start. */
#include "services/auth/auth-db-private.h"

#include "core/user-name.h"
#include "core/utf8.h"
#include "core/xalloc.h"
#include "core/yaml-print.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define AUTH_DB_DEFAULT_CONNECT_TIMEOUT_MS 5000
#define AUTH_DB_DEFAULT_QUERY_TIMEOUT_MS 5000

/* ---------- configuration ---------- */

const char *auth_db_driver_name(enum auth_db_driver d)
{
    switch (d) {
    case AUTH_DB_PASSWD_FILE:
        return "passwd-file";
    case AUTH_DB_SQL:
        return "sql";
    }
    return "unknown";
}

static const char *engine_name(enum auth_sql_engine e)
{
    return e == AUTH_SQL_PGSQL ? "pgsql" : "sqlite";
}

static void config_defaults(struct auth_db_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->driver = AUTH_DB_PASSWD_FILE;
    cfg->default_scheme = PASSWORD_SCHEME_CRYPT;
    cfg->engine = AUTH_SQL_SQLITE;
    cfg->connect_timeout_ms = AUTH_DB_DEFAULT_CONNECT_TIMEOUT_MS;
    cfg->query_timeout_ms = AUTH_DB_DEFAULT_QUERY_TIMEOUT_MS;
}

static void join_key(char *dst, size_t size, const char *path, const char *key)
{
    snprintf(dst, size, "%s.%s", path, key);
}

/* Reads `key` as one of `names` (NULL-terminated; values[i] for names[i]).
 * *present (may be NULL) tells whether the key was there. */
static bool read_choice(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                        const char *key, const char *const names[], const int values[],
                        const char *expected, bool *present, int *out)
{
    char *text = NULL;
    if (!cfg_string(ctx, map, path, key, &text))
        return false;
    if (present != NULL)
        *present = text != NULL;
    if (text == NULL)
        return true;
    for (size_t i = 0; names[i] != NULL; i++) {
        if (strcmp(text, names[i]) == 0) {
            *out = values[i];
            free(text);
            return true;
        }
    }
    char full[256];
    join_key(full, sizeof(full), path, key);
    bool r = cfg_fail(ctx, ynode_get(map, key), full, "unknown value '%s' (%s)", text, expected);
    free(text);
    return r;
}

static bool read_scheme(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                        struct auth_db_config *cfg)
{
    char *text = NULL;
    if (!cfg_string(ctx, map, path, "default_scheme", &text))
        return false;
    if (text == NULL)
        return true;
    enum password_scheme s = password_scheme_parse(text);
    if (s == PASSWORD_SCHEME_UNKNOWN) {
        char full[256];
        join_key(full, sizeof(full), path, "default_scheme");
        bool r = cfg_fail(ctx, ynode_get(map, "default_scheme"), full,
                          "unknown password scheme '%s'", text);
        free(text);
        return r;
    }
    free(text);
    cfg->default_scheme = s;
    return true;
}

/* Refuses `key` when present: it belongs to the other driver. */
static bool refuse_key(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                       const char *key, const char *driver)
{
    const struct ynode *n = ynode_get(map, key);
    if (n == NULL)
        return true;
    char full[256];
    join_key(full, sizeof(full), path, key);
    return cfg_fail(ctx, n, full, "only applies to driver %s", driver);
}

static bool check_query(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                        const char *key, const char *text, enum auth_sql_engine engine)
{
    if (text == NULL)
        return true;
    char full[256];
    join_key(full, sizeof(full), path, key);
    if (text[0] == '\0')
        return cfg_fail(ctx, ynode_get(map, key), full, "must not be empty");
    struct auth_sql_query q;
    char *error = NULL;
    if (!auth_sql_query_convert(text, engine, &q, &error)) {
        bool r = cfg_fail(ctx, ynode_get(map, key), full, "%s", error);
        free(error);
        return r;
    }
    auth_sql_query_free(&q);
    return true;
}

static bool check_passwd_file(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                              const struct auth_db_config *cfg)
{
    static const char *const sql_keys[] = {
        "engine",        "connect",         "password_query", "user_query",
        "iterate_query", "connect_timeout", "query_timeout",  NULL};
    for (size_t i = 0; sql_keys[i] != NULL; i++) {
        if (!refuse_key(ctx, map, path, sql_keys[i], "sql"))
            return false;
    }
    if (cfg->path == NULL || cfg->path[0] == '\0')
        return cfg_fail(ctx, map, path, "driver passwd-file needs a path");
    return true;
}

static bool check_sql(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                      bool is_passdb, const struct auth_db_config *cfg)
{
    if (!refuse_key(ctx, map, path, "path", "passwd-file (sql takes `connect`)"))
        return false;
    if (cfg->connect == NULL || cfg->connect[0] == '\0')
        return cfg_fail(ctx, map, path, "driver sql needs connect (%s)",
                        cfg->engine == AUTH_SQL_SQLITE ? "the SQLite database file"
                                                       : "a libpq connection string");
    if (cfg->engine == AUTH_SQL_PGSQL) {
        char *error = NULL;
        if (!auth_sql_conninfo_check(cfg->connect, &error)) {
            char full[256];
            join_key(full, sizeof(full), path, "connect");
            /* the conninfo may hold a password: the message never quotes it */
            bool r = cfg_fail(ctx, ynode_get(map, "connect"), full, "%s", error);
            free(error);
            return r;
        }
    }
    if (is_passdb && cfg->password_query == NULL)
        return cfg_fail(ctx, map, path, "a sql passdb needs password_query");
    if (!is_passdb && cfg->user_query == NULL && cfg->password_query == NULL)
        return cfg_fail(ctx, map, path, "a sql userdb needs user_query (or password_query)");
    return check_query(ctx, map, path, "password_query", cfg->password_query, cfg->engine) &&
           check_query(ctx, map, path, "user_query", cfg->user_query, cfg->engine) &&
           check_query(ctx, map, path, "iterate_query", cfg->iterate_query, cfg->engine);
}

bool auth_db_config_read(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                         bool is_passdb, struct auth_db_config *cfg)
{
    static const char *const keys[] = {
        "driver",          "default_scheme", "path",       "engine",
        "connect",         "password_query", "user_query", "iterate_query",
        "connect_timeout", "query_timeout",  NULL};
    static const char *const drivers[] = {"passwd-file", "sql", NULL};
    static const int driver_values[] = {AUTH_DB_PASSWD_FILE, AUTH_DB_SQL};
    static const char *const engines[] = {"sqlite", "pgsql", "postgresql", NULL};
    static const int engine_values[] = {AUTH_SQL_SQLITE, AUTH_SQL_PGSQL, AUTH_SQL_PGSQL};

    auth_db_config_free(cfg);
    config_defaults(cfg);
    if (!cfg_expect_map(ctx, map, path) || !cfg_check_keys(ctx, map, path, keys))
        return false;
    bool has_driver = false;
    int driver = (int)cfg->driver;
    int engine = (int)cfg->engine;
    if (!read_choice(ctx, map, path, "driver", drivers, driver_values, "passwd-file, sql",
                     &has_driver, &driver) ||
        !read_scheme(ctx, map, path, cfg) || !cfg_string(ctx, map, path, "path", &cfg->path) ||
        !read_choice(ctx, map, path, "engine", engines, engine_values, "sqlite, pgsql", NULL,
                     &engine) ||
        !cfg_string(ctx, map, path, "connect", &cfg->connect) ||
        !cfg_string(ctx, map, path, "password_query", &cfg->password_query) ||
        !cfg_string(ctx, map, path, "user_query", &cfg->user_query) ||
        !cfg_string(ctx, map, path, "iterate_query", &cfg->iterate_query) ||
        !cfg_duration_ms(ctx, map, path, "connect_timeout", 100, 300000,
                         &cfg->connect_timeout_ms) ||
        !cfg_duration_ms(ctx, map, path, "query_timeout", 100, 3600000, &cfg->query_timeout_ms))
        return false;
    if (!has_driver)
        return cfg_fail(ctx, map, path, "needs a driver (passwd-file or sql)");
    cfg->driver = (enum auth_db_driver)driver;
    cfg->engine = (enum auth_sql_engine)engine;
    if (cfg->driver == AUTH_DB_PASSWD_FILE)
        return check_passwd_file(ctx, map, path, cfg);
    return check_sql(ctx, map, path, is_passdb, cfg);
}

void auth_db_config_free(struct auth_db_config *cfg)
{
    free(cfg->path);
    free(cfg->connect);
    free(cfg->password_query);
    free(cfg->user_query);
    free(cfg->iterate_query);
    cfg->path = cfg->connect = NULL;
    cfg->password_query = cfg->user_query = cfg->iterate_query = NULL;
}

static void put_optional(FILE *out, const char *indent, const char *key, const char *value)
{
    if (value != NULL)
        yaml_put_kv(out, indent, key, value);
}

void auth_db_config_print(const struct auth_db_config *cfg, const char *indent, FILE *out)
{
    fprintf(out, "%sdriver: %s\n", indent, auth_db_driver_name(cfg->driver));
    fprintf(out, "%sdefault_scheme: %s\n", indent, password_scheme_name(cfg->default_scheme));
    if (cfg->driver == AUTH_DB_PASSWD_FILE) {
        yaml_put_kv(out, indent, "path", cfg->path);
        return;
    }
    fprintf(out, "%sengine: %s\n", indent, engine_name(cfg->engine));
    /* Never the connect string: a conninfo may carry a password. */
    fprintf(out, "%s# connect: %s\n", indent, cfg->connect != NULL ? "set (not shown)" : "unset");
    put_optional(out, indent, "password_query", cfg->password_query);
    put_optional(out, indent, "user_query", cfg->user_query);
    put_optional(out, indent, "iterate_query", cfg->iterate_query);
    fprintf(out, "%sconnect_timeout: %lldms\n%squery_timeout: %lldms\n", indent,
            (long long)cfg->connect_timeout_ms, indent, (long long)cfg->query_timeout_ms);
}

/* ---------- dispatch ---------- */

struct auth_db *auth_db_open(const struct auth_db_config *cfg, unsigned workers,
                             struct petrel_error *err)
{
    const struct auth_db_vfuncs *v =
        cfg->driver == AUTH_DB_SQL ? &auth_db_sql_vfuncs : &auth_db_passwd_file_vfuncs;
    if (workers == 0)
        workers = 1;
    struct auth_db *db = v->open(cfg, workers, err);
    if (db == NULL)
        return NULL;
    db->v = v;
    db->workers = workers;
    return db;
}

void auth_db_close(struct auth_db *db)
{
    if (db != NULL)
        db->v->close(db);
}

const char *auth_db_name(const struct auth_db *db)
{
    return db->v->name;
}

static bool worker_ok(const struct auth_db *db, unsigned worker, char **error)
{
    if (worker < db->workers)
        return true;
    *error = xasprintf("%s: worker index %u out of range (%u workers)", db->v->name, worker,
                       db->workers);
    return false;
}

enum auth_db_status auth_db_lookup(struct auth_db *db, unsigned worker, const char *username,
                                   bool want_password, struct userdb_entry **out, char **error)
{
    *out = NULL;
    *error = NULL;
    if (!worker_ok(db, worker, error))
        return AUTH_DB_ERROR;
    /* The callers validate already; a name that slipped through cannot be a user. */
    if (!auth_username_valid(username))
        return AUTH_DB_NOT_FOUND;
    return db->v->lookup(db, worker, username, want_password, out, error);
}

bool auth_db_iterate(struct auth_db *db, unsigned worker, char ***users, size_t *count,
                     char **error)
{
    *users = NULL;
    *count = 0;
    *error = NULL;
    if (!worker_ok(db, worker, error))
        return false;
    return db->v->iterate(db, worker, users, count, error);
}

void auth_db_users_free(char **users, size_t count)
{
    if (users == NULL)
        return;
    for (size_t i = 0; i < count; i++)
        free(users[i]);
    free(users);
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void auth_db_users_sort_unique(char **users, size_t *count)
{
    size_t n = *count;
    if (n < 2)
        return;
    qsort(users, n, sizeof(*users), compare_names);
    size_t w = 1;
    for (size_t r = 1; r < n; r++) {
        if (strcmp(users[r], users[w - 1]) == 0)
            free(users[r]);
        else
            users[w++] = users[r];
    }
    *count = w;
}

/* ---------- usernames ---------- */

bool auth_username_valid(const char *username)
{
    return user_name_valid(username, AUTH_USERNAME_MAX, NULL);
}
