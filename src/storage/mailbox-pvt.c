/* Private \Seen of readers of shared and public folders (see
 * mailbox-pvt.h). */
#include "storage/mailbox-pvt.h"

#include "core/file-lock.h"
#include "core/fs-util.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "storage/mail-storage-private.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COMPONENT "storage"
#define HEADER_BYTES 16
#define LOCK_TIMEOUT_MS 10000

static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le32(struct buf *out, uint32_t v)
{
    const char b[4] = {(char)(v & 0xff), (char)(v >> 8 & 0xff), (char)(v >> 16 & 0xff),
                       (char)(v >> 24 & 0xff)};
    buf_append(out, b, 4);
}

bool mailbox_pvt_parse(const void *data, size_t len, uint32_t *uid_validity, uint32_t **uids,
                       size_t *count, struct petrel_error *err)
{
    const unsigned char *p = data;
    *uids = NULL;
    *count = 0;
    if (len < HEADER_BYTES || memcmp(p, MAILBOX_PVT_MAGIC, 8) != 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "not a private seen file");
    uint32_t n = get_le32(p + 12);
    if ((len - HEADER_BYTES) % 4 != 0 || (len - HEADER_BYTES) / 4 != n)
        return petrel_error_set(err, PETREL_ERR_INVALID, "private seen file: wrong length");
    uint32_t *list = n > 0 ? xmalloc(n * sizeof(*list)) : NULL;
    for (uint32_t i = 0; i < n; i++) {
        list[i] = get_le32(p + HEADER_BYTES + 4 * (size_t)i);
        if (list[i] == 0 || (i > 0 && list[i] <= list[i - 1])) {
            free(list);
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "private seen file: UIDs not ascending");
        }
    }
    *uid_validity = get_le32(p + 8);
    *uids = list;
    *count = n;
    return true;
}

bool mailbox_pvt_active(const struct mailbox *box)
{
    const struct mailbox_common *c = mailbox_common(box);
    return c->user->session && c->ns->type != NAMESPACE_PERSONAL && c->ns->private_index != NULL;
}

