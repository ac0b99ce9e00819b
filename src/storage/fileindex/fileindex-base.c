/* fileindex base file: petrel.index.
 *
 * The base is only ever replaced whole (temporary file, fsync, rename,
 * directory fsync), never changed in place, so a reader that opened it sees
 * one consistent version for as long as it keeps the descriptor or mapping.
 * All integers are little-endian.
 *
 *   header (128 bytes)
 *     0   magic "PTRLIDX\0"
 *     8   u32 version            2 (1 = older format: no lineage, see below)
 *     12  u32 header_size        128
 *     16  u32 record_size        48
 *     20  u32 flags              bit 0 FOLDED: this base is exactly the parent
 *                                base plus the parent log up to parent_log_size
 *                                (a reader at that point may adopt it);
 *                                bit 1 USAGE: usage_bytes below is valid
 *     24  u8  guid[16]
 *     40  u32 uid_validity
 *     44  u32 next_uid
 *     48  u64 highest_modseq
 *     56  u64 cache_reset_id
 *     64  u64 lineage            random, non-zero, new for every base written
 *                                (0 in version 1)
 *     72  u64 parent_lineage     lineage of the base this one replaced (0: none)
 *     80  u64 parent_log_size    bytes of the parent's log folded into this base
 *     88  u32 record_count       <= 10,000,000
 *     92  u32 records_crc        CRC-32C of the record area
 *     96  u64 strings_size       < 4 GiB
 *     104 u32 strings_crc        CRC-32C of the string table
 *     108 u32 usage_bytes_lo     the folder's aggregate: the sum of the
 *     112 i64 written_at         unix seconds (informational)
 *     120 u32 usage_bytes_hi     records' sizes, in two halves (the slots an
 *                                older writer left 0; its count is
 *                                record_count). Only with flag USAGE; a base
 *                                without it (an older writer) or whose sum
 *                                disagrees with its records is trusted for
 *                                its records and healed by the next write.
 *     124 u32 header_crc         CRC-32C of bytes 0..123
 *   records (record_count x 48 bytes, ascending uid)
 *     0   u32 uid                non-zero, strictly increasing, < next_uid
 *     4   u32 flags              storage flag bits (opaque)
 *     8   u32 keywords
 *     12  u32 name_offset        into the string table
 *     16  u64 modseq             <= highest_modseq
 *     24  u64 size
 *     32  u64 vsize
 *     40  i64 internal_date
 *   string table (strings_size bytes): the file names in record order, each
 *   1..1024 bytes plus a NUL, back to back (the first at offset 0, each
 *   next one right after the previous NUL, the last NUL the table's last
 *   byte), so a name's length follows from the next record's offset.
 *
 * Version 1 (written before lineages existed) has the same layout with
 * flags, lineage, parent_lineage and parent_log_size all 0, and its log
 * header's lineage is 0. Such an index cannot prove freshness without the
 * lock: readers reload it under a shared lock until the next writer folds
 * it into a version 2 base (fileindex.c).
 *
 * The file size must be exactly 128 + 48 * record_count + strings_size.
 * Anything that does not check out is PETREL_ERR_INVALID (the storage driver
 * rebuilds the index from the messages).
 *
 * Loading maps the file read-only, verifies both checksums, builds the
 * packed in-memory record array and lets file names point into the mapped
 * string table; the pages of the record area are then released from the
 * mapping (MADV_DONTNEED) since only the strings are referenced later. */
#include "storage/fileindex/fileindex-private.h"

#include "core/error.h"
#include "core/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_POPULATE
#define MAP_POPULATE 0
#endif

#define WRITE_CHUNK (1024u * 1024u)

static bool bad(struct petrel_error *err, const char *what)
{
    return petrel_error_set(err, PETREL_ERR_INVALID, "index base damaged: %s", what);
}

