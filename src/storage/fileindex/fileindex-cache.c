/* fileindex cache file: petrel.index.cache.
 *
 * Per-message cached fields (envelope, bodystructure, ...) for one
 * generation of the cache. The index header's cache_reset_id names the
 * generation that is valid; a cache file of any other generation reads as
 * absent. All integers are little-endian.
 *
 *   header (32 bytes)
 *     0   magic "PTRLCCH\0"
 *     8   u32 version          1
 *     12  u32 header_size      32
 *     16  u64 generation       the cache_reset_id this file belongs to
 *     24  u32 reserved (0)
 *     28  u32 header_crc       CRC-32C of bytes 0..27
 *   records, appended back to back
 *     0   u32 length           whole record (24 + field_len + data_len)
 *     4   u32 crc              CRC-32C of bytes 8 .. length-1
 *     8   u32 offset           the record's own position in the file
 *     12  u32 uid
 *     16  u16 field_len        1..64, [A-Za-z0-9._-]
 *     18  u16 reserved (0)
 *     20  u32 data_len         <= 1 MiB
 *     24  field name, then data
 *
 * Appends are not fsynced (a lost or torn record only means "not cached");
 * a purged file is fsynced before the index moves to it.
 *
 * A later record for the same (uid, field) replaces an earlier one. The
 * file never grows past 4 GiB (offsets are 32-bit): at that ceiling caching
 * stops until a purge.
 *
 * Appends happen under the folder lock; readers scan without it and stop at
 * an incomplete or unverifiable record ("not yet"). Under the lock the rest
 * of the file is searched for a valid record at its own offset: found, the
 * cache is unreadable; not found, the torn tail is cut.
 *
 * Purge: under the lock, copy the latest record of every (live uid, field)
 * into a new file of generation max(cache_reset_id, old generation) + 1
 * (temporary file, fsync, rename), then commit one index transaction moving
 * cache_reset_id to it. Interrupted in between, the index still names the
 * old generation, the file has the new one: the cache reads as absent and
 * the next add starts it again, empty, for the index's generation.
 *
 * An unreadable cache (bad header, a record that fails its checksum when
 * read, corruption in the middle) is dropped: a new empty file with the
 * next generation and an index write moving cache_reset_id to it. */
#include "storage/fileindex/fileindex-private.h"

#include "core/error.h"
#include "core/log.h"
#include "core/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t fileindex_cache_ceiling = FI_CACHE_CEILING;

#define CACHE_REC_HDR 24u
#define SCAN_CHUNK (1024u * 1024u)
#define CACHE_WINDOW 16384u
#define MAX_CACHE_REC (CACHE_REC_HDR + FI_MAX_FIELD + FI_MAX_CACHE_DATA)

enum cache_open { CACHE_ABSENT, CACHE_OK, CACHE_BAD };

void fi_cache_init(struct fi_cache *c)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

static void cache_close(struct fi_cache *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    if (c->slots != NULL)
        memset(c->slots, 0, c->slot_count * sizeof(*c->slots));
    c->used = 0;
    buf_free(&c->window);
    c->window_off = 0;
    c->generation = 0;
    c->scanned = 0;
    c->header_bad = false;
    c->checked = false;
}

