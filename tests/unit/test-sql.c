/* Unit tests for the sql layer (src/sql): statements and placeholders in
 * both dialects, the SQLite executor (hostile strings, NULLs, binary
 * values, operator-written parameters, the query deadline, cursors) and,
 * when PETREL_TEST_PG names a PostgreSQL conninfo, the libpq executor on
 * an event loop and blocking, including a server restart between two
 * statements (PETREL_TEST_PG_RESTART=1: the test prints
 * "PETREL-RESTART-NOW" and waits for a line on stdin once the server has
 * been restarted; tests/e2e/test_sql_layer.py drives that). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/xalloc.h"
#include "sql/sql-pgsql.h"
#include "sql/sql-sqlite.h"
#include "sql/sql-stmt.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Strings that would change a statement's meaning if they entered its
 * text: quotes, comments, statement ends, both dialects' placeholders,
 * Petrel's own %-variables, backslashes, non-ASCII. */
static const char *const hostile[] = {
    "'; DROP TABLE t; --",
    "\" OR \"1\"=\"1",
    "x' OR '1'='1",
    "?1",
    "$1",
    ":name @name",
    "%u %d %n %%",
    "back\\slash\\'",
    "/* open comment",
    "l\xc3\xa4nge \xe2\x80\x94 \xf0\x9f\x90\xa6",
    "",
};
#define HOSTILE_COUNT (sizeof(hostile) / sizeof(hostile[0]))

/* ---------- statements ---------- */

static void test_placeholders_per_dialect(void **state)
{
    (void)state;
    struct sql_stmt lite;
    struct sql_stmt pg;
    sql_stmt_init(&lite, SQL_DIALECT_SQLITE);
    sql_stmt_init(&pg, SQL_DIALECT_PGSQL);
    struct sql_stmt *both[] = {&lite, &pg};
    for (size_t i = 0; i < 2; i++) {
        struct sql_stmt *st = both[i];
        sql_stmt_append(st, "SELECT ");
        sql_stmt_ident(st, "value");
        sql_stmt_append(st, " FROM ");
        sql_stmt_ident(st, "t");
        sql_stmt_append(st, " WHERE k = ");
        sql_stmt_text(st, hostile[0]);
        sql_stmt_append(st, " AND n = ");
        sql_stmt_int(st, -5);
        sql_stmt_append(st, " AND b = ");
        sql_stmt_blob(st, "a\0b", 3);
        sql_stmt_append(st, " AND z IS ");
        sql_stmt_null(st);
    }
    assert_string_equal(
        buf_cstr(&lite.sql),
        "SELECT \"value\" FROM \"t\" WHERE k = ?1 AND n = ?2 AND b = ?3 AND z IS ?4");
    assert_string_equal(
        buf_cstr(&pg.sql),
        "SELECT \"value\" FROM \"t\" WHERE k = $1 AND n = $2 AND b = $3 AND z IS $4");
    assert_int_equal(lite.count, 4);
    /* the value is bound, never in the text */
    assert_null(strstr(buf_cstr(&lite.sql), "DROP"));
    assert_int_equal(lite.params[0].kind, SQL_PARAM_TEXT);
    assert_string_equal(lite.params[0].data, hostile[0]);
    assert_int_equal(lite.params[1].num, -5);
    assert_int_equal(lite.params[2].len, 3);
    assert_int_equal(lite.params[3].kind, SQL_PARAM_NULL);
    /* reset keeps the dialect, drops text and parameters */
    sql_stmt_reset(&pg);
    sql_stmt_text_copy(&pg, "copied");
    assert_string_equal(buf_cstr(&pg.sql), "$1");
    assert_int_equal(pg.count, 1);
    sql_stmt_free(&lite);
    sql_stmt_free(&pg);
}

static void test_identifiers(void **state)
{
    (void)state;
    assert_true(sql_identifier_valid("dict"));
    assert_true(sql_identifier_valid("_a9"));
    assert_false(sql_identifier_valid(""));
    assert_false(sql_identifier_valid("9a"));
    assert_false(sql_identifier_valid("a\"b"));
    assert_false(sql_identifier_valid("a b"));
    assert_false(sql_identifier_valid("t;DROP"));
    char long_name[80];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[63] = '\0';
    assert_true(sql_identifier_valid(long_name));
    long_name[63] = 'a';
    long_name[64] = '\0';
    assert_false(sql_identifier_valid(long_name));
}

