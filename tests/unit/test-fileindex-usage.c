/* Unit tests for the fileindex aggregate (fileindex.h "usage"): the folder's
 * message count and byte sum kept in the same commit as the records, read
 * without loading records (fileindex_read_usage), self-healing and recalc.
 *
 * The crash test tears the log at every byte: whatever a crash leaves, the
 * aggregate a quota reader sees equals the sum over the records the index
 * recovers, and both equal the state after the last complete transaction. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/xalloc.h"
#include "storage/fileindex/fileindex-private.h"
#include "storage/fileindex/fileindex.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t GUID[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6};

struct fx {
    char dir[256];
};

static int setup(void **state)
{
    struct fx *fx = xcalloc(1, sizeof(*fx));
    const char *tmp = getenv("TMPDIR");
    snprintf(fx->dir, sizeof(fx->dir), "%s/petrel-fi-usage-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(fx->dir) == NULL)
        return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    DIR *d = opendir(fx->dir);
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char *p = xasprintf("%s/%s", fx->dir, de->d_name);
        unlink(p);
        free(p);
    }
    if (d != NULL)
        closedir(d);
    rmdir(fx->dir);
    free(fx);
    return 0;
}

static const struct fileindex_settings SET = {.fsync = FILEINDEX_FSYNC_NEVER};

static struct fileindex *open_ok(const char *dir)
{
    struct petrel_error err = {0};
    struct fileindex *fi = fileindex_open(dir, &SET, &err);
    if (fi == NULL)
        fail_msg("open: %s", err.message);
    return fi;
}

static struct fileindex_txn *begin_ok(struct fileindex *fi)
{
    struct petrel_error err = {0};
    struct fileindex_txn *t = fileindex_begin(fi, &err);
    if (t == NULL)
        fail_msg("begin: %s", err.message);
    return t;
}

static void commit_ok(struct fileindex_txn *t)
{
    struct petrel_error err = {0};
    if (!fileindex_txn_commit(t, &err))
        fail_msg("commit: %s", err.message);
}

static uint32_t append(struct fileindex_txn *t, uint64_t size)
{
    static unsigned n;
    char name[64];
    snprintf(name, sizeof(name), "m%u.host,S=%llu", ++n, (unsigned long long)size);
    struct fileindex_record rec = {.size = size, .vsize = size + 10, .filename = name};
    uint32_t uid = fileindex_txn_append(t, &rec);
    assert_true(uid != 0);
    return uid;
}

/* The aggregate as the records say: the reference everything must equal. */
static struct fileindex_usage summed(const struct fileindex *fi)
{
    struct fileindex_usage u = {0, 0};
    for (size_t i = 0; i < fileindex_count(fi); i++) {
        u.messages++;
        u.bytes += fileindex_record_at(fi, i)->size;
    }
    return u;
}

static struct fileindex_usage read_usage(const char *dir, bool expect_scan)
{
    struct fileindex_usage u = {~0ull, ~0ull};
    bool scanned = !expect_scan;
    struct petrel_error err = {0};
    if (!fileindex_read_usage(dir, &SET, &u, &scanned, &err))
        fail_msg("read_usage: %s", err.message);
    if (scanned != expect_scan)
        fail_msg("read_usage %s the records", scanned ? "scanned" : "did not scan");
    return u;
}

static void assert_usage(struct fileindex_usage u, uint64_t messages, uint64_t bytes)
{
    if (u.messages != messages || u.bytes != bytes)
        fail_msg("usage %llu/%llu, expected %llu/%llu", (unsigned long long)u.messages,
                 (unsigned long long)u.bytes, (unsigned long long)messages,
                 (unsigned long long)bytes);
}

static char *path_in(const struct fx *fx, const char *name)
{
    return xasprintf("%s/%s", fx->dir, name);
}

static char *read_all(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    char *data = xmalloc((size_t)st.st_size + 1);
    assert_int_equal(pread(fd, data, (size_t)st.st_size, 0), st.st_size);
    close(fd);
    *len = (size_t)st.st_size;
    return data;
}

