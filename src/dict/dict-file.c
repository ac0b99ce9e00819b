/* file: one data file per dict, crash-safe, shared between processes.
 *
 * The whole dict lives in memory (a sorted map, as in the memory driver) and
 * in one data file, which is a snapshot followed by an append-only log of
 * committed transactions. A commit appends one record for the whole
 * transaction, fsyncs it (policy `fsync: always`, the default), and only then
 * answers, so an acknowledged write survives kill -9 and power loss.
 *
 * File format (integers little-endian):
 *   header, 32 bytes: "PTRLDICT", u32 version (1), u32 header size (32),
 *     u64 generation (bumped by every compaction), u32 reserved (0),
 *     u32 CRC-32 of bytes 0..27
 *   records: u32 payload length, u32 CRC-32 of (the 4 length bytes + payload),
 *     payload = u8 type (1 transaction, 2 snapshot), u32 op count, ops:
 *       u8 1 put:    u32 key length, key, i64 expires_at (0 = never),
 *                    u32 value length, value
 *       u8 2 delete: u32 key length, key
 * Records hold resolved state (an atomic-inc is logged as the put of its
 * result), so replaying them is deterministic and idempotent.
 *
 * Recovery: a bad record (cut short, checksum mismatch) with no valid record
 * anywhere after it is a torn tail, a crash mid-append that was never
 * acknowledged: readers ignore it and the next writer cuts it off. A bad
 * record followed by a valid one is corruption of acknowledged data: loading
 * fails with the offset and the file is left untouched for an operator. (A
 * torn tail whose value bytes happen to contain a whole valid record is
 * reported as corruption too: the safe side.)
 *
 * Compaction: when the file outgrows `compact_ratio` times the live data (and
 * `compact_min_bytes`), the live entries are written as snapshot records to
 * `<path>.tmp`, fsynced, renamed over the data file, and the directory is
 * fsynced. Expired entries are left out.
 *
 * Processes: every commit, expire-scan and compaction holds an exclusive
 * flock on `<path>.lock` (never deleted); refreshing before a read holds a
 * shared one. Before each operation the driver compares the data file's inode
 * and size with what it has applied: a new inode (another process compacted)
 * means a full reload, a longer file an incremental read of the new records.
 * Locks are taken with a timeout (`lock_timeout`) so a stuck peer turns into
 * failed operations, not a hung event loop. */
#include "dict/dict-private.h"

#include "core/clock.h"
#include "core/file-lock.h"
#include "core/fs-util.h"
#include "core/log.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define COMPONENT "dict"

#define FILE_MAGIC "PTRLDICT"
#define FILE_VERSION 1u
#define HEADER_SIZE 32u
#define RECORD_HEAD 8u
#define RECORD_MAX (1u << 30)        /* payload bytes of one record */
#define SNAPSHOT_CHUNK (1u << 20)    /* snapshot records are cut at about this size */
#define READ_CHUNK ((size_t)1 << 20) /* read-ahead while loading */
#define OP_OVERHEAD 17u              /* tag, key length, expires_at, value length */

#define REC_TX 1
#define REC_SNAPSHOT 2
#define OP_PUT 1
#define OP_DEL 2

#define DEFAULT_COMPACT_RATIO 4
#define DEFAULT_COMPACT_MIN_BYTES (1024 * 1024)
#define DEFAULT_LOCK_TIMEOUT_MS 10000

/* ---------- configuration ---------- */

struct file_config {
    char *path;
    bool fsync;
    int64_t compact_ratio;
    int64_t compact_min_bytes;
    int64_t lock_timeout_ms;
};

static void file_config_free(void *p)
{
    struct file_config *c = p;
    if (c == NULL)
        return;
    free(c->path);
    free(c);
}

static void *file_config_read(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                              const char *dict_name)
{
    static const char *const keys[] = {
        "driver", "path", "fsync", "compact_ratio", "compact_min_bytes", "lock_timeout", NULL};
    (void)dict_name;
    if (!cfg_check_keys(ctx, map, path, keys))
        return NULL;
    struct file_config *c = xcalloc(1, sizeof(*c));
    c->fsync = true;
    c->compact_ratio = DEFAULT_COMPACT_RATIO;
    c->compact_min_bytes = DEFAULT_COMPACT_MIN_BYTES;
    c->lock_timeout_ms = DEFAULT_LOCK_TIMEOUT_MS;
    char *fsync_mode = NULL;
    if (!cfg_string(ctx, map, path, "path", &c->path) ||
        !cfg_string(ctx, map, path, "fsync", &fsync_mode) ||
        !cfg_int(ctx, map, path, "compact_ratio", 2, 1000, &c->compact_ratio) ||
        !cfg_int(ctx, map, path, "compact_min_bytes", 0, INT64_C(1) << 40, &c->compact_min_bytes) ||
        !cfg_duration_ms(ctx, map, path, "lock_timeout", 1, 3600 * 1000, &c->lock_timeout_ms))
        goto fail;
    if (c->path == NULL || c->path[0] == '\0') {
        cfg_fail(ctx, map, path, "path is required for the file driver (the data file)");
        goto fail;
    }
    size_t plen = strlen(c->path);
    if (c->path[plen - 1] == '/' || plen > 4000) {
        cfg_fail(ctx, ynode_get(map, "path"), path, "path must name a file (at most 4000 bytes)");
        goto fail;
    }
    if (fsync_mode != NULL) {
        if (strcmp(fsync_mode, "always") == 0) {
            c->fsync = true;
        } else if (strcmp(fsync_mode, "never") == 0) {
            c->fsync = false;
        } else {
            cfg_fail(ctx, ynode_get(map, "fsync"), path, "fsync must be always or never, not '%s'",
                     fsync_mode);
            goto fail;
        }
    }
    free(fsync_mode);
    return c;
fail:
    free(fsync_mode);
    file_config_free(c);
    return NULL;
}

