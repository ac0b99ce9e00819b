/* fileindex transaction log: petrel.index.log.
 *
 * The log holds the transactions committed since the base was written. It
 * is append-only while its base lives; a fold writes a new base and then a
 * new log (header only) naming the new base's lineage, each through a
 * temporary file and rename. All integers are little-endian.
 *
 *   header (48 bytes)
 *     0   magic "PTRLLOG\0"
 *     8   u32 version          2 (1 = older format: lineage is 0)
 *     12  u32 header_size      48
 *     16  u64 lineage          lineage of the base this log extends
 *     24  i64 created_at       unix seconds (informational)
 *     32  u64 reserved (0)
 *     40  u32 reserved (0)
 *     44  u32 header_crc       CRC-32C of bytes 0..43
 *   transactions, back to back
 *     0   u32 length           whole transaction, these 16 bytes included
 *                              (37 .. 16 MiB)
 *     4   u32 crc              CRC-32C of bytes 8 .. length-1
 *     8   u64 offset           the transaction's own position in the file
 *                              (stale bytes past a cut can never pass for a
 *                              transaction at another position)
 *     16  operations, each one byte of type then its fields:
 *         1 APPEND   u32 uid, u32 flags, u32 keywords, u64 modseq, u64 size,
 *                    u64 vsize, i64 internal_date, u16 name_len, name
 *         2 FLAGS    u32 uid, u32 flags, u32 keywords, u64 modseq
 *         3 NAME     u32 uid, u16 name_len, name
 *         4 EXPUNGE  u32 uid
 *         5 HEADER   u32 next_uid, u64 highest_modseq, u64 cache_reset_id
 *                    (the header after the transaction; last, exactly once)
 *         6 USAGE    u32 messages, u64 bytes: the folder's aggregate after
 *                    the transaction. Written by the previous version in
 *                    transactions that append or expunge; read as TOTALS
 *                    without the trailer (this version writes TOTALS).
 *         7 TOTALS   u32 messages, u64 bytes, u32 txn_length, u32 seal:
 *                    the folder's aggregate after the transaction (live
 *                    records and the sum of their sizes), the length of
 *                    the transaction it ends, and fi_totals_seal() of the
 *                    transaction's offset, length and the aggregate. In
 *                    every transaction this version writes, just before
 *                    HEADER, so the aggregate and the records it sums are
 *                    one checksummed write and no crash can separate them,
 *                    and the last 42 bytes of a log that ends cleanly are
 *                    TOTALS and HEADER: a reader that does not load records
 *                    (fileindex_read_usage) reads them and the
 *                    transaction's 16-byte header (length and offset must
 *                    match, the seal must hold, and the checksum when the
 *                    transaction lies within the 4 KiB read from the
 *                    tail) and nothing else; when they
 *                    do not verify (a torn or unfinished tail, an older
 *                    writer's transaction) it reads the log from the start
 *                    (fileindex-usage.c). An aggregate (TOTALS or USAGE)
 *                    that disagrees with the records it follows (an older
 *                    writer's, damage) is not an error: the records win and
 *                    the next transaction writes it again (usage_suspect).
 *
 * Replay rules: appends carry strictly increasing UIDs >= next_uid, every
 * modseq in a transaction is above the highest_modseq before it and at most
 * the one in its HEADER, next_uid and highest_modseq never decrease. A
 * transaction whose checksum holds but that breaks a rule makes the log
 * PETREL_ERR_INVALID.
 *
 * Durability (settings.fsync, `mail_fsync`): "always" fsyncs the log after
 * every transaction; "optimized" fdatasyncs transactions that append,
 * expunge, rename or change header fields and leaves flag-only transactions
 * to the kernel (a crash may lose the latest flag changes, never a message
 * or a UID); "never" syncs nothing. New files (base, log, cache) are written
 * to a temporary file, fsynced, renamed, and the directory fsynced, except
 * under "never".
 *
 * Tail: a reader stops at the first transaction that is incomplete or fails
 * its checksum. Without the lock that only means "not yet" (a writer may be
 * in the middle of its write). Under the lock the rest of the file is
 * searched for a valid transaction at its own offset: found, the log is
 * corrupt (PETREL_ERR_INVALID); not found, it is a torn tail, which the next
 * writer cuts (ftruncate) before appending. */
