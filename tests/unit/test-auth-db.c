/* Unit tests for services/auth/auth-db.h: the passdb/userdb configuration
 * reader and printer, auth_username_valid, the conversion of operator SQL
 * into bound parameters, the sql driver on a real SQLite file (lookups with
 * %u/%d/%n, an injection attempt, NULL columns, several rows, iterate,
 * errors and reconnecting, several workers at once), the pgsql path failing
 * cleanly without a server, and the passwd-file driver (problems logged
 * with file:line, reload after a rewrite, a failed reload keeping the old
 * table). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/yaml-doc.h"
#include "services/auth/auth-db-private.h"

#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------- fixture: a temporary directory ---------- */

struct fx {
    char dir[64];
    char path[128]; /* the SQLite file or the passwd-file */
    struct ydoc *doc;
    struct auth_db_config cfg;
    struct auth_db *db;
    sqlite3 *side; /* a side connection for plain SQL */
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/petrel-auth-db-XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    auth_db_close(f->db);
    auth_db_config_free(&f->cfg);
    ydoc_free(f->doc);
    if (f->side != NULL)
        sqlite3_close(f->side);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->dir);
    free(f);
    return 0;
}

/* Reads `yaml` (a document whose root holds a `passdb:` map). */
static bool read_config(struct fx *f, const char *yaml, bool is_passdb, struct petrel_error *err)
{
    ydoc_free(f->doc);
    petrel_error_clear(err);
    f->doc = ydoc_parse("t.yaml", yaml, strlen(yaml), err);
    if (f->doc == NULL)
        fail_msg("YAML: %s", err->message);
    struct cfg_ctx ctx = {.file = "t.yaml", .err = err};
    return auth_db_config_read(&ctx, ynode_get(f->doc->root, "passdb"), "auth.passdb", is_passdb,
                               &f->cfg);
}

static void expect_config_error(struct fx *f, const char *yaml, bool is_passdb,
                                const char *expected)
{
    struct petrel_error err;
    if (read_config(f, yaml, is_passdb, &err))
        fail_msg("accepted:\n%s", yaml);
    if (strstr(err.message, expected) == NULL)
        fail_msg("error \"%s\" lacks \"%s\"", err.message, expected);
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, strlen(text), fp), strlen(text));
    assert_int_equal(fclose(fp), 0);
}

/* ---------- configuration ---------- */

static void test_config_passwd_file_defaults(void **state)
{
    struct fx *f = *state;
    struct petrel_error err;
    assert_true(
        read_config(f, "passdb:\n  driver: passwd-file\n  path: /etc/petrel/users\n", true, &err));
    assert_int_equal(f->cfg.driver, AUTH_DB_PASSWD_FILE);
    assert_string_equal(f->cfg.path, "/etc/petrel/users");
    assert_int_equal(f->cfg.default_scheme, PASSWORD_SCHEME_CRYPT);
    assert_int_equal(f->cfg.connect_timeout_ms, 5000);
    assert_int_equal(f->cfg.query_timeout_ms, 5000);
    assert_string_equal(auth_db_driver_name(f->cfg.driver), "passwd-file");

    /* printed, it reads back the same */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    fputs("passdb:\n", out);
    auth_db_config_print(&f->cfg, "  ", out);
    fclose(out);
    assert_true(read_config(f, text, true, &err));
    assert_string_equal(f->cfg.path, "/etc/petrel/users");
    assert_int_equal(f->cfg.default_scheme, PASSWORD_SCHEME_CRYPT);
    free(text);
}

static void test_config_sql(void **state)
{
    struct fx *f = *state;
    struct petrel_error err;
    assert_true(read_config(f,
                            "passdb:\n"
                            "  driver: sql\n"
                            "  engine: postgresql\n"
                            "  connect: \"host=db user=petrel password=hunter2\"\n"
                            "  default_scheme: argon2id\n"
                            "  password_query: \"SELECT password FROM u WHERE name = '%u'\"\n"
                            "  user_query: SELECT home FROM u WHERE name = '%n' AND d = '%d'\n"
                            "  iterate_query: SELECT name FROM u\n"
                            "  connect_timeout: 2s\n"
                            "  query_timeout: 250ms\n",
                            true, &err));
    assert_int_equal(f->cfg.driver, AUTH_DB_SQL);
    assert_int_equal(f->cfg.engine, AUTH_SQL_PGSQL);
    assert_int_equal(f->cfg.default_scheme, PASSWORD_SCHEME_ARGON2ID);
    assert_int_equal(f->cfg.connect_timeout_ms, 2000);
    assert_int_equal(f->cfg.query_timeout_ms, 250);
    assert_string_equal(f->cfg.iterate_query, "SELECT name FROM u");

    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    auth_db_config_print(&f->cfg, "    ", out);
    fclose(out);
    assert_non_null(strstr(text, "    driver: sql\n"));
    assert_non_null(strstr(text, "    engine: pgsql\n"));
    assert_non_null(strstr(text, "    query_timeout: 250ms\n"));
    assert_non_null(strstr(text, "password_query: \"SELECT password FROM u WHERE name = '%u'\""));
    assert_null(strstr(text, "hunter2")); /* the conninfo is never printed */
    free(text);

    /* a userdb may get by with user_query alone */
    assert_true(read_config(f,
                            "passdb:\n  driver: sql\n  connect: /x.db\n"
                            "  user_query: SELECT home FROM u WHERE name = %u\n",
                            false, &err));
    assert_int_equal(f->cfg.engine, AUTH_SQL_SQLITE);
}

