/* passdb/userdb drivers. A driver answers two questions about users: the
 * record of one user (with the stored password when it is a passdb) and the
 * list of all usernames. Lookups run on worker threads (they may block on a
 * file or a database), so every driver is thread-safe; a driver keeps
 * per-worker state (database connections) indexed by `worker`.
 *
 * Drivers: `passwd-file` (auth-db-passwd-file.c) and `sql` (auth-db-sql.c,
 * SQLite or PostgreSQL). */
#ifndef PETREL_SERVICES_AUTH_DB_H
#define PETREL_SERVICES_AUTH_DB_H

#include "core/cfg-read.h"
#include "core/error.h"
#include "core/user-name.h"
#include "clients/auth/password-scheme.h"
#include "clients/auth/userdb.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define AUTH_USERNAME_MAX USER_NAME_MAX

enum auth_db_status {
    AUTH_DB_OK,
    AUTH_DB_NOT_FOUND,
    AUTH_DB_ERROR, /* temporary: file unreadable, database down */
};

enum auth_db_driver {
    AUTH_DB_PASSWD_FILE,
    AUTH_DB_SQL,
};

enum auth_sql_engine {
    AUTH_SQL_SQLITE,
    AUTH_SQL_PGSQL,
};

/* One `passdb:` or `userdb:` section. */
struct auth_db_config {
    enum auth_db_driver driver;
    enum password_scheme default_scheme; /* for stored passwords without {SCHEME} */
    /* passwd-file */
    char *path;
    /* sql */
    enum auth_sql_engine engine;
    char *connect;        /* sqlite: database file; pgsql: libpq conninfo */
    char *password_query; /* passdb: must return a `password` column */
    char *user_query;     /* userdb: userdb fields by column name */
    char *iterate_query;  /* first column: username */
    int64_t connect_timeout_ms;
    int64_t query_timeout_ms;
};

/* Reads a `passdb`/`userdb` map at `path` ("auth.passdb") into cfg
 * (defaults first); `is_passdb` requires what a passdb needs (a
 * password_query for sql). Keys: driver, default_scheme, path, engine,
 * connect, password_query, user_query, iterate_query, connect_timeout,
 * query_timeout. Queries are checked at load: only %u %d %n %% may appear. */
bool auth_db_config_read(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                         bool is_passdb, struct auth_db_config *cfg);
void auth_db_config_free(struct auth_db_config *cfg);
/* Writes the section for --check-config (connect strings omitted: they may hold secrets). */
void auth_db_config_print(const struct auth_db_config *cfg, const char *indent, FILE *out);
const char *auth_db_driver_name(enum auth_db_driver d);

struct auth_db;

/* Opens the driver for `workers` worker threads. Checks what it can now
 * (the passwd-file is readable and parses; the SQLite file opens) and
 * fails start-up with a message otherwise; a PostgreSQL server that is down
 * is an error per lookup, not at start. */
struct auth_db *auth_db_open(const struct auth_db_config *cfg, unsigned workers,
                             struct petrel_error *err);
void auth_db_close(struct auth_db *db);
const char *auth_db_name(const struct auth_db *db); /* "passwd-file", "sql" */

/* Thread-safe lookup of `username` (already validated: 1..255 bytes, no
 * control characters). With `want_password` the record's `password` is
 * filled (passdb use). On AUTH_DB_OK *out is a new entry; on AUTH_DB_ERROR
 * *error holds an allocated message. */
enum auth_db_status auth_db_lookup(struct auth_db *db, unsigned worker, const char *username,
                                   bool want_password, struct userdb_entry **out, char **error);

/* Thread-safe: every username, sorted bytewise, deduplicated. */
bool auth_db_iterate(struct auth_db *db, unsigned worker, char ***users, size_t *count,
                     char **error);
void auth_db_users_free(char **users, size_t count);

/* True when `username` may be looked up at all: the user-name rule
 * (core/user-name.h) with AUTH_USERNAME_MAX bytes at most. */
bool auth_username_valid(const char *username);

#endif
