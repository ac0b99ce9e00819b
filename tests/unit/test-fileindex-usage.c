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

static struct fileindex_usage read_usage_how(const char *dir, enum fileindex_usage_source *how)
{
    struct fileindex_usage u = {~0ull, ~0ull};
    struct petrel_error err = {0};
    if (!fileindex_read_usage(dir, &SET, &u, how, &err))
        fail_msg("read_usage: %s", err.message);
    return u;
}

static struct fileindex_usage read_usage(const char *dir, bool expect_scan)
{
    enum fileindex_usage_source how;
    struct fileindex_usage u = read_usage_how(dir, &how);
    bool scanned = how == FILEINDEX_USAGE_RECORDS;
    if (scanned != expect_scan)
        fail_msg("read_usage %s the records", scanned ? "scanned" : "did not scan");
    return u;
}

static const char *source_name(enum fileindex_usage_source how)
{
    return how == FILEINDEX_USAGE_TAIL ? "tail" : how == FILEINDEX_USAGE_LOG ? "log" : "records";
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
        /* A cut between transactions leaves a log that ends with a
         * complete one: read from its tail. Any other cut is a torn
         * tail: the tail does not verify and the log is read whole. */
        bool clean = cut == FI_LOG_HDR_SIZE;
        for (size_t i = 0; i < n; i++)
            clean = clean || cut == ends[i];
        enum fileindex_usage_source how;
        struct fileindex_usage quick = read_usage_how(fx->dir, &how);
        if (how != (clean ? FILEINDEX_USAGE_TAIL : FILEINDEX_USAGE_LOG))
            fail_msg("cut at %zu: read from the %s", cut, source_name(how));
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

/* Appends to the log a transaction as an older writer wrote it: one APPEND
 * of `size` bytes (uid next_uid), then a USAGE operation with the aggregate
 * `after` when `with_usage` (the previous version), none at all before
 * that, then HEADER; no TOTALS trailer. */
static void append_old_txn(const struct fx *fx, const struct fileindex_header *h, uint64_t size,
                           bool with_usage, struct fileindex_usage after)
{
    static const char name[] = "old.host,S=1";
    uint8_t txn[256];
    size_t n = FI_TXN_HDR_SIZE;
    txn[n++] = FI_OP_APPEND;
    fi_put32(txn + n, h->next_uid);
    fi_put32(txn + n + 4, 0);
    fi_put32(txn + n + 8, 0);
    fi_put64(txn + n + 12, h->highest_modseq + 1);
    fi_put64(txn + n + 20, size);
    fi_put64(txn + n + 28, size);
    fi_put64(txn + n + 36, 1700000000);
    fi_put16(txn + n + 44, (uint16_t)(sizeof(name) - 1));
    memcpy(txn + n + 46, name, sizeof(name) - 1);
    n += FI_OP_APPEND_FIXED + sizeof(name) - 1;
    if (with_usage) {
        txn[n++] = FI_OP_USAGE;
        fi_put32(txn + n, (uint32_t)after.messages);
        fi_put64(txn + n + 4, after.bytes);
        n += FI_OP_USAGE_SIZE;
    }
    txn[n++] = FI_OP_HEADER;
    fi_put32(txn + n, h->next_uid + 1);
    fi_put64(txn + n + 4, h->highest_modseq + 1);
    fi_put64(txn + n + 12, h->cache_reset_id);
    n += FI_OP_HEADER_SIZE;
    uint64_t off = (uint64_t)file_size_of(fx, FI_LOG_FILE);
    fi_put32(txn, (uint32_t)n);
    fi_put64(txn + 8, off);
    fi_put32(txn + 4, fi_crc32c(0, txn + 8, n - 8));
    char *log = path_in(fx, FI_LOG_FILE);
    int fd = open(log, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, txn, n, (off_t)off), (ssize_t)n);
    close(fd);
    free(log);
}

/* Overwrites `len` bytes of the log at `off` with `bytes`. */
static void patch_log(const struct fx *fx, uint64_t off, const void *bytes, size_t len)
{
    char *log = path_in(fx, FI_LOG_FILE);
    int fd = open(log, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, len, (off_t)off), (ssize_t)len);
    close(fd);
    free(log);
}