/* ---------- SQLite ---------- */

struct lite_fx {
    char dir[64];
    char path[128];
    struct sql_sqlite *db;
};

static int lite_setup(void **state)
{
    struct lite_fx *f = xcalloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/petrel-test-sql.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/t.sqlite", f->dir);
    struct sql_sqlite_settings s = {.path = f->path,
                                    .create = true,
                                    .wal = true,
                                    .busy_timeout_ms = 1000,
                                    .query_timeout_ms = 200};
    char *error = NULL;
    f->db = sql_sqlite_open(&s, &error);
    assert_non_null(f->db);
    assert_true(sql_sqlite_wal(f->db));
    assert_true(sql_sqlite_exec(f->db, "CREATE TABLE t (k TEXT, v BLOB, n INTEGER)", &error));
    *state = f;
    return 0;
}

static int lite_teardown(void **state)
{
    struct lite_fx *f = *state;
    sql_sqlite_close(f->db);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

struct collected {
    size_t rows;
    char *first[4];
    size_t first_len[4];
    bool first_null[4];
};

static bool collect(const struct sql_row *row, void *ctx)
{
    struct collected *c = ctx;
    if (c->rows++ == 0) {
        for (size_t i = 0; i < row->ncols && i < 4; i++) {
            c->first_null[i] = row->values[i].data == NULL;
            c->first_len[i] = row->values[i].len;
            if (row->values[i].data != NULL) {
                c->first[i] = xmalloc(row->values[i].len + 1);
                memcpy(c->first[i], row->values[i].data, row->values[i].len + 1);
            }
        }
    }
    return true;
}

static void collected_free(struct collected *c)
{
    for (size_t i = 0; i < 4; i++)
        free(c->first[i]);
    memset(c, 0, sizeof(*c));
}

static void test_sqlite_hostile_strings_round_trip(void **state)
{
    struct lite_fx *f = *state;
    char *error = NULL;
    struct sql_stmt st;
    sql_stmt_init(&st, SQL_DIALECT_SQLITE);
    for (size_t i = 0; i < HOSTILE_COUNT; i++) {
        sql_stmt_reset(&st);
        sql_stmt_append(&st, "INSERT INTO t (k, n) VALUES (");
        sql_stmt_text(&st, hostile[i]);
        sql_stmt_append(&st, ", ");
        sql_stmt_int(&st, (int64_t)i);
        sql_stmt_append(&st, ")");
        int64_t changes = 0;
        assert_true(sql_sqlite_run(f->db, &st, NULL, NULL, &changes, &error));
        assert_int_equal(changes, 1);
    }
    /* every string comes back byte for byte, found by equality */
    for (size_t i = 0; i < HOSTILE_COUNT; i++) {
        sql_stmt_reset(&st);
        sql_stmt_append(&st, "SELECT k, n FROM t WHERE k = ");
        sql_stmt_text(&st, hostile[i]);
        struct collected c = {0};
        assert_true(sql_sqlite_run(f->db, &st, collect, &c, NULL, &error));
        assert_int_equal(c.rows, 1);
        assert_string_equal(c.first[0], hostile[i]);
        assert_int_equal(c.first_len[0], strlen(hostile[i]));
        assert_int_equal(atoi(c.first[1]), (int)i);
        collected_free(&c);
    }
    /* the table is still there and holds exactly those rows */
    sql_stmt_reset(&st);
    sql_stmt_append(&st, "SELECT count(*) FROM t");
    struct collected c = {0};
    assert_true(sql_sqlite_run(f->db, &st, collect, &c, NULL, &error));
    assert_int_equal(atoi(c.first[0]), (int)HOSTILE_COUNT);
    collected_free(&c);
    sql_stmt_free(&st);
}

static void test_sqlite_nulls_blobs_and_integers(void **state)
{
    struct lite_fx *f = *state;
    char *error = NULL;
    struct sql_stmt st;
    sql_stmt_init(&st, SQL_DIALECT_SQLITE);
    const char blob[] = {'a', '\0', 'b', '\xff', '\0'};
    sql_stmt_append(&st, "INSERT INTO t (k, v, n) VALUES (");
    sql_stmt_null(&st);
    sql_stmt_append(&st, ", ");
    sql_stmt_blob(&st, blob, sizeof(blob));
    sql_stmt_append(&st, ", ");
    sql_stmt_int(&st, INT64_MIN);
    sql_stmt_append(&st, "), ('', NULL, ");
    sql_stmt_int(&st, INT64_MAX);
    sql_stmt_append(&st, ")");
    assert_true(sql_sqlite_run(f->db, &st, NULL, NULL, NULL, &error));

    sql_stmt_reset(&st);
    sql_stmt_append(&st, "SELECT k, v, n FROM t WHERE k IS NULL");
    struct collected c = {0};
    assert_true(sql_sqlite_run(f->db, &st, collect, &c, NULL, &error));
    assert_int_equal(c.rows, 1);
    assert_true(c.first_null[0]); /* SQL NULL, not "" */
    assert_int_equal(c.first_len[1], sizeof(blob));
    assert_memory_equal(c.first[1], blob, sizeof(blob));
    assert_string_equal(c.first[2], "-9223372036854775808");
    collected_free(&c);

    sql_stmt_reset(&st);
    sql_stmt_append(&st, "SELECT k, v, n FROM t WHERE k = ''");
    assert_true(sql_sqlite_run(f->db, &st, collect, &c, NULL, &error));
    assert_int_equal(c.rows, 1);
    assert_false(c.first_null[0]); /* "" stays "" */
    assert_int_equal(c.first_len[0], 0);
    assert_true(c.first_null[1]);
    assert_string_equal(c.first[2], "9223372036854775807");
    collected_free(&c);
    sql_stmt_free(&st);
}

static void test_sqlite_foreign_parameters_are_refused(void **state)
{
    struct lite_fx *f = *state;
    char *error = NULL;
    size_t cols = 0;
    assert_int_equal(sql_sqlite_prepare(f->db, "SELECT k FROM t WHERE k = ?1", 1, &cols, &error),
                     SQL_SQLITE_PREPARED);
    assert_int_equal(cols, 1);
    assert_true(sql_sqlite_has_column(f->db, "SELECT k FROM t WHERE k = ?1", "K"));
    assert_false(sql_sqlite_has_column(f->db, "SELECT k FROM t WHERE k = ?1", "password"));
    const char *foreign[] = {"SELECT k FROM t WHERE k = ?", "SELECT k FROM t WHERE k = :name",
                             "SELECT k FROM t WHERE k = @n", "SELECT k FROM t WHERE k = $n",
                             "SELECT k FROM t WHERE k = ?1 OR k = ?2"};
    for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++)
        assert_int_equal(sql_sqlite_prepare(f->db, foreign[i], 1, &cols, &error),
                         SQL_SQLITE_FOREIGN_PARAMS);
    assert_int_equal(sql_sqlite_prepare(f->db, "SELEC nonsense", 0, &cols, &error),
                     SQL_SQLITE_PREPARE_FAILED);
    assert_non_null(strstr(error, "syntax error"));
    free(error);
}

