/* \Recent for Maildir++ folders (see mailbox_recent_claim in
 * mail-storage.h). The mark — the first UID no read-write session has
 * been told of — lives in its own small file beside the index rather than
 * in the index header: it changes on most SELECTs, is harmless to lose (a
 * message is then recent once more), and so needs neither an index
 * transaction record nor an fsync.
 *
 * The file is rewritten in place (pwrite at offset 0 under the file's own
 * flock), not replaced by a renamed copy: a claim follows every APPEND of a
 * session that has the folder selected, and a new file per claim cost an
 * inode allocation and a directory update each time. A record is
 * "<10 digits> <crc32c as 8 hex digits>\n", all records the same length,
 * so a reader that races a write sees either record or a mix that fails
 * its check, and reads again. The older form "<digits>\n" is still read.
 *
 * A file that is exactly one record long is mapped shared, once per handle,
 * and read and written through the mapping: a claim after each of a
 * session's own APPENDs is then its two flock calls, and the peek of every
 * SELECT no call at all (a pread and a pwrite per claim were most of what
 * \Recent added to the IMAP load run's system calls). A store into the
 * mapping is the same page-cache write a pwrite is: it survives the
 * process (kill -9) as a pwrite does, and like one is not fsynced. Unlike a
 * pwrite it raises no inotify event, so the folder's watch (which ignores
 * this file anyway) is not woken to read one. Other forms (the older one,
 * a damaged file) go through pread and pwrite; the first record written
 * over them makes the file mappable. */
#include "storage/maildir/maildir-private.h"

#include "core/crc32c.h"
#include "core/slice.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAILDIR_RECENT "petrel-recent"
#define RECORD_LEN 20 /* "%010u %08x\n" */
#define READ_TRIES 64

/* Opens the file for reading and writing when it exists, or creates it
 * when `create` (the caller holds the folder lock). */
static int recent_fd(struct mailbox *box, bool create)
{
    if (box->recent_fd >= 0)
        return box->recent_fd;
    int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
    box->recent_fd = openat(box->dir_fd, MAILDIR_RECENT, flags, 0600);
    box->recent_rw = box->recent_fd >= 0;
    if (box->recent_fd < 0 && !create && (errno == EACCES || errno == EROFS))
        box->recent_fd = openat(box->dir_fd, MAILDIR_RECENT, O_RDONLY | O_CLOEXEC);
    return box->recent_fd;
}

/* The record mapped shared when the file is exactly one record long; NULL
 * otherwise (read and written with pread and pwrite then). The file is
 * never made shorter than a record (write_mark cuts a damaged one to one
 * record), so the mapped bytes stay inside it. */
static volatile char *record_map(struct mailbox *box, int fd)
{
    if (box->recent_map != NULL || box->recent_unmappable)
        return box->recent_map;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size != RECORD_LEN) {
        box->recent_unmappable = true;
        return NULL;
    }
    void *p =
        mmap(NULL, RECORD_LEN, PROT_READ | (box->recent_rw ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        box->recent_unmappable = true;
        return NULL;
    }
    box->recent_map = p;
    return box->recent_map;
}

void maildir_recent_release(struct mailbox *box)
{
    if (box->recent_map != NULL)
        munmap(box->recent_map, RECORD_LEN);
    box->recent_map = NULL;
    if (box->recent_fd >= 0)
        close(box->recent_fd);
    box->recent_fd = -1;
}

/* 0: `data` is no valid record (torn or damaged). Parsed by hand: a claim
 * reads the record twice after each of a session's APPENDs, and strtoul
 * cost more than the rest of the claim's user time. */
static uint32_t parse_record(const char *data, size_t len)
{
    if (len == 0 || len > RECORD_LEN)
        return 0;
    size_t i = 0;
    uint64_t v = 0;
    while (i < len && data[i] >= '0' && data[i] <= '9' && v <= UINT32_MAX)
        v = v * 10 + (uint64_t)(data[i++] - '0');
    if (i == 0 || v < 1 || v > UINT32_MAX)
        return 0;
    if (i < len && data[i] == '\n' && i + 1 == len) /* the older form "<digits>\n" */
        return (uint32_t)v;
    if (len != RECORD_LEN || i != 10 || data[i] != ' ' || data[RECORD_LEN - 1] != '\n')
        return 0;
    uint32_t crc = 0;
    for (size_t k = 11; k < RECORD_LEN - 1; k++) {
        int h = hex_digit_value(data[k]);
        if (h < 0)
            return 0;
        crc = crc << 4 | (uint32_t)h;
    }
    return crc == crc32c(0, data, 10) ? (uint32_t)v : 0;
}

/* The stored mark; 1 (every message recent once) when there is none or it
 * cannot be read (*damaged then says whether a file is there but holds no
 * valid record: the next write must cut it to one record). */