/* ---------- CRC-32 (IEEE 802.3) ---------- */

/* zlib's crc32: its tables are constants, so threads need no set-up
 * between them (docs/decisions.md). */
static uint32_t crc32_update(uint32_t crc, const void *data, size_t len)
{
    /* crc32_z answers 0 for a NULL buffer, whatever `crc` was. */
    if (len == 0)
        return crc;
    return (uint32_t)crc32_z(crc, data, len);
}

/* ---------- little-endian encoding ---------- */

static void put_u8(struct buf *b, unsigned v)
{
    buf_append_char(b, (char)(v & 0xff));
}

static void put_u32(struct buf *b, uint32_t v)
{
    unsigned char t[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    buf_append(b, t, 4);
}

static void put_u64(struct buf *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void set_u32(char *p, uint32_t v)
{
    unsigned char *u = (unsigned char *)p;
    u[0] = (unsigned char)v;
    u[1] = (unsigned char)(v >> 8);
    u[2] = (unsigned char)(v >> 16);
    u[3] = (unsigned char)(v >> 24);
}

/* ---------- in-memory state ---------- */

struct file_dict {
    const struct file_config *cfg;
    const char *name;
    char *lock_path;
    char *tmp_path;
    char *dir_path;
    int lock_fd;
    int data_fd;
    dev_t dev;
    ino_t ino;
    uint64_t generation;
    int64_t offset;      /* end of the last record applied */
    uint64_t live_bytes; /* what a snapshot of `map` would take */
    struct smap *map;
    bool need_reload;      /* the file and the map may disagree: reload fully */
    bool dir_sync_pending; /* a compaction's rename is not yet known durable */
    struct metric_family *events;
};

static void entry_free(void *p)
{
    struct dict_mem_entry *e = p;
    free(e->value);
    free(e);
}

static uint64_t entry_cost(size_t key_len, size_t value_len)
{
    return OP_OVERHEAD + (uint64_t)key_len + (uint64_t)value_len;
}

static void count_event(struct file_dict *d, const char *event)
{
    if (d->events == NULL)
        return;
    const char *values[] = {d->name, event};
    metric_add(metric_series_get(d->events, values), 1);
}

/* ---------- record payloads ---------- */

/* Checks that a payload is well formed (bounds, tags) without applying it. */
static bool payload_valid(const unsigned char *p, size_t len)
{
    if (len < 5 || (p[0] != REC_TX && p[0] != REC_SNAPSHOT))
        return false;
    uint32_t n = get_u32(p + 1);
    size_t pos = 5;
    for (uint32_t i = 0; i < n; i++) {
        if (len - pos < 5)
            return false;
        unsigned tag = p[pos];
        uint32_t klen = get_u32(p + pos + 1);
        pos += 5;
        if (len - pos < klen || klen == 0 || memchr(p + pos, '\0', klen) != NULL)
            return false;
        pos += klen;
        if (tag == OP_DEL)
            continue;
        if (tag != OP_PUT || len - pos < 12)
            return false;
        uint32_t vlen = get_u32(p + pos + 8);
        pos += 12;
        if (len - pos < vlen)
            return false;
        pos += vlen;
    }
    return pos == len;
}

static void map_remove(struct smap *map, uint64_t *live, const char *key)
{
    struct dict_mem_entry *old = smap_remove(map, key);
    if (old != NULL) {
        *live -= entry_cost(strlen(key), old->len);
        entry_free(old);
    }
}

/* Applies a payload that passed payload_valid(). */
static void payload_apply(struct smap *map, uint64_t *live, const unsigned char *p, size_t len,
                          int64_t now)
{
    (void)len;
    uint32_t n = get_u32(p + 1);
    size_t pos = 5;
    struct buf key = {0};
    for (uint32_t i = 0; i < n; i++) {
        unsigned tag = p[pos];
        uint32_t klen = get_u32(p + pos + 1);
        pos += 5;
        buf_reset(&key);
        buf_append(&key, p + pos, klen);
        pos += klen;
        if (tag == OP_DEL) {
            map_remove(map, live, key.data);
            continue;
        }
        int64_t expires_at = (int64_t)get_u64(p + pos);
        uint32_t vlen = get_u32(p + pos + 8);
        pos += 12;
        if (expires_at != 0 && expires_at <= now) {
            /* Already gone: keep it out of memory (a later snapshot drops it too). */
            map_remove(map, live, key.data);
            pos += vlen;
            continue;
        }
        struct dict_mem_entry *e = xcalloc(1, sizeof(*e));
        e->value = xmalloc((size_t)vlen + 1);
        memcpy(e->value, p + pos, vlen);
        e->value[vlen] = '\0';
        e->len = vlen;
        e->expires_at = expires_at;
        pos += vlen;
        struct dict_mem_entry *old = smap_put(map, key.data, e);
        if (old != NULL) {
            *live -= entry_cost(klen, old->len);
            entry_free(old);
        }
        *live += entry_cost(klen, vlen);
    }
    buf_free(&key);
}

static void payload_begin(struct buf *b, unsigned type)
{
    buf_reset(b);
    /* room for the record head, filled in by record_finish() */
    buf_append(b, "\0\0\0\0\0\0\0\0", RECORD_HEAD);
    put_u8(b, type);
    put_u32(b, 0);
}

static void payload_put(struct buf *b, uint32_t *count, const char *key, const char *value,
                        size_t len, int64_t expires_at)
{
    size_t klen = strlen(key);
    put_u8(b, OP_PUT);
    put_u32(b, (uint32_t)klen);
    buf_append(b, key, klen);
    put_u64(b, (uint64_t)expires_at);
    put_u32(b, (uint32_t)len);
    buf_append(b, value, len);
    (*count)++;
}

static void payload_del(struct buf *b, uint32_t *count, const char *key)
{
    size_t klen = strlen(key);
    put_u8(b, OP_DEL);
    put_u32(b, (uint32_t)klen);
    buf_append(b, key, klen);
    (*count)++;
}

/* Fills in the op count and the record head. False when too large. */
static bool record_finish(struct buf *b, uint32_t count)
{
    size_t payload = b->len - RECORD_HEAD;
    if (payload > RECORD_MAX)
        return false;
    set_u32(b->data + RECORD_HEAD + 1, count);
    set_u32(b->data, (uint32_t)payload);
    uint32_t crc = crc32_update(0, b->data, 4);
    crc = crc32_update(crc, b->data + RECORD_HEAD, payload);
    set_u32(b->data + 4, crc);
    return true;
}

/* ---------- low-level I/O ---------- */

static bool sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return false;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc == 0;
}

/* mkdir -p of the data file's directory (0700 for what it creates). */
static bool make_dirs(const char *dir, struct petrel_error *err)
{
    char *copy = xstrdup(dir);
    for (char *p = copy + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(copy, 0700) != 0 && errno != EEXIST) {
            petrel_error_set(err, PETREL_ERR_IO, "cannot create directory %s: %s", copy,
                             strerror(errno));
            free(copy);
            return false;
        }
        *p = '/';
    }
    bool ok = mkdir(copy, 0700) == 0 || errno == EEXIST;
    if (!ok)
        petrel_error_set(err, PETREL_ERR_IO, "cannot create directory %s: %s", copy,
                         strerror(errno));
    free(copy);
    return ok;
}

