/* fileindex_read_usage(): a folder's aggregate from the base header and the
 * log's last transaction (its TOTALS trailer, fileindex-log.c), without
 * loading records and without reading the rest of the log (fileindex.h);
 * from the whole log's USAGE/TOTALS operations when the tail does not
 * verify (an older writer's log, a torn or unfinished tail). Used for
 * a user's quota usage, a sum over folders that must not cost a scan of
 * every message (document 3: quota/show for 100 folders x 10,000 messages
 * in milliseconds).
 *
 * Without the lock a writer may be between its two renames of a fold (new
 * base, old log): the log's lineage then names neither this base nor its
 * parent, and the read is retried; a log that names the base's parent is
 * the folded one (already in the base) and adds nothing. A torn or
 * in-progress tail ends the scan, as for any unlocked reader. */
#include "storage/fileindex/fileindex-private.h"

#include "core/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_LOG_READ (64u * 1024u * 1024u)
#define RETRIES 3

enum usage_read { USAGE_OK, USAGE_RETRY, USAGE_FALLBACK, USAGE_ERROR };

/* "<dir>/<name>" into path[FI_MAX_DIR + 32] (dir at most FI_MAX_DIR bytes,
 * names the index's own): a quota check makes several per folder, where
 * snprintf cost as much as the rest of the read. */
static void join(char *path, const char *dir, const char *name)
{
    size_t d = strnlen(dir, FI_MAX_DIR);
    size_t n = strnlen(name, 30);
    memcpy(path, dir, d);
    path[d] = '/';
    memcpy(path + d + 1, name, n);
    path[d + 1 + n] = '\0';
}

/* What a file was when it was read: a cached answer holds while both index
 * files still are exactly this (a fold replaces them, a commit appends to
 * the log, a cut shortens it: each changes one of these). */
struct file_stamp {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    struct timespec ctime;
};

static void stamp_of(const struct stat *st, struct file_stamp *out)
{
    memset(out, 0, sizeof(*out));
    out->dev = st->st_dev;
    out->ino = st->st_ino;
    out->size = st->st_size;
    out->mtime = st->st_mtim;
    out->ctime = st->st_ctim;
}