/* Where `uid` is or would go in the sorted uids. */
static size_t uid_pos(const struct mailbox_pvt *p, uint32_t uid)
{
    size_t lo = 0, hi = p->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->uids[mid] < uid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool mailbox_pvt_has(const struct mailbox_pvt *p, uint32_t uid)
{
    size_t lo = uid_pos(p, uid);
    return lo < p->count && p->uids[lo] == uid;
}

void mailbox_pvt_free(struct mailbox_pvt *p)
{
    if (p == NULL)
        return;
    free(p->path);
    free(p->lock);
    free(p->uids);
    free(p);
}

static uint64_t stamp_of(const struct stat *st)
{
    uint64_t h = 14695981039346656037ull;
    const uint64_t parts[] = {(uint64_t)st->st_ino, (uint64_t)st->st_size,
                              (uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec};
    for (size_t i = 0; i < 4; i++) {
        h ^= parts[i];
        h *= 1099511628211ull;
    }
    return h != 0 ? h : 1;
}

/* Reads the file into `p` when it changed (or `force`). A missing file or
 * one of another UIDVALIDITY is an empty set. */
static bool load(struct mailbox_pvt *p, uint32_t uid_validity, bool force, struct petrel_error *err)
{
    struct stat st;
    if (stat(p->path, &st) != 0) {
        if (errno != ENOENT)
            return petrel_error_set_errno(err, errno, "cannot stat %s", p->path);
        p->count = 0;
        p->stamp = 0;
        p->uid_validity = uid_validity;
        return true;
    }
    uint64_t s = stamp_of(&st);
    if (!force && s == p->stamp && p->uid_validity == uid_validity)
        return true;
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAILBOX_PVT_MAX_BYTES)
        return petrel_error_set(err, PETREL_ERR_INVALID, "%s: not a file of at most %u bytes",
                                p->path, MAILBOX_PVT_MAX_BYTES);
    int fd = open(p->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return petrel_error_set_errno(err, errno, "cannot open %s", p->path);
    size_t len = (size_t)st.st_size;
    char *data = xmalloc(len > 0 ? len : 1);
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, data + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    uint32_t uv = 0;
    uint32_t *uids = NULL;
    size_t count = 0;
    bool ok = mailbox_pvt_parse(data, got, &uv, &uids, &count, err);
    free(data);
    if (!ok)
        return false;
    free(p->uids);
    p->stamp = s;
    p->uid_validity = uid_validity;
    if (uv != uid_validity) {
        /* Another folder life: nothing of it was seen. */
        free(uids);
        uids = NULL;
        count = 0;
    }
    p->uids = uids;
    p->count = count;
    p->cap = count;
    return true;
}

/* <index_private>/<owner or slug>/<guid> (without the suffix). */
static bool base_path(struct mailbox *box, const uint8_t guid[16], struct buf *out,
                      struct petrel_error *err)
{
    const struct mailbox_common *c = mailbox_common(box);
    if (!mail_template_expand(c->ns->private_index, c->user->name, c->user->home, out, err))
        return false;
    char hex[33];
    mailbox_guid_hex(guid, hex);
    buf_printf(out, "/%s/%s", c->ns->owner != NULL ? c->ns->owner : c->ns->slug, hex);
    return true;
}

struct mailbox_pvt *mailbox_pvt_get(struct mailbox *box)
{
    struct mailbox_common *c = mailbox_common(box);
    if (!mailbox_pvt_active(box))
        return NULL;
    struct petrel_error err;
    struct mailbox_info info;
    petrel_error_clear(&err);
    /* the driver's own (mailbox_get_info counts unseen through here) */
    if (!c->user->storage->v->get_info(box, false, &info, &err))
        goto fail;
    if (c->pvt == NULL) {
        struct buf base = {0};
        if (!base_path(box, info.guid, &base, &err)) {
            buf_free(&base);
            goto fail;
        }
        buf_append_char(&base, '\0');
        c->pvt = xcalloc(1, sizeof(*c->pvt));
        c->pvt->path = xasprintf("%s.seen", base.data);
        c->pvt->lock = xasprintf("%s.lock", base.data);
        buf_free(&base);
    }
    if (load(c->pvt, info.uid_validity, false, &err))
        return c->pvt;
fail:
    log_error(COMPONENT, "private seen flags unusable: the folder's own show",
              "user=%s folder=%s error=\"%s\"", c->user->name, c->name, err.message);
    return NULL;
}

static void set_one(struct mailbox_pvt *p, uint32_t uid, bool seen)
{
    size_t lo = uid_pos(p, uid);
    bool present = lo < p->count && p->uids[lo] == uid;
    if (seen && !present) {
        p->uids = xgrow(p->uids, &p->cap, p->count + 1, sizeof(*p->uids));
        memmove(p->uids + lo + 1, p->uids + lo, (p->count - lo) * sizeof(*p->uids));
        p->uids[lo] = uid;
        p->count++;
    } else if (!seen && present) {
        memmove(p->uids + lo, p->uids + lo + 1, (p->count - lo - 1) * sizeof(*p->uids));
        p->count--;
    }
}

bool mailbox_pvt_set(struct mailbox *box, const uint32_t *uids, size_t count, bool seen,
                     struct petrel_error *err)
{
    struct mailbox_pvt *p = mailbox_pvt_get(box);
    if (p == NULL)
        return petrel_error_set(err, PETREL_ERR_IO, "private seen flags unusable");
    char *dir = xstrdup(p->path);
    *strrchr(dir, '/') = '\0';
    bool ok = fs_mkdir_p(dir, 0700, err);
    free(dir);
    if (!ok)
        return false;
    int fd = open(p->lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return petrel_error_set_errno(err, errno, "cannot open %s", p->lock);
    if (file_lock_take(fd, true, LOCK_TIMEOUT_MS, NULL) != FILE_LOCK_TAKEN) {
        close(fd);
        return petrel_error_set(err, PETREL_ERR_UNAVAILABLE, "private seen flags locked");
    }
    /* Another session of this reader may have written since our read. */
    ok = load(p, p->uid_validity, true, err);
    if (ok) {
        for (size_t i = 0; i < count; i++)
            set_one(p, uids[i], seen);
        struct buf out = {0};
        buf_append(&out, MAILBOX_PVT_MAGIC, 8);
        put_le32(&out, p->uid_validity);
        put_le32(&out, (uint32_t)p->count);
        for (size_t i = 0; i < p->count; i++)
            put_le32(&out, p->uids[i]);
        ok = fs_write_atomic(p->path, out.data, out.len, false, err);
        buf_free(&out);
        struct stat st;
        if (ok && stat(p->path, &st) == 0)
            p->stamp = stamp_of(&st);
    }
    close(fd); /* releases the lock */
    return ok;
}
