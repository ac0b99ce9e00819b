/* fileindex_read_usage(): a folder's aggregate from the base header and the
 * log's USAGE operations, without loading records (fileindex.h). Used for
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
    default:
        return 0;
    }
}

/* Applies the USAGE operations of the valid transactions in data[0..len)
 * (the log after its header, file offset FI_LOG_HDR_SIZE). False when a
 * transaction changes records without one (an older writer): the
 * aggregate cannot be known without them. */
static bool scan_log(const uint8_t *data, size_t len, struct fileindex_usage *u, bool *have)
{
    size_t pos = 0;
    while (len - pos >= FI_TXN_HDR_SIZE) {
        const uint8_t *t = data + pos;
        uint32_t tlen = fi_get32(t);
        if (tlen < FI_TXN_HDR_SIZE + 1 || tlen > FI_MAX_TXN || tlen > len - pos ||
            fi_get64(t + 8) != FI_LOG_HDR_SIZE + pos ||
            fi_crc32c(0, t + 8, tlen - 8) != fi_get32(t + 4))
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
            } else if (op == FI_OP_USAGE) {
                u->messages = fi_get32(t + off + 1);
                u->bytes = fi_get64(t + off + 5);
                got = true;
                changes = false;
                *have = true;
            }
            off += n;
        }
        if (changes && !got)
            return false;
        pos += tlen;
    }
    return true;
}

/* Bytes read from the log at once: its header and, usually, every
 * transaction since the last fold (more is read when the file is longer). */
#define LOG_FIRST_READ (64u * 1024u)

static enum usage_read read_once(const char *dir, struct fileindex_usage *out,
                                 struct petrel_error *err)
{
    enum usage_read r = USAGE_FALLBACK;
    int lfd = -1;
    uint8_t *data = NULL;
    char path[FI_MAX_DIR + 32];
    snprintf(path, sizeof(path), "%s/%s", dir, FI_BASE_FILE);
    int bfd = open(path, O_RDONLY | O_CLOEXEC);
    if (bfd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return USAGE_FALLBACK; /* fileindex_open tells what is missing */
        petrel_error_set_errno(err, errno, "cannot open %s: %s", path, strerror(errno));
        return USAGE_ERROR;
    }
    uint8_t hdr[FI_BASE_HDR_SIZE];
    struct fi_base_info info;
    struct petrel_error perr;
    /* Only the checksummed header is used, so the size check the header
     * parser makes is given the size the header itself implies (no fstat):
     * a base cut short is found by the next full open, not here. */
    if (fi_pread_all(bfd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr) ||
        !fi_base_parse_header(hdr, FI_BASE_HDR_SIZE + (uint64_t)fi_get32(hdr + 88) *
                                                          FI_BASE_REC_SIZE + fi_get64(hdr + 96),
                              &info, &perr) ||
        info.version != FI_BASE_VERSION)
        goto out; /* damaged or older: the full open judges */
    struct fileindex_usage u = {info.count, info.usage_bytes};
    bool have = (info.flags & FI_BASE_FLAG_USAGE) != 0;
    snprintf(path, sizeof(path), "%s/%s", dir, FI_LOG_FILE);
    lfd = open(path, O_RDONLY | O_CLOEXEC);
    if (lfd < 0)
        goto out;
    /* One read for the header and the transactions in the common case. */
    size_t cap = LOG_FIRST_READ;
    data = xmalloc(cap);
    ssize_t got = fi_pread_all(lfd, data, cap, 0);
    if (got == (ssize_t)cap) {
        struct stat lst;
        if (fstat(lfd, &lst) != 0 || (uint64_t)lst.st_size > MAX_LOG_READ)
            goto out;
        cap = (size_t)lst.st_size;
        data = xrealloc(data, cap > 0 ? cap : 1);
        got = fi_pread_all(lfd, data, cap, 0);
    }
    if (got < (ssize_t)FI_LOG_HDR_SIZE)
        goto out;
    /* The header as fi_log_read_header() checks it. */
    if (memcmp(data, FI_LOG_MAGIC, 8) != 0 || fi_crc32c(0, data, 44) != fi_get32(data + 44) ||
        fi_get32(data + 8) != FI_LOG_VERSION || fi_get32(data + 12) != FI_LOG_HDR_SIZE)
        goto out;
    uint64_t lineage = fi_get64(data + 16);
    if (lineage != info.hdr.lineage) {
        if ((info.flags & FI_BASE_FLAG_FOLDED) != 0 && lineage == info.parent_lineage) {
            r = have ? USAGE_OK : USAGE_FALLBACK; /* the log is folded into this base */
            if (have)
                *out = u;
        } else {
            r = USAGE_RETRY;
        }
        goto out;
    }
    if (scan_log(data + FI_LOG_HDR_SIZE, (size_t)got - FI_LOG_HDR_SIZE, &u, &have) && have) {
        *out = u;
        r = USAGE_OK;
    }
out:
    free(data);
    if (lfd >= 0)
        close(lfd);
    close(bfd);
    return r;
}

bool fileindex_read_usage(const char *dir, const struct fileindex_settings *set,
                          struct fileindex_usage *out, bool *scanned, struct petrel_error *err)
{
    if (scanned != NULL)
        *scanned = false;
    if (strlen(dir) > FI_MAX_DIR)
        return petrel_error_set(err, PETREL_ERR_INVALID, "index directory name too long");
    enum usage_read r = USAGE_RETRY;
    for (int i = 0; i < RETRIES && r == USAGE_RETRY; i++)
        r = read_once(dir, out, err);
    if (r == USAGE_OK || r == USAGE_ERROR)
        return r == USAGE_OK;
    /* Sum the records: an index this version has not written yet, or a
     * writer that kept folding under us. */
    struct fileindex *fi = fileindex_open(dir, set, err);
    if (fi == NULL)
        return false;
    fileindex_get_usage(fi, out);
    fileindex_close(fi);
    if (scanned != NULL)
        *scanned = true;
    return true;
}