/* flock with lock_timeout: LOCK_SH or LOCK_EX. */
static bool lock_take(struct file_dict *d, int how, struct petrel_error *err)
{
    switch (file_lock_take(d->lock_fd, how == LOCK_EX, d->cfg->lock_timeout_ms, NULL)) {
    case FILE_LOCK_TAKEN:
        return true;
    case FILE_LOCK_TIMEOUT:
        return petrel_error_set(err, PETREL_ERR_UNAVAILABLE,
                                "%s is locked by another process for more than %" PRId64
                                " ms (lock_timeout)",
                                d->lock_path, d->cfg->lock_timeout_ms);
    case FILE_LOCK_ERROR:
        break;
    }
    return petrel_error_set(err, PETREL_ERR_IO, "cannot lock %s: %s", d->lock_path,
                            strerror(errno));
}

static void lock_release(struct file_dict *d)
{
    file_lock_release(d->lock_fd);
}

/* ---------- loading ---------- */

/* Sequential reader over [.., size) of a file with read-ahead. */
struct reader {
    int fd;
    int64_t size;
    int64_t base; /* file offset of data[0] */
    unsigned char *data;
    size_t len;
    size_t cap;
    bool failed; /* an I/O error (errno kept in saved_errno) */
    int saved_errno;
};

/* Pointer to the n bytes at `pos`, or NULL when they are not all in the
 * file (or on an I/O error: r->failed). Cheapest when `pos` only grows. */
static const unsigned char *reader_get(struct reader *r, int64_t pos, size_t n)
{
    if (pos + (int64_t)n > r->size)
        return NULL;
    if (pos < r->base) {
        r->base = pos; /* a second pass (recovery checks): read again */
        r->len = 0;
    }
    size_t skip = (size_t)(pos - r->base);
    if (skip + n <= r->len)
        return r->data + skip;
    if (skip >= r->len) {
        r->len = 0;
    } else {
        memmove(r->data, r->data + skip, r->len - skip);
        r->len -= skip;
    }
    r->base = pos;
    size_t want = n > READ_CHUNK ? n : READ_CHUNK;
    if ((int64_t)want > r->size - pos)
        want = (size_t)(r->size - pos);
    if (r->cap < want) {
        r->data = xrealloc(r->data, want);
        r->cap = want;
    }
    while (r->len < want) {
        ssize_t got =
            pread(r->fd, r->data + r->len, want - r->len, (off_t)(r->base + (int64_t)r->len));
        if (got < 0) {
            if (errno == EINTR)
                continue;
            r->failed = true;
            r->saved_errno = errno;
            return NULL;
        }
        if (got == 0) {
            r->size = r->base + (int64_t)r->len; /* shorter than fstat said */
            return r->len >= n ? r->data : NULL;
        }
        r->len += (size_t)got;
    }
    return r->data;
}

static bool reader_rest_is_zero(struct reader *r, int64_t pos)
{
    while (pos < r->size) {
        size_t n = r->size - pos > (int64_t)READ_CHUNK ? READ_CHUNK : (size_t)(r->size - pos);
        const unsigned char *p = reader_get(r, pos, n);
        if (p == NULL)
            return false;
        for (size_t i = 0; i < n; i++) {
            if (p[i] != 0)
                return false;
        }
        pos += (int64_t)n;
    }
    return true;
}

/* Is there a record with a valid checksum and payload starting anywhere in
 * [from, end of file)? Cheap tests first, so random bytes cost O(1) each. */
static bool valid_record_after(struct reader *r, int64_t from)
{
    for (int64_t q = from; q + (int64_t)RECORD_HEAD + 5 <= r->size; q++) {
        const unsigned char *h = reader_get(r, q, RECORD_HEAD + 5);
        if (h == NULL)
            return false;
        uint32_t len = get_u32(h);
        if (len < 5 || len > RECORD_MAX || q + (int64_t)RECORD_HEAD + (int64_t)len > r->size)
            continue;
        if ((h[8] != REC_TX && h[8] != REC_SNAPSHOT) || get_u32(h + 9) > len / 5)
            continue;
        const unsigned char *rec = reader_get(r, q, RECORD_HEAD + (size_t)len);
        if (rec == NULL)
            return false;
        uint32_t crc = crc32_update(crc32_update(0, rec, 4), rec + RECORD_HEAD, len);
        if (crc == get_u32(rec + 4) && payload_valid(rec + RECORD_HEAD, len))
            return true;
    }
    return false;
}

