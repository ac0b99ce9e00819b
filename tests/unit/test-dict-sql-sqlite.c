/* Unit tests for the sql dict driver on SQLite (dict/dict-sql*.c), through
 * the public dict API: CRUD, all-or-nothing batches, iterate flags and sort
 * orders, TTL and expire-scan, the table map (multi-value lookups from rows
 * inserted with plain SQL), SQL injection attempts in keys, configuration
 * errors, and the PostgreSQL backend failing cleanly when no server
 * listens. Each test gets a fresh database in a temporary directory. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/yaml-doc.h"
#include "dict/dict.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct fx {
    char dir[64];
    char path[128];
    struct dict_registry *reg;
    struct dict *dict;
    sqlite3 *db; /* a side connection for plain SQL */
};

static struct dict_registry *load(const char *yaml, struct petrel_error *err)
{
    struct ydoc *doc = ydoc_parse("test.yaml", yaml, strlen(yaml), err);
    if (doc == NULL)
        return NULL;
    struct dict_settings *settings =
        dict_settings_read("test.yaml", ynode_get(doc->root, "dicts"), err);
    ydoc_free(doc);
    struct dict_registry *reg = settings != NULL ? dict_registry_new(settings) : NULL;
    dict_settings_free(settings);
    return reg;
}

/* Opens dict "d" with `extra` YAML lines (indented 4) after the defaults. */
static void fx_open(struct fx *f, const char *extra)
{
    char yaml[8192];
    snprintf(yaml, sizeof(yaml),
             "dicts:\n"
             "  d:\n"
             "    driver: sql\n"
             "    path: %s\n"
             "%s",
             f->path, extra != NULL ? extra : "");
    struct petrel_error err;
    petrel_error_clear(&err);
    f->reg = load(yaml, &err);
    if (f->reg == NULL)
        fail_msg("config: %s", err.message);
    if (!dict_registry_open(f->reg, NULL, NULL, &err))
        fail_msg("open: %s", err.message);
    f->dict = dict_registry_get(f->reg, "d");
    assert_non_null(f->dict);
    assert_int_equal(sqlite3_open(f->path, &f->db), SQLITE_OK);
    sqlite3_busy_timeout(f->db, 5000);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/petrel-dict-sql-XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    snprintf(f->path, sizeof(f->path), "%s/dict.sqlite", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (f->db != NULL)
        sqlite3_close(f->db);
    dict_registry_free(f->reg);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->dir);
    free(f);
    return 0;
}

static void sql(struct fx *f, const char *text)
{
    char *msg = NULL;
    if (sqlite3_exec(f->db, text, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("sql '%s': %s", text, msg);
}

static long long sql_int(struct fx *f, const char *text)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(f->db, text, -1, &st, NULL), SQLITE_OK);
    long long v = -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* ---- synchronous wrappers over the callback API ---- */

struct looked {
    bool called;
    int ret;
    char error[512];
    size_t count;
    char values[8][256];
    size_t lens[8];
};

static void lookup_cb(const struct dict_lookup_result *r, void *ctx)
{
    struct looked *l = ctx;
    l->called = true;
    l->ret = r->ret;
    snprintf(l->error, sizeof(l->error), "%s", r->error != NULL ? r->error : "");
    l->count = r->value_count;
    for (size_t i = 0; i < r->value_count && i < 8; i++) {
        size_t n = r->values[i].len < 255 ? r->values[i].len : 255;
        memcpy(l->values[i], r->values[i].data, n);
        l->values[i][n] = '\0';
        l->lens[i] = r->values[i].len;
    }
}

static struct looked lookup_as(struct fx *f, const char *user, const char *key)
{
    struct looked l;
    memset(&l, 0, sizeof(l));
    struct dict_op_settings set = {.username = user};
    dict_lookup(f->dict, &set, key, lookup_cb, &l);
    assert_true(l.called); /* SQLite answers before returning */
    return l;
}

static struct looked lookup(struct fx *f, const char *key)
{
    return lookup_as(f, NULL, key);
}

/* The value of `key`, or "<none>". */
static const char *value_of(struct fx *f, const char *key)
{
    static char out[256];
    struct looked l = lookup(f, key);
    if (l.ret < 0)
        fail_msg("lookup %s: %s", key, l.error);
    snprintf(out, sizeof(out), "%s", l.ret > 0 ? l.values[0] : "<none>");
    return out;
}

struct committed {
    bool called;
    enum dict_commit_result result;
    char error[512];
};

static void commit_cb(enum dict_commit_result result, const char *error, void *ctx)
{
    struct committed *c = ctx;
    c->called = true;
    c->result = result;
    snprintf(c->error, sizeof(c->error), "%s", error != NULL ? error : "");
}

static struct committed commit(struct dict_transaction *tx)
{
    struct committed c;
    memset(&c, 0, sizeof(c));
    dict_transaction_commit(tx, commit_cb, &c);
    assert_true(c.called);
    return c;
}

static struct dict_transaction *begin_tx(struct fx *f, const char *user, int64_t expire_secs)
{
    struct dict_op_settings set = {.username = user, .expire_secs = expire_secs};
    return dict_transaction_begin(f->dict, &set);
}

static void set_value(struct fx *f, const char *key, const char *value)
{
    struct dict_transaction *tx = begin_tx(f, NULL, 0);
    dict_set(tx, key, value, strlen(value));
    struct committed c = commit(tx);
    if (c.result != DICT_COMMIT_OK)
        fail_msg("set %s: %d %s", key, c.result, c.error);
}

/* "key=value;..." of a whole iteration (values joined with ','). */
static char *iterate_as(struct fx *f, const char *user, const char *path, unsigned flags)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict_op_settings set = {.username = user};
    struct dict_iterate *it = dict_iterate_init(f->dict, &set, path, flags, &err);
    if (it == NULL)
        fail_msg("iterate %s: %s", path, err.message);
    struct buf out = {0};
    struct dict_row row;
    enum dict_iter_status st;
    while ((st = dict_iterate_next(it, &row)) == DICT_ITER_ROW) {
        buf_append_str(&out, row.key);
        if (row.value_count > 0)
            buf_append_char(&out, '=');
        for (size_t i = 0; i < row.value_count; i++) {
            if (i > 0)
                buf_append_char(&out, ',');
            buf_append(&out, row.values[i].data, row.values[i].len);
        }
        buf_append_char(&out, ';');
    }
    if (st != DICT_ITER_DONE)
        fail_msg("iterate %s ended with %d: %s", path, st, dict_iterate_error(it));
    dict_iterate_deinit(it);
    return buf_steal(&out);
}