#include "storage/fileindex/fileindex-private.h"

#include "core/error.h"
#include "core/xalloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK (1024u * 1024u)
#define MIN_TXN (FI_TXN_HDR_SIZE + 1 + FI_OP_HEADER_SIZE)
#define MAX_TAIL_SCAN (64u * 1024u * 1024u)

static bool bad(struct petrel_error *err, const char *what)
{
    return petrel_error_set(err, PETREL_ERR_INVALID, "index log damaged: %s", what);
}

bool fi_log_create(struct fileindex *fi, uint32_t version, uint64_t lineage, int *fd_out,
                   struct petrel_error *err)
{
    uint8_t h[FI_LOG_HDR_SIZE];
    memset(h, 0, sizeof(h));
    memcpy(h, FI_LOG_MAGIC, 8);
    fi_put32(h + 8, version);
    fi_put32(h + 12, FI_LOG_HDR_SIZE);
    fi_put64(h + 16, lineage);
    fi_put64(h + 24, (uint64_t)time(NULL));
    fi_put32(h + 44, fi_crc32c(0, h, 44));
    return fi_replace_file(fi, fi->log_path, h, sizeof(h), fd_out, err);
}

bool fi_log_read_header(int fd, uint32_t *version, uint64_t *lineage, struct petrel_error *err)
{
    uint8_t h[FI_LOG_HDR_SIZE];
    ssize_t n = fi_pread_all(fd, h, sizeof(h), 0);
    if (n < 0)
        return petrel_error_set_errno(err, errno, "cannot read index log: %s", strerror(errno));
    if (n != (ssize_t)sizeof(h))
        return bad(err, "shorter than its header");
    if (memcmp(h, FI_LOG_MAGIC, 8) != 0)
        return bad(err, "bad magic");
    if (fi_crc32c(0, h, 44) != fi_get32(h + 44))
        return bad(err, "header checksum mismatch");
    *version = fi_get32(h + 8);
    if (*version != FI_LOG_VERSION && *version != FI_LOG_VERSION_NO_LINEAGE)
        return bad(err, "unsupported version");
    if (fi_get32(h + 12) != FI_LOG_HDR_SIZE)
        return bad(err, "unexpected header size");
    *lineage = fi_get64(h + 16);
    if ((*version == FI_LOG_VERSION) != (*lineage != 0))
        return bad(err, "lineage does not match the version");
    return true;
}

/* ---------- applying one transaction ---------- */

static bool valid_name(const uint8_t *p, size_t len)
{
    return len >= 1 && len <= FI_MAX_FILENAME && memchr(p, '\0', len) == NULL;
}

/* The live (not yet expunged) record with `uid`, or NULL. */
static struct fileindex_record *live(struct fi_view *v, uint32_t uid)
{
    bool found;
    size_t pos = fi_view_search(v, uid, &found);
    if (!found || v->recs[pos].filename == NULL)
        return NULL;
    return &v->recs[pos];
}

