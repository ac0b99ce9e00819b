/* Unit tests for the file dict driver (dict/dict-file.c): the dict API on
 * top of it, persistence, crash recovery (torn tails cut, corruption
 * refused), compaction, two instances on one file (as two processes would
 * be), lock timeouts and write failures. Every test works in its own
 * temporary directory. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/metrics.h"
#include "core/xalloc.h"
#include "core/yaml-doc.h"
#include "dict/dict.h"

#include <event2/event.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------- fixture ---------- */

struct fx {
    char dir[256];
    char path[300];
};

static int setup(void **state)
{
    struct fx *fx = xcalloc(1, sizeof(*fx));
    const char *tmp = getenv("TMPDIR");
    snprintf(fx->dir, sizeof(fx->dir), "%s/petrel-dict-file-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(fx->dir) == NULL)
        return -1;
    snprintf(fx->path, sizeof(fx->path), "%s/sub/dir/file.db", fx->dir);
    *state = fx;
    return 0;
}

static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL) {
        unlink(path);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char *child = xasprintf("%s/%s", path, de->d_name);
        remove_tree(child);
        free(child);
    }
    closedir(d);
    rmdir(path);
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    remove_tree(fx->dir);
    free(fx);
    return 0;
}

/* A registry with one file dict "d" at `path`; `extra` adds option lines
 * (each "    key: value\n"). NULL with *err filled on failure. */
static struct dict_registry *registry_for(const char *path, const char *extra,
                                          struct metrics_registry *metrics,
                                          struct petrel_error *err)
{
    char *yaml = xasprintf("dicts:\n  d:\n    driver: file\n    path: \"%s\"\n%s", path,
                           extra != NULL ? extra : "");
    struct ydoc *doc = ydoc_parse("t.yaml", yaml, strlen(yaml), err);
    free(yaml);
    if (doc == NULL)
        return NULL;
    struct dict_settings *settings =
        dict_settings_read("t.yaml", ynode_get(doc->root, "dicts"), err);
    ydoc_free(doc);
    struct dict_registry *reg = settings != NULL ? dict_registry_new(settings) : NULL;
    dict_settings_free(settings);
    if (reg == NULL)
        return NULL;
    if (!dict_registry_open(reg, NULL, metrics, err)) {
        dict_registry_free(reg);
        return NULL;
    }
    return reg;
}

static struct dict_registry *open_ok(const char *path, const char *extra)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict_registry *reg = registry_for(path, extra, NULL, &err);
    if (reg == NULL)
        fail_msg("open failed: %s", err.message);
    return reg;
}

static struct dict *D(struct dict_registry *reg)
{
    return dict_registry_get(reg, "d");
}

/* ---------- synchronous helpers ---------- */

struct lookup_out {
    int ret;
    char *value;
    size_t len;
    char *error;
};

static void lookup_cb(const struct dict_lookup_result *r, void *ctx)
{
    struct lookup_out *o = ctx;
    o->ret = r->ret;
    if (r->ret > 0) {
        assert_int_equal(r->value_count, 1);
        o->value = xmalloc(r->values[0].len + 1);
        memcpy(o->value, r->values[0].data, r->values[0].len);
        o->value[r->values[0].len] = '\0';
        o->len = r->values[0].len;
    }
    if (r->error != NULL)
        o->error = xstrdup(r->error);
}

static struct lookup_out lookup_user(struct dict *dict, const char *user, const char *key)
{
    struct lookup_out o = {.ret = -2};
    struct dict_op_settings set = {.username = user};
    dict_lookup(dict, &set, key, lookup_cb, &o);
    assert_int_not_equal(o.ret, -2); /* answered synchronously */
    return o;
}

static struct lookup_out lookup(struct dict *dict, const char *key)
{
    return lookup_user(dict, NULL, key);
}

static void lookup_free(struct lookup_out *o)
{
    free(o->value);
    free(o->error);
}

/* Asserts the key holds `want` (NULL: absent). */
static void check_value(struct dict *dict, const char *key, const char *want)
{
    struct lookup_out o = lookup(dict, key);
    if (o.ret < 0)
        fail_msg("lookup %s failed: %s", key, o.error);
    if (want == NULL) {
        if (o.ret != 0)
            fail_msg("%s: expected absent, found '%s'", key, o.value);
    } else {
        if (o.ret != 1)
            fail_msg("%s: expected '%s', absent", key, want);
        assert_string_equal(o.value, want);
    }
    lookup_free(&o);
}

struct commit_out {
    int result;
    char *error;
    bool called;
};

static void commit_cb(enum dict_commit_result result, const char *error, void *ctx)
{
    struct commit_out *o = ctx;
    o->called = true;
    o->result = result;
    o->error = error != NULL ? xstrdup(error) : NULL;
}

static struct commit_out commit(struct dict_transaction *tx)
{
    struct commit_out o = {0};
    dict_transaction_commit(tx, commit_cb, &o);
    assert_true(o.called);
    return o;
}

static int commit_result(struct dict_transaction *tx)
{
    struct commit_out o = commit(tx);
    free(o.error);
    return o.result;
}