static void expect_iterate(struct fx *f, const char *user, const char *path, unsigned flags,
                           const char *expected)
{
    char *got = iterate_as(f, user, path, flags);
    if (strcmp(got, expected) != 0)
        fail_msg("iterate %s flags %u:\n  got      %s\n  expected %s", path, flags, got, expected);
    free(got);
}

static void expire_cb(bool ok, const char *error, void *ctx)
{
    int *result = ctx;
    *result = ok ? 1 : 0;
    if (!ok)
        fprintf(stderr, "expire-scan: %s\n", error);
}

/* ---- tests ---- */

static void test_crud(void **state)
{
    struct fx *f = *state;
    fx_open(f, NULL);
    assert_true(dict_is_multi_value(f->dict));
    assert_string_equal(dict_driver_name(f->dict), "sql");
    assert_int_equal(lookup(f, "shared/a").ret, 0);

    set_value(f, "shared/a", "one");
    struct looked l = lookup(f, "shared/a");
    assert_int_equal(l.ret, 1);
    assert_int_equal(l.count, 1);
    assert_string_equal(l.values[0], "one");

    set_value(f, "shared/a", "two");
    assert_string_equal(value_of(f, "shared/a"), "two");
    assert_int_equal(sql_int(f, "SELECT count(*) FROM dict"), 1);
    assert_int_equal(sql_int(f, "SELECT count(*) FROM dict WHERE key = 'shared/a' AND "
                                "CAST(value AS TEXT) = 'two' AND typeof(value) = 'blob'"),
                     1);

    struct dict_transaction *tx = begin_tx(f, NULL, 0);
    dict_unset(tx, "shared/a");
    dict_unset(tx, "shared/never-there"); /* not an error */
    assert_int_equal(commit(tx).result, DICT_COMMIT_OK);
    assert_int_equal(lookup(f, "shared/a").ret, 0);

    /* empty value */
    set_value(f, "shared/empty", "");
    l = lookup(f, "shared/empty");
    assert_int_equal(l.ret, 1);
    assert_int_equal(l.lens[0], 0);

    /* the data survives a reopen (it is a file) */
    sqlite3_close(f->db);
    f->db = NULL;
    dict_registry_free(f->reg);
    fx_open(f, NULL);
    assert_int_equal(lookup(f, "shared/empty").ret, 1);
}

static void test_binary_values(void **state)
{
    struct fx *f = *state;
    fx_open(f, NULL);
    const char bin[] = {'a', '\0', 'b', '\xff', '\x80', '\0'};
    struct dict_transaction *tx = begin_tx(f, NULL, 0);
    dict_set(tx, "shared/bin", bin, sizeof(bin));
    assert_int_equal(commit(tx).result, DICT_COMMIT_OK);
    struct looked l = lookup(f, "shared/bin");
    assert_int_equal(l.ret, 1);
    assert_int_equal(l.lens[0], sizeof(bin));
    assert_memory_equal(l.values[0], bin, sizeof(bin));
}

static void test_priv_keys_belong_to_their_user(void **state)
{
    struct fx *f = *state;
    fx_open(f, NULL);
    struct dict_transaction *tx = begin_tx(f, "alice", 0);
    dict_set(tx, "priv/quota/storage", "10", 2);
    dict_set(tx, "priv/sieve/x", "s", 1);
    assert_int_equal(commit(tx).result, DICT_COMMIT_OK);
    tx = begin_tx(f, "bob", 0);
    dict_set(tx, "priv/quota/storage", "20", 2);
    assert_int_equal(commit(tx).result, DICT_COMMIT_OK);

    assert_string_equal(lookup_as(f, "alice", "priv/quota/storage").values[0], "10");
    assert_string_equal(lookup_as(f, "bob", "priv/quota/storage").values[0], "20");
    assert_int_equal(lookup_as(f, "carol", "priv/quota/storage").ret, 0);
    assert_int_equal(sql_int(f, "SELECT count(*) FROM dict WHERE key = "
                                "'priv/alice/quota/storage'"),
                     1);
    expect_iterate(f, "alice", "priv/", DICT_ITER_RECURSE | DICT_ITER_SORT_BY_KEY,
                   "priv/quota/storage=10;priv/sieve/x=s;");
    expect_iterate(f, "bob", "priv/", DICT_ITER_RECURSE, "priv/quota/storage=20;");
    expect_iterate(f, "alice", "priv/", 0, "");
}

