/* libFuzzer target: the fileindex's on-disk files (petrel.index, its log,
 * its cache; storage/fileindex/) as a damaged disk or another program could
 * leave them.
 *
 * Input:
 *   byte 0      bit 0: after the damage, put every checksum right again (so
 *               the damage reaches the checks behind the checksums)
 *   byte 1      n: how many build steps follow (at most 48)
 *   n x 4 bytes build steps, each its own transaction on a fresh index:
 *               append, flags, expunge, rename, fold (optimize), cache add,
 *               cache queue + flush, cache purge
 *   the rest    damage, 4 bytes each: file (base, log, cache), what (xor a
 *               byte, cut the file there, append a byte, set a byte),
 *               16-bit offset, value
 *
 * Checks, whatever the damage:
 *   - open either fails with INVALID or NOT_FOUND (the storage rebuilds
 *     then), or gives an index whose records are in UID order below
 *     next_uid, each found by its UID, with modseqs up to highest_modseq;
 *   - cache lookups answer or miss, never crash (a bad cache is dropped);
 *   - a write to an index that opened commits or fails cleanly, and after a
 *     commit the index opens again and holds the appended message;
 *   - the folder aggregate (fileindex_read_usage, read without records)
 *     equals the sum over the records of the built index, never crashes on
 *     the damaged files, and equals the records' sum again after a commit. */
#include "storage/fileindex/fileindex-private.h"
#include "storage/fileindex/fileindex.h"

#include "core/xalloc.h"

#include <assert.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_STEPS 48
#define MAX_FILE (64u * 1024u)

static char *dir;
static const char *const file_names[3] = {FI_BASE_FILE, FI_LOG_FILE, FI_CACHE_FILE};
static const char *const fields[3] = {"envelope", "imap.hdr", "bodystructure"};
static const uint8_t guid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const struct fileindex_settings settings = {.fsync = FILEINDEX_FSYNC_NEVER};

static char *path_of(const char *name)
{
    return xasprintf("%s/%s", dir, name);
}

static void clear_dir(void)
{
    static const char *const all[] = {FI_BASE_FILE, FI_LOG_FILE, FI_CACHE_FILE, FI_LOCK_FILE,
                                      FI_LOG_FILE ".2"};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        char *p = path_of(all[i]);
        unlink(p);
        free(p);
    }
}

static void remove_dir(void)
{
    clear_dir();
    rmdir(dir);
}

static uint8_t *read_whole(const char *name, size_t *len)
{
    char *p = path_of(name);
    int fd = open(p, O_RDONLY);
    free(p);
    *len = 0;
    if (fd < 0)
        return NULL;
    uint8_t *buf = xmalloc(MAX_FILE + 1);
    ssize_t n = read(fd, buf, MAX_FILE);
    close(fd);
    *len = n > 0 ? (size_t)n : 0;
    return buf;
}