static void test_config_errors(void **state)
{
    struct fx *f = *state;
    expect_config_error(f, "passdb:\n  path: /x\n", true, "t.yaml:2: auth.passdb: needs a driver");
    expect_config_error(f, "passdb:\n  driver: ldap\n", true,
                        "t.yaml:2: auth.passdb.driver: unknown value 'ldap'");
    expect_config_error(f, "passdb:\n  driver: passwd-file\n", true, "needs a path");
    expect_config_error(f, "passdb:\n  driver: passwd-file\n  path: /x\n  colour: red\n", true,
                        "t.yaml:4: auth.passdb.colour: unknown key");
    expect_config_error(f, "passdb:\n  driver: passwd-file\n  path: /x\n  connect: y\n", true,
                        "auth.passdb.connect: only applies to driver sql");
    expect_config_error(f, "passdb:\n  driver: passwd-file\n  path: /x\n  default_scheme: rot13\n",
                        true, "auth.passdb.default_scheme: unknown password scheme 'rot13'");
    expect_config_error(f, "passdb:\n  driver: sql\n  password_query: SELECT 1\n", true,
                        "needs connect");
    expect_config_error(f, "passdb:\n  driver: sql\n  connect: /x.db\n  path: /x.db\n", true,
                        "auth.passdb.path: only applies to driver passwd-file");
    expect_config_error(f, "passdb:\n  driver: sql\n  connect: /x.db\n", true,
                        "a sql passdb needs password_query");
    expect_config_error(f, "passdb:\n  driver: sql\n  connect: /x.db\n", false,
                        "a sql userdb needs user_query");
    expect_config_error(f,
                        "passdb:\n  driver: sql\n  connect: /x.db\n"
                        "  password_query: SELECT password FROM u WHERE name = '%x'\n",
                        true, "t.yaml:4: auth.passdb.password_query: unknown variable '%x'");
    expect_config_error(f,
                        "passdb:\n  driver: sql\n  connect: /x.db\n"
                        "  password_query: SELECT password FROM u WHERE n LIKE 'a%'\n",
                        true, "a lone '%' in the query");
    expect_config_error(f,
                        "passdb:\n  driver: sql\n  connect: /x.db\n"
                        "  password_query: \"SELECT password FROM u WHERE n = '%u\"\n",
                        true, "unterminated string literal");
    expect_config_error(f,
                        "passdb:\n  driver: sql\n  connect: /x.db\n"
                        "  password_query: SELECT password FROM u WHERE n = ?\n",
                        true, "parameters of its own");
    expect_config_error(f,
                        "passdb:\n  driver: sql\n  connect: /x.db\n"
                        "  password_query: \"\"\n",
                        true, "auth.passdb.password_query: must not be empty");
    expect_config_error(f,
                        "passdb:\n  driver: sql\n  engine: mysql\n  connect: x\n"
                        "  password_query: SELECT 1\n",
                        true, "auth.passdb.engine: unknown value 'mysql' (sqlite, pgsql)");
    expect_config_error(f,
                        "passdb:\n  driver: sql\n  connect: /x.db\n  password_query: SELECT 1\n"
                        "  query_timeout: 1ms\n",
                        true, "auth.passdb.query_timeout: duration out of range");
    /* a broken conninfo is refused without quoting it (it may hold a password) */
    struct petrel_error err;
    assert_false(read_config(f,
                             "passdb:\n  driver: sql\n  engine: pgsql\n"
                             "  connect: \"host=db password=hunter2 oops\"\n"
                             "  password_query: SELECT password FROM u WHERE n = %u\n",
                             true, &err));
    assert_non_null(strstr(err.message, "auth.passdb.connect: not a valid libpq connection"));
    assert_null(strstr(err.message, "hunter2"));
    assert_null(strstr(err.message, "oops"));
}

/* ---------- usernames ---------- */

static void test_username_validity(void **state)
{
    assert_true(auth_username_valid("a"));
    assert_true(auth_username_valid("alice@example.com"));
    assert_true(auth_username_valid("J\303\274rgen M\303\274ller")); /* UTF-8, a space */
    assert_true(auth_username_valid("x' OR '1'='1"));
    char name[300];
    memset(name, 'a', sizeof(name));
    name[AUTH_USERNAME_MAX] = '\0';
    assert_true(auth_username_valid(name));
    name[AUTH_USERNAME_MAX] = 'a';
    name[AUTH_USERNAME_MAX + 1] = '\0';
    assert_false(auth_username_valid(name));
    assert_false(auth_username_valid(""));
    assert_false(auth_username_valid("a/b"));
    assert_false(auth_username_valid("../etc"));
    assert_false(auth_username_valid("tab\there"));
    assert_false(auth_username_valid("nl\n"));
    assert_false(auth_username_valid("del\177"));
    assert_false(auth_username_valid("c1\302\205")); /* U+0085 NEL */
    assert_false(auth_username_valid("bad\377"));
    assert_false(auth_username_valid("\300\257")); /* overlong '/' */
}

/* ---------- query conversion ---------- */

static void expect_sql(const char *query, enum auth_sql_engine engine, const char *want_sql,
                       size_t params, const enum auth_sql_var *vars)
{
    struct auth_sql_query q;
    char *error = NULL;
    if (!auth_sql_query_convert(query, engine, &q, &error))
        fail_msg("%s: %s", query, error);
    assert_string_equal(q.sql, want_sql);
    assert_int_equal(q.param_count, params);
    for (size_t i = 0; i < params; i++)
        assert_int_equal(q.vars[i], vars[i]);
    auth_sql_query_free(&q);
}