static void write_all(const char *path, const char *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

static off_t file_size_of(const struct fx *fx, const char *name)
{
    char *p = path_in(fx, name);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    free(p);
    return st.st_size;
}

static struct fileindex *create(const struct fx *fx)
{
    struct petrel_error err = {0};
    if (!fileindex_create(fx->dir, GUID, 1234, &SET, &err))
        fail_msg("create: %s", err.message);
    return open_ok(fx->dir);
}

static void test_torn_log_every_byte(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create(fx);
    /* A history of every kind of change; the aggregate after each. */
    struct {
        uint64_t messages, bytes;
    } after[16] = {{0, 0}};
    size_t steps = 0;
    struct fileindex_txn *t = begin_ok(fi);
    append(t, 1000);
    append(t, 2500);
    append(t, 1);
    commit_ok(t);
    after[steps].messages = 3, after[steps++].bytes = 3501;
    t = begin_ok(fi);
    assert_true(fileindex_txn_set_flags(t, 1, 1, 0)); /* flags only: no change */
    commit_ok(t);
    after[steps].messages = 3, after[steps++].bytes = 3501;
    t = begin_ok(fi);
    assert_true(fileindex_txn_expunge(t, 2));
    append(t, 70000);
    commit_ok(t);
    after[steps].messages = 3, after[steps++].bytes = 71001;
    t = begin_ok(fi);
    uint32_t gone = append(t, 999999); /* appended and expunged in one transaction */
    assert_true(fileindex_txn_expunge(t, gone));
    append(t, 5);
    commit_ok(t);
    after[steps].messages = 4, after[steps++].bytes = 71006;
    t = begin_ok(fi);
    assert_true(fileindex_txn_expunge(t, 1));
    assert_true(fileindex_txn_expunge(t, 3));
    commit_ok(t);
    after[steps].messages = 2, after[steps++].bytes = 70005;
    assert_usage(summed(fi), 2, 70005);
    struct fileindex_usage live;
    fileindex_get_usage(fi, &live);
    assert_usage(live, 2, 70005);
    fileindex_close(fi);

    char *log = path_in(fx, FI_LOG_FILE);
    size_t full_len;
    char *full = read_all(log, &full_len);
    size_t ends[16];
    size_t n = 0;
    for (size_t pos = FI_LOG_HDR_SIZE; pos < full_len; n++) {
        pos += fi_get32((const uint8_t *)full + pos);
        ends[n] = pos;
    }
    assert_int_equal(n, steps);
    assert_int_equal(ends[n - 1], full_len);

    for (size_t cut = FI_LOG_HDR_SIZE; cut <= full_len; cut++) {
        write_all(log, full, cut);
        uint64_t em = 0, eb = 0; /* the state after the last complete transaction */
        for (size_t i = 0; i < n && ends[i] <= cut; i++)
            em = after[i].messages, eb = after[i].bytes;
        struct fileindex_usage quick = read_usage(fx->dir, false);
        fi = open_ok(fx->dir);
        struct fileindex_usage kept;
        fileindex_get_usage(fi, &kept);
        struct fileindex_usage sum = summed(fi);
        fileindex_close(fi);
        if (quick.messages != sum.messages || quick.bytes != sum.bytes ||
            kept.messages != sum.messages || kept.bytes != sum.bytes)
            fail_msg("cut at %zu: reader %llu/%llu, view %llu/%llu, records %llu/%llu", cut,
                     (unsigned long long)quick.messages, (unsigned long long)quick.bytes,
                     (unsigned long long)kept.messages, (unsigned long long)kept.bytes,
                     (unsigned long long)sum.messages, (unsigned long long)sum.bytes);
        assert_usage(sum, em, eb);
    }
    /* After a fold the base alone carries it. */
    write_all(log, full, full_len);
    fi = open_ok(fx->dir);
    struct petrel_error err = {0};
    assert_true(fileindex_optimize(fi, &err));
    fileindex_close(fi);
    assert_usage(read_usage(fx->dir, false), 2, 70005);
    free(full);
    free(log);
}

/* Rewrites the base header's aggregate (and flags) as an older writer or
 * damage would leave it, keeping the header checksum valid. */
static void patch_base(const struct fx *fx, uint64_t bytes, bool flag)
{
    char *base = path_in(fx, FI_BASE_FILE);
    size_t len;
    char *data = read_all(base, &len);
    uint8_t *h = (uint8_t *)data;
    uint32_t flags = fi_get32(h + 20);
    fi_put32(h + 20, flag ? flags | FI_BASE_FLAG_USAGE : flags & ~FI_BASE_FLAG_USAGE);
    fi_put32(h + 108, flag ? (uint32_t)bytes : 0);
    fi_put32(h + 120, flag ? (uint32_t)(bytes >> 32) : 0);
    fi_put32(h + 124, fi_crc32c(0, h, 124));
    write_all(base, data, len);
    free(data);
    free(base);
}

static void test_self_heal_and_recalc(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create(fx);
    struct fileindex_txn *t = begin_ok(fi);
    append(t, 100);
    append(t, 200);
    commit_ok(t);
    struct petrel_error err = {0};
    assert_true(fileindex_optimize(fi, &err)); /* the aggregate now in the base only */
    fileindex_close(fi);
    assert_usage(read_usage(fx->dir, false), 2, 300);

    /* A wrong sum in the base: the quick reader trusts the header... */
    patch_base(fx, 5, true);
    assert_usage(read_usage(fx->dir, false), 2, 5);
    /* ...a handle sums its records and is right... */
    fi = open_ok(fx->dir);
    struct fileindex_usage u;
    fileindex_get_usage(fi, &u);
    assert_usage(u, 2, 300);
    /* ...and its next transaction of any kind writes the aggregate again. */
    t = begin_ok(fi);
    assert_true(fileindex_txn_set_flags(t, 1, 1, 0));
    commit_ok(t);
    assert_usage(read_usage(fx->dir, false), 2, 300);
    fileindex_close(fi);

    /* recalc: from the records, written at once. */
    fi = open_ok(fx->dir);
    assert_true(fileindex_optimize(fi, &err));
    fileindex_close(fi);
    patch_base(fx, 7, true);
    fi = open_ok(fx->dir);
    assert_true(fileindex_usage_recalc(fi, &u, &err));
    assert_usage(u, 2, 300);
    fileindex_close(fi);
    assert_usage(read_usage(fx->dir, false), 2, 300);

    /* A base of an older writer (no aggregate): the reader sums the
     * records until the next write heals it. */
    fi = open_ok(fx->dir);
    assert_true(fileindex_optimize(fi, &err));
    fileindex_close(fi);
    patch_base(fx, 0, false);
    assert_usage(read_usage(fx->dir, true), 2, 300);
    fi = open_ok(fx->dir);
    t = begin_ok(fi);
    append(t, 50);
    commit_ok(t);
    fileindex_close(fi);
    assert_usage(read_usage(fx->dir, false), 3, 350);
}

static void test_rebuild_and_fold(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create(fx);
    struct fileindex_txn *t = begin_ok(fi);
    for (int i = 0; i < 10; i++)
        append(t, 1000 + (uint64_t)i);
    commit_ok(t);
    /* replace_all (a rebuild from the messages) writes a base with its sum. */
    struct fileindex_record recs[3] = {
        {.uid = 2, .size = 11, .filename = "a"},
        {.uid = 5, .size = 22, .filename = "b"},
        {.uid = 9, .size = 33, .filename = "c"},
    };
    t = begin_ok(fi);
    struct petrel_error err = {0};
    assert_true(fileindex_txn_replace_all(t, fileindex_get_header(fi), recs, 3, &err));
    commit_ok(t);
    struct fileindex_usage u;
    fileindex_get_usage(fi, &u);
    assert_usage(u, 3, 66);
    assert_usage(read_usage(fx->dir, false), 3, 66);
    /* Automatic folds keep it: many transactions past a small fold size. */
    fileindex_close(fi);
    struct fileindex_settings small = SET;
    small.log_fold_bytes = 512;
    fi = fileindex_open(fx->dir, &small, &err);
    assert_non_null(fi);
    uint64_t bytes = 66;
    for (int i = 0; i < 40; i++) {
        t = begin_ok(fi);
        append(t, (uint64_t)i * 7);
        commit_ok(t);
        bytes += (uint64_t)i * 7;
        assert_usage(read_usage(fx->dir, false), 4 + (uint64_t)i, bytes);
    }
    /* A log longer than the reader's first read (64 KiB). */
    fileindex_close(fi);
    fi = open_ok(fx->dir); /* the default fold size */
    t = begin_ok(fi);
    for (int i = 0; i < 2000; i++)
        append(t, 3);
    commit_ok(t);
    assert_true(file_size_of(fx, FI_LOG_FILE) > 64 * 1024);
    assert_usage(read_usage(fx->dir, false), 43 + 2000, bytes + 6000);
    fileindex_close(fi);
    /* A missing index is NOT_FOUND, as fileindex_open says. */
    char *none = path_in(fx, "nowhere");
    struct fileindex_usage x;
    assert_false(fileindex_read_usage(none, &SET, &x, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    free(none);
}

static struct fileindex_usage cached(struct fileindex_usage_cache *c, const char *dir)
{
    struct fileindex_usage u = {~0ull, ~0ull};
    struct petrel_error err = {0};
    if (!fileindex_read_usage_cached(c, dir, &SET, &u, &err))
        fail_msg("read_usage_cached: %s", err.message);
    return u;
}

/* The cache answers only while both files are the ones it read: every kind
 * of change is seen at once, never a stale value. */
static void test_cache_never_stale(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create(fx);
    struct fileindex_txn *t = begin_ok(fi);
    append(t, 100);
    commit_ok(t);
    struct fileindex_usage_cache *c = fileindex_usage_cache_new(4);
    assert_usage(cached(c, fx->dir), 1, 100);
    assert_int_equal(fileindex_usage_cache_hits(c), 0);
    assert_usage(cached(c, fx->dir), 1, 100);
    assert_int_equal(fileindex_usage_cache_hits(c), 1);
    /* a commit appends to the log */
    t = begin_ok(fi);
    append(t, 50);
    commit_ok(t);
    assert_usage(cached(c, fx->dir), 2, 150);
    assert_int_equal(fileindex_usage_cache_hits(c), 1);
    /* an expunge */
    t = begin_ok(fi);
    assert_true(fileindex_txn_expunge(t, 1));
    commit_ok(t);
    assert_usage(cached(c, fx->dir), 1, 50);
    /* a fold replaces both files */
    struct petrel_error err = {0};
    assert_true(fileindex_optimize(fi, &err));
    assert_usage(cached(c, fx->dir), 1, 50);
    assert_usage(cached(c, fx->dir), 1, 50);
    assert_int_equal(fileindex_usage_cache_hits(c), 2);
    /* a torn tail (a writer that died mid-write) is read but not cached;
     * the next writer cuts it and appends */
    t = begin_ok(fi);
    append(t, 10);
    commit_ok(t);
    fileindex_close(fi);
    char *log = path_in(fx, FI_LOG_FILE);
    size_t len;
    char *data = read_all(log, &len);
    char *torn = xmalloc(len + 7);
    memcpy(torn, data, len);
    memcpy(torn + len, data + FI_LOG_HDR_SIZE, 7);
    write_all(log, torn, len + 7);
    uint64_t hits = fileindex_usage_cache_hits(c);
    assert_usage(cached(c, fx->dir), 2, 60);
    assert_usage(cached(c, fx->dir), 2, 60);
    assert_int_equal(fileindex_usage_cache_hits(c), hits); /* not from the cache */
    fi = open_ok(fx->dir);
    t = begin_ok(fi);
    append(t, 1);
    commit_ok(t);
    fileindex_close(fi);
    assert_usage(cached(c, fx->dir), 3, 61);
    assert_usage(cached(c, fx->dir), 3, 61);
    assert_int_equal(fileindex_usage_cache_hits(c), hits + 1);
    free(torn);
    free(data);
    free(log);
    fileindex_usage_cache_free(c);
}

/* A log that only grows is read from where the cache left it: after each
 * commit (appends and expunges, one transaction or several between reads)
 * the cached answer is the records' sum, with no full read after the first
 * (a fold in between starts over). */
static void test_cache_follows_growth(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create(fx);
    struct fileindex_usage_cache *c = fileindex_usage_cache_new(4);
    assert_usage(cached(c, fx->dir), 0, 0);
    for (int i = 1; i <= 60; i++) {
        for (int k = 0; k < 1 + i % 3; k++) {
            struct fileindex_txn *t = begin_ok(fi);
            append(t, 10 + i);
            if (i % 4 == 0)
                assert_true(fileindex_txn_expunge(t, fileindex_record_at(fi, 0)->uid));
            commit_ok(t);
        }
        struct fileindex_usage want = summed(fi);
        assert_usage(cached(c, fx->dir), want.messages, want.bytes);
        assert_usage(read_usage(fx->dir, false), want.messages, want.bytes);
        if (i == 30) {
            struct petrel_error err = {0};
            assert_true(fileindex_optimize(fi, &err));
        }
    }
    fileindex_close(fi);
    fileindex_usage_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_torn_log_every_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(test_self_heal_and_recalc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuild_and_fold, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_never_stale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_follows_growth, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