bool fi_base_parse_header(const uint8_t *p, uint64_t file_size, struct fi_base_info *info,
                          struct petrel_error *err)
{
    memset(info, 0, sizeof(*info));
    if (file_size < FI_BASE_HDR_SIZE)
        return bad(err, "shorter than its header");
    if (memcmp(p, FI_BASE_MAGIC, 8) != 0)
        return bad(err, "bad magic");
    if (fi_crc32c(0, p, 124) != fi_get32(p + 124))
        return bad(err, "header checksum mismatch");
    info->version = fi_get32(p + 8);
    if (info->version != FI_BASE_VERSION && info->version != FI_BASE_VERSION_NO_LINEAGE)
        return bad(err, "unsupported version");
    if (fi_get32(p + 12) != FI_BASE_HDR_SIZE || fi_get32(p + 16) != FI_BASE_REC_SIZE)
        return bad(err, "unexpected header or record size");
    info->flags = fi_get32(p + 20);
    memcpy(info->hdr.guid, p + 24, 16);
    info->hdr.uid_validity = fi_get32(p + 40);
    info->hdr.next_uid = fi_get32(p + 44);
    info->hdr.highest_modseq = fi_get64(p + 48);
    info->hdr.cache_reset_id = fi_get64(p + 56);
    info->hdr.lineage = fi_get64(p + 64);
    info->parent_lineage = fi_get64(p + 72);
    info->parent_log_size = fi_get64(p + 80);
    info->count = fi_get32(p + 88);
    info->strings_size = fi_get64(p + 96);
    if (info->flags & FI_BASE_FLAG_USAGE)
        info->usage_bytes = (uint64_t)fi_get32(p + 108) | ((uint64_t)fi_get32(p + 120) << 32);
    if (info->count > FI_MAX_RECORDS)
        return bad(err, "too many records");
    if (info->strings_size > FI_MAX_STRINGS)
        return bad(err, "string table too large");
    if (file_size !=
        FI_BASE_HDR_SIZE + (uint64_t)info->count * FI_BASE_REC_SIZE + info->strings_size)
        return bad(err, "size does not match its header");
    if (info->hdr.next_uid == 0)
        return bad(err, "next_uid is 0");
    if (info->version == FI_BASE_VERSION && info->hdr.lineage == 0)
        return bad(err, "no lineage");
    if (info->version == FI_BASE_VERSION_NO_LINEAGE && info->hdr.lineage != 0)
        return bad(err, "lineage in an older-format base");
    return true;
}

bool fi_base_load(int fd, uint64_t file_size, struct fi_view *v, struct fi_base_info *info,
                  struct fi_timing *t, struct petrel_error *err)
{
    double t0 = fi_now();
    uint8_t hdr[FI_BASE_HDR_SIZE];
    if (file_size < FI_BASE_HDR_SIZE)
        return bad(err, "shorter than its header");
    ssize_t n = fi_pread_all(fd, hdr, sizeof(hdr), 0);
    if (n < 0)
        return petrel_error_set_errno(err, errno, "cannot read index base: %s", strerror(errno));
    if (n != (ssize_t)sizeof(hdr) || !fi_base_parse_header(hdr, file_size, info, err))
        return n == (ssize_t)sizeof(hdr) ? false : bad(err, "short read");
    if (file_size > SIZE_MAX)
        return bad(err, "too large");
    uint8_t *map = mmap(NULL, (size_t)file_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED)
        return petrel_error_set_errno(err, errno, "cannot map index base: %s", strerror(errno));
    size_t count = info->count;
    const uint8_t *recs = map + FI_BASE_HDR_SIZE;
    size_t strings_off = FI_BASE_HDR_SIZE + count * FI_BASE_REC_SIZE;
    const char *strings = (const char *)map + strings_off;
    size_t strings_size = (size_t)info->strings_size;
    const char *why = NULL;
    if (memcmp(map, hdr, sizeof(hdr)) != 0)
        why = "changed while read";
    else if (fi_crc32c(0, recs, count * FI_BASE_REC_SIZE) != fi_get32(map + 92))
        why = "record checksum mismatch";
    else if (fi_crc32c(0, strings, strings_size) != fi_get32(map + 104))
        why = "string table checksum mismatch";
    else if (count > 0 && (strings_size == 0 || strings[strings_size - 1] != '\0'))
        why = "string table not terminated";
    else if (count == 0 && strings_size != 0)
        why = "string table without records";
    if (why != NULL) {
        munmap(map, (size_t)file_size);
        return bad(err, why);
    }
    double t1 = fi_now();
    if (t != NULL)
        t->part[FI_PART_RELOAD] += t1 - t0;