/* Applies the records of `fd` from `from` to its end to `map`. A torn tail
 * is skipped, and cut off the file when `may_cut` (the caller holds the
 * exclusive lock, so no append is in progress). *end is the end of the last
 * good record. False (err set) on an I/O error or corruption; records before
 * the bad one have been applied and *end says how far. */
static bool scan_records(struct file_dict *d, int fd, struct smap *map, uint64_t *live,
                         int64_t from, int64_t size, bool may_cut, int64_t *end,
                         struct petrel_error *err)
{
    struct reader r = {.fd = fd, .size = size, .base = from};
    int64_t now = dict_now();
    int64_t pos = from;
    const char *why = NULL;
    uint32_t len = 0;
    bool ok = true;
    bool torn_tail = false;
    *end = from;
    while (pos < r.size) {
        const unsigned char *head = reader_get(&r, pos, RECORD_HEAD);
        if (head == NULL)
            goto torn_or_failed;
        len = get_u32(head);
        uint32_t crc = get_u32(head + 4);
        if (len == 0 || len > RECORD_MAX) {
            why = "invalid record length";
            goto bad;
        }
        const unsigned char *rec = reader_get(&r, pos, RECORD_HEAD + (size_t)len);
        if (rec == NULL)
            goto torn_or_failed;
        uint32_t actual = crc32_update(crc32_update(0, rec, 4), rec + RECORD_HEAD, len);
        if (actual != crc) {
            why = "checksum mismatch";
            goto bad;
        }
        if (!payload_valid(rec + RECORD_HEAD, len)) {
            /* The checksum holds, so this is no torn write. */
            ok = petrel_error_set(err, PETREL_ERR_IO,
                                  "%s: malformed record at offset %" PRId64
                                  " (checksum valid; written by a newer version?)",
                                  d->cfg->path, pos);
            goto out;
        }
        payload_apply(map, live, rec + RECORD_HEAD, len, now);
        pos += RECORD_HEAD + (int64_t)len;
        *end = pos;
    }
    goto out;

torn_or_failed:
    if (r.failed) {
        ok = petrel_error_set(err, PETREL_ERR_IO, "cannot read %s: %s", d->cfg->path,
                              strerror(r.saved_errno));
        goto out;
    }
    why = "record runs past the end of the file";
    len = 0;
    goto bad;

bad:
    /* A bad record reaching exactly the end of the file, or followed only by
     * zeros (an extended but unwritten tail), or by nothing that reads as a
     * record, is the last append, torn by a crash. A valid record after it
     * proves acknowledged data follows (a damaged length field, say): that
     * is corruption, never cut. */
    torn_tail = (len != 0 && len <= RECORD_MAX && pos + RECORD_HEAD + (int64_t)len == r.size) ||
                reader_rest_is_zero(&r, pos) || !valid_record_after(&r, pos + 1);
    if (r.failed) {
        ok = petrel_error_set(err, PETREL_ERR_IO, "cannot read %s: %s", d->cfg->path,
                              strerror(r.saved_errno));
        goto out;
    }
    if (torn_tail)
        goto torn;
    ok = petrel_error_set(err, PETREL_ERR_IO,
                          "%s: corrupt record at offset %" PRId64 " (%s) with %" PRId64
                          " more bytes after it; refusing to load. Truncate the file at that "
                          "offset to keep the records before it, or move it aside to start empty",
                          d->cfg->path, pos, why, r.size - pos);
    goto out;

torn:
    if (pos < r.size && may_cut) {
        log_warn(COMPONENT, "cutting torn tail",
                 "dict=%s file=%s offset=%" PRId64 " bytes=%" PRId64, d->name, d->cfg->path, pos,
                 r.size - pos);
        if (ftruncate(fd, (off_t)pos) != 0 || (d->cfg->fsync && fsync(fd) != 0)) {
            ok = petrel_error_set(err, PETREL_ERR_IO, "cannot cut the torn tail of %s: %s",
                                  d->cfg->path, strerror(errno));
            goto out;
        }
        count_event(d, "torn_tail_cut");
    }
out:
    free(r.data);
    return ok;
}