void fi_cache_free(struct fi_cache *c)
{
    cache_close(c);
    free(c->slots);
    for (size_t i = 0; i < c->field_count; i++)
        free(c->fields[i]);
    buf_free(&c->data);
    buf_free(&c->window);
    buf_free(&c->queued);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

/* ---------- field names and the (uid, field) map ---------- */

static bool valid_field(const char *field, size_t *len_out)
{
    if (field == NULL)
        return false;
    size_t len = strnlen(field, FI_MAX_FIELD + 1);
    if (len == 0 || len > FI_MAX_FIELD)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = field[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return false;
    }
    *len_out = len;
    return true;
}

/* 1-based id of a field name; 0 when unknown and not `create`d (or the
 * table is full). */
static uint16_t field_id(struct fi_cache *c, const char *name, size_t len, bool create)
{
    for (size_t i = 0; i < c->field_count; i++) {
        if (strlen(c->fields[i]) == len && memcmp(c->fields[i], name, len) == 0)
            return (uint16_t)(i + 1);
    }
    if (!create || c->field_count == FI_MAX_FIELDS)
        return 0;
    c->fields[c->field_count++] = xstrndup(name, len);
    return (uint16_t)c->field_count;
}

static size_t slot_of(const struct fi_cache *c, uint32_t uid, uint16_t field)
{
    uint64_t h = ((uint64_t)uid << 16 | field) * 0x9e3779b97f4a7c15ULL;
    return (size_t)(h >> 20) & (c->slot_count - 1);
}

static void map_put(struct fi_cache *c, uint32_t uid, uint16_t field, uint32_t off);

static void map_grow(struct fi_cache *c)
{
    struct fi_cache_entry *old = c->slots;
    size_t old_count = c->slot_count;
    c->slot_count = old_count == 0 ? 256 : old_count * 2;
    c->slots = xcalloc(c->slot_count, sizeof(*c->slots));
    c->used = 0;
    for (size_t i = 0; i < old_count; i++) {
        if (old[i].field != 0)
            map_put(c, old[i].uid, old[i].field, old[i].off);
    }
    free(old);
}

static void map_put(struct fi_cache *c, uint32_t uid, uint16_t field, uint32_t off)
{
    if ((c->used + 1) * 4 > c->slot_count * 3)
        map_grow(c);
    size_t i = slot_of(c, uid, field);
    while (c->slots[i].field != 0) {
        if (c->slots[i].uid == uid && c->slots[i].field == field) {
            c->slots[i].off = off;
            return;
        }
        i = (i + 1) & (c->slot_count - 1);
    }
    c->slots[i].uid = uid;
    c->slots[i].field = field;
    c->slots[i].off = off;
    c->used++;
}

static const struct fi_cache_entry *map_get(const struct fi_cache *c, uint32_t uid, uint16_t field)
{
    if (c->slot_count == 0)
        return NULL;
    size_t i = slot_of(c, uid, field);
    while (c->slots[i].field != 0) {
        if (c->slots[i].uid == uid && c->slots[i].field == field)
            return &c->slots[i];
        i = (i + 1) & (c->slot_count - 1);
    }
    return NULL;
}

/* ---------- the file ---------- */

/* The cache file as it is at cache_path, open in c->fd; *size_out: its size
 * now. For a reader a descriptor already held is kept while the file still
 * has a name: Petrel replaces the cache only by a rename over it (or
 * removes it with its folder), which leaves the old inode with no link, so
 * one fstat tells both "still current" and how far it grew. A writer
 * (`writing`, under the exclusive lock) also compares the inode at the
 * path, so that it never appends to a replaced file some other program
 * kept a link to. */
static enum cache_open cache_open_file(struct fileindex *fi, bool writing, uint64_t *size_out)
{
    struct fi_cache *c = &fi->cache;
    struct stat st;
    *size_out = 0;
    if (c->fd >= 0 && fstat(c->fd, &st) == 0 && st.st_nlink > 0) {
        struct stat at;
        if (!writing || (fstatat(fi->dir_fd, FI_CACHE_FILE, &at, 0) == 0 &&
                         at.st_dev == st.st_dev && at.st_ino == st.st_ino)) {
            *size_out = (uint64_t)st.st_size;
            return c->header_bad ? CACHE_BAD : CACHE_OK;
        }
    }
    cache_close(c);
    int fd = openat(fi->dir_fd, FI_CACHE_FILE, O_RDWR | O_CLOEXEC);
    if (fd < 0 && (errno == EACCES || errno == EROFS))
        fd = openat(fi->dir_fd, FI_CACHE_FILE, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return CACHE_ABSENT;
    }
    c->fd = fd;
    fi_file_id_from_stat(&c->id, &st);
    *size_out = (uint64_t)st.st_size;
    uint8_t h[FI_CACHE_HDR_SIZE];
    if (fi_pread_all(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
        memcmp(h, FI_CACHE_MAGIC, 8) != 0 || fi_crc32c(0, h, 28) != fi_get32(h + 28) ||
        fi_get32(h + 8) != FI_CACHE_VERSION || fi_get32(h + 12) != FI_CACHE_HDR_SIZE) {
        c->header_bad = true;
        return CACHE_BAD;
    }
    c->generation = fi_get64(h + 16);
    c->scanned = FI_CACHE_HDR_SIZE;
    return CACHE_OK;
}

/* A complete record at `pos` whose checksum holds? Fills field/uid. */
static bool record_valid(const uint8_t *p, size_t avail, uint64_t pos, uint32_t *len_out)
{
    if (avail < CACHE_REC_HDR)
        return false;
    uint32_t len = fi_get32(p);
    uint32_t field_len = fi_get16(p + 16);
    uint32_t data_len = fi_get32(p + 20);
    if (field_len == 0 || field_len > FI_MAX_FIELD || data_len > FI_MAX_CACHE_DATA ||
        len != CACHE_REC_HDR + field_len + data_len || len > avail || fi_get32(p + 8) != pos)
        return false;
    if (fi_crc32c(0, p + 8, len - 8) != fi_get32(p + 4))
        return false;
    *len_out = len;
    return true;
}

/* Reads records after c->scanned, up to `size` (the file's size as
 * cache_open_file saw it), into the map. With `locked` bytes after the last
 * valid record are classified: *corrupt when a valid record follows (else
 * they are a torn tail). */
static bool cache_scan(struct fileindex *fi, bool locked, uint64_t size, bool *corrupt)
{
    struct fi_cache *c = &fi->cache;
    *corrupt = false;
    if (size > fileindex_cache_ceiling + MAX_CACHE_REC)
        size = fileindex_cache_ceiling + MAX_CACHE_REC;
    uint8_t *buf = NULL;
    size_t cap = 0;
    while (c->scanned < size) {
        size_t want = (size_t)(size - c->scanned);
        if (want > SCAN_CHUNK + MAX_CACHE_REC)
            want = SCAN_CHUNK + MAX_CACHE_REC;
        if (buf == NULL || want > cap) {
            buf = xrealloc(buf, want);
            cap = want;
        }
        ssize_t got = fi_pread_all(c->fd, buf, want, c->scanned);
        if (got <= 0)
            break;
        size_t at = 0;
        uint32_t len;
        while (at < SCAN_CHUNK && record_valid(buf + at, (size_t)got - at, c->scanned + at, &len)) {
            size_t fl = fi_get16(buf + at + 16);
            uint16_t id = field_id(c, (const char *)buf + at + CACHE_REC_HDR, fl, true);
            if (id != 0)
                map_put(c, fi_get32(buf + at + 12), id, (uint32_t)(c->scanned + at));
            at += len;
        }
        uint64_t window = c->scanned;
        c->scanned += at;
        if (at >= SCAN_CHUNK)
            continue;
        /* Stopped at an incomplete or unverifiable record (a record fits in
         * the window, so this is not a window edge). */
        if (locked && c->scanned < size) {
            for (size_t i = at + 1; i + CACHE_REC_HDR <= (size_t)got; i++) {
                if (record_valid(buf + i, (size_t)got - i, window + i, &len)) {
                    *corrupt = true;
                    break;
                }
            }
        }
        break;
    }
    free(buf);
    return true;
}

/* The cache file's header for `generation`. */
static void cache_header(uint8_t h[FI_CACHE_HDR_SIZE], uint64_t generation)
{
    memset(h, 0, FI_CACHE_HDR_SIZE);
    memcpy(h, FI_CACHE_MAGIC, 8);
    fi_put32(h + 8, FI_CACHE_VERSION);
    fi_put32(h + 12, FI_CACHE_HDR_SIZE);
    fi_put64(h + 16, generation);
    fi_put32(h + 28, fi_crc32c(0, h, 28));
}

static bool write_empty_cache(struct fileindex *fi, uint64_t generation, struct petrel_error *err)
{
    uint8_t h[FI_CACHE_HDR_SIZE];
    cache_header(h, generation);
    cache_close(&fi->cache);
    return fi_replace_file(fi, fi->cache_path, h, sizeof(h), NULL, err);
}

/* A read that finds the cache unreadable does not wait long for the lock:
 * when it is busy the cache just reads as absent and a later call drops it. */
#define DROP_LOCK_WAIT 1.0

/* Drops an unreadable cache: a new, empty generation, and the index moved
 * to it. Takes the lock (re-entrant when the caller holds it). */
static bool cache_drop(struct fileindex *fi, const char *why, double wait, struct petrel_error *err)
{
    struct fi_cache *c = &fi->cache;
    struct fi_file_id bad_id = c->id;
    log_warn(FI_COMPONENT, "dropping unreadable index cache", "dir=%s reason=\"%s\"", fi->dir, why);
    if (fi->lock_depth > 0 && fi->lock_mode != FI_LOCK_EXCLUSIVE) {
        cache_close(c);
        return petrel_error_set(err, PETREL_ERR_CONFLICT, "cache unreadable");
    }
    if (!fi_lock_timed(fi, FI_LOCK_EXCLUSIVE, FI_SITE_WRITE, wait, NULL, err)) {
        cache_close(c);
        return false;
    }
    bool ok = fi_refresh_locked(fi, err);
    struct stat st;
    if (ok && fstatat(fi->dir_fd, FI_CACHE_FILE, &st, 0) == 0 &&
        (st.st_dev != bad_id.dev || st.st_ino != bad_id.ino)) {
        /* someone replaced it meanwhile */
        cache_close(c);
        fi_unlock(fi);
        return true;
    }
    if (ok) {
        uint64_t cur = fi_current_cache_reset_id(fi);
        uint64_t next = (cur > c->generation ? cur : c->generation) + 1;
        ok = write_empty_cache(fi, next, err) && fi_set_cache_reset_id(fi, next, err);
    }
    cache_close(c);
    fi_unlock(fi);
    return ok;
}

/* The whole record at `off` (its length field within bounds), from the
 * window or (`fresh`, or not in it) from a new read starting at `off`;
 * NULL when it cannot be read or claims an impossible length. The window
 * keeps only bytes before c->scanned as read: records there were complete
 * when read, so a record appended meanwhile is never served torn. */
static const uint8_t *cache_window_record(struct fi_cache *c, uint32_t off, bool fresh)
{
    struct buf *w = &c->window;
    if (!fresh && off >= c->window_off && off - c->window_off + CACHE_REC_HDR <= w->len) {
        const uint8_t *p = (const uint8_t *)w->data + (off - c->window_off);
        uint32_t total = fi_get32(p);
        if (total >= CACHE_REC_HDR && total <= MAX_CACHE_REC &&
            off - c->window_off + total <= w->len)
            return p;
    }
    buf_reset(w);
    buf_reserve(w, CACHE_WINDOW);
    ssize_t got = fi_pread_all(c->fd, w->data, CACHE_WINDOW, off);
    if (got < (ssize_t)CACHE_REC_HDR)
        return NULL;
    w->len = (size_t)got;
    if (c->scanned > off && w->len > c->scanned - off)
        w->len = (size_t)(c->scanned - off);
    c->window_off = off;
    uint32_t total = fi_get32((const uint8_t *)w->data);
    if (total < CACHE_REC_HDR || total > MAX_CACHE_REC)
        return NULL;
    if (total > w->len) {
        buf_reserve(w, total - w->len);
        ssize_t rest = fi_pread_all(c->fd, w->data + w->len, total - w->len, off + w->len);
        if (rest < 0 || w->len + (size_t)rest < total) {
            buf_reset(w);
            return NULL;
        }
        w->len += (size_t)rest;
    }
    return (const uint8_t *)w->data;
}

/* The value of record `rec` (field name `flen` bytes), copied out so that
 * it is NUL-terminated and outlives the window or the queue. */
static const void *record_value(struct fi_cache *c, const uint8_t *rec, size_t flen, size_t *len)
{
    size_t data_len = fi_get32(rec + 20);
    buf_reserve(&c->data, data_len);
    memcpy(c->data.data, rec + CACHE_REC_HDR + flen, data_len);
    c->data.len = data_len;
    c->data.data[data_len] = '\0';
    if (len != NULL)
        *len = data_len;
    return c->data.data;
}

/* The latest queued record of (uid, field), or NULL. */
static const uint8_t *queued_find(const struct fi_cache *c, uint32_t uid, const char *field,
                                  size_t flen)
{
    const uint8_t *found = NULL;
    const uint8_t *q = (const uint8_t *)c->queued.data;
    for (size_t at = 0; at < c->queued.len; at += fi_get32(q + at)) {
        const uint8_t *rec = q + at;
        if (fi_get32(rec + 12) == uid && fi_get16(rec + 16) == flen &&
            memcmp(rec + CACHE_REC_HDR, field, flen) == 0)
            found = rec;
    }
    return found;
}

const void *fileindex_cache_get(struct fileindex *fi, uint32_t uid, const char *field, size_t *len)
{
    struct fi_cache *c = &fi->cache;
    size_t flen;
    if (len != NULL)
        *len = 0;
    buf_reset(&c->data);
    if (!valid_field(field, &flen))
        return NULL;
    const uint8_t *queued = c->queued_reset_id == fi->st.view.hdr.cache_reset_id
                                ? queued_find(c, uid, field, flen)
                                : NULL;
    if (queued != NULL)
        return record_value(c, queued, flen, len);
    bool locked = fi->lock_mode == FI_LOCK_EXCLUSIVE;
    if (locked || !c->checked || c->checked_at != fi->refreshes || c->fd < 0) {
        /* Once per refresh (a command's sync): has the file been replaced,
         * and what did other processes append? */
        uint64_t size;
        enum cache_open r = cache_open_file(fi, locked, &size);
        if (r == CACHE_ABSENT)
            return NULL;
        if (r == CACHE_BAD) {
            cache_drop(fi, "bad header", DROP_LOCK_WAIT, NULL);
            return NULL;
        }
        bool corrupt;
        if (!cache_scan(fi, locked, size, &corrupt))
            return NULL;
        if (corrupt) {
            cache_drop(fi, "damaged record", DROP_LOCK_WAIT, NULL);
            return NULL;
        }
        c->checked = true;
        c->checked_at = fi->refreshes;
        buf_free(&c->window); /* read again from the file once per refresh */
    }
    if (c->generation != fi->st.view.hdr.cache_reset_id)
        return NULL;
    uint16_t id = field_id(c, field, flen, false);
    const struct fi_cache_entry *e = id != 0 ? map_get(c, uid, id) : NULL;
    if (e == NULL)
        return NULL;
    uint32_t off = e->off;
    const uint8_t *rec = NULL;
    for (int attempt = 0; attempt < 2 && rec == NULL; attempt++) {
        rec = cache_window_record(c, off, attempt > 0);
        if (rec == NULL) {
            cache_drop(fi, "record unreadable", DROP_LOCK_WAIT, NULL);
            return NULL;
        }
        uint32_t rlen;
        if (!record_valid(rec, fi_get32(rec), off, &rlen) || fi_get32(rec + 12) != uid ||
            fi_get16(rec + 16) != flen || memcmp(rec + CACHE_REC_HDR, field, flen) != 0)
            rec = NULL;
    }
    if (rec == NULL) {
        cache_drop(fi, "record fails its checksum", DROP_LOCK_WAIT, NULL);
        return NULL;
    }
    return record_value(c, rec, flen, len);
}

/* Under the exclusive lock: a cache file of the index's generation, with
 * its tail checked, ready for appending. */
static bool cache_ready_locked(struct fileindex *fi, struct petrel_error *err)
{
    struct fi_cache *c = &fi->cache;
    uint64_t want = fi_current_cache_reset_id(fi);
    for (int attempt = 0; attempt < 3; attempt++) {
        uint64_t size;
        enum cache_open r = cache_open_file(fi, true, &size);
        if (r == CACHE_BAD) {
            if (!cache_drop(fi, "bad header", fileindex_lock_timeout, err))
                return false;
            want = fi_current_cache_reset_id(fi);
            continue;
        }
        if (r == CACHE_ABSENT || c->generation != want) {
            if (!write_empty_cache(fi, want, err))
                return false;
            continue;
        }
        bool corrupt;
        if (!cache_scan(fi, true, size, &corrupt))
            return fi_io_error(err, "cannot read", fi->cache_path);
        if (corrupt) {
            if (!cache_drop(fi, "damaged record", fileindex_lock_timeout, err))
                return false;
            want = fi_current_cache_reset_id(fi);
            continue;
        }
        /* Under the exclusive lock the size cannot have moved since. */
        if (size > c->scanned && ftruncate(c->fd, (off_t)c->scanned) != 0)
            return fi_io_error(err, "cannot cut", fi->cache_path);
        return true;
    }
    return petrel_error_set(err, PETREL_ERR_IO, "cache keeps changing: %s", fi->cache_path);
}

static bool valid_value(uint32_t uid, const char *field, const void *data, size_t len, size_t *flen,
                        struct petrel_error *err)
{
    if (!valid_field(field, flen))
        return petrel_error_set(err, PETREL_ERR_INVALID, "bad cache field name");
    if (len > FI_MAX_CACHE_DATA || (data == NULL && len > 0))
        return petrel_error_set(err, PETREL_ERR_INVALID, "cache value too large (%zu bytes)", len);
    if (uid == 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "cache entry for uid 0");
    return true;
}

/* A flush happens on its own past either bound, so one FETCH over a whole
 * folder neither holds the lock long nor keeps much in memory. */
#define QUEUE_MAX_RECORDS 256u
#define QUEUE_MAX_BYTES (1024u * 1024u)

static void queue_clear(struct fi_cache *c)
{
    buf_reset(&c->queued);
    c->queued_count = 0;
}

/* A record for (uid, field, data) at the end of the queue; its offset and
 * checksum are filled in when it is written. */
static void queue_record(struct fi_cache *c, uint32_t uid, const char *field, size_t flen,
                         const void *data, size_t len)
{
    size_t total = CACHE_REC_HDR + flen + len;
    uint8_t hdr[CACHE_REC_HDR];
    memset(hdr, 0, sizeof(hdr));
    fi_put32(hdr, (uint32_t)total);
    fi_put32(hdr + 12, uid);
    fi_put16(hdr + 16, (uint16_t)flen);
    fi_put32(hdr + 20, (uint32_t)len);
    buf_reserve(&c->queued, total);
    buf_append(&c->queued, hdr, sizeof(hdr));
    buf_append(&c->queued, field, flen);
    if (len > 0)
        buf_append(&c->queued, data, len);
    c->queued_count++;
}

/* Appends the queued records under the exclusive lock, in one write, and
 * empties the queue. `same_identity`: drop them instead when the index's
 * cache_reset_id is no longer the one they were queued for. */
static bool write_queue(struct fileindex *fi, bool same_identity, struct petrel_error *err)
{
    struct fi_cache *c = &fi->cache;
    if (!fi_lock(fi, FI_LOCK_EXCLUSIVE, FI_SITE_WRITE, NULL, err)) {
        queue_clear(c);
        return false;
    }
    bool ok = fi_refresh_locked(fi, err) && cache_ready_locked(fi, err);
    if (ok && same_identity && fi->st.view.hdr.cache_reset_id != c->queued_reset_id) {
        queue_clear(c); /* the index was replaced meanwhile */
        fi_unlock(fi);
        return true;
    }
    if (ok && c->scanned + c->queued.len > fileindex_cache_ceiling) {
        if (!c->ceiling_logged)
            log_warn(FI_COMPONENT, "index cache reached its size ceiling; purge it",
                     "dir=%s size=%llu", fi->dir, (unsigned long long)c->scanned);
        c->ceiling_logged = true;
        queue_clear(c);
        fi_unlock(fi);
        return true; /* not cached: the cache is an optimisation */
    }
    uint8_t *q = (uint8_t *)c->queued.data;
    size_t kept = 0;
    for (size_t at = 0; ok && at < c->queued.len;) {
        uint32_t total = fi_get32(q + at);
        size_t flen = fi_get16(q + at + 16);
        /* a name past the handle's field table is not cached */
        if (field_id(c, (const char *)q + at + CACHE_REC_HDR, flen, true) != 0) {
            if (kept != at)
                memmove(q + kept, q + at, total);
            fi_put32(q + kept + 8, (uint32_t)(c->scanned + kept));
            fi_put32(q + kept + 4, fi_crc32c(0, q + kept + 8, total - 8));
            kept += total;
        }
        at += total;
    }
    if (ok && kept > 0) {
        if (!fs_pwrite_all(c->fd, q, kept, c->scanned)) {
            ok = fi_io_error(err, "cannot append to", fi->cache_path);
            if (ftruncate(c->fd, (off_t)c->scanned) != 0) {
                /* the next writer cuts it */
            }
        } else {
            for (size_t at = 0; at < kept; at += fi_get32(q + at)) {
                size_t flen = fi_get16(q + at + 16);
                uint16_t id = field_id(c, (const char *)q + at + CACHE_REC_HDR, flen, false);
                map_put(c, fi_get32(q + at + 12), id, (uint32_t)(c->scanned + at));
            }
            c->scanned += kept;
        }
    }
    queue_clear(c);
    fi_unlock(fi);
    return ok;
}

bool fileindex_cache_add(struct fileindex *fi, uint32_t uid, const char *field, const void *data,
                         size_t len, struct petrel_error *err)
{
    size_t flen = 0;
    if (!valid_value(uid, field, data, len, &flen, err))
        return false;
    /* Queued values go first, so that the later call's value is the one kept. */
    if (fi->cache.queued_count > 0)
        (void)fileindex_cache_flush(fi, NULL);
    queue_record(&fi->cache, uid, field, flen, data, len);
    return write_queue(fi, false, err);
}

bool fileindex_cache_queue(struct fileindex *fi, uint32_t uid, const char *field, const void *data,
                           size_t len, struct petrel_error *err)
{
    size_t flen = 0;
    if (!valid_value(uid, field, data, len, &flen, err))
        return false;
    struct fi_cache *c = &fi->cache;
    uint64_t reset_id = fi->st.view.hdr.cache_reset_id;
    if (c->queued_count > 0 && c->queued_reset_id != reset_id)
        queue_clear(c); /* made for another index identity: its UIDs may name other messages */
    c->queued_reset_id = reset_id;
    queue_record(c, uid, field, flen, data, len);
    if (c->queued_count >= QUEUE_MAX_RECORDS || c->queued.len >= QUEUE_MAX_BYTES)
        return fileindex_cache_flush(fi, err);
    return true;
}

bool fileindex_cache_flush(struct fileindex *fi, struct petrel_error *err)
{
    if (fi->cache.queued_count == 0)
        return true;
    return write_queue(fi, true, err);
}

static int cmp_off(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a;
    uint32_t y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

bool fileindex_cache_purge(struct fileindex *fi, struct fileindex_purge_stats *stats,
                           struct petrel_error *err)
{
    struct fileindex_purge_stats local;
    if (stats == NULL)
        stats = &local;
    memset(stats, 0, sizeof(*stats));
    if (fi->txn != NULL)
        return petrel_error_set(err, PETREL_ERR_CONFLICT, "a transaction is open on %s", fi->dir);
    if (!fi_lock(fi, FI_LOCK_EXCLUSIVE, FI_SITE_WRITE, NULL, err))
        return false;
    if (!fi_refresh_locked(fi, err)) {
        fi_unlock(fi);
        return false;
    }
    struct fi_cache *c = &fi->cache;
    uint64_t cur = fi->st.view.hdr.cache_reset_id;
    uint64_t old_size = 0;
    uint32_t *offs = NULL;
    size_t n = 0;
    enum cache_open r = cache_open_file(fi, true, &old_size);
    bool corrupt = false;
    if (r == CACHE_OK && c->generation == cur && cache_scan(fi, true, old_size, &corrupt) &&
        !corrupt) {
        offs = xmalloc((c->used + 1) * sizeof(*offs));
        for (size_t i = 0; i < c->slot_count; i++) {
            const struct fi_cache_entry *e = &c->slots[i];
            if (e->field != 0 && fileindex_lookup_uid(fi, e->uid) != NULL)
                offs[n++] = e->off;
        }
        qsort(offs, n, sizeof(*offs), cmp_off);
    }
    uint64_t gen = (cur > c->generation ? cur : c->generation) + 1;
    char *tmp = NULL;
    int fd = fi_tmp_create(fi, fi->cache_path, &tmp, err);
    bool ok = fd >= 0;
    struct buf out = {0};
    uint64_t written = 0;
    if (ok) {
        uint8_t h[FI_CACHE_HDR_SIZE];
        cache_header(h, gen);
        buf_append(&out, h, sizeof(h));
    }
    uint8_t *rec = n > 0 ? xmalloc(MAX_CACHE_REC) : NULL;
    for (size_t i = 0; ok && i < n; i++) {
        uint8_t h[CACHE_REC_HDR];
        if (fi_pread_all(c->fd, h, sizeof(h), offs[i]) != (ssize_t)sizeof(h))
            continue;
        uint32_t total = fi_get32(h);
        uint32_t rlen;
        if (total < CACHE_REC_HDR || total > MAX_CACHE_REC ||
            fi_pread_all(c->fd, rec, total, offs[i]) != (ssize_t)total ||
            !record_valid(rec, total, offs[i], &rlen))
            continue; /* unreadable records are not carried */
        uint64_t at = written + out.len;
        fi_put32(rec + 8, (uint32_t)at);
        fi_put32(rec + 4, fi_crc32c(0, rec + 8, total - 8));
        buf_append(&out, rec, total);
        stats->carried++;
        if (out.len >= SCAN_CHUNK) {
            if (!fs_pwrite_all(fd, out.data, out.len, written))
                ok = fi_io_error(err, "cannot write", tmp);
            written += out.len;
            buf_reset(&out);
        }
    }
    free(rec);
    free(offs);
    if (ok && out.len > 0) {
        if (!fs_pwrite_all(fd, out.data, out.len, written))
            ok = fi_io_error(err, "cannot write", tmp);
        written += out.len;
    }
    buf_free(&out);
    if (fd >= 0 && !ok) {
        close(fd);
        unlinkat(fi->dir_fd, fi_name(fi, tmp), 0);
        free(tmp);
    } else if (ok) {
        ok = fi_tmp_install(fi, fd, tmp, fi->cache_path, err);
        if (ok)
            close(fd);
    }
    cache_close(c);
    if (ok) {
        stats->reclaimed_bytes = old_size > written ? old_size - written : 0;
        if (fileindex_fault != FI_FAULT_PURGE_SKIP_INDEX)
            ok = fi_set_cache_reset_id(fi, gen, err);
    }
    fi_unlock(fi);
    return ok;
}