    memset(v, 0, sizeof(*v));
    v->hdr = info->hdr;
    fi_view_alloc(v, count + 64);
    uint32_t prev = 0;
    size_t unseen = 0;
    uint64_t bytes = 0;
    size_t next_off = 0;
    for (size_t i = 0; i < count && why == NULL; i++) {
        const uint8_t *p = recs + i * FI_BASE_REC_SIZE;
        struct fileindex_record *r = &v->recs[i];
        r->uid = fi_get32(p);
        r->flags = fi_get32(p + 4);
        r->keywords = fi_get32(p + 8);
        uint32_t off = fi_get32(p + 12);
        r->modseq = fi_get64(p + 16);
        r->size = fi_get64(p + 24);
        r->vsize = fi_get64(p + 32);
        r->internal_date = (int64_t)fi_get64(p + 40);
        if (r->uid <= prev || r->uid >= info->hdr.next_uid) {
            why = "uids not increasing or beyond next_uid";
            break;
        }
        if (r->modseq > info->hdr.highest_modseq) {
            why = "record modseq beyond highest_modseq";
            break;
        }
        /* Names are stored back to back in record order: each starts where
         * the previous one ended, so lengths follow from the offsets. */
        size_t end = i + 1 < count ? fi_get32(p + FI_BASE_REC_SIZE + 12) : strings_size;
        if (off != next_off || end <= off || end > strings_size ||
            end - off - 1 > FI_MAX_FILENAME || end - off - 1 == 0 || strings[end - 1] != '\0') {
            why = "file name offsets or lengths out of order";
            break;
        }
        next_off = end;
        r->filename = strings + off;
        if ((r->flags & FILEINDEX_SEEN_BIT) == 0)
            unseen++;
        bytes += r->size;
        prev = r->uid;
    }
    if (why != NULL) {
        fi_view_free(v);
        munmap(map, (size_t)file_size);
        return bad(err, why);
    }
    v->count = count;
    v->unseen = unseen;
    v->bytes = bytes;
    v->usage_suspect = (info->flags & FI_BASE_FLAG_USAGE) == 0 || info->usage_bytes != bytes;
    /* Only the string table is referenced from now on. */
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0) {
        size_t drop = strings_off - strings_off % (size_t)page;
        if (drop > 0)
            madvise(map, drop, MADV_DONTNEED);
    }
    fi_view_add_map(v, map, (size_t)file_size);
    if (t != NULL)
        t->part[FI_PART_BUILD] += fi_now() - t1;
    return true;
}

struct out {
    int fd;
    uint64_t off;
    uint8_t *buf;
    size_t len;
    uint32_t crc;
    bool failed;
};

static void out_flush(struct out *o)
{
    if (o->len == 0 || o->failed)
        return;
    o->crc = fi_crc32c(o->crc, o->buf, o->len);
    if (!fs_pwrite_all(o->fd, o->buf, o->len, o->off))
        o->failed = true;
    o->off += o->len;
    o->len = 0;
}

static uint8_t *out_reserve(struct out *o, size_t n)
{
    if (o->len + n > WRITE_CHUNK)
        out_flush(o);
    uint8_t *p = o->buf + o->len;
    o->len += n;
    return p;
}