static void test_atomic_inc(void **state)
{
    struct fx *f = *state;
    fx_open(f, NULL);
    set_value(f, "shared/n", "40");
    struct dict_transaction *tx = begin_tx(f, NULL, 0);
    dict_atomic_inc(tx, "shared/n", 2);
    assert_int_equal(commit(tx).result, DICT_COMMIT_OK);
    assert_string_equal(value_of(f, "shared/n"), "42");
    tx = begin_tx(f, NULL, 0);
    dict_atomic_inc(tx, "shared/n", -50);
    assert_int_equal(commit(tx).result, DICT_COMMIT_OK);
    assert_string_equal(value_of(f, "shared/n"), "-8");

    /* missing key: NOT_FOUND, the rest of the batch still applies */
    tx = begin_tx(f, NULL, 0);
    dict_set(tx, "shared/other", "x", 1);
    dict_atomic_inc(tx, "shared/missing", 1);
    dict_atomic_inc(tx, "shared/n", 8);
    struct committed c = commit(tx);
    assert_int_equal(c.result, DICT_COMMIT_NOT_FOUND);
    assert_string_equal(value_of(f, "shared/other"), "x");
    assert_string_equal(value_of(f, "shared/n"), "0");
    assert_int_equal(lookup(f, "shared/missing").ret, 0);

    /* a value the batch itself wrote is counted from */
    tx = begin_tx(f, NULL, 0);
    dict_set(tx, "shared/fresh", "5", 1);
    dict_atomic_inc(tx, "shared/fresh", 5);
    assert_int_equal(commit(tx).result, DICT_COMMIT_OK);
    assert_string_equal(value_of(f, "shared/fresh"), "10");

    /* overflow fails */
    set_value(f, "shared/big", "9223372036854775807");
    tx = begin_tx(f, NULL, 0);
    dict_atomic_inc(tx, "shared/big", 1);
    c = commit(tx);
    assert_int_equal(c.result, DICT_COMMIT_FAILED);
    assert_non_null(strstr(c.error, "overflow"));
}

static void test_batch_failure_applies_nothing(void **state)
{
    struct fx *f = *state;
    fx_open(f, "    maps:\n"
               "      - pattern: shared/ro/$id\n"
               "        table: ro\n"
               "        fields: {id: id}\n"
               "        value_fields: [a, b]\n");
    sql(f, "CREATE TABLE ro (id TEXT, a TEXT, b TEXT)");
    set_value(f, "shared/keep", "old");
    set_value(f, "shared/text", "not a number");

    /* a non-integer counter fails the whole batch */
    struct dict_transaction *tx = begin_tx(f, NULL, 0);
    dict_set(tx, "shared/a", "1", 1);
    dict_set(tx, "shared/keep", "new", 3);
    dict_unset(tx, "shared/text");
    dict_atomic_inc(tx, "shared/text", 1); /* unset above: missing now */
    dict_set(tx, "shared/text", "abc", 3);
    dict_atomic_inc(tx, "shared/text", 1); /* "abc": fails */
    dict_set(tx, "shared/b", "2", 1);
    struct committed c = commit(tx);
    assert_int_equal(c.result, DICT_COMMIT_FAILED);
    assert_non_null(strstr(c.error, "not an integer"));
    assert_non_null(strstr(c.error, "shared/text"));
    assert_int_equal(lookup(f, "shared/a").ret, 0);
    assert_int_equal(lookup(f, "shared/b").ret, 0);
    assert_string_equal(value_of(f, "shared/keep"), "old");
    assert_string_equal(value_of(f, "shared/text"), "not a number");
    assert_int_equal(sql_int(f, "SELECT count(*) FROM dict"), 2);

    /* a write to a read-only (multi-value) map fails before anything runs */
    tx = begin_tx(f, NULL, 0);
    dict_set(tx, "shared/a", "1", 1);
    dict_set(tx, "shared/ro/1", "x", 1);
    c = commit(tx);
    assert_int_equal(c.result, DICT_COMMIT_FAILED);
    assert_non_null(strstr(c.error, "read-only"));
    assert_int_equal(lookup(f, "shared/a").ret, 0);

    /* a failing SQL statement mid-batch (the map's table is gone) */
    sql(f, "DROP TABLE ro");
    sqlite3_close(f->db);
    f->db = NULL;
    dict_registry_free(f->reg);
    fx_open(f, "    maps:\n"
               "      - pattern: shared/rw/$id\n"
               "        table: missing_table\n"
               "        fields: {id: id}\n"
               "        value_field: v\n");
    tx = begin_tx(f, NULL, 0);
    dict_set(tx, "shared/a", "1", 1);
    dict_set(tx, "shared/rw/1", "x", 1);
    c = commit(tx);
    assert_int_equal(c.result, DICT_COMMIT_FAILED);
    assert_non_null(strstr(c.error, "missing_table"));
    assert_int_equal(lookup(f, "shared/a").ret, 0);
    /* and the dict still works afterwards */
    set_value(f, "shared/a", "1");
    assert_string_equal(value_of(f, "shared/a"), "1");
}