static void set_ttl(struct dict *dict, const char *key, const char *value, int64_t ttl)
{
    struct dict_op_settings set = {.expire_secs = ttl};
    struct dict_transaction *tx = dict_transaction_begin(dict, &set);
    dict_set(tx, key, value, strlen(value));
    struct commit_out o = commit(tx);
    if (o.result != DICT_COMMIT_OK)
        fail_msg("set %s failed: %d %s", key, o.result, o.error != NULL ? o.error : "");
    free(o.error);
}

static void set(struct dict *dict, const char *key, const char *value)
{
    set_ttl(dict, key, value, 0);
}

static int unset(struct dict *dict, const char *key)
{
    struct dict_transaction *tx = dict_transaction_begin(dict, NULL);
    dict_unset(tx, key);
    return commit_result(tx);
}

static int inc(struct dict *dict, const char *key, int64_t delta)
{
    struct dict_transaction *tx = dict_transaction_begin(dict, NULL);
    dict_atomic_inc(tx, key, delta);
    return commit_result(tx);
}

static void expire_cb(bool ok, const char *error, void *ctx)
{
    (void)error;
    *(int *)ctx = ok ? 1 : 0;
}

static void expire_scan(struct dict *dict)
{
    int ok = -1;
    dict_expire_scan(dict, expire_cb, &ok);
    assert_int_equal(ok, 1);
}

/* Iterates and returns "key=value;" for each row. */
static char *iterate(struct dict *dict, const char *user, const char *path, unsigned flags)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict_op_settings set = {.username = user};
    struct dict_iterate *it = dict_iterate_init(dict, &set, path, flags, &err);
    if (it == NULL)
        fail_msg("iterate_init: %s", err.message);
    struct buf out = {0};
    struct dict_row row;
    enum dict_iter_status st;
    while ((st = dict_iterate_next(it, &row)) == DICT_ITER_ROW) {
        buf_append_str(&out, row.key);
        if (row.value_count > 0) {
            buf_append_char(&out, '=');
            buf_append(&out, row.values[0].data, row.values[0].len);
        }
        buf_append_char(&out, ';');
    }
    if (st != DICT_ITER_DONE)
        fail_msg("iterate ended with %d: %s", (int)st, dict_iterate_error(it));
    dict_iterate_deinit(it);
    return buf_steal(&out);
}

static void expect_iterate(struct dict *dict, const char *user, const char *path, unsigned flags,
                           const char *want)
{
    char *got = iterate(dict, user, path, flags);
    assert_string_equal(got, want);
    free(got);
}

static int64_t file_size(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        fail_msg("stat %s: %s", path, strerror(errno));
    return (int64_t)st.st_size;
}

/* The header's generation: bumped by every compaction. */
static uint64_t file_generation(const char *path)
{
    unsigned char h[32];
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(read(fd, h, sizeof(h)), (ssize_t)sizeof(h));
    close(fd);
    uint64_t g = 0;
    for (int i = 7; i >= 0; i--)
        g = g << 8 | h[16 + i];
    return g;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    struct buf b = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        buf_append(&b, chunk, n);
    fclose(f);
    *len = b.len;
    return buf_steal(&b);
}

/* Walks the record framing of a data file: counts records whose payload
 * type is `type`; fails on a framing error. */
static int count_records(const char *path, int type)
{
    size_t len;
    unsigned char *data = (unsigned char *)read_file(path, &len);
    assert_true(len >= 32);
    assert_memory_equal(data, "PTRLDICT", 8);
    size_t pos = 32;
    int n = 0;
    while (pos < len) {
        assert_true(len - pos >= 9);
        size_t rlen = (size_t)data[pos] | (size_t)data[pos + 1] << 8 | (size_t)data[pos + 2] << 16 |
                      (size_t)data[pos + 3] << 24;
        assert_true(len - pos - 8 >= rlen);
        if (data[pos + 8] == type)
            n++;
        pos += 8 + rlen;
    }
    free(data);
    return n;
}

static void append_bytes(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

/* ---------- configuration ---------- */

static void expect_config_error(const char *yaml, const char *fragment)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct ydoc *doc = ydoc_parse("t.yaml", yaml, strlen(yaml), &err);
    assert_non_null(doc);
    struct dict_settings *settings =
        dict_settings_read("t.yaml", ynode_get(doc->root, "dicts"), &err);
    ydoc_free(doc);
    struct dict_registry *reg = settings != NULL ? dict_registry_new(settings) : NULL;
    dict_settings_free(settings);
    if (reg != NULL) {
        dict_registry_free(reg);
        fail_msg("accepted: %s", yaml);
    }
    if (strstr(err.message, fragment) == NULL)
        fail_msg("error '%s' lacks '%s'", err.message, fragment);
}