static void expect_refused(const char *query, enum auth_sql_engine engine, const char *needle)
{
    struct auth_sql_query q;
    char *error = NULL;
    if (auth_sql_query_convert(query, engine, &q, &error))
        fail_msg("accepted: %s -> %s", query, q.sql);
    if (strstr(error, needle) == NULL)
        fail_msg("error \"%s\" lacks \"%s\"", error, needle);
    free(error);
}

static void test_query_conversion(void **state)
{
    const enum auth_sql_var u[] = {AUTH_SQL_VAR_USER};
    const enum auth_sql_var nd[] = {AUTH_SQL_VAR_LOCAL, AUTH_SQL_VAR_DOMAIN};
    const enum auth_sql_var dnu[] = {AUTH_SQL_VAR_DOMAIN, AUTH_SQL_VAR_LOCAL, AUTH_SQL_VAR_USER};
    expect_sql("SELECT password FROM users WHERE userid = '%u'", AUTH_SQL_SQLITE,
               "SELECT password FROM users WHERE userid = ?1", 1, u);
    expect_sql("SELECT password FROM users WHERE userid = '%u'", AUTH_SQL_PGSQL,
               "SELECT password FROM users WHERE userid = $1", 1, u);
    expect_sql("SELECT 1 WHERE a = %u OR b = \"%u\"", AUTH_SQL_SQLITE,
               "SELECT 1 WHERE a = ?1 OR b = ?1", 1, u);
    expect_sql("SELECT p FROM t WHERE user = '%n' AND domain = '%d'", AUTH_SQL_PGSQL,
               "SELECT p FROM t WHERE user = $1 AND domain = $2", 2, nd);
    expect_sql("SELECT p FROM t WHERE email = '%n@%d'", AUTH_SQL_SQLITE,
               "SELECT p FROM t WHERE email = (CAST(?1 AS TEXT) || '@' || CAST(?2 AS TEXT))", 2,
               nd);
    expect_sql("SELECT '%d', '%n', %u, %d", AUTH_SQL_PGSQL, "SELECT $1, $2, $3, $1", 3, dnu);
    /* %% is a literal %, in and out of strings; '' stays a quote */
    expect_sql("SELECT p FROM t WHERE n LIKE 'a%%' AND m = 'it''s' AND x %% 2 = 0", AUTH_SQL_SQLITE,
               "SELECT p FROM t WHERE n LIKE 'a%' AND m = 'it''s' AND x % 2 = 0", 0, NULL);
    expect_sql("SELECT p FROM t WHERE n = 'it''s %u%%'", AUTH_SQL_SQLITE,
               "SELECT p FROM t WHERE n = ('it''s ' || CAST(?1 AS TEXT) || '%')", 1, u);
    /* quoted identifiers without variables are kept */
    expect_sql("SELECT \"Pass\"\"word\" AS password FROM \"my table\" WHERE n = %u", AUTH_SQL_PGSQL,
               "SELECT \"Pass\"\"word\" AS password FROM \"my table\" WHERE n = $1", 1, u);
    /* comments are copied as they are */
    expect_sql("SELECT p -- by %u\nFROM t /* 'x %d */ WHERE n = %n", AUTH_SQL_SQLITE,
               "SELECT p -- by %u\nFROM t /* 'x %d */ WHERE n = ?1", 1,
               (const enum auth_sql_var[]){AUTH_SQL_VAR_LOCAL});
    /* PostgreSQL casts and identifiers with '$' are not parameters */
    expect_sql("SELECT p::text FROM t$1 WHERE n = %u::text", AUTH_SQL_PGSQL,
               "SELECT p::text FROM t$1 WHERE n = $1::text", 1, u);

    expect_refused("SELECT %x", AUTH_SQL_SQLITE, "unknown variable '%x'");
    expect_refused("SELECT '%U'", AUTH_SQL_SQLITE, "unknown variable '%U'");
    expect_refused("SELECT 5 %", AUTH_SQL_SQLITE, "at the end of the query");
    expect_refused("SELECT 5 % 2", AUTH_SQL_SQLITE, "write %% for a literal %"); /* modulo */
    expect_refused("SELECT 'abc", AUTH_SQL_SQLITE, "unterminated string literal");
    expect_refused("SELECT \"abc", AUTH_SQL_SQLITE, "unterminated identifier");
    expect_refused("SELECT \"t_%u\"", AUTH_SQL_SQLITE, "quoted identifier must stand alone");
    expect_refused("SELECT p FROM t WHERE n = ?", AUTH_SQL_SQLITE, "parameters of its own");
    expect_refused("SELECT p FROM t WHERE n = $1", AUTH_SQL_PGSQL, "parameters of its own");
}