bool fi_base_write(struct fileindex *fi, const struct fi_view *v, const struct fi_base_info *info,
                   int *fd_out, struct petrel_error *err)
{
    PETREL_ASSERT(v->expunged_marks == 0);
    if (v->count > FI_MAX_RECORDS)
        return petrel_error_set(err, PETREL_ERR_INVALID, "too many messages for one index (%zu)",
                                v->count);
    uint64_t strings_size = 0;
    for (size_t i = 0; i < v->count; i++)
        strings_size += strlen(v->recs[i].filename) + 1;
    if (strings_size > FI_MAX_STRINGS)
        return petrel_error_set(err, PETREL_ERR_INVALID, "file names exceed the index format");

    char *tmp = NULL;
    int fd = fi_tmp_create(fi, fi->base_path, &tmp, err);
    if (fd < 0)
        return false;
    struct out o = {.fd = fd, .off = FI_BASE_HDR_SIZE, .buf = xmalloc(WRITE_CHUNK)};
    uint32_t name_off = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < v->count && !o.failed; i++) {
        const struct fileindex_record *r = &v->recs[i];
        bytes += r->size;
        uint8_t *p = out_reserve(&o, FI_BASE_REC_SIZE);
        fi_put32(p, r->uid);
        fi_put32(p + 4, r->flags);
        fi_put32(p + 8, r->keywords);
        fi_put32(p + 12, name_off);
        fi_put64(p + 16, r->modseq);
        fi_put64(p + 24, r->size);
        fi_put64(p + 32, r->vsize);
        fi_put64(p + 40, (uint64_t)r->internal_date);
        name_off += (uint32_t)strlen(r->filename) + 1;
    }
    out_flush(&o);
    uint32_t records_crc = o.crc;
    o.crc = 0;
    for (size_t i = 0; i < v->count && !o.failed; i++) {
        size_t len = strlen(v->recs[i].filename) + 1;
        memcpy(out_reserve(&o, len), v->recs[i].filename, len);
    }
    out_flush(&o);
    uint32_t strings_crc = o.crc;
    free(o.buf);

    uint8_t h[FI_BASE_HDR_SIZE];
    memset(h, 0, sizeof(h));
    memcpy(h, FI_BASE_MAGIC, 8);
    fi_put32(h + 8, info->version);
    fi_put32(h + 12, FI_BASE_HDR_SIZE);
    fi_put32(h + 16, FI_BASE_REC_SIZE);
    /* The aggregate is summed from the records written, never copied. */
    fi_put32(h + 20, info->flags | FI_BASE_FLAG_USAGE);
    memcpy(h + 24, info->hdr.guid, 16);
    fi_put32(h + 40, info->hdr.uid_validity);
    fi_put32(h + 44, info->hdr.next_uid);
    fi_put64(h + 48, info->hdr.highest_modseq);
    fi_put64(h + 56, info->hdr.cache_reset_id);
    fi_put64(h + 64, info->hdr.lineage);
    fi_put64(h + 72, info->parent_lineage);
    fi_put64(h + 80, info->parent_log_size);
    fi_put32(h + 88, (uint32_t)v->count);
    fi_put32(h + 92, records_crc);
    fi_put64(h + 96, strings_size);
    fi_put32(h + 104, strings_crc);
    fi_put32(h + 108, (uint32_t)bytes);
    fi_put32(h + 120, (uint32_t)(bytes >> 32));
    fi_put64(h + 112, (uint64_t)time(NULL));
    fi_put32(h + 124, fi_crc32c(0, h, 124));
    if (o.failed || !fs_pwrite_all(fd, h, sizeof(h), 0)) {
        fi_io_error(err, "cannot write", tmp);
        close(fd);
        unlinkat(fi->dir_fd, fi_name(fi, tmp), 0);
        free(tmp);
        return false;
    }
    if (!fi_tmp_install(fi, fd, tmp, fi->base_path, err))
        return false;
    *fd_out = fd;
    return true;
}