static void test_config_validation(void **state)
{
    (void)state;
    expect_config_error("dicts:\n  d:\n    driver: file\n", "t.yaml:3: dicts.d: path is required");
    expect_config_error("dicts:\n  d:\n    driver: file\n    path: x.db\n    colour: red\n",
                        "t.yaml:5");
    expect_config_error("dicts:\n  d:\n    driver: file\n    path: x.db\n    colour: red\n",
                        "colour");
    expect_config_error("dicts:\n  d:\n    driver: file\n    path: x.db\n    fsync: sometimes\n",
                        "t.yaml:5: dicts.d: fsync must be always or never");
    expect_config_error("dicts:\n  d:\n    driver: file\n    path: x.db\n    compact_ratio: 1\n",
                        "t.yaml:5");
    expect_config_error("dicts:\n  d:\n    driver: file\n    path: dir/\n", "must name a file");
    expect_config_error("dicts:\n  d:\n    driver: file\n    path: x.db\n    lock_timeout: soon\n",
                        "t.yaml:5");

    const char *good = "dicts:\n  d:\n    driver: file\n    path: x.db\n    fsync: never\n"
                       "    compact_ratio: 3\n    compact_min_bytes: 0\n    lock_timeout: 250ms\n";
    struct petrel_error err;
    petrel_error_clear(&err);
    struct ydoc *doc = ydoc_parse("t.yaml", good, strlen(good), &err);
    assert_non_null(doc);
    struct dict_settings *settings =
        dict_settings_read("t.yaml", ynode_get(doc->root, "dicts"), &err);
    ydoc_free(doc);
    struct dict_registry *reg = settings != NULL ? dict_registry_new(settings) : NULL;
    dict_settings_free(settings);
    if (reg == NULL)
        fail_msg("%s", err.message);
    assert_int_equal(dict_registry_count(reg), 1);
    assert_string_equal(dict_driver_name(dict_registry_get(reg, "d")), "file");
    dict_registry_free(reg);

    bool listed = false;
    for (size_t i = 0; i < dict_driver_count(); i++)
        listed = listed || strcmp(dict_driver_name_at(i), "file") == 0;
    assert_true(listed);
}

/* ---------- the API ---------- */

static void test_set_lookup_unset_persist(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, NULL);
    struct dict *dict = D(reg);
    check_value(dict, "shared/a", NULL);
    set(dict, "shared/a", "one");
    set(dict, "shared/b", "");
    check_value(dict, "shared/a", "one");
    check_value(dict, "shared/b", "");
    set(dict, "shared/a", "two");
    check_value(dict, "shared/a", "two");

    /* binary values, NUL included */
    struct dict_transaction *tx = dict_transaction_begin(dict, NULL);
    dict_set(tx, "shared/bin", "x\0y\xff", 4);
    assert_int_equal(commit_result(tx), DICT_COMMIT_OK);
    struct lookup_out o = lookup(dict, "shared/bin");
    assert_int_equal(o.ret, 1);
    assert_int_equal(o.len, 4);
    assert_memory_equal(o.value, "x\0y\xff", 4);
    lookup_free(&o);

    /* priv/ keys are stored per user */
    struct dict_op_settings alice = {.username = "alice"};
    tx = dict_transaction_begin(dict, &alice);
    dict_set(tx, "priv/quota", "5", 1);
    assert_int_equal(commit_result(tx), DICT_COMMIT_OK);
    o = lookup_user(dict, "alice", "priv/quota");
    assert_int_equal(o.ret, 1);
    lookup_free(&o);
    o = lookup_user(dict, "bob", "priv/quota");
    assert_int_equal(o.ret, 0);
    lookup_free(&o);

    assert_int_equal(unset(dict, "shared/b"), DICT_COMMIT_OK);
    assert_int_equal(unset(dict, "shared/never-was"), DICT_COMMIT_OK);
    check_value(dict, "shared/b", NULL);
    dict_registry_free(reg);

    /* everything acknowledged is there after a reopen */
    reg = open_ok(fx->path, NULL);
    dict = D(reg);
    check_value(dict, "shared/a", "two");
    check_value(dict, "shared/b", NULL);
    o = lookup(dict, "shared/bin");
    assert_int_equal(o.len, 4);
    assert_memory_equal(o.value, "x\0y\xff", 4);
    lookup_free(&o);
    o = lookup_user(dict, "alice", "priv/quota");
    assert_string_equal(o.value, "5");
    lookup_free(&o);
    dict_registry_free(reg);

    /* the parent directories were created; the lock file sits beside */
    char *lock = xasprintf("%s.lock", fx->path);
    assert_true(access(lock, F_OK) == 0);
    free(lock);
}

