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

static enum usage_read read_once(int dir_fd, const char *dir, struct fileindex_usage *out,
                                 struct petrel_error *err)
{
    enum usage_read r = USAGE_FALLBACK;
    int lfd = -1;
    uint8_t *data = NULL;
    int bfd = openat(dir_fd, FI_BASE_FILE, O_RDONLY | O_CLOEXEC);
    if (bfd < 0) {
        if (errno == ENOENT)
            return USAGE_FALLBACK; /* fileindex_open tells what is missing */
        petrel_error_set_errno(err, errno, "cannot open %s/%s: %s", dir, FI_BASE_FILE,
                               strerror(errno));
        return USAGE_ERROR;
    }
    struct stat st;
    uint8_t hdr[FI_BASE_HDR_SIZE];
    struct fi_base_info info;
    struct petrel_error perr;
    if (fstat(bfd, &st) != 0 || fi_pread_all(bfd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr) ||
        !fi_base_parse_header(hdr, (uint64_t)st.st_size, &info, &perr) ||
        info.version != FI_BASE_VERSION)
        goto out; /* damaged or older: the full open judges */
    struct fileindex_usage u = {info.count, info.usage_bytes};
    bool have = (info.flags & FI_BASE_FLAG_USAGE) != 0;
    lfd = openat(dir_fd, FI_LOG_FILE, O_RDONLY | O_CLOEXEC);
    uint32_t lversion;
    uint64_t lineage;
    if (lfd < 0 || !fi_log_read_header(lfd, &lversion, &lineage, &perr))
        goto out;
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
    struct stat lst;
    if (fstat(lfd, &lst) != 0 || (uint64_t)lst.st_size > MAX_LOG_READ)
        goto out;
    size_t len = (size_t)lst.st_size > FI_LOG_HDR_SIZE ? (size_t)lst.st_size - FI_LOG_HDR_SIZE : 0;
    data = xmalloc(len + 1);
    ssize_t got = fi_pread_all(lfd, data, len, FI_LOG_HDR_SIZE);
    if (got < 0)
        goto out;
    if (scan_log(data, (size_t)got, &u, &have) && have) {
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
    int dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
        if (errno == ENOENT)
            return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "no index in %s", dir);
        return petrel_error_set_errno(err, errno, "cannot open %s: %s", dir, strerror(errno));
    }
    enum usage_read r = USAGE_RETRY;
    for (int i = 0; i < RETRIES && r == USAGE_RETRY; i++)
        r = read_once(dir_fd, dir, out, err);
    if (r == USAGE_OK || r == USAGE_ERROR) {
        close(dir_fd);
        return r == USAGE_OK;
    }
    /* Sum the records: an index this version has not written yet, or a
     * writer that kept folding under us. */
    struct fileindex *fi = fileindex_open_in(dir, dir_fd, set, err);
    close(dir_fd);
    if (fi == NULL)
        return false;
    fileindex_get_usage(fi, out);
    fileindex_close(fi);
    if (scanned != NULL)
        *scanned = true;
    return true;
}