static void test_variable_values(void **state)
{
    struct {
        const char *user, *d, *n;
    } cases[] = {
        {"alice@example.com", "example.com", "alice"},
        {"bob", "", "bob"},
        {"a@b@c.org", "c.org", "a@b"},
        {"trailing@", "", "trailing"},
        {"@lead", "lead", ""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *u = auth_sql_var_value(AUTH_SQL_VAR_USER, cases[i].user);
        char *d = auth_sql_var_value(AUTH_SQL_VAR_DOMAIN, cases[i].user);
        char *n = auth_sql_var_value(AUTH_SQL_VAR_LOCAL, cases[i].user);
        assert_string_equal(u, cases[i].user);
        assert_string_equal(d, cases[i].d);
        assert_string_equal(n, cases[i].n);
        free(u);
        free(d);
        free(n);
    }
}

/* ---------- sql driver on SQLite ---------- */

static void sql(struct fx *f, const char *text)
{
    char *msg = NULL;
    if (sqlite3_exec(f->side, text, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("sql '%s': %s", text, msg);
}

static void create_users_db(struct fx *f)
{
    snprintf(f->path, sizeof(f->path), "%s/users.sqlite", f->dir);
    assert_int_equal(sqlite3_open(f->path, &f->side), SQLITE_OK);
    sqlite3_busy_timeout(f->side, 5000);
    sql(f, "CREATE TABLE users (localpart TEXT NOT NULL, domain TEXT NOT NULL, pw TEXT,"
           " uid INTEGER, gid INTEGER, home TEXT, quota TEXT, nets TEXT, active INTEGER)");
    sql(f, "INSERT INTO users VALUES"
           " ('alice', 'example.com', '{PLAIN}alice-secret', 5001, 5000, '/srv/mail/alice',"
           "  '*:storage=1G', '10.0.0.0/8,::1/128', 1),"
           " ('bob', 'example.com', '{PLAIN}bob-secret', 5002, 5000, NULL, NULL, NULL, 1),"
           " ('carol', 'example.org', NULL, 5003, 5000, '/srv/mail/carol', NULL, NULL, 1),"
           " ('twin', 'example.com', '{PLAIN}first', 1, 1, '/first', NULL, NULL, 1),"
           " ('twin', 'example.com', '{PLAIN}second', 2, 2, '/second', NULL, NULL, 1),"
           " ('badnet', 'example.com', '{PLAIN}x', 1, 1, '/h', NULL, '10.0.0.1/8', 1),"
           " ('plain', '', '{PLAIN}nodomain', 7, 7, '/plain', NULL, NULL, 1),"
           " ('x'' OR ''1''=''1', 'example.com', '{PLAIN}quoted', 9, 9, '/quoted', NULL, NULL, 1)");
}

static const char *const sqlite_passdb_yaml =
    "passdb:\n"
    "  driver: sql\n"
    "  connect: %s\n"
    "  password_query: >-\n"
    "    SELECT pw AS password, uid, gid, home, quota AS userdb_quota_rule,\n"
    "    nets AS allow_nets, localpart AS user\n"
    "    FROM users WHERE localpart = '%%n' AND domain = '%%d' AND active = 1\n"
    "  iterate_query: >-\n"
    "    SELECT CASE WHEN domain = '' THEN localpart ELSE localpart || '@' || domain END\n"
    "    FROM users UNION ALL SELECT NULL UNION ALL SELECT 'alice@example.com'\n"
    "%s";

/* Opens the sql driver on the fixture's database with `extra` YAML lines. */
static void open_sqlite(struct fx *f, const char *extra, unsigned workers)
{
    char yaml[4096];
    snprintf(yaml, sizeof(yaml), sqlite_passdb_yaml, f->path, extra != NULL ? extra : "");
    struct petrel_error err;
    if (!read_config(f, yaml, true, &err))
        fail_msg("config: %s", err.message);
    f->db = auth_db_open(&f->cfg, workers, &err);
    if (f->db == NULL)
        fail_msg("open: %s", err.message);
    assert_string_equal(auth_db_name(f->db), "sql");
}

static enum auth_db_status lookup(struct fx *f, unsigned worker, const char *user, bool want_pw,
                                  struct userdb_entry **e, char **error)
{
    *e = NULL;
    *error = NULL;
    return auth_db_lookup(f->db, worker, user, want_pw, e, error);
}

static void test_sqlite_lookup_with_password(void **state)
{
    struct fx *f = *state;
    create_users_db(f);
    open_sqlite(f, NULL, 2);
    struct userdb_entry *e;
    char *error;
    assert_int_equal(lookup(f, 0, "alice@example.com", true, &e, &error), AUTH_DB_OK);
    assert_string_equal(e->username, "alice@example.com"); /* the `user` column is skipped */
    assert_string_equal(e->password, "{PLAIN}alice-secret");
    assert_int_equal(e->uid, 5001);
    assert_int_equal(e->gid, 5000);
    assert_string_equal(e->home, "/srv/mail/alice");
    assert_string_equal(e->quota_rule[0], "*:storage=1G");
    assert_string_equal(e->allow_nets[0], "10.0.0.0/8");
    assert_string_equal(e->allow_nets[1], "::1/128");
    assert_int_equal(e->extra_count, 0);
    userdb_entry_free(e);

    /* without want_password the same query answers, minus the password */
    assert_int_equal(lookup(f, 1, "alice@example.com", false, &e, &error), AUTH_DB_OK);
    assert_null(e->password);
    assert_int_equal(e->uid, 5001);
    userdb_entry_free(e);

    /* NULL columns are skipped: bob has no home, quota or nets */
    assert_int_equal(lookup(f, 0, "bob@example.com", true, &e, &error), AUTH_DB_OK);
    assert_string_equal(e->password, "{PLAIN}bob-secret");
    assert_string_equal(e->home, "");
    assert_null(e->quota_rule[0]);
    assert_null(e->allow_nets[0]);
    userdb_entry_free(e);

    /* a NULL password column: found, but with no password */
    assert_int_equal(lookup(f, 0, "carol@example.org", true, &e, &error), AUTH_DB_OK);
    assert_null(e->password);
    userdb_entry_free(e);

    /* %d is "" and %n the whole name when there is no '@' */
    assert_int_equal(lookup(f, 0, "plain", true, &e, &error), AUTH_DB_OK);
    assert_string_equal(e->password, "{PLAIN}nodomain");
    userdb_entry_free(e);

    /* the last '@' splits */
    assert_int_equal(lookup(f, 0, "alice@example.com@example.com", true, &e, &error),
                     AUTH_DB_NOT_FOUND);
    assert_int_equal(lookup(f, 0, "carol@example.com", true, &e, &error), AUTH_DB_NOT_FOUND);
    assert_int_equal(lookup(f, 0, "nobody@example.com", true, &e, &error), AUTH_DB_NOT_FOUND);
    assert_null(e);
    assert_null(error);
}

static void test_sqlite_injection_attempts_find_nothing(void **state)
{
    struct fx *f = *state;
    create_users_db(f);
    open_sqlite(f, NULL, 1);
    struct userdb_entry *e;
    char *error;
    const char *attempts[] = {
        "x' OR '1'='1",          "x' OR '1'='1@example.com' OR '1'='1",
        "alice' --@example.com", "alice'; DROP TABLE users; --@example.com",
        "%u@example.com",        "?1@example.com",
    };
    for (size_t i = 0; i < sizeof(attempts) / sizeof(attempts[0]); i++) {
        if (lookup(f, 0, attempts[i], true, &e, &error) != AUTH_DB_NOT_FOUND)
            fail_msg("'%s' was not NOT_FOUND (%s)", attempts[i], error != NULL ? error : "found");
    }
    /* The quote characters are plain data: a user really named that is found. */
    assert_int_equal(lookup(f, 0, "x' OR '1'='1@example.com", true, &e, &error), AUTH_DB_OK);
    assert_string_equal(e->password, "{PLAIN}quoted");
    userdb_entry_free(e);
    /* and the table is still there */
    assert_int_equal(lookup(f, 0, "alice@example.com", true, &e, &error), AUTH_DB_OK);
    userdb_entry_free(e);
}

static void test_sqlite_several_rows_use_the_first(void **state)
{
    struct fx *f = *state;
    create_users_db(f);
    open_sqlite(f, NULL, 1);
    for (int round = 0; round < 2; round++) { /* the warning is logged once */
        struct userdb_entry *e;
        char *error;
        assert_int_equal(lookup(f, 0, "twin@example.com", true, &e, &error), AUTH_DB_OK);
        assert_string_equal(e->password, "{PLAIN}first");
        assert_string_equal(e->home, "/first");
        userdb_entry_free(e);
    }
}

static void test_sqlite_bad_field_is_an_error_not_a_wider_record(void **state)
{
    struct fx *f = *state;
    create_users_db(f);
    open_sqlite(f, NULL, 1);
    struct userdb_entry *e;
    char *error;
    assert_int_equal(lookup(f, 0, "badnet@example.com", true, &e, &error), AUTH_DB_ERROR);
    assert_null(e);
    assert_non_null(strstr(error, "allow_nets"));
    assert_null(strstr(error, "{PLAIN}"));
    free(error);
}

static void test_sqlite_user_query_and_iterate(void **state)
{
    struct fx *f = *state;
    create_users_db(f);
    open_sqlite(f,
                "  user_query: >-\n"
                "    SELECT home, uid, 'x' AS mail, NULL AS gid, 'sieve' AS userdb_plugin\n"
                "    FROM users WHERE localpart || '@' || domain = '%n@%d'\n",
                1);
    struct userdb_entry *e;
    char *error;
    /* the userdb lookup takes user_query, written with a concatenated literal */
    assert_int_equal(lookup(f, 0, "alice@example.com", false, &e, &error), AUTH_DB_OK);
    assert_null(e->password);
    assert_string_equal(e->home, "/srv/mail/alice");
    assert_string_equal(e->mail_location, "x");
    assert_int_equal(e->gid, -1);
    assert_null(e->quota_rule[0]); /* user_query has no quota column */
    assert_int_equal(e->extra_count, 1);
    assert_string_equal(e->extra[0].key, "plugin");
    assert_string_equal(e->extra[0].value, "sieve");
    userdb_entry_free(e);
    /* the passdb lookup still takes password_query */
    assert_int_equal(lookup(f, 0, "alice@example.com", true, &e, &error), AUTH_DB_OK);
    assert_string_equal(e->password, "{PLAIN}alice-secret");
    assert_string_equal(e->quota_rule[0], "*:storage=1G");
    userdb_entry_free(e);

    char **users = NULL;
    size_t count = 0;
    assert_true(auth_db_iterate(f->db, 0, &users, &count, &error));
    const char *want[] = {"alice@example.com",
                          "badnet@example.com",
                          "bob@example.com",
                          "carol@example.org",
                          "plain",
                          "twin@example.com",
                          "x' OR '1'='1@example.com"};
    assert_int_equal(count, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < count; i++)
        assert_string_equal(users[i], want[i]);
    auth_db_users_free(users, count);
}

static void test_sqlite_errors_and_reconnect(void **state)
{
    struct fx *f = *state;
    create_users_db(f);
    open_sqlite(f, NULL, 2);
    struct userdb_entry *e;
    char *error;
    char **users;
    size_t count;
    /* no iterate on a db without iterate_query, worker out of range */
    assert_false(auth_db_iterate(f->db, 2, &users, &count, &error));
    assert_non_null(strstr(error, "worker index 2 out of range"));
    free(error);
    assert_int_equal(lookup(f, 5, "alice@example.com", true, &e, &error), AUTH_DB_ERROR);
    free(error);
    /* an invalid username is never looked up */
    assert_int_equal(lookup(f, 0, "a/b", true, &e, &error), AUTH_DB_NOT_FOUND);

    /* the table goes away: an error with the database's message ... */
    assert_int_equal(lookup(f, 0, "alice@example.com", true, &e, &error), AUTH_DB_OK);
    userdb_entry_free(e);
    sql(f, "ALTER TABLE users RENAME TO users_old");
    assert_int_equal(lookup(f, 0, "alice@example.com", true, &e, &error), AUTH_DB_ERROR);
    assert_non_null(strstr(error, "no such table: users"));
    assert_null(strstr(error, "secret"));
    free(error);
    /* ... and once it is back the next lookup reconnects and works */
    sql(f, "ALTER TABLE users_old RENAME TO users");
    assert_int_equal(lookup(f, 0, "alice@example.com", true, &e, &error), AUTH_DB_OK);
    userdb_entry_free(e);

    /* a write lock held longer than query_timeout: an error, not a hang */
    auth_db_close(f->db);
    f->db = NULL;
    open_sqlite(f, "  query_timeout: 200ms\n", 1);
    sql(f, "BEGIN EXCLUSIVE");
    sql(f, "UPDATE users SET uid = 1");
    assert_int_equal(lookup(f, 0, "alice@example.com", true, &e, &error), AUTH_DB_ERROR);
    assert_non_null(strstr(error, "locked"));
    free(error);
    sql(f, "ROLLBACK");
    assert_int_equal(lookup(f, 0, "alice@example.com", true, &e, &error), AUTH_DB_OK);
    userdb_entry_free(e);
}

static void test_sqlite_open_checks(void **state)
{
    struct fx *f = *state;
    struct petrel_error err;
    char yaml[1024];
    /* a missing database file is not created */
    snprintf(f->path, sizeof(f->path), "%s/missing.sqlite", f->dir);
    snprintf(yaml, sizeof(yaml),
             "passdb:\n  driver: sql\n  connect: %s\n"
             "  password_query: SELECT pw AS password FROM users WHERE localpart = %%u\n",
             f->path);
    assert_true(read_config(f, yaml, true, &err));
    assert_null(auth_db_open(&f->cfg, 1, &err));
    assert_non_null(strstr(err.message, "cannot open"));
    assert_int_equal(access(f->path, F_OK), -1);

    create_users_db(f);
    struct {
        const char *query;
        const char *error;
    } cases[] = {
        {"SELECT pw AS password FROM nosuch WHERE a = %u", "no such table: nosuch"},
        {"SELECT pw FROM users WHERE localpart = %u", "no column named `password`"},
        {"SELECT pw AS password FROM users WHERE localpart = %u AND domain = :d",
         "parameters of its own"},
        {"SELEKT pw", "syntax error"},
        {"UPDATE users SET uid = 0 WHERE localpart = %u", "not a query that returns rows"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(yaml, sizeof(yaml),
                 "passdb:\n  driver: sql\n  connect: %s\n  password_query: %s\n", f->path,
                 cases[i].query);
        if (!read_config(f, yaml, true, &err))
            fail_msg("config %s: %s", cases[i].query, err.message);
        struct auth_db *db = auth_db_open(&f->cfg, 1, &err);
        if (db != NULL)
            fail_msg("opened with %s", cases[i].query);
        if (strstr(err.message, cases[i].error) == NULL)
            fail_msg("error \"%s\" lacks \"%s\"", err.message, cases[i].error);
    }
}

struct hammer {
    struct fx *f;
    unsigned worker;
    int failures;
};

static void *hammer_main(void *arg)
{
    struct hammer *h = arg;
    const char *names[] = {"alice@example.com", "bob@example.com", "nobody@example.com"};
    for (int i = 0; i < 300; i++) {
        struct userdb_entry *e = NULL;
        char *error = NULL;
        const char *name = names[i % 3];
        enum auth_db_status st = auth_db_lookup(h->f->db, h->worker, name, true, &e, &error);
        bool ok = (i % 3 == 2) ? st == AUTH_DB_NOT_FOUND
                               : st == AUTH_DB_OK && strstr(e->password, "-secret") != NULL;
        if (!ok)
            h->failures++;
        userdb_entry_free(e);
        free(error);
    }
    return NULL;
}

static void test_sqlite_workers_in_parallel(void **state)
{
    enum { WORKERS = 4 };
    struct fx *f = *state;
    create_users_db(f);
    open_sqlite(f, NULL, WORKERS);
    pthread_t threads[WORKERS];
    struct hammer h[WORKERS];
    for (unsigned i = 0; i < WORKERS; i++) {
        h[i] = (struct hammer){f, i, 0};
        assert_int_equal(pthread_create(&threads[i], NULL, hammer_main, &h[i]), 0);
    }
    for (unsigned i = 0; i < WORKERS; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(h[i].failures, 0);
    }
}

/* ---------- sql driver on PostgreSQL, no server ---------- */

static void test_pgsql_without_a_server_fails_per_lookup(void **state)
{
    struct fx *f = *state;
    struct petrel_error err;
    /* port 1 on loopback: nothing listens, the connection is refused at once */
    assert_true(read_config(f,
                            "passdb:\n  driver: sql\n  engine: pgsql\n"
                            "  connect: \"host=127.0.0.1 port=1 dbname=mail user=petrel "
                            "password=hunter2\"\n"
                            "  password_query: SELECT password FROM users WHERE userid = '%u'\n"
                            "  iterate_query: SELECT userid FROM users\n"
                            "  connect_timeout: 1s\n",
                            true, &err));
    f->db = auth_db_open(&f->cfg, 2, &err); /* a server that is down is not a start-up error */
    if (f->db == NULL)
        fail_msg("open: %s", err.message);
    struct userdb_entry *e;
    char *error;
    assert_int_equal(lookup(f, 1, "alice@example.com", true, &e, &error), AUTH_DB_ERROR);
    assert_non_null(strstr(error, "postgresql: connect:"));
    assert_null(strstr(error, "hunter2"));
    free(error);
    char **users;
    size_t count;
    assert_false(auth_db_iterate(f->db, 0, &users, &count, &error));
    assert_non_null(strstr(error, "postgresql: connect:"));
    free(error);
}

/* ---------- passwd-file driver ---------- */

/* Captures what the process writes to stderr while `fn` runs. */
static char *capture_stderr(void (*fn)(struct fx *), struct fx *f)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/stderr.txt", f->dir);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    fn(f);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    static char text[16384];
    size_t n = fread(text, 1, sizeof(text) - 1, fp);
    text[n] = '\0';
    fclose(fp);
    return text;
}

static void open_passwd_file(struct fx *f)
{
    char yaml[512];
    snprintf(yaml, sizeof(yaml), "passdb:\n  driver: passwd-file\n  path: %s\n", f->path);
    struct petrel_error err;
    assert_true(read_config(f, yaml, true, &err));
    f->db = auth_db_open(&f->cfg, 3, &err);
    if (f->db == NULL)
        fail_msg("open: %s", err.message);
}

static void set_mtime(const char *path, time_t secs)
{
    struct timespec times[2] = {{secs, 0}, {secs, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
}

static void test_passwd_file_lookup_and_logged_problems(void **state)
{
    struct fx *f = *state;
    snprintf(f->path, sizeof(f->path), "%s/passwd", f->dir);
    write_file(f->path, "alice@example.com:{PLAIN}alice-pw:5001:5001::/srv/alice::"
                        "userdb_quota_rule=*:storage=1G\n"
                        "bob:{PLAIN}bob-pw\n"
                        "bad/user:{PLAIN}x\n"
                        "carol:{PLAIN}c:notanumber\n");
    char *log = capture_stderr(open_passwd_file, f);
    char expected[256];
    snprintf(expected, sizeof(expected), "%s:3: invalid username", f->path);
    if (strstr(log, expected) == NULL)
        fail_msg("log lacks \"%s\":\n%s", expected, log);
    snprintf(expected, sizeof(expected), "%s:4: uid must be", f->path);
    if (strstr(log, expected) == NULL)
        fail_msg("log lacks \"%s\":\n%s", expected, log);
    assert_non_null(strstr(log, "level=warn"));
    assert_null(strstr(log, "{PLAIN}"));
    assert_string_equal(auth_db_name(f->db), "passwd-file");

    struct userdb_entry *e;
    char *error;
    assert_int_equal(lookup(f, 2, "alice@example.com", true, &e, &error), AUTH_DB_OK);
    assert_string_equal(e->password, "{PLAIN}alice-pw");
    assert_int_equal(e->uid, 5001);
    assert_string_equal(e->quota_rule[0], "*:storage=1G");
    userdb_entry_free(e);
    assert_int_equal(lookup(f, 0, "alice@example.com", false, &e, &error), AUTH_DB_OK);
    assert_null(e->password);
    assert_string_equal(e->home, "/srv/alice");
    userdb_entry_free(e);
    assert_int_equal(lookup(f, 0, "carol", true, &e, &error), AUTH_DB_NOT_FOUND);
    assert_int_equal(lookup(f, 0, "Bob", true, &e, &error), AUTH_DB_NOT_FOUND);

    char **users;
    size_t count;
    assert_true(auth_db_iterate(f->db, 1, &users, &count, &error));
    assert_int_equal(count, 2);
    assert_string_equal(users[0], "alice@example.com");
    assert_string_equal(users[1], "bob");
    auth_db_users_free(users, count);
}

static void test_passwd_file_reloads_after_a_rewrite(void **state)
{
    struct fx *f = *state;
    snprintf(f->path, sizeof(f->path), "%s/passwd", f->dir);
    write_file(f->path, "alice:{PLAIN}old-pw\nbob:{PLAIN}bob\n");
    set_mtime(f->path, 1000000000);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    open_passwd_file(f);
    struct userdb_entry *e;
    char *error;

    /* Rewritten in place: same inode, same size; only the mtime differs. */
    write_file(f->path, "alice:{PLAIN}new-pw\nbob:{PLAIN}bob\n");
    set_mtime(f->path, 1000000100);
    /* Within a second of the last check the file is not looked at. */
    assert_int_equal(lookup(f, 0, "alice", true, &e, &error), AUTH_DB_OK);
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (t1.tv_sec - t0.tv_sec < 1 ||
        (t1.tv_sec - t0.tv_sec == 1 && t1.tv_nsec < t0.tv_nsec)) /* not too slow a machine */
        assert_string_equal(e->password, "{PLAIN}old-pw");
    userdb_entry_free(e);

    auth_db_passwd_file_recheck(f->db);
    assert_int_equal(lookup(f, 0, "alice", true, &e, &error), AUTH_DB_OK);
    assert_string_equal(e->password, "{PLAIN}new-pw");
    userdb_entry_free(e);

    /* A vanished file keeps the old table. */
    char moved[200];
    snprintf(moved, sizeof(moved), "%s.moved", f->path);
    assert_int_equal(rename(f->path, moved), 0);
    auth_db_passwd_file_recheck(f->db);
    assert_int_equal(lookup(f, 1, "alice", true, &e, &error), AUTH_DB_OK);
    assert_string_equal(e->password, "{PLAIN}new-pw");
    userdb_entry_free(e);

    /* A new file (new inode) with other users replaces the table. */
    write_file(f->path, "carol:{PLAIN}carol\n");
    auth_db_passwd_file_recheck(f->db);
    assert_int_equal(lookup(f, 1, "alice", true, &e, &error), AUTH_DB_NOT_FOUND);
    assert_int_equal(lookup(f, 1, "carol", true, &e, &error), AUTH_DB_OK);
    userdb_entry_free(e);
    char **users;
    size_t count;
    assert_true(auth_db_iterate(f->db, 0, &users, &count, &error));
    assert_int_equal(count, 1);
    assert_string_equal(users[0], "carol");
    auth_db_users_free(users, count);

    /* A directory where the file was: a failed reload, the table stays. */
    assert_int_equal(unlink(f->path), 0);
    assert_int_equal(mkdir(f->path, 0700), 0);
    auth_db_passwd_file_recheck(f->db);
    assert_int_equal(lookup(f, 1, "carol", true, &e, &error), AUTH_DB_OK);
    userdb_entry_free(e);
}

struct reader {
    struct fx *f;
    unsigned worker;
    atomic_bool *stop;
    int failures;
    int lookups;
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    while (!atomic_load(r->stop) || r->lookups == 0) {
        struct userdb_entry *e = NULL;
        char *error = NULL;
        if (auth_db_lookup(r->f->db, r->worker, "alice", true, &e, &error) != AUTH_DB_OK ||
            strncmp(e->password, "{PLAIN}v", 8) != 0)
            r->failures++;
        userdb_entry_free(e);
        free(error);
        r->lookups++;
    }
    return NULL;
}

static void test_passwd_file_lookups_during_reloads(void **state)
{
    enum { READERS = 3, VERSIONS = 30 };
    struct fx *f = *state;
    snprintf(f->path, sizeof(f->path), "%s/passwd", f->dir);
    write_file(f->path, "alice:{PLAIN}v0\n");
    open_passwd_file(f);
    atomic_bool stop = false;
    pthread_t threads[READERS];
    struct reader r[READERS];
    for (unsigned i = 0; i < READERS; i++) {
        r[i] = (struct reader){f, i, &stop, 0, 0};
        assert_int_equal(pthread_create(&threads[i], NULL, reader_main, &r[i]), 0);
    }
    char text[128];
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.tmp", f->path);
    for (int v = 1; v <= VERSIONS; v++) {
        /* the way operators should replace the file: a new one renamed over it */
        snprintf(text, sizeof(text), "alice:{PLAIN}v%d\nu%d:x\n", v, v);
        write_file(tmp, text);
        assert_int_equal(rename(tmp, f->path), 0);
        auth_db_passwd_file_recheck(f->db);
        usleep(2000);
    }
    atomic_store(&stop, true);
    for (unsigned i = 0; i < READERS; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(r[i].failures, 0);
    }
    auth_db_passwd_file_recheck(f->db);
    struct userdb_entry *e;
    char *error;
    assert_int_equal(lookup(f, 0, "alice", true, &e, &error), AUTH_DB_OK);
    snprintf(text, sizeof(text), "{PLAIN}v%d", VERSIONS);
    assert_string_equal(e->password, text);
    userdb_entry_free(e);
}

static void test_passwd_file_unreadable_at_open_fails(void **state)
{
    struct fx *f = *state;
    snprintf(f->path, sizeof(f->path), "%s/nope", f->dir);
    char yaml[512];
    snprintf(yaml, sizeof(yaml), "passdb:\n  driver: passwd-file\n  path: %s\n", f->path);
    struct petrel_error err;
    assert_true(read_config(f, yaml, true, &err));
    assert_null(auth_db_open(&f->cfg, 1, &err));
    assert_int_equal(err.code, PETREL_ERR_IO);
    assert_non_null(strstr(err.message, "passwd-file: cannot open"));
    assert_non_null(strstr(err.message, f->path));
    assert_int_equal(mkdir(f->path, 0700), 0);
    assert_null(auth_db_open(&f->cfg, 1, &err));
    assert_non_null(strstr(err.message, "not a regular file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_config_passwd_file_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_sql, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_errors, setup, teardown),
        cmocka_unit_test(test_username_validity),
        cmocka_unit_test(test_query_conversion),
        cmocka_unit_test(test_variable_values),
        cmocka_unit_test_setup_teardown(test_sqlite_lookup_with_password, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_injection_attempts_find_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_several_rows_use_the_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_bad_field_is_an_error_not_a_wider_record, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_user_query_and_iterate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_errors_and_reconnect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_open_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_workers_in_parallel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pgsql_without_a_server_fails_per_lookup, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_passwd_file_lookup_and_logged_problems, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_passwd_file_reloads_after_a_rewrite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_passwd_file_lookups_during_reloads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_passwd_file_unreadable_at_open_fails, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