static void test_atomic_inc_semantics(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, "    fsync: never\n");
    struct dict *dict = D(reg);
    set(dict, "shared/n", "10");
    assert_int_equal(inc(dict, "shared/n", 5), DICT_COMMIT_OK);
    assert_int_equal(inc(dict, "shared/n", -20), DICT_COMMIT_OK);
    check_value(dict, "shared/n", "-5");

    /* missing key: NOT_FOUND, the batch's other operations applied */
    struct dict_transaction *tx = dict_transaction_begin(dict, NULL);
    dict_set(tx, "shared/other", "x", 1);
    dict_atomic_inc(tx, "shared/missing", 1);
    assert_int_equal(commit_result(tx), DICT_COMMIT_NOT_FOUND);
    check_value(dict, "shared/other", "x");
    check_value(dict, "shared/missing", NULL);

    /* non-integer value: FAILED and nothing applied */
    set(dict, "shared/text", "abc");
    tx = dict_transaction_begin(dict, NULL);
    dict_set(tx, "shared/would", "1", 1);
    dict_atomic_inc(tx, "shared/n", 1);
    dict_atomic_inc(tx, "shared/text", 1);
    struct commit_out o = commit(tx);
    assert_int_equal(o.result, DICT_COMMIT_FAILED);
    assert_non_null(strstr(o.error, "not an integer"));
    free(o.error);
    check_value(dict, "shared/would", NULL);
    check_value(dict, "shared/n", "-5");

    /* inc sees the batch's own set and unset */
    tx = dict_transaction_begin(dict, NULL);
    dict_set(tx, "shared/c", "7", 1);
    dict_atomic_inc(tx, "shared/c", 3);
    dict_atomic_inc(tx, "shared/c", 3);
    assert_int_equal(commit_result(tx), DICT_COMMIT_OK);
    check_value(dict, "shared/c", "13");
    tx = dict_transaction_begin(dict, NULL);
    dict_unset(tx, "shared/c");
    dict_atomic_inc(tx, "shared/c", 1);
    assert_int_equal(commit_result(tx), DICT_COMMIT_NOT_FOUND);
    check_value(dict, "shared/c", NULL);

    /* a batch setting a non-integer then incrementing it fails whole */
    tx = dict_transaction_begin(dict, NULL);
    dict_set(tx, "shared/d", "zz", 2);
    dict_atomic_inc(tx, "shared/d", 1);
    assert_int_equal(commit_result(tx), DICT_COMMIT_FAILED);
    check_value(dict, "shared/d", NULL);

    /* overflow is refused rather than wrapped */
    set(dict, "shared/big", "9223372036854775807");
    assert_int_equal(inc(dict, "shared/big", 1), DICT_COMMIT_FAILED);
    check_value(dict, "shared/big", "9223372036854775807");

    /* an invalid key fails the commit before the driver */
    tx = dict_transaction_begin(dict, NULL);
    dict_set(tx, "nope/x", "1", 1);
    assert_int_equal(commit_result(tx), DICT_COMMIT_FAILED);
    dict_registry_free(reg);

    reg = open_ok(fx->path, NULL);
    check_value(D(reg), "shared/n", "-5");
    check_value(D(reg), "shared/other", "x");
    dict_registry_free(reg);
}

static void test_batch_is_one_record(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, NULL);
    struct dict *dict = D(reg);
    set(dict, "shared/gone", "x");
    int64_t before = file_size(fx->path);
    struct dict_transaction *tx = dict_transaction_begin(dict, NULL);
    char key[64];
    for (int i = 0; i < 500; i++) {
        snprintf(key, sizeof(key), "shared/batch/%03d", i);
        dict_set(tx, key, key, strlen(key));
    }
    dict_unset(tx, "shared/gone");
    assert_int_equal(commit_result(tx), DICT_COMMIT_OK);
    dict_registry_free(reg);

    /* cutting one byte off the end loses the whole batch, not part of it */
    assert_int_equal(truncate(fx->path, (off_t)(file_size(fx->path) - 1)), 0);
    reg = open_ok(fx->path, NULL);
    dict = D(reg);
    assert_int_equal(file_size(fx->path), before);
    check_value(dict, "shared/batch/000", NULL);
    check_value(dict, "shared/batch/499", NULL);
    check_value(dict, "shared/gone", "x");
    dict_registry_free(reg);
}

static void test_iterate(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, NULL);
    struct dict *dict = D(reg);
    set(dict, "shared/a/1", "c");
    set(dict, "shared/a/2", "a");
    set(dict, "shared/a/sub/3", "b");
    set(dict, "shared/ab", "z");
    set(dict, "shared/b", "y");
    struct dict_op_settings alice = {.username = "alice"};
    struct dict_transaction *tx = dict_transaction_begin(dict, &alice);
    dict_set(tx, "priv/x", "1", 1);
    dict_set(tx, "priv/y/z", "2", 1);
    assert_int_equal(commit_result(tx), DICT_COMMIT_OK);

    expect_iterate(dict, NULL, "shared/a/", 0, "shared/a/1=c;shared/a/2=a;");
    expect_iterate(dict, NULL, "shared/a/", DICT_ITER_RECURSE,
                   "shared/a/1=c;shared/a/2=a;shared/a/sub/3=b;");
    expect_iterate(dict, NULL, "shared/a/", DICT_ITER_RECURSE | DICT_ITER_SORT_BY_VALUE,
                   "shared/a/2=a;shared/a/sub/3=b;shared/a/1=c;");
    expect_iterate(dict, NULL, "shared/a/", DICT_ITER_RECURSE | DICT_ITER_NO_VALUE,
                   "shared/a/1;shared/a/2;shared/a/sub/3;");
    expect_iterate(dict, NULL, "shared/a/1", DICT_ITER_EXACT_KEY, "shared/a/1=c;");
    expect_iterate(dict, NULL, "shared/", DICT_ITER_RECURSE | DICT_ITER_SORT_BY_KEY,
                   "shared/a/1=c;shared/a/2=a;shared/a/sub/3=b;shared/ab=z;shared/b=y;");
    expect_iterate(dict, "alice", "priv/", DICT_ITER_RECURSE, "priv/x=1;priv/y/z=2;");
    expect_iterate(dict, "bob", "priv/", DICT_ITER_RECURSE, "");

    /* writes between steps: the walk continues after its last key */
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict_iterate *it = dict_iterate_init(dict, NULL, "shared/", DICT_ITER_RECURSE, &err);
    assert_non_null(it);
    struct dict_row row;
    assert_int_equal(dict_iterate_next(it, &row), DICT_ITER_ROW);
    assert_string_equal(row.key, "shared/a/1");
    assert_int_equal(unset(dict, "shared/a/2"), DICT_COMMIT_OK);
    set(dict, "shared/aa", "new");
    assert_int_equal(dict_iterate_next(it, &row), DICT_ITER_ROW);
    assert_string_equal(row.key, "shared/a/sub/3");
    assert_int_equal(dict_iterate_next(it, &row), DICT_ITER_ROW);
    assert_string_equal(row.key, "shared/aa");
    dict_iterate_deinit(it);
    dict_registry_free(reg);
}