static bool read_header(struct file_dict *d, int fd, int64_t size, uint64_t *generation,
                        struct petrel_error *err)
{
    unsigned char h[HEADER_SIZE];
    if (size < (int64_t)HEADER_SIZE)
        return petrel_error_set(err, PETREL_ERR_IO,
                                "%s: not a petrel dict file (only %" PRId64 " bytes)", d->cfg->path,
                                size);
    size_t got = 0;
    while (got < HEADER_SIZE) {
        ssize_t n = pread(fd, h + got, HEADER_SIZE - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return petrel_error_set(err, PETREL_ERR_IO, "cannot read %s: %s", d->cfg->path,
                                    n < 0 ? strerror(errno) : "unexpected end of file");
        got += (size_t)n;
    }
    if (memcmp(h, FILE_MAGIC, 8) != 0)
        return petrel_error_set(err, PETREL_ERR_IO, "%s: not a petrel dict file (bad magic)",
                                d->cfg->path);
    if (crc32_update(0, h, 28) != get_u32(h + 28))
        return petrel_error_set(err, PETREL_ERR_IO, "%s: header checksum mismatch", d->cfg->path);
    if (get_u32(h + 8) != FILE_VERSION || get_u32(h + 12) != HEADER_SIZE)
        return petrel_error_set(err, PETREL_ERR_IO, "%s: unsupported file version %" PRIu32,
                                d->cfg->path, get_u32(h + 8));
    *generation = get_u64(h + 16);
    return true;
}

/* Opens the data file afresh and reads all of it into a new map, which
 * replaces the current state only when everything went well. */
static bool full_load(struct file_dict *d, bool may_cut, struct petrel_error *err)
{
    int fd = open(d->cfg->path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return petrel_error_set(err, PETREL_ERR_IO, "cannot open %s: %s", d->cfg->path,
                                strerror(errno));
    struct stat st;
    uint64_t generation = 0;
    struct smap *map = NULL;
    uint64_t live = 0;
    int64_t end = 0;
    if (fstat(fd, &st) != 0) {
        petrel_error_set(err, PETREL_ERR_IO, "cannot stat %s: %s", d->cfg->path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        petrel_error_set(err, PETREL_ERR_IO, "%s is not a regular file", d->cfg->path);
        goto fail;
    }
    if (!read_header(d, fd, (int64_t)st.st_size, &generation, err))
        goto fail;
    map = smap_new();
    if (!scan_records(d, fd, map, &live, HEADER_SIZE, (int64_t)st.st_size, may_cut, &end, err))
        goto fail;
    if (d->map != NULL)
        smap_free(d->map, entry_free);
    if (d->data_fd >= 0)
        close(d->data_fd);
    d->map = map;
    d->live_bytes = live;
    d->data_fd = fd;
    d->dev = st.st_dev;
    d->ino = st.st_ino;
    d->generation = generation;
    d->offset = end;
    d->need_reload = false;
    return true;
fail:
    if (map != NULL)
        smap_free(map, entry_free);
    close(fd);
    return false;
}

/* Brings the map up to date with the file; the caller holds the lock
 * (exclusive when `may_cut`). */
static bool refresh(struct file_dict *d, bool may_cut, struct petrel_error *err)
{
    struct stat st;
    if (stat(d->cfg->path, &st) != 0) {
        if (errno == ENOENT)
            return petrel_error_set(err, PETREL_ERR_IO,
                                    "%s is gone (deleted or moved outside petrel); restart to "
                                    "start a new file",
                                    d->cfg->path);
        return petrel_error_set(err, PETREL_ERR_IO, "cannot stat %s: %s", d->cfg->path,
                                strerror(errno));
    }
    if (d->need_reload || d->data_fd < 0 || st.st_dev != d->dev || st.st_ino != d->ino) {
        if (!full_load(d, may_cut, err))
            return false;
        count_event(d, "reload");
        return true;
    }
    if ((int64_t)st.st_size == d->offset)
        return true;
    if ((int64_t)st.st_size < d->offset) {
        log_warn(COMPONENT, "data file shrank, reloading", "dict=%s file=%s", d->name,
                 d->cfg->path);
        d->need_reload = true;
        return refresh(d, may_cut, err);
    }
    int64_t end = d->offset;
    bool ok = scan_records(d, d->data_fd, d->map, &d->live_bytes, d->offset, (int64_t)st.st_size,
                           may_cut, &end, err);
    d->offset = end;
    return ok;
}

/* Cheap check (two stats, no lock) before a read; refreshes when needed. */
static bool sync_for_read(struct file_dict *d, struct petrel_error *err)
{
    if (!d->need_reload && d->data_fd >= 0) {
        struct stat st;
        struct stat fst;
        if (stat(d->cfg->path, &st) == 0 && st.st_dev == d->dev && st.st_ino == d->ino &&
            fstat(d->data_fd, &fst) == 0 && (int64_t)fst.st_size == d->offset)
            return true;
    }
    if (!lock_take(d, LOCK_SH, err))
        return false;
    bool ok = refresh(d, false, err);
    lock_release(d);
    return ok;
}

/* ---------- writing whole files (creation and compaction) ---------- */

/* Writes header + snapshot of the live entries of `map` (may be NULL) to the
 * temp file, fsyncs it and renames it over the data file. Returns the open
 * descriptor of the new file (-1 with err on failure; the old file stays). */
static int write_snapshot(struct file_dict *d, const struct smap *map, uint64_t generation,
                          int64_t *size_out, struct petrel_error *err)
{
    int fd = open(d->tmp_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        petrel_error_set(err, PETREL_ERR_IO, "cannot create %s: %s", d->tmp_path, strerror(errno));
        return -1;
    }
    struct buf out = {0};
    struct buf rec = {0};
    int64_t written = 0;
    buf_append(&out, FILE_MAGIC, 8);
    put_u32(&out, FILE_VERSION);
    put_u32(&out, HEADER_SIZE);
    put_u64(&out, generation);
    put_u32(&out, 0);
    put_u32(&out, crc32_update(0, out.data, 28));

    int64_t now = dict_now();
    uint32_t count = 0;
    payload_begin(&rec, REC_SNAPSHOT);
    const char *key = NULL;
    const char *from = "";
    bool strict = false;
    char *last = NULL;
    bool ok = true;
    for (;;) {
        struct dict_mem_entry *e = map != NULL ? smap_seek(map, from, strict, &key) : NULL;
        if (e != NULL && !dict_mem_expired(e, now)) {
            payload_put(&rec, &count, key, e->value, e->len, e->expires_at);
        }
        if (count > 0 && (e == NULL || rec.len >= SNAPSHOT_CHUNK)) {
            if (!record_finish(&rec, count)) {
                errno = EFBIG;
                ok = false;
                break;
            }
            buf_append(&out, rec.data, rec.len);
            payload_begin(&rec, REC_SNAPSHOT);
            count = 0;
        }
        if (out.len >= SNAPSHOT_CHUNK || (e == NULL && out.len > 0)) {
            if (!fs_pwrite_all(fd, out.data, out.len, (uint64_t)written)) {
                ok = false;
                break;
            }
            written += (int64_t)out.len;
            buf_reset(&out);
        }
        if (e == NULL)
            break;
        free(last);
        last = xstrdup(key);
        from = last;
        strict = true;
    }
    free(last);
    buf_free(&out);
    buf_free(&rec);
    if (ok && fsync(fd) != 0)
        ok = false;
    if (ok && rename(d->tmp_path, d->cfg->path) != 0)
        ok = false;
    if (!ok) {
        petrel_error_set(err, PETREL_ERR_IO, "cannot write %s: %s", d->tmp_path, strerror(errno));
        close(fd);
        unlink(d->tmp_path);
        return -1;
    }
    if (!sync_dir(d->dir_path)) {
        /* The new file is in place for every process; only its durability
         * across power loss is in doubt. Retried before the next commit. */
        log_error(COMPONENT, "cannot fsync directory", "dict=%s dir=%s error=\"%s\"", d->name,
                  d->dir_path, strerror(errno));
        d->dir_sync_pending = true;
    }
    *size_out = written;
    return fd;
}

static bool compact(struct file_dict *d, struct petrel_error *err)
{
    int64_t size = 0;
    int64_t before = d->offset;
    int fd = write_snapshot(d, d->map, d->generation + 1, &size, err);
    if (fd < 0)
        return false;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        /* The rename happened: the only safe state is a reload. */
        close(fd);
        d->need_reload = true;
        return petrel_error_set(err, PETREL_ERR_IO, "cannot stat %s: %s", d->cfg->path,
                                strerror(errno));
    }
    close(d->data_fd);
    d->data_fd = fd;
    d->dev = st.st_dev;
    d->ino = st.st_ino;
    d->generation++;
    d->offset = size;
    count_event(d, "compaction");
    log_info(COMPONENT, "compacted",
             "dict=%s file=%s before=%" PRId64 " after=%" PRId64 " generation=%" PRIu64, d->name,
             d->cfg->path, before, size, d->generation);
    return true;
}

static void maybe_compact(struct file_dict *d)
{
    uint64_t size = (uint64_t)d->offset;
    if (size <= HEADER_SIZE || size < (uint64_t)d->cfg->compact_min_bytes)
        return;
    if (size <= (d->live_bytes + HEADER_SIZE) * (uint64_t)d->cfg->compact_ratio)
        return;
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!compact(d, &err))
        log_warn(COMPONENT, "compaction failed, keeping the log", "dict=%s error=\"%s\"", d->name,
                 err.message);
}

/* ---------- open / close ---------- */

static void file_close(struct dict *dict)
{
    struct file_dict *d = dict->driver_data;
    if (d == NULL)
        return;
    if (d->data_fd >= 0)
        close(d->data_fd);
    if (d->lock_fd >= 0)
        close(d->lock_fd);
    if (d->map != NULL)
        smap_free(d->map, entry_free);
    free(d->lock_path);
    free(d->tmp_path);
    free(d->dir_path);
    free(d);
    dict->driver_data = NULL;
}

static bool file_open(struct dict *dict, struct petrel_error *err)
{
    struct file_dict *d = xcalloc(1, sizeof(*d));
    d->cfg = dict->config;
    d->name = dict->name;
    d->lock_fd = -1;
    d->data_fd = -1;
    d->lock_path = xasprintf("%s.lock", d->cfg->path);
    d->tmp_path = xasprintf("%s.tmp", d->cfg->path);
    const char *slash = strrchr(d->cfg->path, '/');
    if (slash == NULL)
        d->dir_path = xstrdup(".");
    else if (slash == d->cfg->path)
        d->dir_path = xstrdup("/");
    else
        d->dir_path = xstrndup(d->cfg->path, (size_t)(slash - d->cfg->path));
    dict->driver_data = d;
    if (dict->metrics != NULL) {
        static const char *const labels[] = {"dict", "event", NULL};
        d->events = metrics_counter(dict->metrics, "petrel_dict_file_events_total",
                                    "File dict maintenance events by dict: compaction, reload "
                                    "(another process compacted), torn_tail_cut (crash recovery).",
                                    labels);
    }

    if (!make_dirs(d->dir_path, err))
        goto fail;
    d->lock_fd = open(d->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (d->lock_fd < 0) {
        petrel_error_set(err, PETREL_ERR_IO, "cannot open %s: %s", d->lock_path, strerror(errno));
        goto fail;
    }
    if (!lock_take(d, LOCK_EX, err))
        goto fail;
    struct stat st;
    bool ok = true;
    if (stat(d->cfg->path, &st) != 0) {
        if (errno != ENOENT) {
            ok = petrel_error_set(err, PETREL_ERR_IO, "cannot stat %s: %s", d->cfg->path,
                                  strerror(errno));
        } else {
            /* Created whole (header included) by rename, so a crash never
             * leaves a half-made file behind. */
            int64_t size = 0;
            int fd = write_snapshot(d, NULL, 1, &size, err);
            ok = fd >= 0;
            if (ok) {
                close(fd);
                log_info(COMPONENT, "created data file", "dict=%s file=%s", d->name, d->cfg->path);
            }
        }
    }
    ok = ok && full_load(d, true, err);
    lock_release(d);
    if (!ok)
        goto fail;
    log_info(COMPONENT, "file dict loaded",
             "dict=%s file=%s keys=%zu bytes=%" PRId64 " generation=%" PRIu64 " fsync=%s", d->name,
             d->cfg->path, smap_count(d->map), d->offset, d->generation,
             d->cfg->fsync ? "always" : "never");
    return true;
fail:
    file_close(dict);
    return false;
}

/* ---------- lookup ---------- */

static void file_lookup(struct dict *dict, const char *key, dict_lookup_cb *cb, void *ctx)
{
    struct file_dict *d = dict->driver_data;
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!sync_for_read(d, &err)) {
        struct dict_lookup_result r = {.ret = -1, .error = err.message};
        cb(&r, ctx);
        return;
    }
    dict_mem_lookup(d->map, key, cb, ctx);
}

/* ---------- iterate ---------- */

struct file_iterate {
    struct dict_iterate head;
    bool failed;
    struct dict_map_cursor cursor;
};

static struct dict_iterate *file_iterate_init(struct dict *dict, const char *prefix, unsigned flags)
{
    struct file_iterate *it = xcalloc(1, sizeof(*it));
    dict_iterate_head_init(&it->head, dict, prefix, flags);
    dict_map_cursor_init(&it->cursor, flags);
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!sync_for_read(dict->driver_data, &err)) {
        it->failed = true;
        dict_iterate_set_error(&it->head, "%s", err.message);
    }
    return &it->head;
}