static void test_iterate_flags_and_sorting(void **state)
{
    struct fx *f = *state;
    fx_open(f, NULL);
    set_value(f, "shared/b", "3");
    set_value(f, "shared/a", "2");
    set_value(f, "shared/c", "1");
    set_value(f, "shared/b/x", "5");
    set_value(f, "shared/b/x/deep", "4");
    set_value(f, "shared/bz", "0");
    set_value(f, "shared/", "root");

    expect_iterate(f, NULL, "shared/", DICT_ITER_SORT_BY_KEY,
                   "shared/=root;shared/a=2;shared/b=3;shared/bz=0;shared/c=1;");
    expect_iterate(f, NULL, "shared/", DICT_ITER_RECURSE | DICT_ITER_SORT_BY_KEY,
                   "shared/=root;shared/a=2;shared/b=3;shared/b/x=5;shared/b/x/deep=4;"
                   "shared/bz=0;shared/c=1;");
    expect_iterate(f, NULL, "shared/", DICT_ITER_RECURSE | DICT_ITER_SORT_BY_VALUE,
                   "shared/bz=0;shared/c=1;shared/a=2;shared/b=3;shared/b/x/deep=4;"
                   "shared/b/x=5;shared/=root;");
    expect_iterate(f, NULL, "shared/b", DICT_ITER_SORT_BY_KEY, "shared/b=3;shared/bz=0;");
    expect_iterate(f, NULL, "shared/b", DICT_ITER_RECURSE | DICT_ITER_SORT_BY_KEY,
                   "shared/b=3;shared/b/x=5;shared/b/x/deep=4;shared/bz=0;");
    expect_iterate(f, NULL, "shared/b/", DICT_ITER_SORT_BY_KEY, "shared/b/x=5;");
    expect_iterate(f, NULL, "shared/b/",
                   DICT_ITER_RECURSE | DICT_ITER_SORT_BY_KEY | DICT_ITER_NO_VALUE,
                   "shared/b/x;shared/b/x/deep;");
    expect_iterate(f, NULL, "shared/b/x", DICT_ITER_EXACT_KEY, "shared/b/x=5;");
    expect_iterate(f, NULL, "shared/b/nothing", DICT_ITER_EXACT_KEY, "");
    expect_iterate(f, NULL, "shared/zzz", DICT_ITER_RECURSE, "");

    /* invalid flag combinations are refused by the common layer */
    struct petrel_error err;
    petrel_error_clear(&err);
    assert_null(dict_iterate_init(f->dict, NULL, "shared/",
                                  DICT_ITER_SORT_BY_KEY | DICT_ITER_SORT_BY_VALUE, &err));
}

static void test_iterate_utf8_prefixes(void **state)
{
    struct fx *f = *state;
    fx_open(f, NULL);
    set_value(f, "shared/caf\xc3\xa9/1", "a");
    set_value(f, "shared/caf\xc3\xa9/2/x", "b");
    set_value(f, "shared/caf\xc3\xa9s", "c");
    set_value(f, "shared/cafe", "d");
    set_value(f, "shared/\xe2\x82\xac", "e");
    expect_iterate(f, NULL, "shared/caf\xc3\xa9", DICT_ITER_RECURSE | DICT_ITER_SORT_BY_KEY,
                   "shared/caf\xc3\xa9/1=a;shared/caf\xc3\xa9/2/x=b;shared/caf\xc3\xa9s=c;");
    expect_iterate(f, NULL, "shared/caf\xc3\xa9/", DICT_ITER_SORT_BY_KEY,
                   "shared/caf\xc3\xa9/1=a;");
    expect_iterate(f, NULL, "shared/\xe2\x82", DICT_ITER_RECURSE, "shared/\xe2\x82\xac=e;");
}

/* Writes during an iteration neither block nor break it; the whole result
 * streams from one statement. */
static void test_iterate_many_rows_while_writing(void **state)
{
    struct fx *f = *state;
    fx_open(f, NULL);
    struct dict_transaction *tx = begin_tx(f, NULL, 0);
    char key[64];
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof(key), "shared/many/%06d", i);
        dict_set(tx, key, key + 12, 6);
    }
    assert_int_equal(commit(tx).result, DICT_COMMIT_OK);
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict_iterate *it =
        dict_iterate_init(f->dict, NULL, "shared/many/", DICT_ITER_SORT_BY_KEY, &err);
    assert_non_null(it);
    struct dict_row row;
    int n = 0;
    while (dict_iterate_next(it, &row) == DICT_ITER_ROW) {
        snprintf(key, sizeof(key), "shared/many/%06d", n);
        assert_string_equal(row.key, key);
        assert_int_equal(row.value_count, 1);
        n++;
        if (n == 100) {
            set_value(f, "shared/other", "x"); /* a write on the main connection */
            struct dict_transaction *bad = begin_tx(f, NULL, 0);
            dict_set(bad, "shared/t", "abc", 3);
            dict_atomic_inc(bad, "shared/t", 1);
            assert_int_equal(commit(bad).result, DICT_COMMIT_FAILED); /* a rollback */
        }
    }
    assert_int_equal(n, 20000);
    dict_iterate_deinit(it);

    /* abandoning an iteration mid-way is fine */
    it = dict_iterate_init(f->dict, NULL, "shared/", DICT_ITER_RECURSE, &err);
    assert_int_equal(dict_iterate_next(it, &row), DICT_ITER_ROW);
    dict_iterate_deinit(it);
}