static void test_ttl_and_expire_scan(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, NULL);
    struct dict *dict = D(reg);
    set_ttl(dict, "shared/short", "s", 1);
    set_ttl(dict, "shared/long", "l", 3600);
    set(dict, "shared/forever", "f");
    set_ttl(dict, "shared/counter", "1", 3600);
    assert_int_equal(inc(dict, "shared/counter", 1), DICT_COMMIT_OK);
    check_value(dict, "shared/short", "s");

    /* wait (at most 3 s) for the short one to lapse */
    struct timespec ts = {0, 100 * 1000 * 1000};
    for (int i = 0; i < 30; i++) {
        struct lookup_out o = lookup(dict, "shared/short");
        int ret = o.ret;
        lookup_free(&o);
        if (ret == 0)
            break;
        nanosleep(&ts, NULL);
    }
    check_value(dict, "shared/short", NULL);
    expect_iterate(dict, NULL, "shared/", DICT_ITER_RECURSE,
                   "shared/counter=2;shared/forever=f;shared/long=l;");
    /* an expired counter is a missing counter */
    assert_int_equal(inc(dict, "shared/short", 1), DICT_COMMIT_NOT_FOUND);

    int64_t before = file_size(fx->path);
    expire_scan(dict);
    assert_true(file_size(fx->path) > before); /* the removal is logged */
    int64_t after = file_size(fx->path);
    expire_scan(dict); /* nothing left to remove: nothing written */
    assert_int_equal(file_size(fx->path), after);
    dict_registry_free(reg);

    reg = open_ok(fx->path, NULL);
    dict = D(reg);
    check_value(dict, "shared/short", NULL);
    check_value(dict, "shared/long", "l");
    check_value(dict, "shared/counter", "2");
    check_value(dict, "shared/forever", "f");
    dict_registry_free(reg);
}

/* ---------- crash recovery ---------- */

static void test_torn_tail_is_cut_at_every_offset(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, NULL);
    struct dict *dict = D(reg);
    char key[32];
    char value[64];
    int64_t sizes[6];
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "shared/k%d", i);
        snprintf(value, sizeof(value), "value number %d", i);
        set(dict, key, value);
        sizes[i] = file_size(fx->path);
    }
    dict_registry_free(reg);
    size_t full_len;
    char *full = read_file(fx->path, &full_len);

    /* every cut inside the last record leaves the five before it */
    for (int64_t cut = sizes[4] + 1; cut < sizes[5]; cut++) {
        int fd = open(fx->path, O_WRONLY | O_TRUNC);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, full, (size_t)cut), (ssize_t)cut);
        close(fd);
        reg = open_ok(fx->path, NULL);
        dict = D(reg);
        assert_int_equal(file_size(fx->path), sizes[4]);
        check_value(dict, "shared/k4", "value number 4");
        check_value(dict, "shared/k5", NULL);
        /* and the file takes new writes after the cut */
        set(dict, "shared/k5", "again");
        dict_registry_free(reg);
        reg = open_ok(fx->path, NULL);
        check_value(D(reg), "shared/k0", "value number 0");
        check_value(D(reg), "shared/k5", "again");
        dict_registry_free(reg);
    }
    free(full);
}

static void test_garbage_and_zero_tails_are_cut(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, NULL);
    set(D(reg), "shared/a", "1");
    set(D(reg), "shared/b", "2");
    dict_registry_free(reg);
    int64_t good = file_size(fx->path);

    /* a length running past the end */
    append_bytes(fx->path, "\xff\xff\x00\x00garbage", 11);
    reg = open_ok(fx->path, NULL);
    assert_int_equal(file_size(fx->path), good);
    check_value(D(reg), "shared/b", "2");
    dict_registry_free(reg);

    /* a zero-filled tail (file extended, data never written) */
    assert_int_equal(truncate(fx->path, (off_t)(good + 4096)), 0);
    reg = open_ok(fx->path, NULL);
    assert_int_equal(file_size(fx->path), good);
    check_value(D(reg), "shared/a", "1");
    dict_registry_free(reg);

    /* random bytes with no record in them */
    unsigned char junk[300];
    srand(7);
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (unsigned char)rand();
    junk[0] = 20; /* a small, in-file length: the checksum must catch it */
    junk[1] = junk[2] = junk[3] = 0;
    append_bytes(fx->path, junk, sizeof(junk));
    reg = open_ok(fx->path, NULL);
    assert_int_equal(file_size(fx->path), good);
    check_value(D(reg), "shared/a", "1");
    dict_registry_free(reg);
}