static enum dict_iter_status file_iterate_next(struct dict_iterate *head, struct dict_row *row)
{
    struct file_iterate *it = (struct file_iterate *)head;
    if (it->failed)
        return DICT_ITER_ERROR;
    struct file_dict *d = head->dict->driver_data;
    return dict_map_cursor_next(&it->cursor, d->map, head->prefix, head->flags, row);
}

static void file_iterate_deinit(struct dict_iterate *head)
{
    struct file_iterate *it = (struct file_iterate *)head;
    dict_map_cursor_free(&it->cursor);
    free(it);
}

/* ---------- commit ---------- */

enum append_result { APPEND_OK, APPEND_FAILED, APPEND_UNCERTAIN };

/* Appends one finished record (the caller holds the exclusive lock and has
 * refreshed), makes it durable per the fsync policy and applies it. On
 * APPEND_FAILED nothing changed; on APPEND_UNCERTAIN the record is in the
 * file and applied but its durability is unknown. */
static enum append_result append_record(struct file_dict *d, const struct buf *rec,
                                        struct petrel_error *err)
{
    if (d->dir_sync_pending && d->cfg->fsync) {
        if (!sync_dir(d->dir_path)) {
            petrel_error_set(err, PETREL_ERR_IO, "cannot fsync directory %s: %s", d->dir_path,
                             strerror(errno));
            return APPEND_FAILED;
        }
        d->dir_sync_pending = false;
    }
    if (!fs_pwrite_all(d->data_fd, rec->data, rec->len, (uint64_t)d->offset)) {
        int saved = errno;
        /* Take back a partial record so the next append does not follow it. */
        if (ftruncate(d->data_fd, (off_t)d->offset) != 0)
            d->need_reload = true; /* the next writer cuts it as a torn tail */
        petrel_error_set(err, PETREL_ERR_IO, "cannot write %s: %s", d->cfg->path, strerror(saved));
        return APPEND_FAILED;
    }
    enum append_result result = APPEND_OK;
    if (d->cfg->fsync && fdatasync(d->data_fd) != 0) {
        petrel_error_set(err, PETREL_ERR_IO, "cannot fsync %s: %s", d->cfg->path, strerror(errno));
        log_error(COMPONENT, "fsync failed, write uncertain", "dict=%s error=\"%s\"", d->name,
                  err->message);
        result = APPEND_UNCERTAIN;
    }
    payload_apply(d->map, &d->live_bytes, (const unsigned char *)rec->data + RECORD_HEAD,
                  rec->len - RECORD_HEAD, dict_now());
    d->offset += (int64_t)rec->len;
    return result;
}