static void test_sqlite_query_deadline(void **state)
{
    struct lite_fx *f = *state;
    struct sql_stmt st;
    sql_stmt_init(&st, SQL_DIALECT_SQLITE);
    /* about a billion steps: far beyond the 200 ms deadline */
    sql_stmt_append(&st, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                         "WHERE x < 1000000000) SELECT count(*) FROM c");
    char *error = NULL;
    assert_false(sql_sqlite_run(f->db, &st, NULL, NULL, NULL, &error));
    assert_non_null(strstr(error, "timed out after 200ms"));
    free(error);
    error = NULL;
    /* the connection is still usable afterwards */
    sql_stmt_reset(&st);
    sql_stmt_append(&st, "SELECT 1");
    struct collected c = {0};
    assert_true(sql_sqlite_run(f->db, &st, collect, &c, NULL, &error));
    assert_string_equal(c.first[0], "1");
    collected_free(&c);
    sql_stmt_free(&st);
}

static void test_sqlite_cursor_and_transactions(void **state)
{
    struct lite_fx *f = *state;
    char *error = NULL;
    struct sql_stmt st;
    sql_stmt_init(&st, SQL_DIALECT_SQLITE);
    assert_true(sql_sqlite_begin(f->db, &error));
    for (int i = 0; i < 5000; i++) {
        sql_stmt_reset(&st);
        sql_stmt_append(&st, "INSERT INTO t (k, n) VALUES ('row', ");
        sql_stmt_int(&st, i);
        sql_stmt_append(&st, ")");
        assert_true(sql_sqlite_run(f->db, &st, NULL, NULL, NULL, &error));
    }
    assert_true(sql_sqlite_rollback(f->db, &error));
    assert_true(sql_sqlite_begin(f->db, &error));
    sql_stmt_reset(&st);
    sql_stmt_append(&st, "WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE "
                         "x < 4999) INSERT INTO t (k, n) SELECT 'row', x FROM c");
    int64_t changes = 0;
    assert_true(sql_sqlite_run(f->db, &st, NULL, NULL, &changes, &error));
    assert_int_equal(changes, 5000);
    assert_true(sql_sqlite_commit(f->db, &error));

    sql_stmt_reset(&st);
    sql_stmt_append(&st, "SELECT n FROM t WHERE k = ");
    sql_stmt_text(&st, "row");
    sql_stmt_append(&st, " ORDER BY n");
    struct sql_sqlite_cursor *cur = sql_sqlite_cursor_open(f->db, &st, &error);
    assert_non_null(cur);
    struct sql_row row;
    int n = 0;
    int rc;
    while ((rc = sql_sqlite_cursor_next(cur, &row, &error)) == 1) {
        assert_int_equal(atoi(row.values[0].data), n);
        assert_string_equal(row.names[0], "n");
        n++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(n, 5000); /* the rolled-back batch left nothing */
    sql_sqlite_cursor_close(cur);
    sql_stmt_free(&st);
}

static void test_sqlite_open_without_create(void **state)
{
    (void)state;
    struct sql_sqlite_settings s = {.path = "/nonexistent-dir/none.sqlite", .create = false};
    char *error = NULL;
    assert_null(sql_sqlite_open(&s, &error));
    assert_non_null(strstr(error, "cannot open /nonexistent-dir/none.sqlite"));
    free(error);
}

/* ---------- PostgreSQL ---------- */

static const char *pg_conninfo(void)
{
    const char *c = getenv("PETREL_TEST_PG");
    return c != NULL && *c != '\0' ? c : NULL;
}

static struct sql_pgsql_settings pg_settings(void)
{
    return (struct sql_pgsql_settings){.conninfo = pg_conninfo(),
                                       .application_name = "petrel-test",
                                       .connect_timeout_ms = 5000,
                                       .query_timeout_ms = 5000};
}

static void test_pgsql_conninfo(void **state)
{
    (void)state;
    assert_true(sql_pgsql_conninfo_valid("host=127.0.0.1 port=1 dbname=x"));
    assert_true(sql_pgsql_conninfo_valid("postgresql://u@127.0.0.1:5/db"));
    assert_false(sql_pgsql_conninfo_valid("nonsense"));
    assert_false(sql_pgsql_conninfo_valid("host='unterminated"));
}

static void test_pgsql_blocking_hostile_strings_and_nulls(void **state)
{
    (void)state;
    if (pg_conninfo() == NULL)
        skip();
    struct sql_pgsql_settings s = pg_settings();
    struct sql_pgsql_blocking *b = sql_pgsql_blocking_new(&s);
    char *error = NULL;
    struct sql_stmt st;
    sql_stmt_init(&st, SQL_DIALECT_PGSQL);
    for (size_t i = 0; i < HOSTILE_COUNT; i++) {
        sql_stmt_reset(&st);
        sql_stmt_append(&st, "SELECT CAST(");
        sql_stmt_text(&st, hostile[i]);
        sql_stmt_append(&st, " AS TEXT) AS k, CAST(");
        sql_stmt_null(&st);
        sql_stmt_append(&st, " AS TEXT) AS z, CAST(");
        sql_stmt_int(&st, INT64_MIN);
        sql_stmt_append(&st, " AS BIGINT) AS n");
        struct collected c = {0};
        if (!sql_pgsql_blocking_run(b, &st, "hostile", collect, &c, &error))
            fail_msg("%s", error);
        assert_int_equal(c.rows, 1);
        assert_string_equal(c.first[0], hostile[i]);
        assert_true(c.first_null[1]);
        assert_string_equal(c.first[2], "-9223372036854775808");
        collected_free(&c);
    }
    /* a server-side error is a message, and the connection stays usable */
    sql_stmt_reset(&st);
    sql_stmt_append(&st, "SELECT * FROM no_such_table");
    assert_false(sql_pgsql_blocking_run(b, &st, "missing", collect, NULL, &error));
    assert_non_null(
        strstr(error, "postgresql: missing: relation \"no_such_table\" does not exist"));
    free(error);
    error = NULL;
    /* a statement without rows where rows were asked for */
    sql_stmt_reset(&st);
    sql_stmt_append(&st, "SET application_name = 'x'");
    assert_false(sql_pgsql_blocking_run(b, &st, "set", collect, NULL, &error));
    assert_non_null(strstr(error, "not a query that returns rows"));
    free(error);
    sql_stmt_free(&st);
    sql_pgsql_blocking_free(b);
}

/* The event-loop connection, driven by a private loop. */
struct async_fx {
    struct event_base *base;
    struct sql_pgconn *conn;
    int connected;
    int lost;
    char *failure;
    struct sql_pgsql_result *res;
};

static void a_connected(void *ctx)
{
    ((struct async_fx *)ctx)->connected++;
}

static void a_failed(void *ctx, const char *why)
{
    struct async_fx *a = ctx;
    a->lost++;
    free(a->failure);
    a->failure = xstrdup(why);
}

static void a_lost(void *ctx, const char *why, bool timed_out)
{
    (void)timed_out;
    a_failed(ctx, why);
}

static void a_result(void *ctx, struct sql_pgsql_result *res)
{
    ((struct async_fx *)ctx)->res = res;
}

static const struct sql_pgconn_handlers a_handlers = {
    .connected = a_connected,
    .connect_failed = a_failed,
    .result = a_result,
    .lost = a_lost,
};

/* Runs the loop until *flag changes (bounded by the connection's timers
 * and a 20 s guard). */
static void a_wait(struct async_fx *a, const int *flag, int was)
{
    for (int i = 0; i < 2000 && *flag == was && a->res == NULL; i++) {
        struct timeval tv = {0, 10000};
        event_base_loopexit(a->base, &tv);
        event_base_dispatch(a->base);
    }
}

static void a_connect(struct async_fx *a)
{
    int was = a->connected;
    sql_pgconn_connect(a->conn);
    a_wait(a, &a->connected, was);
    if (a->connected == was)
        fail_msg("no connection: %s", a->failure != NULL ? a->failure : "(timeout)");
}

static struct sql_pgsql_result *a_run(struct async_fx *a, const struct sql_stmt *st, bool text)
{
    a->res = NULL;
    int was = a->lost;
    if (!sql_pgconn_send(a->conn, st, text))
        return NULL;
    a_wait(a, &a->lost, was);
    return a->res;
}

static void test_pgsql_async_binary_values_and_restart(void **state)
{
    (void)state;
    if (pg_conninfo() == NULL)
        skip();
    struct sql_pgsql_settings s = pg_settings();
    struct async_fx a = {.base = event_base_new()};
    a.conn = sql_pgconn_new(a.base, &s, &a_handlers, &a);
    a_connect(&a);

    /* bytes with NUL and 0xff travel as bytea and come back as they were */
    const char blob[] = {'\0', 'x', '\xff', '\'', '\0'};
    struct sql_stmt st;
    sql_stmt_init(&st, SQL_DIALECT_PGSQL);
    sql_stmt_append(&st, "SELECT ");
    sql_stmt_blob(&st, blob, sizeof(blob));
    sql_stmt_append(&st, "::bytea, ");
    sql_stmt_text(&st, hostile[0]);
    sql_stmt_append(&st, "::text, ");
    sql_stmt_null(&st);
    sql_stmt_append(&st, "::text");
    struct sql_pgsql_result *res = a_run(&a, &st, false);
    assert_non_null(res);
    assert_true(sql_pgsql_result_ok(res));
    assert_int_equal(sql_pgsql_result_rows(res), 1);
    struct sql_value v[3];
    assert_int_equal(sql_pgsql_result_row(res, 0, v, 3), 3);
    assert_int_equal(v[0].len, sizeof(blob));
    assert_memory_equal(v[0].data, blob, sizeof(blob));
    assert_string_equal(v[1].data, hostile[0]);
    assert_null(v[2].data);
    sql_pgsql_result_free(res);

    /* changes of a write */
    sql_stmt_reset(&st);
    sql_stmt_append(&st, "CREATE TEMP TABLE t AS SELECT g FROM generate_series(1, 7) g");
    res = a_run(&a, &st, true);
    assert_true(sql_pgsql_result_ok(res));
    assert_false(sql_pgsql_result_has_rows(res));
    assert_int_equal(sql_pgsql_result_changes(res), 7);
    sql_pgsql_result_free(res);

    if (getenv("PETREL_TEST_PG_RESTART") != NULL) {
        /* The server restarts while this connection and a blocking one
         * are idle: the event-loop connection notices on its own (its
         * read event fires), the blocking one on its next statement,
         * which it retries once on a fresh connection. */
        struct sql_pgsql_blocking *b = sql_pgsql_blocking_new(&s);
        char *error = NULL;
        struct sql_stmt one;
        sql_stmt_init(&one, SQL_DIALECT_PGSQL);
        sql_stmt_append(&one, "SELECT pg_backend_pid()");
        struct collected before = {0};
        assert_true(sql_pgsql_blocking_run(b, &one, "pid", collect, &before, &error));

        printf("PETREL-RESTART-NOW\n");
        fflush(stdout);
        char line[16];
        assert_non_null(fgets(line, sizeof(line), stdin));

        int was = a.lost;
        a.res = NULL;
        a_wait(&a, &a.lost, was);
        assert_int_equal(a.lost, was + 1);
        assert_false(sql_pgconn_is_up(a.conn));
        a_connect(&a); /* a new connection works */
        sql_stmt_reset(&st);
        sql_stmt_append(&st, "SELECT 1");
        res = a_run(&a, &st, true);
        assert_true(sql_pgsql_result_ok(res));
        sql_pgsql_result_free(res);

        struct collected after = {0};
        if (!sql_pgsql_blocking_run(b, &one, "pid", collect, &after, &error))
            fail_msg("blocking run after restart: %s", error);
        assert_int_equal(after.rows, 1);
        assert_string_not_equal(before.first[0], after.first[0]); /* a new backend */
        collected_free(&before);
        collected_free(&after);
        sql_stmt_free(&one);
        sql_pgsql_blocking_free(b);
    }
    sql_stmt_free(&st);
    sql_pgconn_free(a.conn);
    free(a.failure);
    event_base_free(a.base);
}

static void test_pgsql_statement_timeout_drops_the_connection(void **state)
{
    (void)state;
    if (pg_conninfo() == NULL)
        skip();
    struct sql_pgsql_settings s = pg_settings();
    s.query_timeout_ms = 200;
    struct sql_pgsql_blocking *b = sql_pgsql_blocking_new(&s);
    struct sql_stmt st;
    sql_stmt_init(&st, SQL_DIALECT_PGSQL);
    sql_stmt_append(&st, "SELECT pg_sleep(5)");
    char *error = NULL;
    assert_false(sql_pgsql_blocking_run(b, &st, "sleep", NULL, NULL, &error));
    assert_non_null(strstr(error, "statement timed out after 200 ms"));
    free(error);
    sql_stmt_free(&st);
    sql_pgsql_blocking_free(b);
}

static void test_pgsql_unreachable_server(void **state)
{
    (void)state;
    /* a port nothing listens on (the discard port needs no server) */
    struct sql_pgsql_settings s = {.conninfo = "host=127.0.0.1 port=9 dbname=x user=x",
                                   .application_name = "petrel-test",
                                   .connect_timeout_ms = 2000,
                                   .query_timeout_ms = 1000};
    struct sql_pgsql_blocking *b = sql_pgsql_blocking_new(&s);
    struct sql_stmt st;
    sql_stmt_init(&st, SQL_DIALECT_PGSQL);
    sql_stmt_append(&st, "SELECT 1");
    char *error = NULL;
    assert_false(sql_pgsql_blocking_run(b, &st, "one", NULL, NULL, &error));
    assert_non_null(strstr(error, "postgresql: connect: "));
    free(error);
    sql_stmt_free(&st);
    sql_pgsql_blocking_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placeholders_per_dialect),
        cmocka_unit_test(test_identifiers),
        cmocka_unit_test_setup_teardown(test_sqlite_hostile_strings_round_trip, lite_setup,
                                        lite_teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_nulls_blobs_and_integers, lite_setup,
                                        lite_teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_foreign_parameters_are_refused, lite_setup,
                                        lite_teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_query_deadline, lite_setup, lite_teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_cursor_and_transactions, lite_setup,
                                        lite_teardown),
        cmocka_unit_test(test_sqlite_open_without_create),
        cmocka_unit_test(test_pgsql_conninfo),
        cmocka_unit_test(test_pgsql_blocking_hostile_strings_and_nulls),
        cmocka_unit_test(test_pgsql_async_binary_values_and_restart),
        cmocka_unit_test(test_pgsql_statement_timeout_drops_the_connection),
        cmocka_unit_test(test_pgsql_unreachable_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