static void test_ttl_and_expire_scan(void **state)
{
    struct fx *f = *state;
    fx_open(f, NULL);
    long long now = (long long)time(NULL);
    struct dict_transaction *tx = begin_tx(f, NULL, 100);
    dict_set(tx, "shared/ttl", "7", 1);
    assert_int_equal(commit(tx).result, DICT_COMMIT_OK);
    long long exp = sql_int(f, "SELECT expires_at FROM dict WHERE key = 'shared/ttl'");
    assert_true(exp >= now + 100 && exp <= now + 102);
    assert_string_equal(value_of(f, "shared/ttl"), "7");
    set_value(f, "shared/forever", "1");
    assert_int_equal(sql_int(f, "SELECT count(*) FROM dict WHERE key = 'shared/forever' AND "
                                "expires_at IS NULL"),
                     1);

    /* an expired row is invisible to lookup, iterate and atomic-inc */
    sql(f, "INSERT INTO dict (key, value, expires_at) VALUES ('shared/gone', '5', "
           "strftime('%s','now') - 10)");
    assert_int_equal(sql_int(f, "SELECT count(*) FROM dict"), 3);
    assert_int_equal(lookup(f, "shared/gone").ret, 0);
    expect_iterate(f, NULL, "shared/", DICT_ITER_SORT_BY_KEY, "shared/forever=1;shared/ttl=7;");
    tx = begin_tx(f, NULL, 0);
    dict_atomic_inc(tx, "shared/gone", 1);
    assert_int_equal(commit(tx).result, DICT_COMMIT_NOT_FOUND);

    /* a set without TTL over a TTL'd row clears the TTL */
    set_value(f, "shared/ttl", "8");
    assert_int_equal(sql_int(f, "SELECT count(*) FROM dict WHERE key = 'shared/ttl' AND "
                                "expires_at IS NULL"),
                     1);

    int ok = -1;
    dict_expire_scan(f->dict, expire_cb, &ok);
    assert_int_equal(ok, 1);
    assert_int_equal(sql_int(f, "SELECT count(*) FROM dict WHERE key = 'shared/gone'"), 0);
    assert_int_equal(sql_int(f, "SELECT count(*) FROM dict"), 2);
}

static const char *const MAPS = "    maps:\n"
                                "      - pattern: priv/quota/storage\n"
                                "        table: quota\n"
                                "        username_field: username\n"
                                "        value_fields: [bytes, messages]\n"
                                "      - pattern: shared/counters/$user/$kind\n"
                                "        table: counters\n"
                                "        fields: {user: owner, $kind: kind}\n"
                                "        value_field: amount\n"
                                "        expire_field: expires\n"
                                "      - pattern: shared/tags/$tag\n"
                                "        table: tags\n"
                                "        fields: {tag: tag}\n"
                                "        value_fields: [label]\n"
                                "      - pattern: shared/plain/$k\n"
                                "        table: plain\n"
                                "        fields: {k: k}\n"
                                "        value_field: v\n";

static void create_map_tables(struct fx *f)
{
    sql(f, "CREATE TABLE quota (username TEXT, bytes INTEGER, messages INTEGER)");
    sql(f, "CREATE TABLE counters (owner TEXT, kind TEXT, amount INTEGER, expires INTEGER, "
           "UNIQUE (owner, kind))");
    sql(f, "CREATE TABLE tags (tag TEXT, label TEXT)");
    sql(f, "CREATE TABLE plain (k TEXT, v TEXT)");
}

static void test_map_multi_value_lookups(void **state)
{
    struct fx *f = *state;
    fx_open(f, MAPS);
    create_map_tables(f);
    sql(f, "INSERT INTO quota VALUES ('alice', 1024, 3), ('bob', 2048, NULL)");

    struct looked l = lookup_as(f, "alice", "priv/quota/storage");
    assert_int_equal(l.ret, 1);
    assert_int_equal(l.count, 2);
    assert_string_equal(l.values[0], "1024");
    assert_string_equal(l.values[1], "3");
    l = lookup_as(f, "bob", "priv/quota/storage");
    assert_int_equal(l.count, 2);
    assert_string_equal(l.values[0], "2048");
    assert_int_equal(l.lens[1], 0); /* NULL reads as empty */
    assert_int_equal(lookup_as(f, "carol", "priv/quota/storage").ret, 0);
    /* a priv key outside the map goes to the default table */
    assert_int_equal(lookup_as(f, "alice", "priv/quota/other").ret, 0);
    expect_iterate(f, "alice", "priv/", DICT_ITER_RECURSE, "priv/quota/storage=1024,3;");
    expect_iterate(f, "alice", "priv/quota/", 0, "priv/quota/storage=1024,3;");
    expect_iterate(f, "alice", "priv/quota/storage", DICT_ITER_EXACT_KEY,
                   "priv/quota/storage=1024,3;");

    /* a multi-value map is read-only */
    struct dict_transaction *tx = begin_tx(f, "alice", 0);
    dict_set(tx, "priv/quota/storage", "1", 1);
    struct committed c = commit(tx);
    assert_int_equal(c.result, DICT_COMMIT_FAILED);
    assert_non_null(strstr(c.error, "read-only"));
    assert_non_null(strstr(c.error, "priv/quota/storage"));

    /* ExactKey returns every row of the key */
    sql(f, "INSERT INTO tags VALUES ('red', 'one'), ('red', 'two'), ('blue', 'three')");
    expect_iterate(f, NULL, "shared/tags/red", DICT_ITER_EXACT_KEY,
                   "shared/tags/red=one;shared/tags/red=two;");
    expect_iterate(f, NULL, "shared/tags/", DICT_ITER_SORT_BY_VALUE,
                   "shared/tags/red=one;shared/tags/blue=three;shared/tags/red=two;");
    expect_iterate(f, NULL, "shared/tags/", DICT_ITER_SORT_BY_KEY | DICT_ITER_NO_VALUE,
                   "shared/tags/blue;shared/tags/red;shared/tags/red;");
    l = lookup(f, "shared/tags/blue");
    assert_int_equal(l.count, 1);
    assert_string_equal(l.values[0], "three");
}

