/* Unit tests for the folder index (storage/fileindex): create/open, append,
 * flag and expunge sequences with their modseqs, persistence, torn log
 * tails and corruption, two handles on one folder (incremental refresh,
 * adopt, full reload), forked writers and a reader racing each other,
 * optimize and automatic folds, replace_all, the cache (generations, purge,
 * interrupted purge, unreadable caches, the size ceiling), indexes of the
 * older format without lineage, limits, and the metrics. Every test works
 * in its own temporary directory. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/metrics.h"
#include "core/xalloc.h"
#include "storage/fileindex/fileindex-private.h"
#include "storage/fileindex/fileindex.h"
#include "storage/mail-flags.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---------- fixture ---------- */

struct fx {
    char dir[256];
    char path[512];
};

static const uint8_t GUID[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static int setup(void **state)
{
    struct fx *fx = xcalloc(1, sizeof(*fx));
    const char *tmp = getenv("TMPDIR");
    snprintf(fx->dir, sizeof(fx->dir), "%s/petrel-fileindex-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(fx->dir) == NULL)
        return -1;
    fileindex_fault = FI_FAULT_NONE;
    fileindex_lock_timeout = 30.0;
    fileindex_cache_ceiling = FI_CACHE_CEILING;
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
    fileindex_fault = FI_FAULT_NONE;
    fileindex_lock_timeout = 30.0;
    fileindex_cache_ceiling = FI_CACHE_CEILING;
    return 0;
}

static const char *file_in(struct fx *fx, const char *name)
{
    snprintf(fx->path, sizeof(fx->path), "%s/%s", fx->dir, name);
    return fx->path;
}

/* ---------- helpers ---------- */

static struct fileindex *open_ok(const char *dir, const struct fileindex_settings *set)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct fileindex *fi = fileindex_open(dir, set, &err);
    if (fi == NULL)
        fail_msg("open failed: %s", err.message);
    return fi;
}

static struct fileindex *create_open(struct fx *fx, const struct fileindex_settings *set)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!fileindex_create(fx->dir, GUID, 1234, set, &err))
        fail_msg("create failed: %s", err.message);
    return open_ok(fx->dir, set);
}

static struct fileindex_txn *begin_ok(struct fileindex *fi)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct fileindex_txn *t = fileindex_begin(fi, &err);
    if (t == NULL)
        fail_msg("begin failed: %s", err.message);
    return t;
}

static void commit_ok(struct fileindex_txn *t)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!fileindex_txn_commit(t, &err))
        fail_msg("commit failed: %s", err.message);
}

static void refresh_ok(struct fileindex *fi)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!fileindex_refresh(fi, &err))
        fail_msg("refresh failed: %s", err.message);
}

static uint32_t append_named(struct fileindex_txn *t, const char *name, uint32_t flags)
{
    struct fileindex_record r = {
        .flags = flags,
        .size = 1000 + strlen(name),
        .vsize = 1020 + strlen(name),
        .internal_date = 1700000000,
        .filename = name,
    };
    return fileindex_txn_append(t, &r);
}

/* Appends `n` messages named "<prefix><i>" in one transaction. */
static void append_n(struct fileindex *fi, const char *prefix, int n)
{
    struct fileindex_txn *t = begin_ok(fi);
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof(name), "%s%d", prefix, i);
        assert_true(append_named(t, name, i % 3 == 0 ? MAIL_FLAG_SEEN : 0) != 0);
    }
    commit_ok(t);
}

static void check_invariants(const struct fileindex *fi)
{
    const struct fileindex_header *h = fileindex_get_header(fi);
    uint32_t prev = 0;
    size_t unseen = 0;
    for (size_t i = 0; i < fileindex_count(fi); i++) {
        const struct fileindex_record *r = fileindex_record_at(fi, i);
        assert_true(r->uid > prev);
        assert_true(r->uid < h->next_uid);
        assert_true(r->modseq <= h->highest_modseq);
        assert_non_null(r->filename);
        assert_ptr_equal(fileindex_lookup_uid(fi, r->uid), r);
        if ((r->flags & MAIL_FLAG_SEEN) == 0)
            unseen++;
        prev = r->uid;
    }
    assert_int_equal(unseen, fileindex_unseen(fi));
    assert_null(fileindex_record_at(fi, fileindex_count(fi)));
}

static void assert_same(const struct fileindex *a, const struct fileindex *b)
{
    const struct fileindex_header *ha = fileindex_get_header(a);
    const struct fileindex_header *hb = fileindex_get_header(b);
    assert_memory_equal(ha->guid, hb->guid, 16);
    assert_int_equal(ha->uid_validity, hb->uid_validity);
    assert_int_equal(ha->next_uid, hb->next_uid);
    assert_int_equal(ha->highest_modseq, hb->highest_modseq);
    assert_int_equal(ha->cache_reset_id, hb->cache_reset_id);
    assert_int_equal(fileindex_count(a), fileindex_count(b));
    assert_int_equal(fileindex_unseen(a), fileindex_unseen(b));
    for (size_t i = 0; i < fileindex_count(a); i++) {
        const struct fileindex_record *x = fileindex_record_at(a, i);
        const struct fileindex_record *y = fileindex_record_at(b, i);
        assert_int_equal(x->uid, y->uid);
        assert_int_equal(x->flags, y->flags);
        assert_int_equal(x->keywords, y->keywords);
        assert_int_equal(x->modseq, y->modseq);
        assert_int_equal(x->size, y->size);
        assert_int_equal(x->vsize, y->vsize);
        assert_int_equal(x->internal_date, y->internal_date);
        assert_string_equal(x->filename, y->filename);
    }
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = xmalloc((size_t)n + 1);
    assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return data;
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

static off_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_size;
}

static ino_t file_ino(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_ino;
}

static void flip_byte(const char *path, off_t off)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, off), 1);
    b ^= 0x5a;
    assert_int_equal(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

static void expect_open_error(const char *dir, enum petrel_error_code code)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct fileindex *fi = fileindex_open(dir, NULL, &err);
    if (fi != NULL)
        fail_msg("open succeeded, expected %s", petrel_error_code_name(code));
    assert_int_equal(err.code, code);
}

static double counter(struct metrics_registry *reg, const char *name, const char *const labels[],
                      const char *const values[])
{
    struct metric_family *f = metrics_counter(reg, name, "", labels);
    return metric_value(metric_series_get(f, values));
}

static double reload_count(struct metrics_registry *reg, const char *result)
{
    static const char *const labels[] = {"result", NULL};
    const char *const values[] = {result, NULL};
    return counter(reg, "petrel_fileindex_reload_total", labels, values);
}

static double lock_count(struct metrics_registry *reg, const char *mode, const char *site)
{
    static const char *const labels[] = {"mode", "site", NULL};
    const char *const values[] = {mode, site, NULL};
    return counter(reg, "petrel_fileindex_lock_acquired_total", labels, values);
}

/* ---------- checksum ---------- */

static uint32_t crc32c_bitwise(const uint8_t *p, size_t len)
{
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < len; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
    }
    return ~crc;
}

