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
 * The file is read and written with pread and pwrite, not through a shared
 * mapping: a mapped page past the end of a file that something else cut to
 * zero bytes raises SIGBUS, which would stop petreld and every session in
 * it. It is opened with O_NOFOLLOW and used only when it is a regular file
 * (a symlink planted in the folder would otherwise have petreld write and
 * truncate its target). A claim checks, under the file's lock, that the
 * name still leads to the open file: one replaced by rename (a restore, a
 * copy tool) is opened again, or the handle would go on claiming into the
 * old inode while new sessions read the new one, and a message would be
 * recent in two sessions. */
#include "storage/maildir/maildir-private.h"

#include "core/crc32c.h"
#include "core/slice.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAILDIR_RECENT "petrel-recent"
#define RECORD_LEN 20 /* "%010u %08x\n" */
#define READ_TRIES 64

/* Opens the file for reading and writing when it exists, or creates it
 * when `create` (the caller holds the folder lock). -1 (errno set) when it
 * is a symlink or not a regular file. O_NONBLOCK: a FIFO put there must
 * not block the open (it is then refused by the fstat). */
static int recent_fd(struct mailbox *box, bool create)
{
    if (box->recent_fd >= 0)
        return box->recent_fd;
    int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (create ? O_CREAT : 0);
    int fd = openat(box->dir_fd, MAILDIR_RECENT, flags, 0600);
    if (fd < 0 && !create && (errno == EACCES || errno == EROFS))
        fd = openat(box->dir_fd, MAILDIR_RECENT, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    box->recent_fd = fd;
    box->recent_fd_dev = (uint64_t)st.st_dev;
    box->recent_fd_ino = (uint64_t)st.st_ino;
    return fd;
}

void maildir_recent_release(struct mailbox *box)
{
    if (box->recent_fd >= 0)
        close(box->recent_fd);
    box->recent_fd = -1;
}

/* Under the file's lock: true when the name no longer leads to the open file (the
 * file was replaced by rename or removed); the caller opens it again. */
static bool recent_replaced(const struct mailbox *box)
{
    struct stat st;
    if (fstatat(box->dir_fd, MAILDIR_RECENT, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT;
    return (uint64_t)st.st_ino != box->recent_fd_ino || (uint64_t)st.st_dev != box->recent_fd_dev;
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
    int fd;
    for (int tries = 0;; tries++) {
        fd = recent_fd(box, true);
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
        /* Replaced by rename since it was opened: the lock and the mark
         * that count are the new file's. */
        if (tries >= 3 || !recent_replaced(box))
            break;
        (void)flock(fd, LOCK_UN);
        maildir_recent_release(box);
    }
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