static uint32_t read_mark_checked(struct mailbox *box, bool *damaged)
{
    *damaged = false;
    int fd = recent_fd(box, false);
    if (fd < 0)
        return 1;
    char data[RECORD_LEN + 1];
    volatile const char *map = record_map(box, fd);
    for (int i = 0; map != NULL && i < READ_TRIES; i++) {
        /* volatile: each try loads the bytes again (a writer in another
         * process may be halfway through them) */
        for (size_t k = 0; k < RECORD_LEN; k++)
            data[k] = map[k];
        uint32_t v = parse_record(data, RECORD_LEN);
        if (v != 0)
            return v;
    }
    if (map != NULL) {
        /* Not a record any more (rewritten by something else, in another
         * form or length): the file as it is now decides, read. */
        munmap(box->recent_map, RECORD_LEN);
        box->recent_map = NULL;
        box->recent_unmappable = true;
    }
    for (int i = 0; i < READ_TRIES; i++) {
        ssize_t n = pread(fd, data, sizeof(data), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 1;
        uint32_t v = parse_record(data, (size_t)n);
        if (v != 0)
            return v;
    }
    *damaged = true; /* not racing a writer */
    return 1;
}

static uint32_t read_mark(struct mailbox *box)
{
    bool damaged;
    return read_mark_checked(box, &damaged);
}

static bool write_mark(struct mailbox *box, uint32_t mark, bool damaged, struct petrel_error *err)
{
    int fd = recent_fd(box, true);
    if (fd < 0)
        return petrel_error_set_errno(err, errno, "cannot open %s/%s: %s", box->dir,
                                      MAILDIR_RECENT, strerror(errno));
    char text[RECORD_LEN];
    for (int k = 9; k >= 0; k--, mark /= 10)
        text[k] = (char)('0' + mark % 10);
    uint32_t crc = crc32c(0, text, 10);
    text[10] = ' ';
    for (int k = 18; k >= 11; k--, crc >>= 4)
        text[k] = "0123456789abcdef"[crc & 15];
    text[RECORD_LEN - 1] = '\n';
    volatile char *map = box->recent_rw ? record_map(box, fd) : NULL;
    if (map != NULL) {
        /* one record long when mapped: the store is the whole file */
        for (size_t k = 0; k < RECORD_LEN; k++)
            map[k] = text[k];
        return true;
    }
    ssize_t n;
    do
        n = pwrite(fd, text, RECORD_LEN, 0);
    while (n < 0 && errno == EINTR);
    if (n != RECORD_LEN)
        return petrel_error_set_errno(err, n < 0 ? errno : EIO, "cannot write %s/%s: %s",
                                      box->dir, MAILDIR_RECENT,
                                      n < 0 ? strerror(errno) : "short write");
    /* A damaged file longer than a record would stay unreadable under the
     * record written over its start, and every message recent at every
     * SELECT from then on: cut it to the record. */
    if (damaged && ftruncate(fd, RECORD_LEN) != 0)
        return petrel_error_set_errno(err, errno, "cannot truncate %s/%s: %s", box->dir,
                                      MAILDIR_RECENT, strerror(errno));
    box->recent_unmappable = false; /* a record now: mapped from the next read */
    return true;
}

uint32_t maildir_recent_peek(struct mailbox *box)
{
    return read_mark(box);
}

bool maildir_recent_claim(struct mailbox *box, uint32_t *first, uint32_t *until,
                          struct petrel_error *err)
{
    /* The handle's view has just been synced by the caller: it claims what
     * it has seen, up to its next UID. Nothing new since the mark: no lock,
     * the common SELECT. */
    uint32_t seen_next = fileindex_get_header(box->index)->next_uid;
    uint32_t seen_mark = read_mark(box);
    if (seen_mark >= seen_next) {
        *first = *until = seen_mark;
        return true;
    }
    /* A lock on the mark file orders claims (two sessions never both take
     * a UID; the mark only grows). It is the file's own lock, not the
     * folder's: a claim follows each of a session's own APPENDs, and
     * taking the folder lock would also bring the index up to date. */
    int fd = recent_fd(box, true);
    if (fd < 0)
        return petrel_error_set_errno(err, errno, "cannot open %s/%s: %s", box->dir,
                                      MAILDIR_RECENT, strerror(errno));
    int rc;
    do
        rc = flock(fd, LOCK_EX);
    while (rc != 0 && errno == EINTR);
    if (rc != 0)
        return petrel_error_set_errno(err, errno, "cannot lock %s/%s: %s", box->dir,
                                      MAILDIR_RECENT, strerror(errno));
    bool damaged;
    uint32_t mark = read_mark_checked(box, &damaged);
    *first = mark;
    *until = seen_next > mark ? seen_next : mark;
    bool ok = seen_next <= mark || write_mark(box, seen_next, damaged, err);
    (void)flock(fd, LOCK_UN);
    return ok;
}

uint32_t maildir_recent_count(struct mailbox *box)
{
    uint32_t mark = read_mark(box);
    size_t lo = 0, hi = fileindex_count(box->index);
    while (lo < hi) { /* first record with uid >= mark */
        size_t mid = lo + (hi - lo) / 2;
        if (fileindex_record_at(box->index, mid)->uid < mark)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (uint32_t)(fileindex_count(box->index) - lo);
}