static void write_whole(const char *name, const uint8_t *buf, size_t len)
{
    char *p = path_of(name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    free(p);
    if (fd < 0)
        abort();
    if (len > 0 && write(fd, buf, len) != (ssize_t)len)
        abort();
    close(fd);
}

/* ---------- building ---------- */

static void step(struct fileindex *fi, const uint8_t s[4])
{
    size_t count = fileindex_count(fi);
    const struct fileindex_record *r = count > 0 ? fileindex_record_at(fi, s[1] % count) : NULL;
    struct fileindex_txn *txn = NULL;
    switch (s[0] % 8) {
    case 0: {
        char name[32];
        snprintf(name, sizeof(name), "m%u.%u", s[1], s[2]);
        struct fileindex_record add = {.flags = s[3] & 0x3f,
                                       .keywords = s[2],
                                       .size = s[1],
                                       .vsize = s[1] + s[2],
                                       .internal_date = 1700000000 + s[3],
                                       .filename = name};
        txn = fileindex_begin(fi, NULL);
        if (txn != NULL)
            fileindex_txn_append(txn, &add);
        break;
    }
    case 1:
        if (r != NULL && (txn = fileindex_begin(fi, NULL)) != NULL)
            fileindex_txn_set_flags(txn, r->uid, s[2] & 0x3f, s[3]);
        break;
    case 2:
        if (r != NULL && (txn = fileindex_begin(fi, NULL)) != NULL)
            fileindex_txn_expunge(txn, r->uid);
        break;
    case 3:
        if (r != NULL && (txn = fileindex_begin(fi, NULL)) != NULL) {
            char name[32];
            snprintf(name, sizeof(name), "renamed%u", s[2]);
            fileindex_txn_set_filename(txn, r->uid, name);
        }
        break;
    case 4:
        fileindex_optimize(fi, NULL);
        break;
    case 5:
    case 6:
        if (r != NULL) {
            char value[256];
            memset(value, 'a' + s[3] % 26, sizeof(value));
            if (s[0] % 8 == 5) {
                fileindex_cache_add(fi, r->uid, fields[s[2] % 3], value, s[3], NULL);
            } else {
                fileindex_cache_queue(fi, r->uid, fields[s[2] % 3], value, s[3], NULL);
                if (s[2] & 0x80)
                    fileindex_cache_flush(fi, NULL);
            }
        }
        break;
    default: {
        struct fileindex_purge_stats st;
        fileindex_cache_purge(fi, &st, NULL);
        break;
    }
    }
    if (txn != NULL && !fileindex_txn_commit(txn, NULL))
        abort(); /* an undamaged index takes every write */
}

/* ---------- damage and checksums ---------- */

static void damage(uint8_t *files[3], size_t lens[3], const uint8_t d[4])
{
    int f = d[0] % 3;
    size_t at = (size_t)d[1] | (size_t)d[2] << 8;
    uint8_t *b = files[f];
    switch ((d[0] >> 2) & 3) {
    case 0:
        if (lens[f] > 0)
            b[at % lens[f]] ^= d[3] == 0 ? 1 : d[3];
        break;
    case 1:
        if (at < lens[f])
            lens[f] = at;
        break;
    case 2:
        if (lens[f] < MAX_FILE)
            b[lens[f]++] = d[3];
        break;
    default:
        if (lens[f] > 0)
            b[at % lens[f]] = d[3];
        break;
    }
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Records of the log and the cache: u32 length, u32 crc of bytes 8.., then
 * the record's own offset at 8 (u64 in the log, u32 in the cache). */
static void fix_records(uint8_t *b, size_t len, size_t start, size_t min, bool offset64)
{
    size_t off = start;
    while (off + min <= len) {
        uint32_t total = get32(b + off);
        if (total < min || total > len - off)
            break;
        if (offset64)
            put64(b + off + 8, off);
        else
            put32(b + off + 8, (uint32_t)off);
        put32(b + off + 4, fi_crc32c(0, b + off + 8, total - 8));
        off += total;
    }
}

static void fix_checksums(uint8_t *files[3], size_t lens[3])
{
    uint8_t *base = files[0];
    size_t blen = lens[0];
    if (blen >= 128) {
        uint64_t records = (uint64_t)get32(base + 88) * 48;
        if (records <= blen - 128) {
            put32(base + 92, fi_crc32c(0, base + 128, records));
            put32(base + 104, fi_crc32c(0, base + 128 + records, blen - 128 - records));
        }
        put32(base + 124, fi_crc32c(0, base, 124));
    }
    if (lens[1] >= 48) {
        put32(files[1] + 44, fi_crc32c(0, files[1], 44));
        fix_records(files[1], lens[1], 48, 16, true);
    }
    if (lens[2] >= 32) {
        put32(files[2] + 28, fi_crc32c(0, files[2], 28));
        fix_records(files[2], lens[2], 32, 24, false);
    }
}

/* ---------- checking ---------- */

/* The aggregate read without records equals the records' sum. */
static void check_usage(struct fileindex *fi)
{
    struct fileindex_usage want = {0, 0};
    for (size_t i = 0; i < fileindex_count(fi); i++) {
        want.messages++;
        want.bytes += fileindex_record_at(fi, i)->size;
    }
    struct fileindex_usage got;
    struct petrel_error err;
    if (!fileindex_read_usage(dir, &settings, &got, NULL, &err)) {
        fprintf(stderr, "read_usage failed: %s\n", err.message);
        abort();
    }
    if (got.messages != want.messages || got.bytes != want.bytes) {
        fprintf(stderr, "aggregate %llu/%llu, records %llu/%llu\n",
                (unsigned long long)got.messages, (unsigned long long)got.bytes,
                (unsigned long long)want.messages, (unsigned long long)want.bytes);
        abort();
    }
}

static void check_index(struct fileindex *fi)
{
    const struct fileindex_header *h = fileindex_get_header(fi);
    uint32_t prev = 0;
    for (size_t i = 0; i < fileindex_count(fi); i++) {
        const struct fileindex_record *r = fileindex_record_at(fi, i);
        assert(r->uid > prev && r->uid < h->next_uid);
        assert(r->modseq <= h->highest_modseq);
        assert(r->filename != NULL);
        assert(fileindex_lookup_uid(fi, r->uid) == r);
        prev = r->uid;
        for (int f = 0; f < 3; f++) {
            size_t len = 0;
            const char *v = fileindex_cache_get(fi, r->uid, fields[f], &len);
            assert(v != NULL || len == 0);
            if (v != NULL)
                assert(v[len] == '\0');
        }
    }
    assert(fileindex_record_at(fi, fileindex_count(fi)) == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (dir == NULL) {
        /* tmpfs where there is one: every run creates and rewrites files */
        char shm[] = "/dev/shm/fuzz-fileindex.XXXXXX";
        char tmp[] = "/tmp/fuzz-fileindex.XXXXXX";
        const char *made = mkdtemp(shm);
        if (made == NULL)
            made = mkdtemp(tmp);
        if (made == NULL)
            abort();
        dir = xstrdup(made);
        atexit(remove_dir);
    }
    if (size < 2)
        return 0;
    bool repair = (data[0] & 1) != 0;
    size_t steps = data[1] % (MAX_STEPS + 1);
    const uint8_t *p = data + 2;
    size_t left = size - 2;
    clear_dir();
    struct petrel_error err;
    if (!fileindex_create(dir, guid, 77, &settings, &err))
        abort();
    struct fileindex *fi = fileindex_open(dir, &settings, &err);
    if (fi == NULL)
        abort();
    for (size_t i = 0; i < steps && left >= 4; i++, p += 4, left -= 4)
        step(fi, p);
    if (!fileindex_cache_flush(fi, NULL))
        abort();
    if (!fileindex_refresh(fi, NULL))
        abort();
    check_usage(fi);
    fileindex_close(fi);

    uint8_t *files[3];
    size_t lens[3];
    for (int f = 0; f < 3; f++) {
        files[f] = read_whole(file_names[f], &lens[f]);
        if (files[f] == NULL)
            files[f] = xmalloc(MAX_FILE + 1);
    }
    for (; left >= 4; p += 4, left -= 4)
        damage(files, lens, p);
    if (repair)
        fix_checksums(files, lens);
    for (int f = 0; f < 3; f++) {
        write_whole(file_names[f], files[f], lens[f]);
        free(files[f]);
    }

    struct fileindex_usage any;
    (void)fileindex_read_usage(dir, &settings, &any, NULL, &err); /* must not crash */
    fi = fileindex_open(dir, &settings, &err);
    if (fi == NULL) {
        assert(err.code == PETREL_ERR_INVALID || err.code == PETREL_ERR_NOT_FOUND);
        return 0;
    }
    check_index(fi);
    if (fileindex_refresh(fi, &err))
        check_index(fi);
    struct fileindex_record add = {.size = 10, .vsize = 10, .filename = "after-damage"};
    uint32_t uid = 0;
    bool committed = false;
    struct fileindex_txn *txn = fileindex_begin(fi, &err);
    if (txn != NULL) {
        uid = fileindex_txn_append(txn, &add);
        committed = fileindex_txn_commit(txn, &err);
    }
    fileindex_close(fi);
    if (committed) {
        fi = fileindex_open(dir, &settings, &err);
        if (fi == NULL) {
            fprintf(stderr, "index committed to does not open: %s\n", err.message);
            abort();
        }
        check_index(fi);
        const struct fileindex_record *r = fileindex_lookup_uid(fi, uid);
        assert(r != NULL && strcmp(r->filename, "after-damage") == 0);
        check_usage(fi);
        fileindex_close(fi);
    }
    return 0;
}
