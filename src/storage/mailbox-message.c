/* The storage API's message reads (mail-storage.h "reading one message",
 * "cached message data"): passed to the folder's driver. How bytes become a
 * struct mailbox_message_data (a mapping for large files, a read for small
 * ones, line endings classified) is the same for every driver, so it is
 * here (mailbox_message_data_load) and a release needs no driver. */
#include "storage/mail-storage-private.h"

#include "core/fs-util.h"
#include "core/xalloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Files up to this size are read into memory: a mapping costs more than a
 * read for them (and a page of address space each). */
#define MESSAGE_READ_MAX (64u * 1024)

struct message_data {
    struct mailbox_message_data pub; /* first: the caller holds a pointer to it */
    void *map;                       /* mmap()ed area, or NULL when read */
    size_t map_len;
    char *heap; /* read into memory */
};

static const struct mail_storage_vfuncs *box_v(const struct mailbox *box)
{
    return mailbox_common(box)->user->storage->v;
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
    if (!fs_pread_all(fd, data, size, 0, got)) {
        free(data);
        return false;
    }
    data[*got] = '\0'; /* shorter than fstat said: take what is there */
    *out = data;
    return true;
}

uint64_t mailbox_message_vsize(const char *data, size_t size)
{
    uint64_t bare = 0;
    for (size_t i = 0; i < size; i++) {
        if (data[i] == '\n' && (i == 0 || data[i - 1] != '\r'))
            bare++;
    }
    return size + bare;
}

struct mailbox_message_data *mailbox_message_data_load(int fd, size_t size, const char *what,
                                                       uint64_t indexed_size,
                                                       uint64_t indexed_vsize,
                                                       struct petrel_error *err)
{
    struct message_data *m = xcalloc(1, sizeof(*m));
    bool ok = true;
    if (size > MESSAGE_READ_MAX) {
        /* Populated at once: the caller reads all of it (FETCH, parsing),
         * and one populate costs far less than a fault per page. */
        m->map = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (m->map == MAP_FAILED) {
            m->map = NULL;
            ok = petrel_error_set_errno(err, errno, "cannot map %s: %s", what, strerror(errno));
        } else {
            m->map_len = size;
            m->pub.data = m->map;
            /* FETCH reads a message front to back. */
            madvise(m->map, size, MADV_SEQUENTIAL);
        }
    } else {
        ok = read_all(fd, size, &m->heap, &size) ||
             petrel_error_set_errno(err, errno, "read %s: %s", what, strerror(errno));
        m->pub.data = m->heap;
    }
    if (!ok) {
        mailbox_message_release(&m->pub);
        return NULL;
    }
    m->pub.size = size;
    /* The index's vsize was measured from these bytes; a file changed
     * behind our back is measured again. */
    m->pub.vsize = indexed_size == size ? indexed_vsize : mailbox_message_vsize(m->pub.data, size);
    m->pub.eol = line_endings(m->pub.data, size, m->pub.vsize);
    return &m->pub;
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

struct mailbox_message_data *mailbox_message_open(struct mailbox *box, uint32_t uid,
                                                  struct petrel_error *err)
{
    return box_v(box)->message_open(box, uid, err);
}

int mailbox_message_open_file(struct mailbox *box, uint32_t uid, uint64_t *size,
                              struct petrel_error *err)
{
    return box_v(box)->message_open_file(box, uid, size, err);
}

bool mailbox_message_sizes(struct mailbox *box, uint32_t uid, uint64_t *size, uint64_t *vsize,
                           struct petrel_error *err)
{
    return box_v(box)->message_sizes(box, uid, size, vsize, err);
}

const char *mailbox_keyword_name(const struct mailbox *box, unsigned idx)
{
    return box_v(box)->keyword_name(box, idx);
}

/* ---------- cached message data ---------- */

const void *mailbox_cache_lookup(struct mailbox *box, uint32_t uid, const char *field, size_t *len)
{
    return box_v(box)->cache_lookup(box, uid, field, len);
}

bool mailbox_cache_store(struct mailbox *box, uint32_t uid, const char *field, const void *data,
                         size_t len, struct petrel_error *err)
{
    return box_v(box)->cache_store(box, uid, field, data, len, false, err);
}

bool mailbox_cache_queue(struct mailbox *box, uint32_t uid, const char *field, const void *data,
                         size_t len, struct petrel_error *err)
{
    return box_v(box)->cache_store(box, uid, field, data, len, true, err);
}

bool mailbox_cache_flush(struct mailbox *box, struct petrel_error *err)
{
    return box_v(box)->cache_flush(box, err);
}