static void expect_read(const struct fx *fx, struct fileindex *fi, enum fileindex_usage_source want,
                        const char *what)
{
    enum fileindex_usage_source how;
    struct fileindex_usage quick = read_usage_how(fx->dir, &how);
    struct petrel_error err = {0};
    assert_true(fileindex_refresh(fi, &err));
    struct fileindex_usage sum = summed(fi);
    if (how != want || quick.messages != sum.messages || quick.bytes != sum.bytes)
        fail_msg("%s: read from the %s (want the %s): %llu/%llu, records %llu/%llu", what,
                 source_name(how), source_name(want), (unsigned long long)quick.messages,
                 (unsigned long long)quick.bytes, (unsigned long long)sum.messages,
                 (unsigned long long)sum.bytes);
}

/* The O(1) read: the aggregate comes from the log's last transaction
 * (TOTALS trailer and the transaction's header), whatever the log holds
 * before it and however long the last transaction is; a tail that does not
 * verify (torn, damaged seal, an older writer's transaction with or
 * without USAGE) falls back to the whole log or the records, never a wrong
 * answer; the next write of this version makes the tail readable again. */
static void test_tail_read(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create(fx);
    expect_read(fx, fi, FILEINDEX_USAGE_TAIL, "empty log");
    /* deliveries: one transaction each */
    for (int i = 0; i < 300; i++) {
        struct fileindex_txn *t = begin_ok(fi);
        append(t, 100 + (uint64_t)i);
        commit_ok(t);
    }
    expect_read(fx, fi, FILEINDEX_USAGE_TAIL, "300 deliveries");
    /* a flag change last: it carries the aggregate too */
    struct fileindex_txn *t = begin_ok(fi);
    assert_true(fileindex_txn_set_flags(t, fileindex_record_at(fi, 5)->uid, 1, 0));
    commit_ok(t);
    expect_read(fx, fi, FILEINDEX_USAGE_TAIL, "flag change last");
    /* the middle of the log is not read: damage there (which a full open
     * would refuse) changes nothing for the tail reader */
    uint64_t log_len = (uint64_t)file_size_of(fx, FI_LOG_FILE);
    struct fileindex_usage before = summed(fi);
    fileindex_close(fi);
    char *log = path_in(fx, FI_LOG_FILE);
    size_t full_len;
    char *full = read_all(log, &full_len);
    static const uint8_t junk[64] = {0xff};
    patch_log(fx, log_len / 2, junk, sizeof(junk));
    enum fileindex_usage_source how;
    struct fileindex_usage u = read_usage_how(fx->dir, &how);
    assert_int_equal(how, FILEINDEX_USAGE_TAIL);
    assert_usage(u, before.messages, before.bytes);
    write_all(log, full, full_len);
    /* a broken seal, or a length that points elsewhere: the whole log */
    uint8_t b;
    uint64_t seal_at = full_len - FI_TXN_TRAILER_SIZE + 17;
    b = (uint8_t)(full[seal_at] ^ 1);
    patch_log(fx, seal_at, &b, 1);
    u = read_usage_how(fx->dir, &how);
    assert_int_equal(how, FILEINDEX_USAGE_LOG);
    assert_usage(u, before.messages, before.bytes);
    write_all(log, full, full_len);
    uint64_t len_at = full_len - FI_TXN_TRAILER_SIZE + 13;
    b = (uint8_t)(full[len_at] + 1);
    patch_log(fx, len_at, &b, 1);
    u = read_usage_how(fx->dir, &how);
    assert_int_equal(how, FILEINDEX_USAGE_LOG);
    assert_usage(u, before.messages, before.bytes);
    write_all(log, full, full_len);
    fi = open_ok(fx->dir);
    expect_read(fx, fi, FILEINDEX_USAGE_TAIL, "restored");

    /* a last transaction longer than the reader's tail read (its header
     * read on its own) */
    t = begin_ok(fi);
    for (int i = 0; i < 500; i++)
        append(t, 7);
    commit_ok(t);
    assert_true(file_size_of(fx, FI_LOG_FILE) - (off_t)full_len > 8 * 1024);
    expect_read(fx, fi, FILEINDEX_USAGE_TAIL, "a long last transaction");

    /* Old-format logs. The previous version's transaction (USAGE, no
     * TOTALS) last: the log is read whole, right. */
    struct fileindex_usage now = summed(fi);
    struct fileindex_usage after = {now.messages + 1, now.bytes + 4000};
    append_old_txn(fx, fileindex_get_header(fi), 4000, true, after);
    expect_read(fx, fi, FILEINDEX_USAGE_LOG, "previous version's transaction last");
    /* this version writes next: the tail again */
    t = begin_ok(fi);
    append(t, 1);
    commit_ok(t);
    expect_read(fx, fi, FILEINDEX_USAGE_TAIL, "written after the previous version");
    /* a writer from before the aggregate (no USAGE at all): the records */
    now = summed(fi);
    append_old_txn(fx, fileindex_get_header(fi), 9000, false, now);
    expect_read(fx, fi, FILEINDEX_USAGE_RECORDS, "pre-aggregate transaction last");
    t = begin_ok(fi);
    assert_true(fileindex_txn_expunge(t, fileindex_record_at(fi, 0)->uid));
    commit_ok(t);
    expect_read(fx, fi, FILEINDEX_USAGE_TAIL, "written after a pre-aggregate writer");

    /* torn at every byte of the last transaction: the whole log (or, at
     * the boundary, the tail of the one before), always the records' sum */
    t = begin_ok(fi);
    append(t, 12345);
    append(t, 6789);
    commit_ok(t);
    fileindex_close(fi);
    free(full);
    full = read_all(log, &full_len);
    size_t last = full_len - fi_get32((const uint8_t *)full + full_len - FI_TXN_TRAILER_SIZE + 13);
    for (size_t cut = last; cut <= full_len; cut++) {
        write_all(log, full, cut);
        fi = open_ok(fx->dir);
        expect_read(fx, fi,
                    cut == last || cut == full_len ? FILEINDEX_USAGE_TAIL : FILEINDEX_USAGE_LOG,
                    "torn last transaction");
        fileindex_close(fi);
    }
    free(full);
    free(log);
}