static void test_corruption_is_refused_not_cut(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, NULL);
    set(D(reg), "shared/a", "first value");
    int64_t first_end = file_size(fx->path);
    set(D(reg), "shared/b", "second value");
    set(D(reg), "shared/c", "third value");
    dict_registry_free(reg);

    /* flip a byte inside the second record: acknowledged data follows it */
    size_t len;
    char *data = read_file(fx->path, &len);
    data[first_end + 12] ^= 0x55;
    int fd = open(fx->path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);

    struct petrel_error err;
    petrel_error_clear(&err);
    assert_null(registry_for(fx->path, NULL, NULL, &err));
    if (strstr(err.message, "corrupt record at offset") == NULL ||
        strstr(err.message, "dict d") == NULL)
        fail_msg("unexpected error: %s", err.message);
    /* the file is untouched */
    size_t len2;
    char *after = read_file(fx->path, &len2);
    assert_int_equal(len2, len);
    assert_memory_equal(after, data, len);
    free(after);
    free(data);
}

static void test_damaged_length_field_is_refused(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, NULL);
    set(D(reg), "shared/a", "first value");
    int64_t first_end = file_size(fx->path);
    set(D(reg), "shared/b", "second value");
    set(D(reg), "shared/c", "third value");
    dict_registry_free(reg);

    /* the second record now claims to run past the end of the file */
    size_t len;
    char *data = read_file(fx->path, &len);
    data[first_end + 2] = 0x70;
    int fd = open(fx->path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    struct petrel_error err;
    petrel_error_clear(&err);
    assert_null(registry_for(fx->path, NULL, NULL, &err));
    assert_non_null(strstr(err.message, "corrupt record at offset"));
    assert_int_equal(file_size(fx->path), (int64_t)len);
    free(data);
}

static void test_foreign_file_is_refused(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, NULL); /* makes the directories */
    dict_registry_free(reg);
    int fd = open(fx->path, O_WRONLY | O_TRUNC);
    const char text[] = "this is not a petrel dict file, it is a text file\n";
    assert_int_equal(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
    close(fd);
    struct petrel_error err;
    petrel_error_clear(&err);
    assert_null(registry_for(fx->path, NULL, NULL, &err));
    assert_non_null(strstr(err.message, "not a petrel dict file"));

    /* a real file whose header was damaged */
    assert_int_equal(unlink(fx->path), 0);
    reg = open_ok(fx->path, NULL);
    set(D(reg), "shared/a", "1");
    dict_registry_free(reg);
    size_t len;
    char *data = read_file(fx->path, &len);
    data[17] ^= 1; /* the generation */
    fd = open(fx->path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    free(data);
    petrel_error_clear(&err);
    assert_null(registry_for(fx->path, NULL, NULL, &err));
    assert_non_null(strstr(err.message, "header checksum mismatch"));
}

/* ---------- compaction ---------- */

static void test_compaction_keeps_everything(void **state)
{
    struct fx *fx = *state;
    struct metrics_registry *metrics = metrics_registry_new();
    struct petrel_error err;
    petrel_error_clear(&err);
    const char *opts = "    compact_ratio: 2\n    compact_min_bytes: 0\n    fsync: never\n";
    struct dict_registry *reg = registry_for(fx->path, opts, metrics, &err);
    if (reg == NULL)
        fail_msg("%s", err.message);
    struct dict *dict = D(reg);
    uint64_t first = file_generation(fx->path);
    char key[64];
    char value[64];
    /* many keys, rewritten many times, some removed, some with TTL */
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 50; i++) {
            snprintf(key, sizeof(key), "shared/k/%02d", i);
            snprintf(value, sizeof(value), "r%d-i%d", round, i);
            set(dict, key, value);
        }
    }
    for (int i = 0; i < 50; i += 5) {
        snprintf(key, sizeof(key), "shared/k/%02d", i);
        assert_int_equal(unset(dict, key), DICT_COMMIT_OK);
    }
    set(dict, "shared/counter", "0");
    for (int i = 0; i < 100; i++)
        assert_int_equal(inc(dict, "shared/counter", 2), DICT_COMMIT_OK);
    set_ttl(dict, "shared/ttl", "t", 3600);
    assert_true(file_generation(fx->path) > first); /* rewritten at least once */
    /* bounded: about twice the live data, not 1000+ records */
    assert_true(file_size(fx->path) < 40 * 1024);

    struct buf text = {0};
    metrics_render(metrics, &text);
    if (strstr(buf_cstr(&text), "event=\"compaction\"") == NULL)
        fail_msg("no compaction counted:\n%s", buf_cstr(&text));
    buf_free(&text);
    dict_registry_free(reg);
    metrics_registry_free(metrics);

    reg = open_ok(fx->path, NULL);
    dict = D(reg);
    for (int i = 0; i < 50; i++) {
        snprintf(key, sizeof(key), "shared/k/%02d", i);
        snprintf(value, sizeof(value), "r19-i%d", i);
        check_value(dict, key, i % 5 == 0 ? NULL : value);
    }
    check_value(dict, "shared/counter", "200");
    check_value(dict, "shared/ttl", "t");
    dict_registry_free(reg);
    /* no temp file left behind */
    char *tmp = xasprintf("%s.tmp", fx->path);
    assert_int_equal(access(tmp, F_OK), -1);
    free(tmp);
}