static void test_map_single_value_writes(void **state)
{
    struct fx *f = *state;
    fx_open(f, MAPS);
    create_map_tables(f);
    set_value(f, "shared/counters/alice/messages", "5");
    assert_int_equal(sql_int(f, "SELECT amount FROM counters WHERE owner = 'alice' AND kind = "
                                "'messages'"),
                     5);
    assert_int_equal(sql_int(f, "SELECT typeof(amount) = 'integer' FROM counters"), 1);
    assert_int_equal(sql_int(f, "SELECT count(*) FROM dict"), 0);
    set_value(f, "shared/counters/alice/messages", "6"); /* update, not a second row */
    assert_int_equal(sql_int(f, "SELECT count(*) FROM counters"), 1);
    struct dict_transaction *tx = begin_tx(f, NULL, 0);
    dict_atomic_inc(tx, "shared/counters/alice/messages", 10);
    dict_atomic_inc(tx, "shared/counters/alice/bytes", 10); /* no row: NOT_FOUND */
    assert_int_equal(commit(tx).result, DICT_COMMIT_NOT_FOUND);
    assert_string_equal(value_of(f, "shared/counters/alice/messages"), "16");
    set_value(f, "shared/counters/bob/bytes", "100");
    set_value(f, "shared/counters/alice/bytes", "50");
    expect_iterate(f, NULL, "shared/counters/", DICT_ITER_RECURSE | DICT_ITER_SORT_BY_KEY,
                   "shared/counters/alice/bytes=50;shared/counters/alice/messages=16;"
                   "shared/counters/bob/bytes=100;");
    expect_iterate(f, NULL, "shared/counters/al", DICT_ITER_RECURSE | DICT_ITER_SORT_BY_KEY,
                   "shared/counters/alice/bytes=50;shared/counters/alice/messages=16;");
    expect_iterate(f, NULL, "shared/counters/alice/", DICT_ITER_SORT_BY_VALUE,
                   "shared/counters/alice/messages=16;shared/counters/alice/bytes=50;");
    expect_iterate(f, NULL, "shared/counters/", 0, ""); /* every key is deeper */
    expect_iterate(f, NULL, "shared/",
                   DICT_ITER_RECURSE | DICT_ITER_NO_VALUE | DICT_ITER_SORT_BY_KEY,
                   "shared/counters/alice/bytes;shared/counters/alice/messages;"
                   "shared/counters/bob/bytes;");

    /* TTL through expire_field */
    tx = begin_tx(f, NULL, 60);
    dict_set(tx, "shared/counters/carol/bytes", "1", 1);
    assert_int_equal(commit(tx).result, DICT_COMMIT_OK);
    assert_true(sql_int(f, "SELECT expires FROM counters WHERE owner = 'carol'") >
                (long long)time(NULL));
    sql(f, "UPDATE counters SET expires = 1 WHERE owner = 'carol'");
    assert_int_equal(lookup(f, "shared/counters/carol/bytes").ret, 0);
    int ok = -1;
    dict_expire_scan(f->dict, expire_cb, &ok);
    assert_int_equal(ok, 1);
    assert_int_equal(sql_int(f, "SELECT count(*) FROM counters WHERE owner = 'carol'"), 0);

    /* a non-integer counter in a map column fails */
    sql(f, "UPDATE counters SET amount = 'x1' WHERE owner = 'bob'");
    tx = begin_tx(f, NULL, 0);
    dict_atomic_inc(tx, "shared/counters/bob/bytes", 1);
    assert_int_equal(commit(tx).result, DICT_COMMIT_FAILED);

    tx = begin_tx(f, NULL, 0);
    dict_unset(tx, "shared/counters/alice/messages");
    assert_int_equal(commit(tx).result, DICT_COMMIT_OK);
    assert_int_equal(sql_int(f, "SELECT count(*) FROM counters WHERE owner = 'alice'"), 1);

    /* maps without expire_field refuse a TTL; NUL bytes do not go to text columns */
    tx = begin_tx(f, NULL, 60);
    dict_set(tx, "shared/plain/x", "1", 1);
    struct committed c = commit(tx);
    assert_int_equal(c.result, DICT_COMMIT_FAILED);
    assert_non_null(strstr(c.error, "no expire_field"));
    tx = begin_tx(f, NULL, 0);
    dict_set(tx, "shared/counters/z/z", "a\0b", 3);
    c = commit(tx);
    assert_int_equal(c.result, DICT_COMMIT_FAILED);
    assert_non_null(strstr(c.error, "NUL"));
    assert_int_equal(sql_int(f, "SELECT count(*) FROM plain"), 0);
}

