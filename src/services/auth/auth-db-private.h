/* Internals shared by auth-db.c (configuration, dispatch) and the drivers
 * (auth-db-passwd-file.c, auth-db-sql.c). A driver is a table of functions;
 * its state struct starts with `struct auth_db` so auth-db.c can find the
 * table, and the driver casts back to its own type. */
#ifndef PETREL_SERVICES_AUTH_DB_PRIVATE_H
#define PETREL_SERVICES_AUTH_DB_PRIVATE_H

#include "services/auth/auth-db.h"

#include <stdbool.h>
#include <stddef.h>

struct auth_db_vfuncs {
    const char *name; /* "passwd-file", "sql" */
    /* Same contracts as auth_db_open/close/lookup/iterate in auth-db.h;
     * auth-db.c has checked `worker` < workers and the username. */
    struct auth_db *(*open)(const struct auth_db_config *cfg, unsigned workers,
                            struct petrel_error *err);
    void (*close)(struct auth_db *db);
    enum auth_db_status (*lookup)(struct auth_db *db, unsigned worker, const char *username,
                                  bool want_password, struct userdb_entry **out, char **error);
    bool (*iterate)(struct auth_db *db, unsigned worker, char ***users, size_t *count,
                    char **error);
};

struct auth_db {
    const struct auth_db_vfuncs *v;
    unsigned workers;
};

extern const struct auth_db_vfuncs auth_db_passwd_file_vfuncs;
extern const struct auth_db_vfuncs auth_db_sql_vfuncs;

/* Sorts `users` bytewise and drops duplicates (freeing them); *count shrinks. */
void auth_db_users_sort_unique(char **users, size_t *count);

/* ---------- passwd-file ---------- */

/* Makes the next lookup stat the file whatever the time since the last
 * check (tests; a SIGHUP handler may use it too). No-op for other drivers. */
void auth_db_passwd_file_recheck(struct auth_db *db);

/* ---------- sql ---------- */

/* The variables an operator's query may use. */
enum auth_sql_var {
    AUTH_SQL_VAR_USER,   /* %u: the full username */
    AUTH_SQL_VAR_DOMAIN, /* %d: after the last '@', "" when there is none */
    AUTH_SQL_VAR_LOCAL,  /* %n: before the last '@', all of it when there is none */
};

#define AUTH_SQL_MAX_PARAMS 3

/* An operator's query converted to SQL with bound parameters: parameter i
 * (`?i+1` for SQLite, `$i+1` for PostgreSQL) carries the value of
 * vars[i]. Each variable is one parameter however often it appears. */
struct auth_sql_query {
    char *sql;
    size_t param_count;
    enum auth_sql_var vars[AUTH_SQL_MAX_PARAMS];
};

/* Converts `text` (%u %d %n %%, see auth-db-sql.c for the quoting rules).
 * False with *error (allocated) for an unknown %-sequence or a variable
 * inside a quoted identifier with other text. */
bool auth_sql_query_convert(const char *text, enum auth_sql_engine engine,
                            struct auth_sql_query *out, char **error);
void auth_sql_query_free(struct auth_sql_query *q);
/* The value of `var` for `username` (fresh allocation). */
char *auth_sql_var_value(enum auth_sql_var var, const char *username);
/* Checks a libpq connection string without connecting. The message never
 * quotes the string (it may hold a password). */
bool auth_sql_conninfo_check(const char *conninfo, char **error);

#endif