static void test_large_snapshot_spans_records(void **state)
{
    struct fx *fx = *state;
    const char *opts = "    compact_ratio: 2\n    compact_min_bytes: 0\n    fsync: never\n";
    struct dict_registry *reg = open_ok(fx->path, opts);
    struct dict *dict = D(reg);
    char *big = xmalloc(4001);
    memset(big, 'v', 4000);
    big[4000] = '\0';
    char key[64];
    /* 1200 keys x 4 KB = ~4.8 MB live: snapshot records are cut at 1 MiB.
     * Written three times over, the log passes twice the live data. */
    uint64_t before = file_generation(fx->path);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 1200; i += 100) {
            struct dict_transaction *tx = dict_transaction_begin(dict, NULL);
            for (int k = i; k < i + 100; k++) {
                snprintf(key, sizeof(key), "shared/big/%04d", k);
                big[0] = (char)('a' + (k + round) % 26);
                dict_set(tx, key, big, 4000);
            }
            assert_int_equal(commit_result(tx), DICT_COMMIT_OK);
        }
    }
    set(dict, "shared/small", "x");
    assert_true(file_generation(fx->path) > before);
    assert_true(file_size(fx->path) < 12 * 1024 * 1024);
    assert_true(count_records(fx->path, 2) >= 4); /* snapshot records of about 1 MiB */
    dict_registry_free(reg);

    reg = open_ok(fx->path, NULL);
    dict = D(reg);
    for (int k = 0; k < 1200; k++) {
        snprintf(key, sizeof(key), "shared/big/%04d", k);
        struct lookup_out o = lookup(dict, key);
        assert_int_equal(o.ret, 1);
        assert_int_equal(o.len, 4000);
        assert_int_equal(o.value[0], 'a' + (k + 2) % 26);
        lookup_free(&o);
    }
    check_value(dict, "shared/small", "x");
    dict_registry_free(reg);
    free(big);
}

/* ---------- an instance of a configured dict (dict_instance_new) ---------- */

/* An IMAP worker's instance: made from the registry's dict, opened on its
 * own loop, sharing the file with the registry's; it keeps the
 * configuration when the registry is freed first (daemon shutdown order). */
static void test_instance_shares_the_file_and_outlives_the_registry(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, NULL);
    struct dict *inst = dict_instance_new(D(reg));
    struct event_base *base = event_base_new();
    struct petrel_error err;
    petrel_error_clear(&err);
    assert_true(dict_instance_start(inst, base, &err));
    assert_true(dict_instance_start(inst, base, &err)); /* idempotent */
    set(D(reg), "shared/x", "from the registry");
    check_value(inst, "shared/x", "from the registry");
    set(inst, "shared/y", "from the instance");
    check_value(D(reg), "shared/y", "from the instance");
    dict_registry_free(reg);
    check_value(inst, "shared/x", "from the registry");
    set(inst, "shared/z", "after");
    dict_instance_free(inst);
    /* an instance never started frees cleanly too */
    reg = open_ok(fx->path, NULL);
    struct dict *idle = dict_instance_new(D(reg));
    dict_registry_free(reg);
    dict_instance_free(idle);
    event_base_free(base);
}

/* ---------- two processes (two instances) ---------- */

static void test_two_instances_see_each_other(void **state)
{
    struct fx *fx = *state;
    const char *opts = "    compact_ratio: 2\n    compact_min_bytes: 0\n";
    struct dict_registry *ra = open_ok(fx->path, opts);
    struct dict_registry *rb = open_ok(fx->path, opts);
    struct dict *a = D(ra);
    struct dict *b = D(rb);

    set(a, "shared/x", "from a");
    check_value(b, "shared/x", "from a");
    set(b, "shared/n", "1");
    assert_int_equal(inc(a, "shared/n", 1), DICT_COMMIT_OK);
    assert_int_equal(inc(b, "shared/n", 1), DICT_COMMIT_OK);
    check_value(a, "shared/n", "3");
    check_value(b, "shared/n", "3");
    assert_int_equal(unset(b, "shared/x"), DICT_COMMIT_OK);
    check_value(a, "shared/x", NULL);

    /* a compacts (new inode) many times; b follows with full reloads */
    uint64_t before = file_generation(fx->path);
    char key[32];
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof(key), "shared/loop/%d", i % 10);
        set(i % 2 == 0 ? a : b, key, i % 2 == 0 ? "a" : "b");
        assert_int_equal(inc(i % 3 == 0 ? b : a, "shared/n", 1), DICT_COMMIT_OK);
    }
    assert_true(file_generation(fx->path) > before);
    check_value(a, "shared/n", "203");
    check_value(b, "shared/n", "203");
    expect_iterate(b, NULL, "shared/loop/", 0,
                   "shared/loop/0=a;shared/loop/1=b;shared/loop/2=a;shared/loop/3=b;"
                   "shared/loop/4=a;shared/loop/5=b;shared/loop/6=a;shared/loop/7=b;"
                   "shared/loop/8=a;shared/loop/9=b;");

    /* an expire-scan in one is seen by the other */
    set_ttl(a, "shared/ttl", "t", 1);
    check_value(b, "shared/ttl", "t");
    struct timespec ts = {1, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    expire_scan(b);
    check_value(a, "shared/ttl", NULL);
    dict_registry_free(ra);
    dict_registry_free(rb);

    struct dict_registry *rc = open_ok(fx->path, NULL);
    check_value(D(rc), "shared/n", "203");
    dict_registry_free(rc);
}