/* Rewrites the log's last transaction so that its TOTALS say `u`, with its
 * seal and checksum made to hold again: a hand-crafted tail nothing but the
 * records can tell from a real one. */
static void forge_last_totals(const struct fx *fx, struct fileindex_usage u)
{
    char *log = path_in(fx, FI_LOG_FILE);
    size_t len;
    uint8_t *data = (uint8_t *)read_all(log, &len);
    uint8_t *tr = data + len - FI_TXN_TRAILER_SIZE;
    assert_int_equal(tr[0], FI_OP_TOTALS);
    uint32_t tlen = fi_get32(tr + 13);
    uint64_t start = len - tlen;
    fi_put32(tr + 1, (uint32_t)u.messages);
    fi_put64(tr + 5, u.bytes);
    fi_put32(tr + 17, fi_totals_seal(start, tlen, (uint32_t)u.messages, u.bytes));
    fi_put32(data + start + 4, fi_crc32c(0, data + start + 8, tlen - 8));
    write_all(log, (const char *)data, len);
    free(data);
    free(log);
}

/* A TOTALS with a valid seal and checksum but wrong values (hand-crafted,
 * or an aggregate a buggy writer got wrong): the records win at the next
 * write, whatever kind of write it is, and the wrong value left in the
 * middle of the log never comes back (not from the tail, not from the
 * whole-log fallback, not torn back to). */
static void test_forged_totals_healed_by_next_write(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create(fx);
    for (int i = 0; i < 20; i++) {
        struct fileindex_txn *t = begin_ok(fi);
        append(t, 1000 + (uint64_t)i);
        commit_ok(t);
    }
    struct fileindex_usage real = summed(fi);
    fileindex_close(fi);
    struct fileindex_usage forged = {1, 1};
    forge_last_totals(fx, forged);
    /* the log itself is valid: a full open accepts it */
    fi = open_ok(fx->dir);
    assert_usage(summed(fi), real.messages, real.bytes);
    /* a flag change (no size changes) is the next write */
    struct fileindex_txn *t = begin_ok(fi);
    assert_true(fileindex_txn_set_flags(t, fileindex_record_at(fi, 3)->uid, 1, 0));
    commit_ok(t);
    expect_read(fx, fi, FILEINDEX_USAGE_TAIL, "next write after a forged TOTALS");
    /* the forged one now in the middle: a later write torn part way sends
     * the reader back past it, to the write after it, never to it */
    t = begin_ok(fi);
    assert_true(fileindex_txn_set_flags(t, fileindex_record_at(fi, 4)->uid, 1, 0));
    commit_ok(t);
    char *log = path_in(fx, FI_LOG_FILE);
    size_t full_len;
    char *full = read_all(log, &full_len);
    size_t last = full_len - fi_get32((const uint8_t *)full + full_len - FI_TXN_TRAILER_SIZE + 13);
    for (size_t cut = last; cut <= full_len; cut++) {
        write_all(log, full, cut);
        enum fileindex_usage_source how;
        struct fileindex_usage u = read_usage_how(fx->dir, &how);
        assert_usage(u, real.messages, real.bytes);
    }
    /* a writer that never loaded the records (a fresh open) appends */
    fileindex_close(fi);
    forge_last_totals(fx, forged);
    fi = open_ok(fx->dir);
    t = begin_ok(fi);
    append(t, 5);
    commit_ok(t);
    expect_read(fx, fi, FILEINDEX_USAGE_TAIL, "append after a forged TOTALS");
    /* and a fold carries the records' sum, not the forged one */
    fileindex_close(fi);
    forge_last_totals(fx, forged);
    fi = open_ok(fx->dir);
    struct petrel_error err = {0};
    assert_true(fileindex_optimize(fi, &err));
    expect_read(fx, fi, FILEINDEX_USAGE_TAIL, "fold after a forged TOTALS");
    fileindex_close(fi);
    free(full);
    free(log);
}