static void test_sql_injection_is_harmless(void **state)
{
    struct fx *f = *state;
    fx_open(f, MAPS);
    create_map_tables(f);
    static const char *const keys[] = {
        "shared/x'; DROP TABLE dict; --",
        "shared/\" OR 1=1 --",
        "shared/a' OR 'a'='a",
        "shared/%_*?\\",
        "shared/); DELETE FROM dict; SELECT ('",
    };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        set_value(f, keys[i], keys[i]);
        assert_string_equal(value_of(f, keys[i]), keys[i]);
    }
    assert_int_equal(sql_int(f, "SELECT count(*) FROM dict"), 5);
    set_value(f, "shared/counters/x' OR '1'='1/bytes", "3");
    assert_int_equal(sql_int(f, "SELECT count(*) FROM counters WHERE owner = 'x'' OR ''1''=''1'"),
                     1);
    assert_int_equal(lookup(f, "shared/a").ret, 0);
    assert_int_equal(lookup(f, "shared/counters/x/bytes").ret, 0);
    assert_int_equal(lookup_as(f, "x' OR '1'='1", "priv/quota/storage").ret, 0);
    /* LIKE wildcards in a prefix are plain characters */
    expect_iterate(f, NULL, "shared/%", DICT_ITER_RECURSE, "shared/%_*?\\=shared/%_*?\\;");
    expect_iterate(f, NULL, "shared/a'", DICT_ITER_RECURSE,
                   "shared/a' OR 'a'='a=shared/a' OR 'a'='a;");
    struct dict_transaction *tx = begin_tx(f, NULL, 0);
    dict_unset(tx, "shared/' OR ''='");
    assert_int_equal(commit(tx).result, DICT_COMMIT_OK);
    assert_int_equal(sql_int(f, "SELECT count(*) FROM dict"), 5);
    assert_int_equal(sql_int(f, "SELECT count(*) FROM sqlite_master WHERE name = 'dict'"), 1);
}

/* ---- configuration ---- */

static void expect_config_error(const char *yaml, const char *needle)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict_registry *reg = load(yaml, &err);
    if (reg != NULL) {
        dict_registry_free(reg);
        fail_msg("accepted:\n%s", yaml);
    }
    if (strstr(err.message, needle) == NULL)
        fail_msg("error '%s' does not mention '%s'", err.message, needle);
    if (strncmp(err.message, "test.yaml:", 10) != 0)
        fail_msg("error '%s' does not name the file", err.message);
}

static void test_config_errors(void **state)
{
    (void)state;
    const char *head = "dicts:\n  d:\n    driver: sql\n";
    char yaml[2048];
#define BAD(extra, needle)                                                                         \
    do {                                                                                           \
        snprintf(yaml, sizeof(yaml), "%s%s", head, extra);                                         \
        expect_config_error(yaml, needle);                                                         \
    } while (0)
    BAD("", "dicts.d.path: is required");
    BAD("    path: x.db\n    table: \"dict; DROP TABLE x\"\n", "plain SQL identifier");
    BAD("    path: x.db\n    table: 1dict\n", "plain SQL identifier");
    BAD("    path: x.db\n    backend: mysql\n", "expected sqlite or pgsql");
    BAD("    path: x.db\n    colour: blue\n", "dicts.d.colour: unknown key");
    BAD("    path: x.db\n    connect: \"host=x\"\n", "only applies to backend pgsql");
    BAD("    backend: pgsql\n", "dicts.d.connect: is required");
    BAD("    backend: pgsql\n    connect: \"host=x\"\n    path: x.db\n",
        "only applies to backend sqlite");
    BAD("    backend: pgsql\n    connect: \"nonsense\"\n", "not a valid libpq conninfo");
    BAD("    backend: pgsql\n    connect: \"host=x\"\n    pool_size: 0\n", "out of range");
    BAD("    path: x.db\n    maps: {a: b}\n", "expected a list");
    BAD("    path: x.db\n    maps:\n      - table: t\n        value_field: v\n",
        "maps[0].pattern: is required");
    BAD("    path: x.db\n    maps:\n      - pattern: other/x\n        table: t\n        "
        "value_field: v\n",
        "must start with shared/ or priv/");
    BAD("    path: x.db\n    maps:\n      - pattern: priv/x\n        table: t\n        "
        "value_field: v\n",
        "username_field: is required");
    BAD("    path: x.db\n    maps:\n      - pattern: shared/x\n        table: t\n        "
        "username_field: u\n        value_field: v\n",
        "only priv/ patterns");
    BAD("    path: x.db\n    maps:\n      - pattern: shared/x/$a\n        table: t\n        "
        "value_field: v\n",
        "$a of the pattern has no column");
    BAD("    path: x.db\n    maps:\n      - pattern: shared/x/$a\n        table: t\n        "
        "fields: {a: c, b: d}\n        value_field: v\n",
        "'b' is not a variable");
    BAD("    path: x.db\n    maps:\n      - pattern: shared/x-$a\n        table: t\n        "
        "fields: {a: c}\n        value_field: v\n",
        "must start a path segment");
    BAD("    path: x.db\n    maps:\n      - pattern: shared/$a.txt\n        table: t\n        "
        "fields: {a: c}\n        value_field: v\n",
        "whole path segment");
    BAD("    path: x.db\n    maps:\n      - pattern: shared/$a/$a\n        table: t\n        "
        "fields: {a: c}\n        value_field: v\n",
        "appears twice");
    BAD("    path: x.db\n    maps:\n      - pattern: shared/x\n        table: t\n", "value_field");
    BAD("    path: x.db\n    maps:\n      - pattern: shared/x\n        table: t\n        "
        "value_field: v\n        value_fields: [a]\n",
        "not both");
    BAD("    path: x.db\n    maps:\n      - pattern: shared/x\n        table: t\n        "
        "value_fields: [\"a b\"]\n",
        "not a plain SQL identifier");
    BAD("    path: x.db\n    maps:\n      - pattern: shared/x/$a\n        table: t\n        "
        "fields: {a: \"c;\"}\n        value_field: v\n",
        "plain SQL identifier");
    BAD("    path: x.db\n    maps:\n      - pattern: shared/x\n        table: t\n        "
        "value_field: v\n        extra: 1\n",
        "maps[0].extra: unknown key");
#undef BAD

    /* a good pgsql configuration reads without connecting */
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict_registry *reg = load("dicts:\n  p:\n    driver: sql\n    backend: pgsql\n"
                                     "    connect: \"host=127.0.0.1 port=1 user=x dbname=y\"\n"
                                     "    pool_size: 2\n    query_timeout: 2s\n",
                                     &err);
    if (reg == NULL)
        fail_msg("%s", err.message);
    dict_registry_free(reg);
}