static void test_torn_tail_left_by_a_crashed_peer(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, NULL);
    struct dict *dict = D(reg);
    set(dict, "shared/a", "1");
    int64_t good = file_size(fx->path);
    /* a peer died mid-append: a record head promising more than is there */
    append_bytes(fx->path, "\x40\x00\x00\x00\x12\x34\x56\x78\x01", 9);
    check_value(dict, "shared/a", "1"); /* readers skip it */
    set(dict, "shared/b", "2");         /* the next writer cuts it first */
    dict_registry_free(reg);
    assert_true(file_size(fx->path) > good);
    reg = open_ok(fx->path, NULL);
    check_value(D(reg), "shared/a", "1");
    check_value(D(reg), "shared/b", "2");
    dict_registry_free(reg);
}

/* ---------- failures ---------- */

static void test_lock_timeout_fails_operations(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, "    lock_timeout: 100ms\n");
    struct dict *dict = D(reg);
    set(dict, "shared/a", "1");
    char *lock = xasprintf("%s.lock", fx->path);
    int fd = open(lock, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX), 0); /* a stuck peer */

    struct dict_transaction *tx = dict_transaction_begin(dict, NULL);
    dict_set(tx, "shared/b", "2", 1);
    struct commit_out o = commit(tx);
    assert_int_equal(o.result, DICT_COMMIT_FAILED);
    assert_non_null(strstr(o.error, "locked by another process"));
    free(o.error);
    /* reads of an unchanged file need no lock */
    check_value(dict, "shared/a", "1");

    flock(fd, LOCK_UN);
    close(fd);
    free(lock);
    set(dict, "shared/b", "2");
    check_value(dict, "shared/b", "2");
    dict_registry_free(reg);
}

static void test_write_failure_applies_nothing(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, NULL);
    struct dict *dict = D(reg);
    set(dict, "shared/a", "1");
    int64_t good = file_size(fx->path);

    /* a file size limit makes the append fail part-way */
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {(rlim_t)(good + 10), old.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    char value[200];
    memset(value, 'q', sizeof(value));
    struct dict_transaction *tx = dict_transaction_begin(dict, NULL);
    dict_set(tx, "shared/b", value, sizeof(value));
    dict_set(tx, "shared/a", "2", 1);
    struct commit_out o = commit(tx);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);

    assert_int_equal(o.result, DICT_COMMIT_FAILED);
    assert_non_null(strstr(o.error, "cannot write"));
    free(o.error);
    check_value(dict, "shared/a", "1");
    check_value(dict, "shared/b", NULL);
    assert_int_equal(file_size(fx->path), good); /* the partial record was taken back */
    set(dict, "shared/c", "3");
    dict_registry_free(reg);

    reg = open_ok(fx->path, NULL);
    check_value(D(reg), "shared/a", "1");
    check_value(D(reg), "shared/b", NULL);
    check_value(D(reg), "shared/c", "3");
    dict_registry_free(reg);
}

static void test_deleted_file_fails_cleanly(void **state)
{
    struct fx *fx = *state;
    struct dict_registry *reg = open_ok(fx->path, NULL);
    struct dict *dict = D(reg);
    set(dict, "shared/a", "1");
    assert_int_equal(unlink(fx->path), 0);
    struct lookup_out o = lookup(dict, "shared/a");
    assert_int_equal(o.ret, -1);
    assert_non_null(strstr(o.error, "is gone"));
    lookup_free(&o);
    struct dict_transaction *tx = dict_transaction_begin(dict, NULL);
    dict_set(tx, "shared/b", "2", 1);
    assert_int_equal(commit_result(tx), DICT_COMMIT_FAILED);
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict_iterate *it = dict_iterate_init(dict, NULL, "shared/", 0, &err);
    assert_non_null(it);
    struct dict_row row;
    assert_int_equal(dict_iterate_next(it, &row), DICT_ITER_ERROR);
    assert_non_null(strstr(dict_iterate_error(it), "is gone"));
    dict_iterate_deinit(it);
    int ok = -1;
    dict_expire_scan(dict, expire_cb, &ok);
    assert_int_equal(ok, 0);
    dict_registry_free(reg);
}

static void test_unwritable_directory_fails_open(void **state)
{
    struct fx *fx = *state;
    char *file = xasprintf("%s/plainfile", fx->dir);
    int fd = open(file, O_CREAT | O_WRONLY, 0600);
    close(fd);
    char *path = xasprintf("%s/under/x.db", file); /* a file where a directory should be */
    struct petrel_error err;
    petrel_error_clear(&err);
    assert_null(registry_for(path, NULL, NULL, &err));
    assert_non_null(strstr(err.message, "cannot create directory"));
    free(path);
    free(file);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_validation),
        cmocka_unit_test_setup_teardown(test_set_lookup_unset_persist, setup, teardown),
        cmocka_unit_test_setup_teardown(test_atomic_inc_semantics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_is_one_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_iterate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ttl_and_expire_scan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail_is_cut_at_every_offset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_and_zero_tails_are_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corruption_is_refused_not_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_length_field_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_file_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compaction_keeps_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_snapshot_spans_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_instances_see_each_other, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail_left_by_a_crashed_peer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_timeout_fails_operations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_instance_shares_the_file_and_outlives_the_registry,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_failure_applies_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deleted_file_fails_cleanly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unwritable_directory_fails_open, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