bool fi_log_apply(struct fi_view *v, const uint8_t *body, size_t len, struct petrel_error *err)
{
    const uint32_t start_next_uid = v->hdr.next_uid;
    const uint64_t start_modseq = v->hdr.highest_modseq;
    uint64_t max_modseq = start_modseq;
    size_t off = 0;
    bool got_header = false;
    bool usage_changed = false; /* records changed since the last USAGE */
    while (off < len) {
        if (got_header)
            return bad(err, "operation after the transaction header");
        uint8_t op = body[off++];
        size_t left = len - off;
        const uint8_t *p = body + off;
        switch (op) {
        case FI_OP_APPEND: {
            if (left < FI_OP_APPEND_FIXED)
                return bad(err, "short append");
            size_t name_len = fi_get16(p + 44);
            if (left - FI_OP_APPEND_FIXED < name_len || !valid_name(p + 46, name_len))
                return bad(err, "bad file name in append");
            uint32_t uid = fi_get32(p);
            uint64_t modseq = fi_get64(p + 12);
            uint32_t last = v->count > 0 ? v->recs[v->count - 1].uid : 0;
            if (uid == 0 || uid < start_next_uid || uid <= last)
                return bad(err, "appended uid not increasing");
            if (modseq <= start_modseq)
                return bad(err, "append modseq not above highest_modseq");
            if (v->count - v->expunged_marks >= FI_MAX_RECORDS)
                return bad(err, "too many records");
            fi_view_reserve(v, 1);
            struct fileindex_record *r = &v->recs[v->count++];
            r->uid = uid;
            r->flags = fi_get32(p + 4);
            r->keywords = fi_get32(p + 8);
            r->modseq = modseq;
            r->size = fi_get64(p + 20);
            r->vsize = fi_get64(p + 28);
            r->internal_date = (int64_t)fi_get64(p + 36);
            r->filename = fi_arena_dup(&v->names, (const char *)p + 46, name_len);
            if ((r->flags & FILEINDEX_SEEN_BIT) == 0)
                v->unseen++;
            v->bytes += r->size;
            usage_changed = true;
            if (modseq > max_modseq)
                max_modseq = modseq;
            off += FI_OP_APPEND_FIXED + name_len;
            break;
        }
        case FI_OP_FLAGS: {
            if (left < FI_OP_FLAGS_SIZE)
                return bad(err, "short flag change");
            struct fileindex_record *r = live(v, fi_get32(p));
            uint64_t modseq = fi_get64(p + 12);
            if (r == NULL)
                return bad(err, "flag change for an unknown uid");
            if (modseq <= start_modseq)
                return bad(err, "flag change modseq not above highest_modseq");
            uint32_t flags = fi_get32(p + 4);
            if ((r->flags & FILEINDEX_SEEN_BIT) == 0 && (flags & FILEINDEX_SEEN_BIT) != 0)
                v->unseen--;
            else if ((r->flags & FILEINDEX_SEEN_BIT) != 0 && (flags & FILEINDEX_SEEN_BIT) == 0)
                v->unseen++;
            r->flags = flags;
            r->keywords = fi_get32(p + 8);
            r->modseq = modseq;
            if (modseq > max_modseq)
                max_modseq = modseq;
            off += FI_OP_FLAGS_SIZE;
            break;
        }
        case FI_OP_NAME: {
            if (left < 6)
                return bad(err, "short rename");
            size_t name_len = fi_get16(p + 4);
            if (left - 6 < name_len || !valid_name(p + 6, name_len))
                return bad(err, "bad file name in rename");
            struct fileindex_record *r = live(v, fi_get32(p));
            if (r == NULL)
                return bad(err, "rename of an unknown uid");
            r->filename = fi_arena_dup(&v->names, (const char *)p + 6, name_len);
            off += 6 + name_len;
            break;
        }
        case FI_OP_EXPUNGE: {
            if (left < 4)
                return bad(err, "short expunge");
            struct fileindex_record *r = live(v, fi_get32(p));
            if (r == NULL)
                return bad(err, "expunge of an unknown uid");
            if ((r->flags & FILEINDEX_SEEN_BIT) == 0)
                v->unseen--;
            v->bytes -= r->size;
            usage_changed = true;
            r->filename = NULL;
            v->expunged_marks++;
            off += 4;
            break;
        }
        case FI_OP_USAGE:
        case FI_OP_TOTALS: {
            size_t size = op == FI_OP_USAGE ? FI_OP_USAGE_SIZE : FI_OP_TOTALS_SIZE;
            if (left < size)
                return bad(err, "short usage");
            v->usage_suspect =
                fi_get32(p) != v->count - v->expunged_marks || fi_get64(p + 4) != v->bytes;
            usage_changed = false;
            off += size;
            break;
        }
        case FI_OP_HEADER: {
            if (left < FI_OP_HEADER_SIZE)
                return bad(err, "short transaction header");
            uint32_t next_uid = fi_get32(p);
            uint64_t highest = fi_get64(p + 4);
            uint32_t last = v->count > 0 ? v->recs[v->count - 1].uid : 0;
            if (next_uid < start_next_uid || next_uid <= last)
                return bad(err, "next_uid goes backwards");
            if (highest < max_modseq)
                return bad(err, "highest_modseq goes backwards");
            v->hdr.next_uid = next_uid;
            v->hdr.highest_modseq = highest;
            v->hdr.cache_reset_id = fi_get64(p + 12);
            got_header = true;
            off += FI_OP_HEADER_SIZE;
            break;
        }
        default:
            return bad(err, "unknown operation");
        }
    }
    if (!got_header)
        return bad(err, "transaction without header");
    if (usage_changed) /* an older writer's: readers without records need USAGE again */
        v->usage_suspect = true;
    return true;
}