static void test_open_failure_is_reported(void **state)
{
    struct fx *f = *state;
    char yaml[512];
    snprintf(yaml, sizeof(yaml), "dicts:\n  d:\n    driver: sql\n    path: %s/no/such/dir/x.db\n",
             f->dir);
    struct petrel_error err;
    petrel_error_clear(&err);
    f->reg = load(yaml, &err);
    assert_non_null(f->reg);
    assert_false(dict_registry_open(f->reg, NULL, NULL, &err));
    assert_non_null(strstr(err.message, "cannot open"));
}

/* ---- PostgreSQL without a server: operations fail, nothing blocks ---- */

struct pg_wait {
    struct event_base *base;
    int pending;
    struct looked looked;
    struct committed committed;
    int expired;
};

static void pg_lookup_cb(const struct dict_lookup_result *r, void *ctx)
{
    struct pg_wait *w = ctx;
    lookup_cb(r, &w->looked);
    if (--w->pending == 0)
        event_base_loopbreak(w->base);
}

static void pg_commit_cb(enum dict_commit_result result, const char *error, void *ctx)
{
    struct pg_wait *w = ctx;
    commit_cb(result, error, &w->committed);
    if (--w->pending == 0)
        event_base_loopbreak(w->base);
}

static void pg_expire_cb(bool ok, const char *error, void *ctx)
{
    (void)error;
    struct pg_wait *w = ctx;
    w->expired = ok ? 1 : 0;
    if (--w->pending == 0)
        event_base_loopbreak(w->base);
}

static void pg_async_cb(void *ctx)
{
    struct pg_wait *w = ctx;
    event_base_loopbreak(w->base);
}

static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    socklen_t len = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &len);
    close(fd);
    return ntohs(sa.sin_port);
}

static void test_pgsql_server_down_fails_cleanly(void **state)
{
    (void)state;
    char yaml[512];
    snprintf(yaml, sizeof(yaml),
             "dicts:\n  p:\n    driver: sql\n    backend: pgsql\n"
             "    connect: \"host=127.0.0.1 port=%d user=postgres dbname=petrel\"\n"
             "    connect_timeout: 2s\n",
             closed_port());
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict_registry *reg = load(yaml, &err);
    assert_non_null(reg);
    struct event_base *base = event_base_new();
    assert_true(dict_registry_open(reg, base, NULL, &err)); /* lazy: opens without a server */
    struct dict *d = dict_registry_get(reg, "p");
    struct pg_wait w = {.base = base};

    w.pending = 1;
    dict_lookup(d, NULL, "shared/x", pg_lookup_cb, &w);
    if (w.pending > 0)
        event_base_dispatch(base);
    assert_int_equal(w.looked.ret, -1);
    assert_non_null(strstr(w.looked.error, "postgresql"));

    /* in the backoff: at once, with the last error */
    w.pending = 1;
    struct dict_transaction *tx = dict_transaction_begin(d, NULL);
    dict_set(tx, "shared/x", "1", 1);
    dict_transaction_commit(tx, pg_commit_cb, &w);
    if (w.pending > 0)
        event_base_dispatch(base);
    assert_int_equal(w.committed.result, DICT_COMMIT_FAILED);
    assert_non_null(strstr(w.committed.error, "postgresql unavailable"));

    w.pending = 1;
    dict_expire_scan(d, pg_expire_cb, &w);
    if (w.pending > 0)
        event_base_dispatch(base);
    assert_int_equal(w.expired, 0);

    struct dict_iterate *it = dict_iterate_init(d, NULL, "shared/", 0, &err);
    assert_non_null(it);
    dict_iterate_set_async_callback(it, pg_async_cb, &w);
    struct dict_row row;
    enum dict_iter_status st;
    while ((st = dict_iterate_next(it, &row)) == DICT_ITER_WAIT)
        event_base_dispatch(base);
    assert_int_equal(st, DICT_ITER_ERROR);
    assert_non_null(strstr(dict_iterate_error(it), "postgresql"));
    dict_iterate_deinit(it);

    dict_registry_free(reg);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_crud, setup, teardown),
        cmocka_unit_test_setup_teardown(test_binary_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_priv_keys_belong_to_their_user, setup, teardown),
        cmocka_unit_test_setup_teardown(test_atomic_inc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_failure_applies_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_iterate_flags_and_sorting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_iterate_utf8_prefixes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_iterate_many_rows_while_writing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ttl_and_expire_scan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_multi_value_lookups, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_single_value_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sql_injection_is_harmless, setup, teardown),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test_setup_teardown(test_open_failure_is_reported, setup, teardown),
        cmocka_unit_test(test_pgsql_server_down_fails_cleanly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
