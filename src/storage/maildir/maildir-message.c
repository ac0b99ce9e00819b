/* mail-storage.h over Maildir++: reading one message (mailbox_message_open).
 *
 * The index gives the message's base name and flags, so its file is
 * cur/<base>:2,<flags>. Another process changing the flags renames the file
 * first and commits the index after (both under the folder lock), and a
 * program that does not know the index (Dovecot, mutt) renames it without
 * telling: when the expected name is missing the index is refreshed and the
 * open retried, then cur/ is searched for the base name. The file is opened
 * before it is read, so a rename or expunge after the open no longer
 * matters: the open descriptor (and a mapping) keep the inode. */
#include "storage/maildir/maildir-private.h"

#include "core/xalloc.h"
#include "storage/maildir/maildir-filename.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Opens that find the expected name missing before cur/ is searched. The
 * rename and the index commit of a concurrent flag change are a few system
 * calls apart, so short pauses between refreshes let the commit land. */
#define LOCATE_ATTEMPTS 3
#define LOCATE_PAUSE_NS 5000000L /* 5 ms, doubled each time */

static void pause_ns(long ns)
{
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* Copies the fields of `uid`'s record without its file name pointer (which
 * a refresh invalidates); the base name goes to `base`. */
static bool snapshot_record(struct mailbox *box, uint32_t uid, struct fileindex_record *rec,
                            struct buf *base)
{
    const struct fileindex_record *r = fileindex_lookup_uid(box->index, uid);
    if (r == NULL)
        return false;
    *rec = *r;
    buf_reset(base);
    buf_append_str(base, r->filename);
    rec->filename = NULL;
    return true;
}

static bool find_in_sub(struct mailbox *box, const char *sub, const char *base, struct buf *name)
{
    DIR *d = maildir_opendir_sub(box, sub);
    if (d == NULL)
        return false;
    size_t base_len = strlen(base);
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL) {
        struct maildir_filename fn;
        if (de->d_name[0] == '.' || !maildir_filename_parse(de->d_name, &fn) ||
            fn.base_len != base_len || memcmp(fn.base, base, base_len) != 0)
            continue;
        buf_reset(name);
        buf_append_str(name, de->d_name);
        found = true;
    }
    closedir(d);
    return found;
}

bool maildir_find_in_cur(struct mailbox *box, const char *base, struct buf *name)
{
    return find_in_sub(box, "cur", base, name);
}

/* A file in `sub` whose base name is `base`, opened; -1 when there is none. */
static int open_by_base(struct mailbox *box, const char *sub, const char *base, struct buf *path)
{
    struct buf name = {0};
    int fd = -1;
    if (find_in_sub(box, sub, base, &name)) {
        buf_reset(path);
        buf_printf(path, "%s/%s/%s", box->dir, sub, name.data);
        fd = openat(box->dir_fd, maildir_rel(box, path->data), O_RDONLY | O_CLOEXEC);
    }
    buf_free(&name);
    return fd;
}

int maildir_message_fd(struct mailbox *box, uint32_t uid, struct fileindex_record *rec,
                       struct buf *path, struct petrel_error *err)
{
    struct buf base = {0};
    struct buf name = {0};
    int fd = -1;
    bool known = snapshot_record(box, uid, rec, &base);
    long pause = LOCATE_PAUSE_NS;
    for (int attempt = 0; fd < 0 && attempt < LOCATE_ATTEMPTS; attempt++) {
        if (!known) {
            /* Perhaps appended by another process since our last refresh. */
            if (!fileindex_refresh(box->index, err))
                goto out;
            known = snapshot_record(box, uid, rec, &base);
            if (!known)
                break;
        }
        maildir_disk_name(base.data, rec->flags, rec->keywords, &name);
        buf_reset(path);
        buf_printf(path, "%s/cur/%s", box->dir, name.data);
        fd = openat(box->dir_fd, maildir_rel(box, path->data), O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
            break;
        if (errno == ENOENT && box->read_only) {
            /* Nothing moves in a read-only folder: it is in new/, where
             * its sync found it. */
            fd = open_by_base(box, "new", base.data, path);
            if (fd >= 0)
                break;
            errno = ENOENT;
        }
        if (errno != ENOENT) {
            petrel_error_set_errno(err, errno, "cannot open %s: %s", path->data, strerror(errno));
            goto out;
        }
        if (attempt > 0) {
            pause_ns(pause);
            pause *= 2;
        }
        if (!fileindex_refresh(box->index, err))
            goto out;
        known = snapshot_record(box, uid, rec, &base);
        if (!known)
            break; /* expunged */
    }
    if (fd < 0 && known)
        fd = open_by_base(box, "cur", base.data, path);
    if (fd < 0)
        petrel_error_set(err, PETREL_ERR_NOT_FOUND, "message UID %u expunged", uid);
out:
    buf_free(&base);
    buf_free(&name);
    return fd;
}

/* The file of `uid` opened (after the folder's sync), its record, its path
 * for messages and its size now; -1 with `err` set otherwise. */
static int open_sized(struct mailbox *box, uint32_t uid, struct fileindex_record *rec,
                      struct buf *path, uint64_t *size, struct petrel_error *err)
{
    if (!maildir_ensure_synced(box, err))
        return -1;
    int fd = maildir_message_fd(box, uid, rec, path, err);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 0) {
        petrel_error_set_errno(err, errno, "cannot stat %s: %s", path->data, strerror(errno));
        close(fd);
        return -1;
    }
    *size = (uint64_t)st.st_size;
    return fd;
}

struct mailbox_message_data *maildir_message_open(struct mailbox *box, uint32_t uid,
                                                  struct petrel_error *err)
{
    struct fileindex_record rec;
    struct buf path = {0};
    uint64_t file_size = 0;
    int fd = open_sized(box, uid, &rec, &path, &file_size, err);
    if (fd < 0) {
        buf_free(&path);
        return NULL;
    }
    struct mailbox_message_data *m =
        mailbox_message_data_load(fd, (size_t)file_size, path.data, rec.size, rec.vsize, err);
    close(fd);
    buf_free(&path);
    if (m == NULL)
        return NULL;
    m->uid = uid;
    m->internal_date = rec.internal_date;
    return m;
}

int maildir_message_open_file(struct mailbox *box, uint32_t uid, uint64_t *size,
                              struct petrel_error *err)
{
    struct fileindex_record rec;
    struct buf path = {0};
    int fd = open_sized(box, uid, &rec, &path, size, err);
    buf_free(&path);
    return fd;
}

bool maildir_message_sizes(struct mailbox *box, uint32_t uid, uint64_t *size, uint64_t *vsize,
                           struct petrel_error *err)
{
    if (!maildir_ensure_synced(box, err))
        return false;
    const struct fileindex_record *r = fileindex_lookup_uid(box->index, uid);
    if (r == NULL) {
        if (!fileindex_refresh(box->index, err))
            return false;
        r = fileindex_lookup_uid(box->index, uid);
    }
    if (r == NULL)
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "message UID %u expunged", uid);
    *size = r->size;
    *vsize = r->vsize;
    return true;
}

const char *maildir_keyword_name(const struct mailbox *box, unsigned idx)
{
    return idx < MAILDIR_MAX_KEYWORDS ? box->keywords.names[idx] : NULL;
}