/* ---------- reading ---------- */

struct reader {
    int fd;
    uint8_t *buf;
    size_t cap;
    uint64_t start; /* file offset of buf[0] */
    size_t len;
    bool eof;
    double io_time;
};

/* Makes [pos, pos+n) available as far as the file has it; returns how many
 * of those bytes are there (-1 on a read error). */
static ssize_t reader_get(struct reader *r, uint64_t pos, size_t n, const uint8_t **out)
{
    if (pos < r->start || pos > r->start + r->len) {
        r->start = pos;
        r->len = 0;
        r->eof = false;
    }
    size_t have = (size_t)(r->start + r->len - pos);
    if (have < n && !r->eof) {
        if (have > 0)
            memmove(r->buf, r->buf + (pos - r->start), have);
        r->start = pos;
        r->len = have;
        size_t want = n > READ_CHUNK ? n : READ_CHUNK;
        if (want > r->cap) {
            r->buf = xrealloc(r->buf, want);
            r->cap = want;
        }
        double t0 = fi_now();
        ssize_t got = fi_pread_all(r->fd, r->buf + r->len, want - r->len, r->start + r->len);
        r->io_time += fi_now() - t0;
        if (got < 0)
            return -1;
        r->len += (size_t)got;
        if (r->len < want)
            r->eof = true;
        have = r->len;
    }
    *out = r->buf + (pos - r->start);
    return (ssize_t)(have < n ? have : n);
}

/* A complete, checksummed transaction at `pos` in `p` (`avail` bytes)? */
static bool txn_valid(const uint8_t *p, size_t avail, uint64_t pos, uint32_t *len_out)
{
    if (avail < FI_TXN_HDR_SIZE)
        return false;
    uint32_t len = fi_get32(p);
    if (len < MIN_TXN || len > FI_MAX_TXN || len > avail)
        return false;
    if (fi_get64(p + 8) != pos)
        return false;
    if (fi_crc32c(0, p + 8, len - 8) != fi_get32(p + 4))
        return false;
    *len_out = len;
    return true;
}

/* Under the lock: is there a valid transaction anywhere after `pos`? */
static enum fi_tail classify_tail(struct reader *r, uint64_t pos, struct petrel_error *err)
{
    struct stat st;
    if (fstat(r->fd, &st) != 0) {
        petrel_error_set_errno(err, errno, "cannot stat index log: %s", strerror(errno));
        return FI_TAIL_CORRUPT;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size <= pos)
        return FI_TAIL_PENDING;
    if (size - pos > MAX_TAIL_SCAN) {
        bad(err, "too much unreadable data at the end");
        return FI_TAIL_CORRUPT;
    }
    const uint8_t *p = NULL;
    ssize_t got = reader_get(r, pos, (size_t)(size - pos), &p);
    if (got < 0) {
        petrel_error_set_errno(err, errno, "cannot read index log: %s", strerror(errno));
        return FI_TAIL_CORRUPT;
    }
    size_t avail = (size_t)got;
    for (size_t i = 1; i + FI_TXN_HDR_SIZE <= avail; i++) {
        uint32_t len;
        if (fi_get64(p + i + 8) == pos + i && txn_valid(p + i, avail - i, pos + i, &len)) {
            bad(err, "a transaction in the middle does not check out");
            return FI_TAIL_CORRUPT;
        }
    }
    return FI_TAIL_PENDING;
}