/* Bytes appended after a clean log that end like a transaction of this
 * version (a trailer whose seal holds, over a header at the offset it
 * names) but are not one: its length disagrees with the header's, the
 * header names another offset, or the transaction's checksum does not
 * hold (checked for a transaction within the reader's 4 KiB tail read;
 * a longer one is taken on its header and seal, decisions.md). A full
 * open cuts them as a torn tail; the usage read must not believe them
 * either (a torn write, a stray block, a hand-made file). */
static void append_crafted(const struct fx *fx, size_t full_len, uint32_t hdr_len, uint64_t hdr_off,
                           uint32_t trailer_len, bool good_crc)
{
    uint8_t buf[16 + FI_TXN_TRAILER_SIZE];
    memset(buf, 0, sizeof(buf));
    fi_put32(buf, hdr_len);
    fi_put64(buf + 8, hdr_off);
    uint8_t *tr = buf + 16;
    tr[0] = FI_OP_TOTALS;
    fi_put32(tr + 1, 1);
    fi_put64(tr + 5, 1);
    fi_put32(tr + 13, trailer_len);
    uint64_t start = full_len + sizeof(buf) - trailer_len;
    fi_put32(tr + 17, fi_totals_seal(start, trailer_len, 1, 1));
    tr[21] = FI_OP_HEADER;
    if (good_crc)
        fi_put32(buf + 4, fi_crc32c(0, buf + 8, sizeof(buf) - 8));
    patch_log(fx, full_len, buf, sizeof(buf));
}

static void test_crafted_tail_not_believed(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create(fx);
    for (int i = 0; i < 5; i++) {
        struct fileindex_txn *t = begin_ok(fi);
        append(t, 300 + (uint64_t)i);
        commit_ok(t);
    }
    struct fileindex_usage real = summed(fi);
    fileindex_close(fi);
    char *log = path_in(fx, FI_LOG_FILE);
    size_t full_len;
    char *full = read_all(log, &full_len);
    const uint32_t n = 16 + FI_TXN_TRAILER_SIZE;
    struct {
        const char *what;
        uint32_t hdr_len;
        uint64_t hdr_off;
        bool good_crc;
    } cases[] = {
        {"length differs from the header's", n + 8, full_len, true},
        {"header names another offset", n, full_len + 8, true},
        {"checksum does not hold", n, full_len, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_all(log, full, full_len);
        append_crafted(fx, full_len, cases[i].hdr_len, cases[i].hdr_off, n, cases[i].good_crc);
        enum fileindex_usage_source how;
        struct fileindex_usage u = read_usage_how(fx->dir, &how);
        if (u.messages != real.messages || u.bytes != real.bytes)
            fail_msg("%s: read %llu/%llu from the %s, records %llu/%llu", cases[i].what,
                     (unsigned long long)u.messages, (unsigned long long)u.bytes, source_name(how),
                     (unsigned long long)real.messages, (unsigned long long)real.bytes);
    }
    write_all(log, full, full_len);
    free(full);
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_torn_log_every_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(test_self_heal_and_recalc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuild_and_fold, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_never_stale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_follows_growth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tail_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_totals_healed_by_next_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crafted_tail_not_believed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