static bool stamp_equal(const struct file_stamp *a, const struct file_stamp *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* Length of the operation at p (`left` bytes), 0 when it does not parse. */
static size_t op_length(const uint8_t *p, size_t left)
{
    switch (p[0]) {
    case FI_OP_APPEND:
        return left >= 1 + FI_OP_APPEND_FIXED ? 1 + FI_OP_APPEND_FIXED + fi_get16(p + 45) : 0;
    case FI_OP_FLAGS:
        return 1 + FI_OP_FLAGS_SIZE;
    case FI_OP_NAME:
        return left >= 7 ? 7 + (size_t)fi_get16(p + 5) : 0;
    case FI_OP_EXPUNGE:
        return 1 + 4;
    case FI_OP_HEADER:
        return 1 + FI_OP_HEADER_SIZE;
    case FI_OP_USAGE:
        return 1 + FI_OP_USAGE_SIZE;
    case FI_OP_TOTALS:
        return 1 + FI_OP_TOTALS_SIZE;
    default:
        return 0;
    }
}

/* Applies the USAGE and TOTALS operations of the valid transactions in data[0..len)
 * (log bytes from file offset `file_off`, a transaction's start). False when a
 * transaction changes records without one (an older writer) and no later
 * one carries the aggregate: it cannot be known without the records. */
static bool scan_log(const uint8_t *data, size_t len, uint64_t file_off, struct fileindex_usage *u,
                     bool *have, size_t *end)
{
    size_t pos = 0;
    bool unknown = false;
    *end = 0;
    while (len - pos >= FI_TXN_HDR_SIZE) {
        const uint8_t *t = data + pos;
        uint32_t tlen = fi_get32(t);
        if (tlen < FI_TXN_HDR_SIZE + 1 || tlen > FI_MAX_TXN || tlen > len - pos ||
            fi_get64(t + 8) != file_off + pos || fi_crc32c(0, t + 8, tlen - 8) != fi_get32(t + 4))
            break; /* the end, a torn tail, or a write in progress */
        bool changes = false;
        bool got = false;
        size_t off = FI_TXN_HDR_SIZE;
        while (off < tlen) {
            size_t n = op_length(t + off, tlen - off);
            if (n == 0 || n > tlen - off)
                return false;
            uint8_t op = t[off];
            if (op == FI_OP_APPEND || op == FI_OP_EXPUNGE) {
                changes = true;
            } else if (op == FI_OP_USAGE || op == FI_OP_TOTALS) {
                u->messages = fi_get32(t + off + 1);
                u->bytes = fi_get64(t + off + 5);
                got = true;
                changes = false;
                *have = true;
            }
            off += n;
        }
        if (got)
            unknown = false; /* an absolute value: what came before no longer matters */
        if (changes)
            unknown = true;
        pos += tlen;
        *end = pos;
    }
    return !unknown;
}

/* Bytes read from the end of the log at once: the trailer and, for any
 * transaction short of this, its header too (one read). */
#define TAIL_READ (4u * 1024u)

/* The aggregate from the log's last transaction, when the log ends with a
 * complete one written by this version (fileindex-log.c, TOTALS): its
 * trailer (in `tail`, the file's bytes from `tail_off` to `size`) and its
 * header must agree on its length and offset and the seal must hold.
 * False when they do not (a torn or unfinished tail, an older writer's
 * transaction, damage): the caller reads the log from the start. */
static bool tail_totals(int fd, const uint8_t *tail, uint64_t tail_off, uint64_t size,
                        struct fileindex_usage *u)
{
    if (size - tail_off < FI_TXN_TRAILER_SIZE || size < FI_LOG_HDR_SIZE + FI_TXN_TRAILER_SIZE)
        return false;
    const uint8_t *p = tail + (size - tail_off - FI_TXN_TRAILER_SIZE);
    if (p[0] != FI_OP_TOTALS || p[1 + FI_OP_TOTALS_SIZE] != FI_OP_HEADER)
        return false;
    uint32_t messages = fi_get32(p + 1);
    uint64_t bytes = fi_get64(p + 5);
    uint32_t len = fi_get32(p + 13);
    if (len < FI_TXN_HDR_SIZE + FI_TXN_TRAILER_SIZE || len > FI_MAX_TXN ||
        len > size - FI_LOG_HDR_SIZE)
        return false;
    uint64_t start = size - len;
    if (fi_get32(p + 17) != fi_totals_seal(start, len, messages, bytes))
        return false;
    /* A transaction wholly inside the tail already read (a delivery, a
     * flag change) is checked as a full open checks it, checksum too, at
     * no extra read: a write that lost an earlier block but kept its last
     * (no data ordering), a stray block or a hand-made tail is then read
     * from the whole log, not believed until the next write. A longer one
     * keeps the header and seal check only: reading it whole would make
     * the read cost what the transaction weighs (decisions.md). */
    uint8_t hbuf[FI_TXN_HDR_SIZE];
    const uint8_t *h = hbuf;
    bool in_tail = start >= tail_off;
    if (in_tail)
        h = tail + (start - tail_off);
    else if (fi_pread_all(fd, hbuf, sizeof(hbuf), start) != (ssize_t)sizeof(hbuf))
        return false;
    if (fi_get32(h) != len || fi_get64(h + 8) != start)
        return false;
    if (in_tail && fi_crc32c(0, h + 8, len - 8) != fi_get32(h + 4))
        return false;
    u->messages = messages;
    u->bytes = bytes;
    return true;
}

/* From the log's tail alone, without the base (open on `lfd`, `st` its
 * fstat): the last transaction's TOTALS is the folder's aggregate whatever
 * base the log extends (a fold carries the aggregate over unchanged, so
 * even a log caught between a writer's two renames answers right). The
 * tail's bytes are left in *data / *tail_off for the caller's fallback. */
static bool read_tail(int lfd, const struct stat *st, uint8_t **data, uint64_t *tail_off,
                      struct fileindex_usage *out)
{
    uint64_t size = (uint64_t)st->st_size;
    if (size < FI_LOG_HDR_SIZE)
        return false;
    *tail_off = size > FI_LOG_HDR_SIZE + TAIL_READ ? size - TAIL_READ : 0;
    size_t len = (size_t)(size - *tail_off);
    *data = xmalloc(len);
    if (fi_pread_all(lfd, *data, len, *tail_off) != (ssize_t)len) {
        free(*data); /* cut meanwhile: judged from the start */
        *data = NULL;
        return false;
    }
    return size > FI_LOG_HDR_SIZE && tail_totals(lfd, *data, *tail_off, size, out);
}

/* One read of the aggregate; with `stamps` (two) also what the two files
 * were before they were read (fstat of the descriptors read from, or a
 * stat of the base's path when only the log was read). `how` says how it
 * was read (USAGE_OK only). */
static enum usage_read read_once(const char *dir, struct fileindex_usage *out,
                                 struct file_stamp *stamps, enum fileindex_usage_source *how,
                                 struct petrel_error *err)
{
    enum usage_read r = USAGE_FALLBACK;
    int bfd = -1;
    uint8_t *data = NULL;
    uint64_t tail_off = 0;
    char path[FI_MAX_DIR + 32];
    struct stat st;
    struct stat bst;
    bool base_stated = false;
    if (stamps != NULL) {
        /* Before the log is read: a fold after this shows as a new log. */
        join(path, dir, FI_BASE_FILE);
        base_stated = stat(path, &bst) == 0;
    }
    join(path, dir, FI_LOG_FILE);
    int lfd = open(path, O_RDONLY | O_CLOEXEC);
    if (lfd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return USAGE_FALLBACK; /* fileindex_open tells what is missing */
        petrel_error_set_errno(err, errno, "cannot open %s: %s", path, strerror(errno));
        return USAGE_ERROR;
    }
    if (fstat(lfd, &st) != 0)
        goto out;
    if (stamps != NULL)
        stamp_of(&st, &stamps[1]);
    struct fileindex_usage u;
    if (read_tail(lfd, &st, &data, &tail_off, &u) && (stamps == NULL || base_stated)) {
        if (stamps != NULL)
            stamp_of(&bst, &stamps[0]);
        *out = u;
        *how = FILEINDEX_USAGE_TAIL;
        r = USAGE_OK;
        goto out;
    }
    /* The base header, then the log from its start. */
    join(path, dir, FI_BASE_FILE);
    bfd = open(path, O_RDONLY | O_CLOEXEC);
    if (bfd < 0)
        goto out;
    uint8_t hdr[FI_BASE_HDR_SIZE];
    struct fi_base_info info;
    struct petrel_error perr;
    struct stat bfst;
    if (stamps != NULL) {
        if (fstat(bfd, &bfst) != 0)
            goto out;
        stamp_of(&bfst, &stamps[0]);
    }
    /* Only the checksummed header is used, so the size check the header
     * parser makes is given the size the header itself implies (no fstat):
     * a base cut short is found by the next full open, not here. */
    if (fi_pread_all(bfd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr) ||
        !fi_base_parse_header(hdr,
                              FI_BASE_HDR_SIZE + (uint64_t)fi_get32(hdr + 88) * FI_BASE_REC_SIZE +
                                  fi_get64(hdr + 96),
                              &info, &perr) ||
        info.version != FI_BASE_VERSION)
        goto out; /* damaged or older: the full open judges */
    u.messages = info.count;
    u.bytes = info.usage_bytes;
    bool have = (info.flags & FI_BASE_FLAG_USAGE) != 0;
    uint64_t size = (uint64_t)st.st_size;
    if (size < FI_LOG_HDR_SIZE || size > MAX_LOG_READ)
        goto out;
    if (data == NULL || tail_off != 0) {
        free(data);
        data = xmalloc((size_t)size);
        ssize_t got = fi_pread_all(lfd, data, (size_t)size, 0);
        if (got < (ssize_t)FI_LOG_HDR_SIZE)
            goto out;
        size = (uint64_t)got;
    }
    /* The header as fi_log_read_header() checks it. */
    if (memcmp(data, FI_LOG_MAGIC, 8) != 0 || fi_crc32c(0, data, 44) != fi_get32(data + 44) ||
        fi_get32(data + 8) != FI_LOG_VERSION || fi_get32(data + 12) != FI_LOG_HDR_SIZE)
        goto out;
    uint64_t lineage = fi_get64(data + 16);
    if (lineage != info.hdr.lineage) {
        if ((info.flags & FI_BASE_FLAG_FOLDED) != 0 && lineage == info.parent_lineage) {
            r = have ? USAGE_OK : USAGE_FALLBACK; /* the log is folded into this base */
            if (have) {
                *out = u;
                *how = FILEINDEX_USAGE_TAIL;
            }
        } else {
            r = USAGE_RETRY;
        }
        goto out;
    }
    if (size == FI_LOG_HDR_SIZE) { /* nothing since the fold: the base's sum */
        if (have) {
            *out = u;
            *how = FILEINDEX_USAGE_TAIL;
            r = USAGE_OK;
        }
        goto out;
    }
    size_t end = 0;
    if (scan_log(data + FI_LOG_HDR_SIZE, (size_t)size - FI_LOG_HDR_SIZE, FI_LOG_HDR_SIZE, &u, &have,
                 &end) &&
        have) {
        *out = u;
        *how = FILEINDEX_USAGE_LOG;
        r = USAGE_OK;
        /* Only a log read to its very end, with no torn or unfinished
         * transaction after the last one, may be cached: such a log
         * changes only by growing or by being replaced (a cut happens only
         * to a torn tail), so its size and inode say it is the same. */
        if (stamps != NULL &&
            (FI_LOG_HDR_SIZE + end != (size_t)size || (off_t)size != stamps[1].size))
            stamps[1].size = -1;
    }
out:
    free(data);
    close(lfd);
    if (bfd >= 0)
        close(bfd);
    return r;
}

bool fileindex_read_usage(const char *dir, const struct fileindex_settings *set,
                          struct fileindex_usage *out, enum fileindex_usage_source *how,
                          struct petrel_error *err)
{
    enum fileindex_usage_source src = FILEINDEX_USAGE_RECORDS;
    if (how == NULL)
        how = &src;
    if (strlen(dir) > FI_MAX_DIR)
        return petrel_error_set(err, PETREL_ERR_INVALID, "index directory name too long");
    enum usage_read r = USAGE_RETRY;
    for (int i = 0; i < RETRIES && r == USAGE_RETRY; i++)
        r = read_once(dir, out, NULL, how, err);
    if (r == USAGE_OK || r == USAGE_ERROR)
        return r == USAGE_OK;
    /* Sum the records: an index this version has not written yet, or a
     * writer that kept folding under us. */
    struct fileindex *fi = fileindex_open(dir, set, err);
    if (fi == NULL)
        return false;
    fileindex_get_usage(fi, out);
    fileindex_close(fi);
    *how = FILEINDEX_USAGE_RECORDS;
    return true;
}

/* ---------- the cache ---------- */

struct cache_entry {
    char *dir; /* NULL: empty slot */
    struct file_stamp stamps[2];
    struct fileindex_usage usage;
};

struct fileindex_usage_cache {
    struct cache_entry *slots;
    size_t cap; /* power of two, at least twice max */
    size_t count;
    size_t max;
    uint64_t hits;
};

struct fileindex_usage_cache *fileindex_usage_cache_new(size_t max_entries)
{
    struct fileindex_usage_cache *c = xcalloc(1, sizeof(*c));
    c->max = max_entries > 0 ? max_entries : 1;
    c->cap = 16;
    while (c->cap < c->max * 2)
        c->cap *= 2;
    c->slots = xcalloc(c->cap, sizeof(*c->slots));
    return c;
}

static void cache_clear(struct fileindex_usage_cache *c)
{
    for (size_t i = 0; i < c->cap; i++) {
        free(c->slots[i].dir);
        c->slots[i].dir = NULL;
    }
    c->count = 0;
}

void fileindex_usage_cache_free(struct fileindex_usage_cache *c)
{
    if (c == NULL)
        return;
    cache_clear(c);
    free(c->slots);
    free(c);
}

uint64_t fileindex_usage_cache_hits(const struct fileindex_usage_cache *c)
{
    return c->hits;
}

static size_t hash_of(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

/* The slot of `dir`, or the empty one where it would go. */
static struct cache_entry *slot_of(struct fileindex_usage_cache *c, const char *dir)
{
    size_t i = hash_of(dir) & (c->cap - 1);
    while (c->slots[i].dir != NULL && strcmp(c->slots[i].dir, dir) != 0)
        i = (i + 1) & (c->cap - 1);
    return &c->slots[i];
}

static bool stat_stamp(const char *dir, const char *name, struct file_stamp *out)
{
    char path[FI_MAX_DIR + 32];
    join(path, dir, name);
    struct stat st;
    if (stat(path, &st) != 0)
        return false;
    stamp_of(&st, out);
    return true;
}

/* A cached log that only grew since (same base, same log file, longer):
 * the new transactions are read on top of the cached aggregate instead of
 * the whole log again (a folder being delivered to changes on each check).
 * False when that cannot be done (then the caller reads it all). */
static bool read_growth(struct cache_entry *e, const char *dir, const struct file_stamp *now,
                        struct fileindex_usage *out)
{
    if (!stamp_equal(&now[0], &e->stamps[0]) || now[1].dev != e->stamps[1].dev ||
        now[1].ino != e->stamps[1].ino || now[1].size <= e->stamps[1].size ||
        now[1].size - e->stamps[1].size > (off_t)MAX_LOG_READ)
        return false;
    char path[FI_MAX_DIR + 32];
    join(path, dir, FI_LOG_FILE);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    struct file_stamp stamp;
    bool ok = false;
    uint8_t small[4096]; /* a delivery or two since the last check */
    uint8_t *data = NULL;
    if (fstat(fd, &st) != 0)
        goto out;
    stamp_of(&st, &stamp);
    if (stamp.ino != e->stamps[1].ino || stamp.size <= e->stamps[1].size)
        goto out;
    size_t len = (size_t)(stamp.size - e->stamps[1].size);
    data = len <= sizeof(small) ? small : xmalloc(len);
    if (fi_pread_all(fd, data, len, e->stamps[1].size) != (ssize_t)len)
        goto out;
    struct fileindex_usage u = e->usage;
    bool have = true;
    size_t end = 0;
    if (!scan_log(data, len, (uint64_t)e->stamps[1].size, &u, &have, &end))
        goto out;
    *out = u;
    ok = true;
    if (end == len) { /* read to a complete end: the cache moves on */
        e->stamps[1] = stamp;
        e->usage = u;
    }
out:
    if (data != small)
        free(data);
    close(fd);
    return ok;
}

bool fileindex_read_usage_cached(struct fileindex_usage_cache *c, const char *dir,
                                 const struct fileindex_settings *set, struct fileindex_usage *out,
                                 struct petrel_error *err)
{
    if (c == NULL)
        return fileindex_read_usage(dir, set, out, NULL, err);
    if (strlen(dir) > FI_MAX_DIR)
        return petrel_error_set(err, PETREL_ERR_INVALID, "index directory name too long");
    struct cache_entry *e = slot_of(c, dir);
    if (e->dir != NULL) {
        struct file_stamp now[2];
        bool stamped =
            stat_stamp(dir, FI_BASE_FILE, &now[0]) && stat_stamp(dir, FI_LOG_FILE, &now[1]);
        if (stamped && stamp_equal(&now[0], &e->stamps[0]) && stamp_equal(&now[1], &e->stamps[1])) {
            *out = e->usage;
            c->hits++;
            return true;
        }
        if (stamped && read_growth(e, dir, now, out))
            return true; /* read, but only the new part: not a hit */
    }
    struct file_stamp stamps[2];
    enum fileindex_usage_source how;
    enum usage_read r = read_once(dir, out, stamps, &how, err);
    if (r == USAGE_ERROR)
        return false;
    if (r != USAGE_OK) /* retries and the records' sum, uncached */
        return fileindex_read_usage(dir, set, out, NULL, err);
    if (stamps[1].size < 0)
        return true; /* a log with a tail not yet complete: not cached */
    if (e->dir == NULL) {
        if (c->count >= c->max) {
            cache_clear(c);
            e = slot_of(c, dir);
        }
        e->dir = xstrdup(dir);
        c->count++;
    }
    memcpy(e->stamps, stamps, sizeof(stamps));
    e->usage = *out;
    return true;
}