/* What the transaction leaves behind for one key. */
struct pending {
    bool deleted;
    const char *value;
    size_t len;
    int64_t expires_at;
    char *owned; /* value of an atomic-inc result */
};

static void pending_free(void *p)
{
    struct pending *pe = p;
    free(pe->owned);
    free(pe);
}

static struct pending *pending_slot(struct smap *pending, const char *key)
{
    struct pending *pe = smap_get(pending, key);
    if (pe == NULL) {
        pe = xcalloc(1, sizeof(*pe));
        smap_put(pending, key, pe);
    }
    free(pe->owned);
    pe->owned = NULL;
    return pe;
}

/* Resolves the operations against the current state into `pending`.
 * Returns FAILED with `msg` filled when nothing may be applied. */
static enum dict_commit_result resolve(struct file_dict *d, const struct dict_tx_op *ops,
                                       size_t count, int64_t expire_secs, struct smap *pending,
                                       char *msg, size_t msg_size)
{
    int64_t now = dict_now();
    int64_t expires_at = 0;
    if (expire_secs > 0)
        expires_at = expire_secs > INT64_MAX - now ? INT64_MAX : now + expire_secs;
    enum dict_commit_result result = DICT_COMMIT_OK;
    for (size_t i = 0; i < count; i++) {
        const struct dict_tx_op *op = &ops[i];
        if (op->kind == DICT_OP_SET) {
            struct pending *pe = pending_slot(pending, op->key);
            pe->deleted = false;
            pe->value = op->value;
            pe->len = op->value_len;
            pe->expires_at = expires_at;
            continue;
        }
        if (op->kind == DICT_OP_UNSET) {
            struct pending *pe = pending_slot(pending, op->key);
            pe->deleted = true;
            continue;
        }
        const char *value = NULL;
        size_t len = 0;
        int64_t keep_expiry = 0;
        struct pending *prior = smap_get(pending, op->key);
        if (prior != NULL) {
            if (!prior->deleted) {
                value = prior->value;
                len = prior->len;
                keep_expiry = prior->expires_at;
            }
        } else {
            struct dict_mem_entry *e = smap_get(d->map, op->key);
            if (e != NULL && !dict_mem_expired(e, now)) {
                value = e->value;
                len = e->len;
                keep_expiry = e->expires_at;
            }
        }
        if (value == NULL) {
            result = DICT_COMMIT_NOT_FOUND;
            continue;
        }
        int64_t v;
        if (!dict_parse_counter(value, len, &v)) {
            snprintf(msg, msg_size, "atomic-inc: value of %.80s is not an integer", op->key);
            return DICT_COMMIT_FAILED;
        }
        int64_t sum;
        if (__builtin_add_overflow(v, op->delta, &sum)) {
            snprintf(msg, msg_size, "atomic-inc: %.80s would overflow a 64-bit integer", op->key);
            return DICT_COMMIT_FAILED;
        }
        char text[32];
        int n = snprintf(text, sizeof(text), "%" PRId64, sum);
        struct pending *pe = pending_slot(pending, op->key);
        pe->deleted = false;
        pe->owned = xstrndup(text, (size_t)n);
        pe->value = pe->owned;
        pe->len = (size_t)n;
        pe->expires_at = keep_expiry;
    }
    return result;
}

