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
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Files up to this size are read into memory: a mapping costs more than a
 * read for them (and a page of address space each). */
#define MESSAGE_READ_MAX (64u * 1024)
/* Opens that find the expected name missing before cur/ is searched. The
 * rename and the index commit of a concurrent flag change are a few system
 * calls apart, so short pauses between refreshes let the commit land. */
#define LOCATE_ATTEMPTS 3
#define LOCATE_PAUSE_NS 5000000L /* 5 ms, doubled each time */

struct message_data {
    struct mailbox_message_data pub; /* first: the caller holds a pointer to it */
    void *map;                       /* mmap()ed area, or NULL when read */
    size_t map_len;
    char *heap; /* read into memory */
};

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

static enum mailbox_eol line_endings(const char *data, size_t size, uint64_t vsize)
{
    uint64_t bare_lf = vsize > size ? vsize - size : 0;
    /* The virtual size (from the file name's W= or counted when the file
     * was indexed) says there is no bare LF: the bytes are already in wire
     * form, and scanning a large message for its line breaks is wasted.
     * Dovecot trusts W= the same way. */
    if (bare_lf == 0)
        return MAILBOX_EOL_CRLF;
    uint64_t lf = 0;
    const char *p = data;
    const char *end = data + size;
    while (p < end && (p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        lf++;
        p++;
    }
    return bare_lf >= lf ? MAILBOX_EOL_LF : MAILBOX_EOL_MIXED;
}

/* The file into a fresh allocation (at most `size` bytes; *got says how
 * many were there); false on a read error. */
static bool read_all(int fd, size_t size, char **out, size_t *got)
{
    char *data = xmalloc(size + 1);
    size_t done = 0;
    while (done < size) {
        ssize_t r = read(fd, data + done, size - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(data);
            return false;
        }
        if (r == 0)
            break; /* shorter than fstat said: take what is there */
        done += (size_t)r;
    }
    data[done] = '\0';
    *out = data;
    *got = done;
    return true;
}

static uint64_t measure_vsize(const char *data, size_t size)
{
    uint64_t bare = 0;
    for (size_t i = 0; i < size; i++) {
        if (data[i] == '\n' && (i == 0 || data[i - 1] != '\r'))
            bare++;
    }
    return size + bare;
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

struct mailbox_message_data *mailbox_message_open(struct mailbox *box, uint32_t uid,
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
    size_t size = (size_t)file_size;
    struct message_data *m = xcalloc(1, sizeof(*m));
    bool ok = true;
    if (size > MESSAGE_READ_MAX) {
        /* Populated at once: the caller reads all of it (FETCH, parsing),
         * and one populate costs far less than a fault per page. */
        m->map = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (m->map == MAP_FAILED) {
            m->map = NULL;
            ok =
                petrel_error_set_errno(err, errno, "cannot map %s: %s", path.data, strerror(errno));
        } else {
            m->map_len = size;
            m->pub.data = m->map;
            /* FETCH reads a message front to back. */
            madvise(m->map, size, MADV_SEQUENTIAL);
        }
    } else {
        ok = read_all(fd, size, &m->heap, &size) ||
             petrel_error_set_errno(err, errno, "read %s: %s", path.data, strerror(errno));
        m->pub.data = m->heap;
    }
    close(fd);
    if (!ok) {
        mailbox_message_release(&m->pub);
        buf_free(&path);
        return NULL;
    }
    m->pub.uid = uid;
    m->pub.size = size;
    /* The index's vsize was measured from these bytes; a file changed
     * behind our back (maildir files never change) is measured again. */
    m->pub.vsize = rec.size == size ? rec.vsize : measure_vsize(m->pub.data, size);
    m->pub.internal_date = rec.internal_date;
    m->pub.eol = line_endings(m->pub.data, size, m->pub.vsize);
    buf_free(&path);
    return &m->pub;
}

int mailbox_message_open_file(struct mailbox *box, uint32_t uid, uint64_t *size,
                              struct petrel_error *err)
{
    struct fileindex_record rec;
    struct buf path = {0};
    int fd = open_sized(box, uid, &rec, &path, size, err);
    buf_free(&path);
    return fd;
}

void mailbox_message_release(struct mailbox_message_data *msg)
{
    if (msg == NULL)
        return;
    struct message_data *m = (struct message_data *)msg;
    if (m->map != NULL)
        munmap(m->map, m->map_len);
    free(m->heap);
    free(m);
}

bool mailbox_message_sizes(struct mailbox *box, uint32_t uid, uint64_t *size, uint64_t *vsize,
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

const char *mailbox_keyword_name(const struct mailbox *box, unsigned idx)
{
    return idx < MAILDIR_MAX_KEYWORDS ? box->keywords.names[idx] : NULL;
}