bool fi_log_replay(int fd, uint64_t from, uint64_t limit, bool classify, struct fi_view *v,
                   uint64_t *end, enum fi_tail *tail, struct fi_timing *t, struct petrel_error *err)
{
    struct reader r = {.fd = fd, .start = from};
    uint64_t pos = from;
    bool ok = true;
    double t0 = fi_now();
    *tail = FI_TAIL_CLEAN;
    for (;;) {
        if (limit != UINT64_MAX && pos >= limit)
            break;
        const uint8_t *p = NULL;
        ssize_t got = reader_get(&r, pos, FI_TXN_HDR_SIZE, &p);
        if (got < 0) {
            ok = petrel_error_set_errno(err, errno, "cannot read index log: %s", strerror(errno));
            break;
        }
        if (got == 0)
            break; /* end of file */
        uint32_t len = got == FI_TXN_HDR_SIZE ? fi_get32(p) : 0;
        bool sane =
            len >= MIN_TXN && len <= FI_MAX_TXN && (limit == UINT64_MAX || pos + len <= limit);
        if (sane) {
            got = reader_get(&r, pos, len, &p);
            if (got < 0) {
                ok = petrel_error_set_errno(err, errno, "cannot read index log: %s",
                                            strerror(errno));
                break;
            }
        }
        uint32_t txn_len = 0;
        if (!sane || !txn_valid(p, (size_t)got, pos, &txn_len)) {
            *tail = classify ? classify_tail(&r, pos, err) : FI_TAIL_PENDING;
            if (*tail == FI_TAIL_CORRUPT)
                ok = false;
            break;
        }
        if (!fi_log_apply(v, p + FI_TXN_HDR_SIZE, txn_len - FI_TXN_HDR_SIZE, err)) {
            ok = false;
            break;
        }
        pos += txn_len;
    }
    free(r.buf);
    fi_view_compact(v);
    *end = pos;
    if (t != NULL) {
        t->part[FI_PART_RELOAD] += r.io_time;
        t->part[FI_PART_BUILD] += fi_now() - t0 - r.io_time;
    }
    return ok;
}

/* ---------- writing ---------- */

bool fi_log_write_txn(struct fileindex *fi, int fd, uint64_t off, uint8_t *txn, size_t total,
                      bool important, bool *visible, struct petrel_error *err)
{
    PETREL_ASSERT(total >= MIN_TXN && total <= FI_MAX_TXN);
    *visible = false;
    fi_put32(txn, (uint32_t)total);
    fi_put64(txn + 8, off);
    fi_put32(txn + 4, fi_crc32c(0, txn + 8, total - 8));
    if (!fs_pwrite_all(fd, txn, total, off)) {
        /* Incomplete: no reader can take it for a transaction. */
        int saved = errno;
        if (ftruncate(fd, (off_t)off) != 0) {
            /* the next writer cuts the torn tail */
        }
        errno = saved;
        return fi_io_error(err, "cannot append to", fi->log_path);
    }
    if (fileindex_fault == FI_FAULT_LOG_SYNC || !fi_sync(fi, fd, important)) {
        /* Complete, so readers may have applied it already: the caller
         * must not just cut it (see fi_log_rewrite_prefix). */
        *visible = true;
        if (fileindex_fault == FI_FAULT_LOG_SYNC)
            errno = EIO;
        return fi_io_error(err, "cannot fsync", fi->log_path);
    }
    return true;
}

bool fi_log_rewrite_prefix(struct fileindex *fi, int fd, uint64_t len, int *fd_out,
                           struct petrel_error *err)
{
    if (len > FI_MAX_TXN + (uint64_t)fi->set.log_fold_bytes + FI_LOG_HDR_SIZE)
        return petrel_error_set(err, PETREL_ERR_IO, "index log too large to rewrite");
    uint8_t *data = xmalloc((size_t)len);
    bool ok = fi_pread_all(fd, data, (size_t)len, 0) == (ssize_t)len;
    if (!ok)
        fi_io_error(err, "cannot read", fi->log_path);
    else
        ok = fi_replace_file(fi, fi->log_path, data, (size_t)len, fd_out, err);
    free(data);
    return ok;
}