static void file_commit(struct dict *dict, const struct dict_tx_op *ops, size_t count,
                        int64_t expire_secs, dict_commit_cb *cb, void *ctx)
{
    struct file_dict *d = dict->driver_data;
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!lock_take(d, LOCK_EX, &err)) {
        cb(DICT_COMMIT_FAILED, err.message, ctx);
        return;
    }
    if (!refresh(d, true, &err)) {
        lock_release(d);
        cb(DICT_COMMIT_FAILED, err.message, ctx);
        return;
    }
    char msg[160];
    struct smap *pending = smap_new();
    enum dict_commit_result result = resolve(d, ops, count, expire_secs, pending, msg, sizeof(msg));
    if (result == DICT_COMMIT_FAILED) {
        smap_free(pending, pending_free);
        lock_release(d);
        cb(DICT_COMMIT_FAILED, msg, ctx);
        return;
    }
    struct buf rec = {0};
    uint32_t n = 0;
    payload_begin(&rec, REC_TX);
    const char *key = NULL;
    char *from = xstrdup("");
    bool strict = false;
    for (;;) {
        struct pending *pe = smap_seek(pending, from, strict, &key);
        if (pe == NULL)
            break;
        if (pe->deleted)
            payload_del(&rec, &n, key);
        else
            payload_put(&rec, &n, key, pe->value, pe->len, pe->expires_at);
        free(from);
        from = xstrdup(key);
        strict = true;
    }
    free(from);
    smap_free(pending, pending_free);

    const char *error = NULL;
    if (n > 0) {
        if (!record_finish(&rec, n)) {
            snprintf(msg, sizeof(msg), "transaction too large for one record (%zu bytes, limit %u)",
                     rec.len, RECORD_MAX);
            result = DICT_COMMIT_FAILED;
            error = msg;
        } else {
            enum append_result ar = append_record(d, &rec, &err);
            if (ar == APPEND_FAILED) {
                result = DICT_COMMIT_FAILED;
                error = err.message;
            } else if (ar == APPEND_UNCERTAIN) {
                result = DICT_COMMIT_WRITE_UNCERTAIN;
                error = err.message;
            }
            if (ar != APPEND_FAILED)
                maybe_compact(d);
        }
    }
    buf_free(&rec);
    lock_release(d);
    cb(result, error, ctx);
}

/* ---------- expiry ---------- */

static void file_expire_scan(struct dict *dict, dict_expire_cb *cb, void *ctx)
{
    struct file_dict *d = dict->driver_data;
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!lock_take(d, LOCK_EX, &err)) {
        cb(false, err.message, ctx);
        return;
    }
    if (!refresh(d, true, &err)) {
        lock_release(d);
        cb(false, err.message, ctx);
        return;
    }
    int64_t now = dict_now();
    struct buf rec = {0};
    uint32_t n = 0;
    size_t removed = 0;
    bool ok = true;
    payload_begin(&rec, REC_TX);
    const char *key = NULL;
    char *from = xstrdup("");
    bool strict = false;
    for (;;) {
        struct dict_mem_entry *e = smap_seek(d->map, from, strict, &key);
        char *k = e != NULL ? xstrdup(key) : NULL;
        if (e != NULL && dict_mem_expired(e, now))
            payload_del(&rec, &n, k);
        /* Removals need no atomicity: log them in bounded records. */
        if (n > 0 && (e == NULL || rec.len >= SNAPSHOT_CHUNK)) {
            record_finish(&rec, n);
            if (append_record(d, &rec, &err) == APPEND_FAILED) {
                ok = false;
                free(k);
                break;
            }
            removed += n;
            payload_begin(&rec, REC_TX);
            n = 0;
        }
        free(from);
        from = k;
        strict = true;
        if (e == NULL)
            break;
    }
    free(from);
    buf_free(&rec);
    if (removed > 0) {
        log_debug(COMPONENT, "expired keys removed", "dict=%s count=%zu", d->name, removed);
        maybe_compact(d);
    }
    lock_release(d);
    cb(ok, ok ? NULL : err.message, ctx);
}

const struct dict_driver_ops dict_driver_file = {
    .name = "file",
    .multi_value = false,
    .config_read = file_config_read,
    .config_free = file_config_free,
    .open = file_open,
    .close = file_close,
    .lookup = file_lookup,
    .iterate_init = file_iterate_init,
    .iterate_next = file_iterate_next,
    .iterate_deinit = file_iterate_deinit,
    .commit = file_commit,
    .expire_scan = file_expire_scan,
};