static void test_crc32c(void **state)
{
    (void)state;
    assert_int_equal(fi_crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(fi_crc32c_sw(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(fi_crc32c(0, "", 0), 0);
    uint8_t buf[1000];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 131 + 7);
    for (size_t start = 0; start < 9; start++) {
        for (size_t len = 0; len + start <= sizeof(buf); len += 37) {
            uint32_t want = crc32c_bitwise(buf + start, len);
            assert_int_equal(fi_crc32c(0, buf + start, len), want);
            assert_int_equal(fi_crc32c_sw(0, buf + start, len), want);
            /* chained in two pieces */
            size_t half = len / 3;
            assert_int_equal(
                fi_crc32c(fi_crc32c(0, buf + start, half), buf + start + half, len - half), want);
        }
    }
}

/* ---------- create / open ---------- */

static void test_create_open(void **state)
{
    struct fx *fx = *state;
    expect_open_error(fx->dir, PETREL_ERR_NOT_FOUND);
    char *missing = xasprintf("%s/nope", fx->dir);
    expect_open_error(missing, PETREL_ERR_NOT_FOUND);
    free(missing);

    struct fileindex *fi = create_open(fx, NULL);
    struct petrel_error err;
    petrel_error_clear(&err);
    assert_false(fileindex_create(fx->dir, GUID, 99, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_EXISTS);

    const struct fileindex_header *h = fileindex_get_header(fi);
    assert_memory_equal(h->guid, GUID, 16);
    assert_int_equal(h->uid_validity, 1234);
    assert_int_equal(h->next_uid, 1);
    assert_int_equal(h->highest_modseq, 1);
    assert_true(h->lineage != 0);
    assert_int_equal(fileindex_count(fi), 0);
    assert_int_equal(fileindex_unseen(fi), 0);
    assert_null(fileindex_record_at(fi, 0));
    assert_null(fileindex_lookup_uid(fi, 1));
    refresh_ok(fi);
    fileindex_close(fi);

    /* create makes the directory when missing */
    char *sub = xasprintf("%s/sub", fx->dir);
    assert_true(fileindex_create(sub, GUID, 5, NULL, &err));
    fi = open_ok(sub, NULL);
    assert_int_equal(fileindex_get_header(fi)->uid_validity, 5);
    fileindex_close(fi);
    free(sub);
}

/* ---------- transactions ---------- */

static void test_append_flags_expunge_modseq(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);

    struct fileindex_txn *t = begin_ok(fi);
    assert_int_equal(append_named(t, "a", 0), 1);
    assert_int_equal(append_named(t, "b", MAIL_FLAG_SEEN), 2);
    assert_int_equal(append_named(t, "c", 0), 3);
    commit_ok(t);
    const struct fileindex_header *h = fileindex_get_header(fi);
    assert_int_equal(h->next_uid, 4);
    assert_int_equal(h->highest_modseq, 4);
    assert_int_equal(fileindex_count(fi), 3);
    assert_int_equal(fileindex_unseen(fi), 2);
    assert_int_equal(fileindex_lookup_uid(fi, 1)->modseq, 2);
    assert_int_equal(fileindex_lookup_uid(fi, 2)->modseq, 3);
    assert_int_equal(fileindex_lookup_uid(fi, 3)->modseq, 4);
    assert_string_equal(fileindex_lookup_uid(fi, 2)->filename, "b");
    assert_int_equal(fileindex_lookup_uid(fi, 3)->size, 1001);

    t = begin_ok(fi);
    assert_true(fileindex_txn_set_flags(t, 2, MAIL_FLAG_SEEN | MAIL_FLAG_FLAGGED, 0x5));
    assert_false(fileindex_txn_set_flags(t, 77, 0, 0));
    assert_true(fileindex_txn_expunge(t, 1));
    assert_false(fileindex_txn_expunge(t, 1));
    assert_false(fileindex_txn_set_flags(t, 1, 0, 0));
    assert_false(fileindex_txn_expunge(t, 99));
    assert_true(fileindex_txn_set_filename(t, 3, "c-renamed"));
    assert_int_equal(append_named(t, "explicit", 0), 4);
    struct fileindex_record r = {.uid = 10, .filename = "ten"};
    assert_int_equal(fileindex_txn_append(t, &r), 10);
    r.uid = 7; /* below next_uid now */
    assert_int_equal(fileindex_txn_append(t, &r), 0);
    commit_ok(t);
    check_invariants(fi);
    assert_int_equal(fileindex_count(fi), 4); /* 2, 3, 4, 10 */
    assert_null(fileindex_lookup_uid(fi, 1));
    const struct fileindex_record *two = fileindex_lookup_uid(fi, 2);
    assert_int_equal(two->flags, MAIL_FLAG_SEEN | MAIL_FLAG_FLAGGED);
    assert_int_equal(two->keywords, 0x5);
    assert_int_equal(two->modseq, 5);
    assert_string_equal(fileindex_lookup_uid(fi, 3)->filename, "c-renamed");
    assert_int_equal(fileindex_lookup_uid(fi, 3)->modseq, 4); /* a rename is no change */
    /* flag 5, expunge 6, appends 7 and 8 */
    assert_int_equal(fileindex_lookup_uid(fi, 4)->modseq, 7);
    assert_int_equal(fileindex_lookup_uid(fi, 10)->modseq, 8);
    assert_int_equal(fileindex_get_header(fi)->highest_modseq, 8);
    assert_int_equal(fileindex_get_header(fi)->next_uid, 11);

    /* next_uid only rises; an expunge alone bumps highest_modseq */
    t = begin_ok(fi);
    fileindex_txn_set_next_uid(t, 20);
    fileindex_txn_set_next_uid(t, 15);
    assert_true(fileindex_txn_expunge(t, 4));
    commit_ok(t);
    assert_int_equal(fileindex_get_header(fi)->next_uid, 20);
    assert_int_equal(fileindex_get_header(fi)->highest_modseq, 9);

    /* a rolled back transaction leaves nothing */
    t = begin_ok(fi);
    assert_int_equal(append_named(t, "gone", 0), 20);
    assert_true(fileindex_txn_expunge(t, 2));
    fileindex_txn_rollback(t);
    assert_int_equal(fileindex_count(fi), 3);
    assert_int_equal(fileindex_get_header(fi)->next_uid, 20);

    /* an append expunged in its own transaction */
    t = begin_ok(fi);
    uint32_t uid = append_named(t, "short-lived", 0);
    assert_int_equal(uid, 20);
    assert_true(fileindex_txn_set_flags(t, uid, MAIL_FLAG_SEEN, 0));
    assert_true(fileindex_txn_expunge(t, uid));
    assert_false(fileindex_txn_set_flags(t, uid, 0, 0));
    commit_ok(t);
    assert_null(fileindex_lookup_uid(fi, 20));
    assert_int_equal(fileindex_get_header(fi)->next_uid, 21);

    /* an empty transaction writes nothing */
    off_t log_before = file_size(file_in(fx, FI_LOG_FILE));
    t = begin_ok(fi);
    commit_ok(t);
    assert_int_equal(file_size(file_in(fx, FI_LOG_FILE)), log_before);

    /* one transaction per handle */
    t = begin_ok(fi);
    struct petrel_error err;
    assert_null(fileindex_begin(fi, &err));
    assert_int_equal(err.code, PETREL_ERR_CONFLICT);
    fileindex_txn_rollback(t);

    /* reopen sees the same */
    struct fileindex *again = open_ok(fx->dir, NULL);
    check_invariants(again);
    assert_same(fi, again);
    fileindex_close(again);
    fileindex_close(fi);
}

static void test_limits(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    char *longname = xmalloc(FI_MAX_FILENAME + 2);
    memset(longname, 'x', FI_MAX_FILENAME + 1);
    longname[FI_MAX_FILENAME + 1] = '\0';
    struct fileindex_txn *t = begin_ok(fi);
    assert_int_equal(append_named(t, longname, 0), 0);
    assert_int_equal(append_named(t, "", 0), 0);
    struct fileindex_record nul = {.filename = NULL};
    assert_int_equal(fileindex_txn_append(t, &nul), 0);
    longname[FI_MAX_FILENAME] = '\0';
    uint32_t uid = append_named(t, longname, 0);
    assert_int_equal(uid, 1);
    longname[FI_MAX_FILENAME] = 'x';
    assert_false(fileindex_txn_set_filename(t, uid, longname));
    struct fileindex_record top = {.uid = UINT32_MAX, .filename = "top"};
    assert_int_equal(fileindex_txn_append(t, &top), 0);
    top.uid = UINT32_MAX - 1;
    assert_int_equal(fileindex_txn_append(t, &top), UINT32_MAX - 1);
    commit_ok(t);
    assert_int_equal(fileindex_get_header(fi)->next_uid, UINT32_MAX);
    t = begin_ok(fi);
    assert_int_equal(append_named(t, "no-more", 0), 0); /* UIDs exhausted */
    fileindex_txn_rollback(t);

    struct petrel_error err;
    assert_false(fileindex_cache_add(fi, 1, "", "x", 1, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    assert_false(fileindex_cache_add(fi, 1, "bad field", "x", 1, &err));
    assert_false(fileindex_cache_add(fi, 1, longname, "x", 1, &err));
    assert_false(fileindex_cache_add(fi, 0, "f", "x", 1, &err));
    char *big = xcalloc(1, FI_MAX_CACHE_DATA + 1);
    assert_false(fileindex_cache_add(fi, 1, "f", big, FI_MAX_CACHE_DATA + 1, &err));
    assert_true(fileindex_cache_add(fi, 1, "f", big, FI_MAX_CACHE_DATA, &err));
    size_t len;
    assert_non_null(fileindex_cache_get(fi, 1, "f", &len));
    assert_int_equal(len, FI_MAX_CACHE_DATA);
    assert_null(fileindex_cache_get(fi, 1, longname, &len));
    free(big);

    char *longdir = xmalloc(FI_MAX_DIR + 10);
    memset(longdir, 'd', FI_MAX_DIR + 9);
    longdir[FI_MAX_DIR + 9] = '\0';
    assert_null(fileindex_open(longdir, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    free(longdir);
    free(longname);
    fileindex_close(fi);
}

/* ---------- crash safety ---------- */

static void test_torn_log_tail(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    for (int i = 0; i < 4; i++) {
        char prefix[16];
        snprintf(prefix, sizeof(prefix), "m%d-", i);
        append_n(fi, prefix, 3);
    }
    struct fileindex_txn *t = begin_ok(fi);
    assert_true(fileindex_txn_set_flags(t, 2, MAIL_FLAG_SEEN, 0));
    assert_true(fileindex_txn_expunge(t, 5));
    commit_ok(t);
    struct fileindex *four = NULL; /* the state after the first four */
    const char *log = file_in(fx, FI_LOG_FILE);
    char *log_path = xstrdup(log);
    size_t full_len;
    char *full = read_file(log_path, &full_len);
    fileindex_close(fi);

    /* Last transaction's start: replay with it cut entirely. */
    size_t s0 = 0;
    {
        /* find s0 by walking the transaction lengths */
        size_t pos = FI_LOG_HDR_SIZE;
        while (pos < full_len) {
            uint32_t len = fi_get32((const uint8_t *)full + pos);
            s0 = pos;
            pos += len;
        }
        assert_int_equal(pos, full_len);
    }
    write_file(log_path, full, s0);
    four = open_ok(fx->dir, NULL);
    assert_int_equal(fileindex_count(four), 12);

    for (size_t cut = s0; cut < full_len; cut++) {
        write_file(log_path, full, cut);
        fi = open_ok(fx->dir, NULL);
        check_invariants(fi);
        assert_same(fi, four);
        /* the next writer cuts the tail and appends after the last good one */
        t = begin_ok(fi);
        assert_int_equal(append_named(t, "after-crash", 0), 13);
        commit_ok(t);
        struct fileindex *again = open_ok(fx->dir, NULL);
        assert_same(fi, again);
        assert_int_equal(fileindex_count(again), 13);
        fileindex_close(again);
        fileindex_close(fi);
    }

    /* garbage after complete transactions is a torn tail too */
    char *garbage = xmalloc(full_len + 100);
    memcpy(garbage, full, full_len);
    for (int i = 0; i < 100; i++)
        garbage[full_len + (size_t)i] = (char)(i * 37 + 11);
    write_file(log_path, garbage, full_len + 100);
    fi = open_ok(fx->dir, NULL);
    assert_int_equal(fileindex_count(fi), 11);
    assert_int_equal(fileindex_lookup_uid(fi, 2)->flags, MAIL_FLAG_SEEN);
    t = begin_ok(fi);
    commit_ok(t);
    assert_int_equal(file_size(log_path), (off_t)full_len); /* cut by the writer */
    fileindex_close(fi);

    /* a damaged transaction followed by a good one is corruption */
    write_file(log_path, full, full_len);
    flip_byte(log_path, (off_t)(FI_LOG_HDR_SIZE + 20));
    expect_open_error(fx->dir, PETREL_ERR_INVALID);
    /* and so is a damaged log header */
    write_file(log_path, full, full_len);
    flip_byte(log_path, 17);
    expect_open_error(fx->dir, PETREL_ERR_INVALID);

    free(garbage);
    free(full);
    free(log_path);
    fileindex_close(four);
}

static void test_corrupt_base(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    append_n(fi, "message-", 20);
    assert_true(fileindex_optimize(fi, NULL));
    fileindex_close(fi);
    char *base = xstrdup(file_in(fx, FI_BASE_FILE));
    char *log = xstrdup(file_in(fx, FI_LOG_FILE));
    size_t len;
    char *orig = read_file(base, &len);
    assert_int_equal(len, FI_BASE_HDR_SIZE + 20 * FI_BASE_REC_SIZE + 20 * 11 - 10);
    /* one flipped byte anywhere: header, records, strings */
    size_t offsets[] = {0,
                        9,
                        30,
                        44,
                        90,
                        124,
                        FI_BASE_HDR_SIZE,
                        FI_BASE_HDR_SIZE + 13,
                        FI_BASE_HDR_SIZE + 19 * FI_BASE_REC_SIZE,
                        len - 5,
                        len - 1};
    for (size_t i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++) {
        write_file(base, orig, len);
        flip_byte(base, (off_t)offsets[i]);
        expect_open_error(fx->dir, PETREL_ERR_INVALID);
    }
    /* truncated, extended, empty */
    write_file(base, orig, len - 1);
    expect_open_error(fx->dir, PETREL_ERR_INVALID);
    write_file(base, orig, 100);
    expect_open_error(fx->dir, PETREL_ERR_INVALID);
    write_file(base, orig, 0);
    expect_open_error(fx->dir, PETREL_ERR_INVALID);
    char *longer = xcalloc(1, len + 8);
    memcpy(longer, orig, len);
    write_file(base, longer, len + 8);
    expect_open_error(fx->dir, PETREL_ERR_INVALID);
    free(longer);
    /* a header with a valid checksum but nonsense inside */
    char *copy = xmalloc(len);
    memcpy(copy, orig, len);
    fi_put32((uint8_t *)copy + 88, 0xffffffffu); /* record count */
    fi_put32((uint8_t *)copy + 124, fi_crc32c(0, copy, 124));
    write_file(base, copy, len);
    expect_open_error(fx->dir, PETREL_ERR_INVALID);
    memcpy(copy, orig, len);
    fi_put32((uint8_t *)copy + 44, 5); /* next_uid below the records' uids */
    fi_put32((uint8_t *)copy + 124, fi_crc32c(0, copy, 124));
    write_file(base, copy, len);
    expect_open_error(fx->dir, PETREL_ERR_INVALID);
    /* a name offset that does not follow the previous name, checksum fixed */
    memcpy(copy, orig, len);
    size_t recs_len = 20 * FI_BASE_REC_SIZE;
    fi_put32((uint8_t *)copy + FI_BASE_HDR_SIZE + 3 * FI_BASE_REC_SIZE + 12, 1);
    fi_put32((uint8_t *)copy + 92, fi_crc32c(0, copy + FI_BASE_HDR_SIZE, recs_len));
    fi_put32((uint8_t *)copy + 124, fi_crc32c(0, copy, 124));
    write_file(base, copy, len);
    expect_open_error(fx->dir, PETREL_ERR_INVALID);
    free(copy);

    /* missing log, missing base */
    write_file(base, orig, len);
    struct fileindex *ok = open_ok(fx->dir, NULL);
    assert_int_equal(fileindex_count(ok), 20);
    fileindex_close(ok);
    size_t log_len;
    char *log_data = read_file(log, &log_len);
    unlink(log);
    expect_open_error(fx->dir, PETREL_ERR_INVALID);
    write_file(log, log_data, log_len);
    unlink(base);
    expect_open_error(fx->dir, PETREL_ERR_INVALID);
    /* a log of another index */
    write_file(base, orig, len);
    fi_put64((uint8_t *)log_data + 16, 42);
    fi_put32((uint8_t *)log_data + 44, fi_crc32c(0, log_data, 44));
    write_file(log, log_data, log_len);
    expect_open_error(fx->dir, PETREL_ERR_INVALID);
    free(log_data);
    free(orig);
    free(base);
    free(log);
}

static void test_fold_interrupted_before_new_log(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    append_n(fi, "x", 5);
    fileindex_fault = FI_FAULT_FOLD_SKIP_LOG;
    assert_true(fileindex_optimize(fi, NULL));
    fileindex_fault = FI_FAULT_NONE;
    /* new base, old log: the log reads as already folded */
    struct fileindex *other = open_ok(fx->dir, NULL);
    assert_int_equal(fileindex_count(other), 5);
    refresh_ok(fi);
    assert_same(fi, other);
    /* the next writer installs a log for the new base */
    struct fileindex_txn *t = begin_ok(other);
    assert_int_equal(append_named(t, "y", 0), 6);
    commit_ok(t);
    refresh_ok(fi);
    assert_same(fi, other);
    struct fileindex *third = open_ok(fx->dir, NULL);
    assert_same(third, other);
    fileindex_close(third);
    fileindex_close(other);
    fileindex_close(fi);
}

static void test_failed_sync_withdraws_transaction(void **state)
{
    struct fx *fx = *state;
    struct fileindex *a = create_open(fx, NULL);
    struct fileindex *b = open_ok(fx->dir, NULL);
    append_n(a, "s-", 3);
    refresh_ok(b);
    ino_t log_ino = file_ino(file_in(fx, FI_LOG_FILE));
    off_t log_size = file_size(file_in(fx, FI_LOG_FILE));
    struct fileindex_txn *t = begin_ok(a);
    assert_int_equal(append_named(t, "lost", 0), 4);
    fileindex_fault = FI_FAULT_LOG_SYNC;
    struct petrel_error err;
    assert_false(fileindex_txn_commit(t, &err));
    fileindex_fault = FI_FAULT_NONE;
    assert_int_equal(err.code, PETREL_ERR_IO);
    /* nothing changed, and the log is a new file so readers reload */
    assert_int_equal(fileindex_count(a), 3);
    assert_int_equal(file_size(file_in(fx, FI_LOG_FILE)), log_size);
    assert_true(file_ino(file_in(fx, FI_LOG_FILE)) != log_ino);
    refresh_ok(b);
    assert_same(a, b);
    t = begin_ok(a);
    assert_int_equal(append_named(t, "kept", 0), 4);
    commit_ok(t);
    refresh_ok(b);
    assert_same(a, b);
    struct fileindex *c = open_ok(fx->dir, NULL);
    assert_same(a, c);
    assert_string_equal(fileindex_lookup_uid(c, 4)->filename, "kept");
    fileindex_close(c);
    fileindex_close(b);
    fileindex_close(a);
}

/* ---------- two handles ---------- */

static void test_two_handles(void **state)
{
    struct fx *fx = *state;
    struct metrics_registry *reg = metrics_registry_new();
    struct fileindex_settings set = {.metrics = reg};
    struct fileindex *a = create_open(fx, &set);
    struct fileindex *b = open_ok(fx->dir, &set);

    append_n(a, "one-", 3);
    double inc = reload_count(reg, "incremental");
    refresh_ok(b);
    assert_same(a, b);
    assert_int_equal(reload_count(reg, "incremental"), inc + 1);
    double none = reload_count(reg, "none");
    refresh_ok(b);
    assert_int_equal(reload_count(reg, "none"), none + 1);

    /* a fold by A: B is exactly at its parent position and adopts */
    ino_t before = file_ino(file_in(fx, FI_BASE_FILE));
    assert_true(fileindex_optimize(a, NULL));
    assert_true(file_ino(file_in(fx, FI_BASE_FILE)) != before);
    const char *b_name = fileindex_record_at(b, 0)->filename;
    double adopt = reload_count(reg, "adopt");
    refresh_ok(b);
    assert_int_equal(reload_count(reg, "adopt"), adopt + 1);
    assert_ptr_equal(fileindex_record_at(b, 0)->filename, b_name); /* view kept */
    assert_same(a, b);
    assert_int_equal(fileindex_get_header(b)->lineage, fileindex_get_header(a)->lineage);

    /* B behind: it catches up from the old log it still holds, then adopts */
    append_n(a, "two-", 4);
    struct fileindex_txn *t = begin_ok(a);
    assert_true(fileindex_txn_expunge(t, 2));
    assert_true(fileindex_txn_set_flags(t, 3, MAIL_FLAG_DELETED, 1));
    commit_ok(t);
    assert_true(fileindex_optimize(a, NULL));
    append_n(a, "three-", 2); /* and the new log already grew */
    refresh_ok(b);
    assert_int_equal(reload_count(reg, "adopt"), adopt + 2);
    assert_same(a, b);

    /* a rebuild (replace_all) cannot be adopted: full reload */
    t = begin_ok(a);
    struct fileindex_record recs[2] = {
        {.uid = 1, .filename = "r1", .modseq = 2},
        {.uid = 50, .filename = "r50"},
    };
    assert_true(fileindex_txn_replace_all(t, fileindex_get_header(a), recs, 2, NULL));
    commit_ok(t);
    double full = reload_count(reg, "full");
    refresh_ok(b);
    assert_int_equal(reload_count(reg, "full"), full + 1);
    assert_int_equal(reload_count(reg, "adopt"), adopt + 2);
    assert_same(a, b);

    /* both writing in turn */
    t = begin_ok(b);
    assert_true(append_named(t, "from-b", 0) != 0);
    commit_ok(t);
    t = begin_ok(a);
    assert_true(append_named(t, "from-a", 0) != 0);
    commit_ok(t);
    refresh_ok(b);
    assert_same(a, b);
    check_invariants(b);

    /* B's lock attempt times out while A holds it */
    fileindex_lock_timeout = 0.2;
    t = begin_ok(a);
    struct petrel_error err;
    assert_null(fileindex_begin(b, &err));
    assert_int_equal(err.code, PETREL_ERR_UNAVAILABLE);
    refresh_ok(b); /* readers never wait for writers */
    commit_ok(t);
    t = begin_ok(b);
    fileindex_txn_rollback(t);

    fileindex_close(a);
    fileindex_close(b);
    metrics_registry_free(reg);
}

static void test_auto_fold(void **state)
{
    struct fx *fx = *state;
    struct fileindex_settings set = {.log_fold_bytes = 2048};
    struct fileindex *fi = create_open(fx, &set);
    struct fileindex *reader = open_ok(fx->dir, &set);
    ino_t first = file_ino(file_in(fx, FI_BASE_FILE));
    for (int i = 0; i < 60; i++) {
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "batch%d-", i);
        append_n(fi, prefix, 3);
        struct fileindex_txn *t = begin_ok(fi);
        assert_true(fileindex_txn_set_flags(t, (uint32_t)(i * 3 + 1), MAIL_FLAG_SEEN, 0));
        if (i % 4 == 0)
            assert_true(fileindex_txn_expunge(t, (uint32_t)(i * 3 + 2)));
        commit_ok(t);
        assert_true(file_size(file_in(fx, FI_LOG_FILE)) <= 2048 + 400);
        if (i % 7 == 0) {
            refresh_ok(reader);
            assert_same(fi, reader);
        }
    }
    assert_true(file_ino(file_in(fx, FI_BASE_FILE)) != first);
    refresh_ok(reader);
    assert_same(fi, reader);
    struct fileindex *again = open_ok(fx->dir, NULL);
    assert_same(fi, again);
    check_invariants(again);
    assert_int_equal(fileindex_count(again), 180 - 15);
    fileindex_close(again);
    fileindex_close(reader);
    fileindex_close(fi);
}

static void test_optimize(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    const char *base = file_in(fx, FI_BASE_FILE);
    ino_t ino = file_ino(base);
    assert_true(fileindex_optimize(fi, NULL));
    assert_int_equal(file_ino(file_in(fx, FI_BASE_FILE)), ino); /* no-op */

    append_n(fi, "opt-", 10);
    struct fileindex_txn *t = begin_ok(fi);
    assert_true(fileindex_txn_set_flags(t, 4, MAIL_FLAG_ANSWERED, 3));
    assert_true(fileindex_txn_expunge(t, 7));
    commit_ok(t);
    struct fileindex *before = open_ok(fx->dir, NULL);
    uint64_t lineage = fileindex_get_header(fi)->lineage;
    assert_true(fileindex_optimize(fi, NULL));
    assert_true(file_ino(file_in(fx, FI_BASE_FILE)) != ino);
    assert_int_equal(file_size(file_in(fx, FI_LOG_FILE)), FI_LOG_HDR_SIZE);
    /* the replaced log is kept (deleted by the next fold, not a reader) */
    assert_true(file_size(file_in(fx, FI_LOG_FILE ".2")) > FI_LOG_HDR_SIZE);
    assert_true(fileindex_get_header(fi)->lineage != lineage);
    assert_same(fi, before); /* records, UIDs, modseqs unchanged */
    struct fileindex *after = open_ok(fx->dir, NULL);
    assert_same(after, before);
    ino = file_ino(file_in(fx, FI_BASE_FILE));
    assert_true(fileindex_optimize(after, NULL));
    assert_int_equal(file_ino(file_in(fx, FI_BASE_FILE)), ino);
    fileindex_close(after);
    fileindex_close(before);

    struct petrel_error err;
    t = begin_ok(fi);
    assert_false(fileindex_optimize(fi, &err));
    assert_int_equal(err.code, PETREL_ERR_CONFLICT);
    fileindex_txn_rollback(t);
    fileindex_close(fi);
}

static void test_replace_all(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    append_n(fi, "old-", 5); /* uids 1..5, modseq 2..6 */
    uint64_t highest = fileindex_get_header(fi)->highest_modseq;
    uint32_t flags3 = fileindex_lookup_uid(fi, 3)->flags;

    struct fileindex_record recs[] = {
        {.uid = 2, .filename = "old-1", .modseq = 3, .flags = fileindex_lookup_uid(fi, 2)->flags},
        {.uid = 3, .filename = "old-2", .modseq = 4, .flags = flags3 ^ MAIL_FLAG_FLAGGED},
        {.uid = 9, .filename = "new-9", .size = 99},
    };
    struct fileindex_header hdr = *fileindex_get_header(fi);
    hdr.next_uid = 2; /* must not lower it */
    struct fileindex_txn *t = begin_ok(fi);
    assert_true(fileindex_txn_replace_all(t, &hdr, recs, 3, NULL));
    /* operations after replace_all in the same transaction apply to it */
    assert_int_equal(append_named(t, "after", 0), 10);
    assert_false(fileindex_txn_set_flags(t, 1, 0, 0)); /* gone with the replace */
    commit_ok(t);
    check_invariants(fi);
    assert_int_equal(fileindex_count(fi), 4);
    assert_int_equal(fileindex_get_header(fi)->next_uid, 11);
    assert_true(fileindex_get_header(fi)->highest_modseq > highest);
    assert_int_equal(fileindex_lookup_uid(fi, 2)->modseq, 3);   /* kept */
    assert_true(fileindex_lookup_uid(fi, 3)->modseq > highest); /* flags changed */
    assert_true(fileindex_lookup_uid(fi, 9)->modseq > highest); /* new */
    assert_int_equal(fileindex_lookup_uid(fi, 9)->size, 99);
    assert_null(fileindex_lookup_uid(fi, 1));
    struct fileindex *again = open_ok(fx->dir, NULL);
    assert_same(fi, again);
    fileindex_close(again);

    /* bad input is refused, and a rollback keeps the old index */
    struct fileindex_record bad[] = {{.uid = 5, .filename = "a"}, {.uid = 5, .filename = "b"}};
    t = begin_ok(fi);
    struct petrel_error err;
    assert_false(fileindex_txn_replace_all(t, &hdr, bad, 2, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    bad[1].uid = 6;
    bad[1].filename = "";
    assert_false(fileindex_txn_replace_all(t, &hdr, bad, 2, &err));
    bad[1].filename = "b";
    assert_true(fileindex_txn_replace_all(t, &hdr, bad, 2, &err));
    fileindex_txn_rollback(t);
    assert_int_equal(fileindex_count(fi), 4);

    /* big: 20,000 records in one go */
    size_t n = 20000;
    struct fileindex_record *many = xcalloc(n, sizeof(*many));
    char *names = xmalloc(n * 16);
    for (size_t i = 0; i < n; i++) {
        snprintf(names + i * 16, 16, "big-%zu", i);
        many[i].uid = (uint32_t)(i + 1) * 2;
        many[i].filename = names + i * 16;
        many[i].flags = i % 2 ? MAIL_FLAG_SEEN : 0;
    }
    t = begin_ok(fi);
    assert_true(fileindex_txn_replace_all(t, &hdr, many, n, NULL));
    commit_ok(t);
    free(many);
    free(names);
    assert_int_equal(fileindex_count(fi), n);
    assert_int_equal(fileindex_unseen(fi), n / 2);
    check_invariants(fi);
    again = open_ok(fx->dir, NULL);
    assert_same(fi, again);
    fileindex_close(again);

    /* another uid_validity: a new cache generation too */
    uint64_t cache_id = fileindex_get_header(fi)->cache_reset_id;
    hdr = *fileindex_get_header(fi);
    hdr.uid_validity = 777;
    hdr.next_uid = 1;
    struct fileindex_record one = {.uid = 1, .filename = "only"};
    t = begin_ok(fi);
    assert_true(fileindex_txn_replace_all(t, &hdr, &one, 1, NULL));
    commit_ok(t);
    assert_int_equal(fileindex_get_header(fi)->uid_validity, 777);
    assert_int_equal(fileindex_get_header(fi)->next_uid, 2);
    assert_true(fileindex_get_header(fi)->cache_reset_id != cache_id);
    fileindex_close(fi);
}

/* ---------- processes ---------- */

#define WRITERS 4
#define WRITER_MIN_COMMITS 300

static int writer_child(const char *dir, int id, double seconds)
{
    struct fileindex_settings set = {.log_fold_bytes = 8192, .fsync = FILEINDEX_FSYNC_NEVER};
    struct petrel_error err;
    struct fileindex *fi = fileindex_open(dir, &set, &err);
    if (fi == NULL)
        return 10;
    char path[600];
    snprintf(path, sizeof(path), "%s/result-%d", dir, id);
    FILE *out = fopen(path, "w");
    if (out == NULL)
        return 11;
    srand((unsigned)(getpid() * 7919));
    double end = fi_now() + seconds;
    uint64_t last_modseq = 0;
    uint32_t last_uid = 0;
    uint32_t mine[4096];
    size_t mine_count = 0;
    int n = 0;
    int rc = 0;
    int commits = 0;
    /* At least WRITER_MIN_COMMITS, however slowly a loaded machine runs us:
     * that is several folds' worth of log. */
    while ((fi_now() < end || commits < WRITER_MIN_COMMITS) && fi_now() < end + 60 && rc == 0) {
        struct fileindex_txn *t = fileindex_begin(fi, &err);
        if (t == NULL) {
            rc = 12;
            break;
        }
        if (fileindex_get_header(fi)->highest_modseq < last_modseq)
            rc = 13;
        int k = 1 + rand() % 3;
        for (int i = 0; i < k; i++) {
            char name[64];
            snprintf(name, sizeof(name), "w%d-%d", id, n++);
            struct fileindex_record r = {.filename = name, .size = (uint64_t)n};
            uint32_t uid = fileindex_txn_append(t, &r);
            if (uid == 0 || uid <= last_uid)
                rc = 14;
            last_uid = uid;
            fprintf(out, "A %u %s\n", uid, name);
            if (mine_count < 4096)
                mine[mine_count++] = uid;
        }
        size_t count = fileindex_count(fi);
        if (count > 0) {
            const struct fileindex_record *r = fileindex_record_at(fi, (size_t)rand() % count);
            if (!fileindex_txn_set_flags(t, r->uid, r->flags ^ MAIL_FLAG_SEEN, r->keywords))
                rc = 15;
        }
        if (mine_count > 2 && rand() % 4 == 0) {
            size_t pick = (size_t)rand() % (mine_count - 1);
            uint32_t uid = mine[pick];
            mine[pick] = mine[mine_count - 1];
            mine_count--;
            if (fileindex_lookup_uid(fi, uid) != NULL) {
                if (!fileindex_txn_expunge(t, uid))
                    rc = 16;
                fprintf(out, "E %u\n", uid);
            }
        }
        if (!fileindex_txn_commit(t, &err)) {
            rc = 17;
            break;
        }
        commits++;
        const struct fileindex_header *h = fileindex_get_header(fi);
        if (h->highest_modseq <= last_modseq || h->next_uid <= last_uid)
            rc = 18;
        last_modseq = h->highest_modseq;
    }
    fclose(out);
    fileindex_close(fi);
    return rc;
}

static int reader_child(const char *dir, double seconds)
{
    struct petrel_error err;
    struct metrics_registry *reg = metrics_registry_new();
    struct fileindex_settings set = {.metrics = reg};
    struct fileindex *fi = fileindex_open(dir, &set, &err);
    if (fi == NULL)
        return 20;
    /* Until the writers are all done (the parent says so), so the reader
     * overlaps their folds however the machine schedules us. */
    char done_path[600];
    snprintf(done_path, sizeof(done_path), "%s/writers-done", dir);
    double hard_end = fi_now() + seconds + 120;
    uint64_t last_modseq = 0;
    uint32_t last_next = 0;
    int rc = 0;
    long refreshes = 0;
    bool last_round = false;
    while (rc == 0 && fi_now() < hard_end) {
        if (last_round)
            break;
        last_round = access(done_path, F_OK) == 0; /* one more refresh after it */
        if (!fileindex_refresh(fi, &err)) {
            fprintf(stderr, "reader: %s\n", err.message);
            rc = 21;
            break;
        }
        refreshes++;
        const struct fileindex_header *h = fileindex_get_header(fi);
        if (h->highest_modseq < last_modseq || h->next_uid < last_next)
            rc = 22;
        last_modseq = h->highest_modseq;
        last_next = h->next_uid;
        uint32_t prev = 0;
        size_t unseen = 0;
        for (size_t i = 0; i < fileindex_count(fi); i++) {
            const struct fileindex_record *r = fileindex_record_at(fi, i);
            if (r->uid <= prev || r->uid >= h->next_uid || r->modseq > h->highest_modseq ||
                r->filename[0] != 'w')
                rc = 23;
            if ((r->flags & MAIL_FLAG_SEEN) == 0)
                unseen++;
            prev = r->uid;
        }
        if (unseen != fileindex_unseen(fi))
            rc = 24;
    }
    fileindex_close(fi);
    double adopt = reload_count(reg, "adopt");
    double full = reload_count(reg, "full");
    printf("    reader: %ld refreshes: incremental %.0f, adopt %.0f, full %.0f, none %.0f\n",
           refreshes, reload_count(reg, "incremental"), adopt, full, reload_count(reg, "none"));
    fflush(stdout);
    metrics_registry_free(reg);
    if (rc == 0 && adopt + full == 0)
        rc = 26; /* the writers fold every 8 KiB: the reader must have crossed folds */
    return refreshes > 10 ? rc : 25;
}

static void test_fork_concurrency(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    fileindex_close(fi);
    pid_t pids[WRITERS + 1];
    double seconds = 2.0;
    for (int i = 0; i <= WRITERS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0)
            _exit(i < WRITERS ? writer_child(fx->dir, i, seconds) : reader_child(fx->dir, seconds));
    }
    for (int i = 0; i <= WRITERS; i++) {
        int status;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status) != 0)
            fail_msg("child %d exited with %d", i, WEXITSTATUS(status));
        if (i == WRITERS - 1) {
            char done_path[600];
            snprintf(done_path, sizeof(done_path), "%s/writers-done", fx->dir);
            FILE *done = fopen(done_path, "w");
            assert_non_null(done);
            fclose(done);
        }
    }
    fi = open_ok(fx->dir, NULL);
    check_invariants(fi);
    /* every append is there under its UID unless expunged; UIDs unique */
    size_t appended = 0;
    size_t expunged = 0;
    size_t max_uid = fileindex_get_header(fi)->next_uid;
    uint8_t *seen = xcalloc(max_uid + 1, 1);
    for (int i = 0; i < WRITERS; i++) {
        char path[600];
        snprintf(path, sizeof(path), "%s/result-%d", fx->dir, i);
        FILE *in = fopen(path, "r");
        assert_non_null(in);
        char line[128];
        while (fgets(line, sizeof(line), in) != NULL) {
            unsigned uid;
            char name[64];
            if (sscanf(line, "A %u %63s", &uid, name) == 2) {
                assert_true(uid < max_uid);
                assert_int_equal(seen[uid], 0);
                seen[uid] = 1;
                appended++;
                const struct fileindex_record *r = fileindex_lookup_uid(fi, uid);
                if (r != NULL)
                    assert_string_equal(r->filename, name);
            } else if (sscanf(line, "E %u", &uid) == 1) {
                assert_null(fileindex_lookup_uid(fi, uid));
                seen[uid] = 2;
                expunged++;
            }
        }
        fclose(in);
    }
    for (size_t uid = 1; uid < max_uid; uid++) {
        if (seen[uid] == 1)
            assert_non_null(fileindex_lookup_uid(fi, (uint32_t)uid));
    }
    assert_int_equal(fileindex_count(fi), appended - expunged);
    assert_true(appended > 100);
    print_message("    %zu appends, %zu expunges, highest_modseq %llu\n", appended, expunged,
                  (unsigned long long)fileindex_get_header(fi)->highest_modseq);
    free(seen);
    fileindex_close(fi);
}

/* ---------- older format: no lineage ---------- */

/* Rewrites the index in place as version 1 (no lineage), as an older
 * Petrel would have left it. */
static void downgrade_to_v1(struct fx *fx)
{
    char *base = xstrdup(file_in(fx, FI_BASE_FILE));
    char *log = xstrdup(file_in(fx, FI_LOG_FILE));
    size_t len;
    char *b = read_file(base, &len);
    fi_put32((uint8_t *)b + 8, FI_BASE_VERSION_NO_LINEAGE);
    fi_put32((uint8_t *)b + 20, 0);
    fi_put64((uint8_t *)b + 64, 0);
    fi_put64((uint8_t *)b + 72, 0);
    fi_put64((uint8_t *)b + 80, 0);
    fi_put32((uint8_t *)b + 124, fi_crc32c(0, b, 124));
    write_file(base, b, len);
    free(b);
    char *l = read_file(log, &len);
    fi_put32((uint8_t *)l + 8, FI_LOG_VERSION_NO_LINEAGE);
    fi_put64((uint8_t *)l + 16, 0);
    fi_put32((uint8_t *)l + 44, fi_crc32c(0, l, 44));
    write_file(log, l, len);
    free(l);
    free(base);
    free(log);
}

static void test_no_lineage_fallback_and_stamp(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    append_n(fi, "v1-", 6);
    fileindex_close(fi);
    downgrade_to_v1(fx);

    struct metrics_registry *reg = metrics_registry_new();
    struct fileindex_settings set = {.metrics = reg};
    struct fileindex *reader = open_ok(fx->dir, &set);
    assert_int_equal(fileindex_count(reader), 6);
    assert_int_equal(fileindex_get_header(reader)->lineage, 0);
    assert_int_equal(lock_count(reg, "shared", "open-probe"), 1);
    refresh_ok(reader);
    refresh_ok(reader);
    assert_int_equal(lock_count(reg, "shared", "reload-fallback"), 2);
    assert_int_equal(reload_count(reg, "fallback"), 2);

    /* the next writer stamps a lineage */
    struct fileindex *writer = open_ok(fx->dir, &set);
    struct fileindex_txn *t = begin_ok(writer);
    assert_true(fileindex_txn_set_flags(t, 1, MAIL_FLAG_SEEN, 0));
    commit_ok(t);
    static const char *const none[] = {NULL};
    assert_int_equal(counter(reg, "petrel_fileindex_lineage_stamped_total", NULL, none), 1);
    assert_true(fileindex_get_header(writer)->lineage != 0);

    refresh_ok(reader); /* still a fallback: it had no lineage to compare */
    assert_int_equal(reload_count(reg, "fallback"), 3);
    assert_same(reader, writer);
    double fallback_locks = lock_count(reg, "shared", "reload-fallback");
    refresh_ok(reader); /* now provably fresh without a lock */
    refresh_ok(reader);
    assert_int_equal(lock_count(reg, "shared", "reload-fallback"), fallback_locks);
    append_n(writer, "v2-", 2);
    refresh_ok(reader);
    assert_same(reader, writer);
    t = begin_ok(writer);
    commit_ok(t);
    assert_int_equal(counter(reg, "petrel_fileindex_lineage_stamped_total", NULL, none), 1);

    /* optimize stamps an old index too */
    fileindex_close(writer);
    fileindex_close(reader);
    downgrade_to_v1(fx);
    fi = open_ok(fx->dir, &set);
    assert_true(fileindex_optimize(fi, NULL));
    assert_int_equal(counter(reg, "petrel_fileindex_lineage_stamped_total", NULL, none), 2);
    assert_int_equal(fileindex_count(fi), 8);
    fileindex_close(fi);
    metrics_registry_free(reg);
}

/* ---------- cache ---------- */

static void expect_cached(struct fileindex *fi, uint32_t uid, const char *field, const char *value)
{
    size_t len = 99;
    const char *got = fileindex_cache_get(fi, uid, field, &len);
    if (value == NULL) {
        assert_null(got);
        assert_int_equal(len, 0);
        return;
    }
    if (got == NULL)
        fail_msg("uid %u field %s not cached", uid, field);
    assert_int_equal(len, strlen(value));
    assert_memory_equal(got, value, len);
}

static void test_cache_add_get_purge(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    append_n(fi, "c-", 4);
    expect_cached(fi, 1, "envelope", NULL); /* no cache file yet */
    struct petrel_error err;
    assert_true(fileindex_cache_add(fi, 1, "envelope", "env-1", 5, &err));
    assert_true(fileindex_cache_add(fi, 1, "bodystructure", "bs-1", 4, &err));
    assert_true(fileindex_cache_add(fi, 2, "envelope", "env-2", 5, &err));
    assert_true(fileindex_cache_add(fi, 3, "envelope", "env-3", 5, &err));
    assert_true(fileindex_cache_add(fi, 3, "envelope", "env-3b", 6, &err)); /* replaces */
    assert_true(fileindex_cache_add(fi, 4, "empty", "", 0, &err));
    expect_cached(fi, 1, "envelope", "env-1");
    expect_cached(fi, 1, "bodystructure", "bs-1");
    expect_cached(fi, 3, "envelope", "env-3b");
    expect_cached(fi, 4, "empty", "");
    expect_cached(fi, 2, "bodystructure", NULL);
    expect_cached(fi, 9, "envelope", NULL);
    /* another handle reads the same, and sees later adds from its next
     * refresh on (until then they are misses, never wrong values) */
    struct fileindex *other = open_ok(fx->dir, NULL);
    expect_cached(other, 2, "envelope", "env-2");
    assert_true(fileindex_cache_add(fi, 2, "flags", "F", 1, &err));
    expect_cached(other, 2, "flags", NULL);
    refresh_ok(other);
    expect_cached(other, 2, "flags", "F");
    assert_true(fileindex_cache_add(other, 1, "x", "from-other", 10, &err));
    refresh_ok(fi);
    expect_cached(fi, 1, "x", "from-other");

    /* purge: expunged messages and replaced records are not carried */
    struct fileindex_txn *t = begin_ok(fi);
    assert_true(fileindex_txn_expunge(t, 2));
    commit_ok(t);
    off_t old_size = file_size(file_in(fx, FI_CACHE_FILE));
    uint64_t gen = fileindex_get_header(fi)->cache_reset_id;
    struct fileindex_purge_stats stats;
    assert_true(fileindex_cache_purge(fi, &stats, &err));
    assert_int_equal(stats.carried, 5); /* 1 env, 1 bs, 1 x, 3 env, 4 empty */
    off_t new_size = file_size(file_in(fx, FI_CACHE_FILE));
    assert_int_equal(stats.reclaimed_bytes, (uint64_t)(old_size - new_size));
    assert_true(stats.reclaimed_bytes > 0);
    assert_true(fileindex_get_header(fi)->cache_reset_id > gen);
    expect_cached(fi, 1, "envelope", "env-1");
    expect_cached(fi, 3, "envelope", "env-3b");
    expect_cached(fi, 2, "envelope", NULL);
    /* other still holds the replaced file open: it must notice the new one
     * (the old has no link left) and read what is added there */
    assert_true(fileindex_cache_add(fi, 1, "after-purge", "new-file", 8, &err));
    refresh_ok(other);
    expect_cached(other, 1, "x", "from-other");
    expect_cached(other, 4, "empty", "");
    expect_cached(other, 1, "after-purge", "new-file");
    /* a second purge carries everything and reclaims nothing */
    assert_true(fileindex_cache_purge(other, &stats, &err));
    assert_int_equal(stats.carried, 6);
    assert_int_equal(stats.reclaimed_bytes, 0);
    refresh_ok(fi);
    expect_cached(fi, 1, "bodystructure", "bs-1");
    fileindex_close(other);
    fileindex_close(fi);
    /* persists */
    fi = open_ok(fx->dir, NULL);
    expect_cached(fi, 1, "envelope", "env-1");
    fileindex_close(fi);
}

/* Queued values: seen by their own handle at once, by others after the
 * flush, written in one go; the queue flushes itself when full, keeps the
 * order of calls with immediate adds, and is dropped when the index's
 * cache identity moved before the flush. */
static void test_cache_queue_flush(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    append_n(fi, "q-", 300);
    struct fileindex *other = open_ok(fx->dir, NULL);
    struct petrel_error err;
    assert_false(fileindex_cache_queue(fi, 0, "envelope", "x", 1, &err));
    assert_false(fileindex_cache_queue(fi, 1, "bad field", "x", 1, &err));
    assert_true(fileindex_cache_queue(fi, 1, "envelope", "q-1", 3, &err));
    assert_true(fileindex_cache_queue(fi, 2, "envelope", "q-2", 3, &err));
    assert_true(fileindex_cache_queue(fi, 1, "envelope", "q-1b", 4, &err)); /* replaces */
    assert_true(fileindex_cache_queue(fi, 3, "empty", "", 0, &err));
    expect_cached(fi, 1, "envelope", "q-1b");
    expect_cached(fi, 3, "empty", "");
    refresh_ok(other);
    expect_cached(other, 1, "envelope", NULL);
    assert_true(fileindex_cache_flush(fi, &err));
    off_t size = file_size(file_in(fx, FI_CACHE_FILE));
    assert_true(fileindex_cache_flush(fi, &err)); /* nothing queued: no write */
    assert_int_equal(file_size(file_in(fx, FI_CACHE_FILE)), size);
    refresh_ok(other);
    expect_cached(other, 1, "envelope", "q-1b");
    expect_cached(other, 2, "envelope", "q-2");
    expect_cached(other, 3, "empty", "");
    expect_cached(fi, 1, "envelope", "q-1b");

    /* full queue: flushed without being asked */
    char value[32];
    for (uint32_t uid = 10; uid < 10 + 256; uid++) {
        snprintf(value, sizeof(value), "auto-%u", uid);
        assert_true(fileindex_cache_queue(fi, uid, "imap.hdr", value, strlen(value), &err));
    }
    refresh_ok(other);
    for (uint32_t uid = 10; uid < 10 + 256; uid++) {
        snprintf(value, sizeof(value), "auto-%u", uid);
        expect_cached(other, uid, "imap.hdr", value);
    }

    /* an immediate add after a queued value of the same field wins */
    assert_true(fileindex_cache_queue(fi, 4, "envelope", "queued", 6, &err));
    assert_true(fileindex_cache_add(fi, 4, "envelope", "added", 5, &err));
    expect_cached(fi, 4, "envelope", "added");
    refresh_ok(other);
    expect_cached(other, 4, "envelope", "added");

    /* the cache identity moved (a purge by another handle): dropped */
    assert_true(fileindex_cache_queue(fi, 5, "envelope", "stale", 5, &err));
    struct fileindex_purge_stats stats;
    assert_true(fileindex_cache_purge(other, &stats, &err));
    refresh_ok(fi);
    expect_cached(fi, 5, "envelope", NULL);
    assert_true(fileindex_cache_flush(fi, &err));
    refresh_ok(other);
    expect_cached(other, 5, "envelope", NULL);
    expect_cached(other, 4, "envelope", "added");
    fileindex_close(other);
    fileindex_close(fi);
}

static void test_cache_purge_interrupted(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    append_n(fi, "p-", 3);
    struct petrel_error err;
    assert_true(fileindex_cache_add(fi, 1, "envelope", "one", 3, &err));
    assert_true(fileindex_cache_add(fi, 2, "envelope", "two", 3, &err));
    uint64_t gen = fileindex_get_header(fi)->cache_reset_id;
    fileindex_fault = FI_FAULT_PURGE_SKIP_INDEX; /* new cache written, index not */
    struct fileindex_purge_stats stats;
    assert_true(fileindex_cache_purge(fi, &stats, &err));
    fileindex_fault = FI_FAULT_NONE;
    assert_int_equal(stats.carried, 2);
    assert_int_equal(fileindex_get_header(fi)->cache_reset_id, gen);
    /* absent, never wrong */
    expect_cached(fi, 1, "envelope", NULL);
    struct fileindex *other = open_ok(fx->dir, NULL);
    expect_cached(other, 2, "envelope", NULL);
    /* rebuilt lazily */
    assert_true(fileindex_cache_add(fi, 1, "envelope", "again", 5, &err));
    expect_cached(fi, 1, "envelope", "again");
    refresh_ok(other);
    expect_cached(other, 1, "envelope", "again");
    expect_cached(other, 2, "envelope", NULL);
    fileindex_close(other);
    fileindex_close(fi);
}

/* Records read through the reader's block: neighbours, records larger
 * than the block, and records another handle appends while the reader
 * holds a block that ends at the old end of the file. */
static void test_cache_reads_across_blocks(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    append_n(fi, "b-", 60);
    struct petrel_error err;
    char value[40000];
    for (uint32_t uid = 1; uid <= 40; uid++) {
        size_t len = uid == 7 ? 30000 : 500 + uid * 13;
        memset(value, 'a' + (int)(uid % 26), len);
        value[len] = '\0';
        assert_true(fileindex_cache_add(fi, uid, "imap.hdr", value, len, &err));
    }
    struct fileindex *other = open_ok(fx->dir, NULL);
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t uid = 1; uid <= 40; uid++) {
            size_t len = uid == 7 ? 30000 : 500 + uid * 13;
            memset(value, 'a' + (int)(uid % 26), len);
            value[len] = '\0';
            expect_cached(other, uid, "imap.hdr", value);
        }
        /* appended after the reader's block was read */
        for (uint32_t uid = 41; uid <= 60; uid++) {
            snprintf(value, sizeof(value), "late-%u-pass-%d", uid, pass);
            assert_true(fileindex_cache_add(fi, uid, "imap.hdr", value, strlen(value), &err));
        }
        refresh_ok(other);
        for (uint32_t uid = 41; uid <= 60; uid++) {
            snprintf(value, sizeof(value), "late-%u-pass-%d", uid, pass);
            expect_cached(other, uid, "imap.hdr", value);
        }
    }
    fileindex_close(other);
    fileindex_close(fi);
}

static void test_cache_unreadable(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    append_n(fi, "u-", 3);
    struct petrel_error err;
    assert_true(fileindex_cache_add(fi, 1, "envelope", "one", 3, &err));
    assert_true(fileindex_cache_add(fi, 2, "envelope", "two", 3, &err));
    char *cache = xstrdup(file_in(fx, FI_CACHE_FILE));

    /* a damaged header: dropped, generation advanced */
    uint64_t gen = fileindex_get_header(fi)->cache_reset_id;
    flip_byte(cache, 3);
    struct fileindex *other = open_ok(fx->dir, NULL);
    expect_cached(other, 1, "envelope", NULL);
    assert_true(fileindex_get_header(other)->cache_reset_id > gen);
    refresh_ok(fi);
    assert_int_equal(fileindex_get_header(fi)->cache_reset_id,
                     fileindex_get_header(other)->cache_reset_id);
    expect_cached(fi, 2, "envelope", NULL);
    assert_true(fileindex_cache_add(fi, 1, "envelope", "fresh", 5, &err));
    refresh_ok(other);
    expect_cached(other, 1, "envelope", "fresh");

    /* a record that fails its checksum when read */
    assert_true(fileindex_cache_add(fi, 2, "envelope", "second", 6, &err));
    refresh_ok(other);
    expect_cached(other, 2, "envelope", "second");
    gen = fileindex_get_header(fi)->cache_reset_id;
    off_t size = file_size(cache);
    flip_byte(cache, size - 2); /* inside the last record's data */
    refresh_ok(other);          /* a reader's block lives one refresh */
    expect_cached(other, 2, "envelope", NULL);
    assert_true(fileindex_get_header(other)->cache_reset_id > gen);
    expect_cached(other, 1, "envelope", NULL);

    /* a torn tail is cut by the next add, earlier records survive */
    assert_true(fileindex_cache_add(fi, 3, "envelope", "three", 5, &err));
    size = file_size(cache);
    int fd = open(cache, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "\x30\x00\x00\x00garbage", 11), 11);
    close(fd);
    refresh_ok(other);
    expect_cached(other, 3, "envelope", "three");
    assert_true(fileindex_cache_add(other, 1, "envelope", "uno", 3, &err));
    refresh_ok(fi);
    expect_cached(fi, 3, "envelope", "three");
    expect_cached(fi, 1, "envelope", "uno");
    assert_true(file_size(cache) > size);

    fileindex_close(other);
    fileindex_close(fi);
    free(cache);
}

static void test_cache_ceiling(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    append_n(fi, "z-", 10);
    fileindex_cache_ceiling = 300;
    struct petrel_error err;
    int cached = 0;
    for (uint32_t uid = 1; uid <= 10; uid++) {
        assert_true(fileindex_cache_add(fi, uid, "envelope", "0123456789", 10, &err));
        if (fileindex_cache_get(fi, uid, "envelope", NULL) != NULL)
            cached++;
    }
    assert_true(cached > 0 && cached < 10);
    assert_true(file_size(file_in(fx, FI_CACHE_FILE)) <= 300);
    /* a purge makes room again (here: by dropping expunged messages) */
    struct fileindex_txn *t = begin_ok(fi);
    for (uint32_t uid = 1; uid <= 5; uid++)
        assert_true(fileindex_txn_expunge(t, uid));
    commit_ok(t);
    struct fileindex_purge_stats stats;
    assert_true(fileindex_cache_purge(fi, &stats, &err));
    assert_true(fileindex_cache_add(fi, 10, "envelope", "0123456789", 10, &err));
    expect_cached(fi, 10, "envelope", "0123456789");
    fileindex_close(fi);
}

static void test_cache_inside_transaction(void **state)
{
    struct fx *fx = *state;
    struct metrics_registry *reg = metrics_registry_new();
    struct fileindex_settings set = {.metrics = reg};
    struct fileindex *fi = create_open(fx, &set);
    append_n(fi, "t-", 2);
    struct petrel_error err;
    struct fileindex_txn *t = begin_ok(fi);
    assert_true(fileindex_cache_add(fi, 1, "envelope", "in-txn", 6, &err));
    expect_cached(fi, 1, "envelope", "in-txn");
    assert_false(fileindex_cache_purge(fi, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_CONFLICT);
    commit_ok(t);
    static const char *const labels[] = {"mode", "site", NULL};
    static const char *const values[] = {"exclusive", "write", NULL};
    assert_true(counter(reg, "petrel_fileindex_lock_reentrant_total", labels, values) >= 1);
    expect_cached(fi, 1, "envelope", "in-txn");
    fileindex_close(fi);
    metrics_registry_free(reg);
}

/* ---------- random damage: reported or survived, never a crash ---------- */

static uint32_t rnd_state = 12345;

static uint32_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 17;
    rnd_state ^= rnd_state << 5;
    return rnd_state;
}

static void test_random_damage(void **state)
{
    struct fx *fx = *state;
    struct fileindex *fi = create_open(fx, NULL);
    append_n(fi, "base-", 30);
    assert_true(fileindex_optimize(fi, NULL));
    append_n(fi, "log-", 5);
    struct fileindex_txn *t = begin_ok(fi);
    assert_true(fileindex_txn_set_flags(t, 3, MAIL_FLAG_SEEN, 2));
    assert_true(fileindex_txn_expunge(t, 4));
    commit_ok(t);
    for (uint32_t uid = 1; uid <= 10; uid++)
        assert_true(fileindex_cache_add(fi, uid, "envelope", "some cached value", 17, NULL));
    fileindex_close(fi);
    static const char *const files[] = {FI_BASE_FILE, FI_LOG_FILE, FI_CACHE_FILE};
    char *paths[3];
    char *orig[3];
    size_t lens[3];
    for (int f = 0; f < 3; f++) {
        paths[f] = xstrdup(file_in(fx, files[f]));
        orig[f] = read_file(paths[f], &lens[f]);
    }
    int opened = 0;
    for (int iter = 0; iter < 400; iter++) {
        for (int f = 0; f < 3; f++)
            write_file(paths[f], orig[f], lens[f]);
        int f = (int)(rnd() % 3);
        char *data = xmalloc(lens[f] + 64);
        memcpy(data, orig[f], lens[f]);
        size_t len = lens[f];
        switch (rnd() % 4) {
        case 0: /* flip a few bytes */
            for (int k = 0; k < 1 + (int)(rnd() % 3); k++)
                data[rnd() % len] ^= (char)(1 + rnd() % 255);
            break;
        case 1: /* truncate */
            len = rnd() % len;
            break;
        case 2: /* append garbage */
            for (int k = 0; k < 64; k++)
                data[len + (size_t)k] = (char)rnd();
            len += 1 + rnd() % 64;
            break;
        default: { /* overwrite a run with garbage */
            size_t at = rnd() % len;
            for (size_t k = at; k < len && k < at + 16; k++)
                data[k] = (char)rnd();
            break;
        }
        }
        write_file(paths[f], data, len);
        free(data);
        struct petrel_error err;
        fi = fileindex_open(fx->dir, NULL, &err);
        if (fi == NULL) {
            assert_true(err.code == PETREL_ERR_INVALID || err.code == PETREL_ERR_NOT_FOUND);
            continue;
        }
        opened++;
        check_invariants(fi);
        assert_true(fileindex_refresh(fi, &err));
        size_t vlen;
        for (uint32_t uid = 1; uid <= 10; uid++)
            (void)fileindex_cache_get(fi, uid, "envelope", &vlen);
        t = fileindex_begin(fi, &err);
        if (t != NULL) {
            assert_true(append_named(t, "after-damage", 0) != 0);
            assert_true(fileindex_txn_commit(t, &err));
            struct fileindex *again = open_ok(fx->dir, NULL);
            assert_same(fi, again);
            fileindex_close(again);
        }
        (void)fileindex_cache_add(fi, 1, "envelope", "x", 1, &err);
        fileindex_close(fi);
    }
    assert_true(opened > 50);
    for (int f = 0; f < 3; f++) {
        free(paths[f]);
        free(orig[f]);
    }
}

/* ---------- metrics ---------- */

static void test_metrics_exposition(void **state)
{
    struct fx *fx = *state;
    struct metrics_registry *reg = metrics_registry_new();
    struct fileindex_settings set = {.metrics = reg};
    struct fileindex *a = create_open(fx, &set);
    struct fileindex *b = open_ok(fx->dir, &set);
    append_n(a, "m-", 3);
    refresh_ok(b);
    refresh_ok(b);
    struct buf out = {0};
    metrics_render(reg, &out);
    const char *text = buf_cstr(&out);
    static const char *const expected[] = {
        "# TYPE petrel_fileindex_read_seconds histogram",
        "# TYPE petrel_fileindex_read_part_seconds histogram",
        "# TYPE petrel_fileindex_lock_acquired_total counter",
        "# TYPE petrel_fileindex_lock_wait_seconds histogram",
        "# TYPE petrel_fileindex_lock_release_seconds histogram",
        "# TYPE petrel_fileindex_lock_reentrant_total counter",
        "# TYPE petrel_fileindex_reload_total counter",
        "# TYPE petrel_fileindex_lineage_stamped_total counter",
        "petrel_fileindex_lock_acquired_total{mode=\"exclusive\",site=\"write\"}",
        "petrel_fileindex_lock_release_seconds_count{mode=\"exclusive\",site=\"write\"}",
        "petrel_fileindex_reload_total{result=\"incremental\"} 1",
        "petrel_fileindex_reload_total{result=\"none\"}",
        "petrel_fileindex_read_seconds_count ",
        "petrel_fileindex_read_part_seconds_count{part=\"reload\"}",
        "petrel_fileindex_read_part_seconds_count{part=\"build\"}",
    };
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++) {
        if (strstr(text, expected[i]) == NULL)
            fail_msg("missing in exposition: %s\n%s", expected[i], text);
    }
    /* one family each, shared by both handles */
    const char *first = strstr(text, "# TYPE petrel_fileindex_reload_total");
    assert_null(strstr(first + 1, "# TYPE petrel_fileindex_reload_total"));
    buf_free(&out);
    fileindex_close(a);
    fileindex_close(b);
    /* without a registry nothing is recorded and nothing breaks */
    struct fileindex *c = open_ok(fx->dir, NULL);
    refresh_ok(c);
    fileindex_close(c);
    metrics_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test_setup_teardown(test_create_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_flags_expunge_modseq, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_log_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_base, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fold_interrupted_before_new_log, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_sync_withdraws_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_handles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auto_fold, setup, teardown),
        cmocka_unit_test_setup_teardown(test_optimize, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace_all, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fork_concurrency, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_lineage_fallback_and_stamp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_add_get_purge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_purge_interrupted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_reads_across_blocks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_unreadable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_queue_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_ceiling, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_inside_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_damage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_exposition, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
