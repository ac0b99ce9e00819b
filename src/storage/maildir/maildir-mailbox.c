/* mail-storage.h over Maildir++: one folder — open, sync with the files on
 * disk, read, append, flag, expunge, and index maintenance.
 *
 * Every indexed message lives in cur/ as "<base>:2,<flags>"; the index keeps
 * the base name. A sync (on open, when cur/ or new/ changed since the last
 * one) picks up what other programs did: new files (moved from new/ to cur/
 * and given UIDs), removed files (expunged), renamed flags (the file name
 * wins). dovecot-uidlist is kept in step for Dovecot interoperability. */
#include "storage/maildir/maildir-private.h"

#include "core/fs-journal.h"
#include "core/fs-util.h"
#include "core/log.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"
#include "storage/maildir/maildir-filename.h"
#include "storage/maildir/maildir-uidlist.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define COMPONENT "storage"
#define MAX_MESSAGE_BYTES (1ull << 36) /* 64 GiB: far above any sane mail */

struct disk_file {
    char *name; /* file name in its directory */
    char *base;
    bool in_new;
    uint32_t flags;
    uint32_t keywords;
    bool has_size;
    uint64_t size;
    bool has_vsize;
    uint64_t vsize;
    bool seen;    /* matched to an index record */
    uint32_t uid; /* sync: the UID dovecot-uidlist gave it (0 = none) */
};

static const char *box_path(struct mailbox *box, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static const char *box_path(struct mailbox *box, const char *fmt, ...)
{
    buf_reset(&box->path);
    buf_append_str(&box->path, box->dir);
    buf_append_char(&box->path, '/');
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(&box->path, fmt, ap);
    va_end(ap);
    return box->path.data;
}

const char *maildir_rel(const struct mailbox *box, const char *path)
{
    return fs_path_under(box->dir, path);
}

bool maildir_dir_current(const struct mailbox *box)
{
    struct stat st;
    return stat(box->dir, &st) == 0 && (uint64_t)st.st_dev == box->dir_dev &&
           (uint64_t)st.st_ino == box->dir_ino;
}

DIR *maildir_opendir_sub(struct mailbox *box, const char *sub)
{
    int fd = openat(box->dir_fd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return d;
}

bool maildir_fsync_sub(struct mailbox *box, const char *sub, struct petrel_error *err)
{
    return fs_fsync_dir_at(box->dir_fd, box_path(box, "%s", sub), err);
}

static bool fsync_enabled(const struct mailbox *box)
{
    return box->common.user->storage->index_settings.fsync != FILEINDEX_FSYNC_NEVER;
}

/* ---------- scanning the directories ---------- */

static void disk_file_free(void *p)
{
    struct disk_file *f = p;
    free(f->name);
    free(f->base);
    free(f);
}

static bool scan_dir(struct mailbox *box, const char *sub, bool in_new, struct smap *files,
                     struct petrel_error *err)
{
    char *path = xasprintf("%s/%s", box->dir, sub);
    DIR *d = maildir_opendir_sub(box, sub);
    if (d == NULL) {
        bool missing = errno == ENOENT;
        petrel_error_set_errno(err, errno, "cannot read %s: %s", path, strerror(errno));
        free(path);
        return missing; /* a missing new/ or cur/ is just empty */
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        struct maildir_filename fn;
        if (!maildir_filename_parse(de->d_name, &fn))
            continue;
        char *base = xstrndup(fn.base, fn.base_len);
        struct disk_file *prior = smap_get(files, base);
        if (prior != NULL) {
            /* The same message in new/ and cur/ (a crash between link and
             * unlink): keep the cur/ copy. */
            if (!prior->in_new || in_new) {
                free(base);
                continue;
            }
            disk_file_free(smap_remove(files, base));
        }
        struct disk_file *f = xcalloc(1, sizeof(*f));
        f->name = xstrdup(de->d_name);
        f->base = base;
        f->in_new = in_new;
        f->flags = fn.flags;
        f->keywords = fn.keywords;
        f->has_size = fn.has_size;
        f->size = fn.size;
        f->has_vsize = fn.has_vsize;
        f->vsize = fn.vsize;
        smap_put(files, base, f);
    }
    closedir(d);
    free(path);
    return true;
}

/* Size and virtual size (CRLF line endings) of a file without S=/W=. */
static bool measure_file(struct mailbox *box, const char *path, struct disk_file *f,
                         struct petrel_error *err)
{
    int fd = openat(box->dir_fd, maildir_rel(box, path), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return petrel_error_set_errno(err, errno, "cannot open %s: %s", path, strerror(errno));
    uint64_t size = 0;
    uint64_t bare_lf = 0;
    char prev = '\0';
    char chunk[65536];
    for (;;) {
        ssize_t r = read(fd, chunk, sizeof(chunk));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            close(fd);
            return petrel_error_set_errno(err, errno, "read %s: %s", path, strerror(errno));
        }
        if (r == 0)
            break;
        for (ssize_t i = 0; i < r; i++) {
            if (chunk[i] == '\n' && prev != '\r')
                bare_lf++;
            prev = chunk[i];
        }
        size += (uint64_t)r;
    }
    close(fd);
    if (!f->has_size)
        f->size = size;
    if (!f->has_vsize)
        f->vsize = size + bare_lf;
    f->has_size = f->has_vsize = true;
    return true;
}

static int64_t file_mtime(struct mailbox *box, const char *path)
{
    struct stat st;
    return fstatat(box->dir_fd, maildir_rel(box, path), &st, 0) == 0 ? (int64_t)st.st_mtime
                                                                     : (int64_t)time(NULL);
}

/* ---------- sync stamp ----------
 *
 * petrel-maildir-sync holds the mtimes of cur/ and new/ (and cur/'s inode)
 * as of the last scan that left the index complete; while they are
 * unchanged, opening the folder skips the scan. Rules that keep a change
 * made by another program (a delivery into new/, a flag rename in cur/)
 * from being covered by a stamp that never saw it:
 *   - a scan captures the stamp *before* reading the directories;
 *   - a new/ mtime within STAMP_FUZZ of that capture could be shared by a
 *     delivery right after it (file times come from a coarse clock), so
 *     such a stamp is not kept: the next operation scans again;
 *   - Petrel's own changes to cur/ (append, flags, expunge; all under the
 *     folder lock) renew the stamp only when it was current before the
 *     change, with cur/ as captured right after it and new/ as it was
 *     before: a delivery meanwhile leaves the stamp stale.
 * (A rename in cur/ by another program within one clock tick after a
 * capture can still go unseen until cur/ changes again; index/rebuild
 * always scans.)
 *
 * The stamp is one fixed-size record (STAMP_LEN bytes) ending in a
 * checksum of its text, rewritten in place (pwrite at offset 0, no fsync):
 * replacing the file by rename cost ~1 ms per change on ext4, which flushes
 * the new file's data on a rename over an existing one. A reader accepts
 * only a file of exactly STAMP_LEN bytes equal to the record it formats
 * from the directories now, so a record torn by a concurrent write or a
 * crash, a zeroed or half-written block, a record of an older format or
 * any other damage reads as "not current": one extra scan, never a skipped
 * one. Writers never interleave within the record (one write call of a few
 * bytes; concurrent stamp writers race exactly as the renames did: the
 * last one wins). Invalidating overwrites the record with one that matches
 * nothing (or unlinks the file) without creating it. */

#define STAMP_FUZZ_NS 50000000LL /* 50 ms: well above a clock tick */

/* "P2 <cur s>.<ns> <new s>.<ns> <cur ino> <checksum>\n", fixed widths. */
#define STAMP_LEN 103

struct dir_stamp {
    bool ok;
    struct timespec cur;
    struct timespec nw;
    unsigned long long ino;
    struct timespec taken; /* CLOCK_REALTIME when captured */
};

static void stamp_capture(struct mailbox *box, struct dir_stamp *s)
{
    struct stat cur;
    struct stat nw;
    memset(s, 0, sizeof(*s));
    clock_gettime(CLOCK_REALTIME, &s->taken);
    s->ok = fstatat(box->dir_fd, "cur", &cur, 0) == 0 && fstatat(box->dir_fd, "new", &nw, 0) == 0;
    if (s->ok) {
        s->cur = cur.st_mtim;
        s->nw = nw.st_mtim;
        s->ino = (unsigned long long)cur.st_ino;
    }
}

/* FNV-1a, 64 bits: enough to tell a torn or mixed record from a whole one. */
static uint64_t stamp_checksum(const char *text, size_t len)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)text[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* The record for `s` into out[STAMP_LEN + 1]; false when `s` is not usable
 * (or does not fit the fixed widths, which no real file system gives). */
static bool stamp_format(const struct dir_stamp *s, char *out)
{
    if (!s->ok || s->cur.tv_sec < 0 || s->nw.tv_sec < 0)
        return false;
    int n = snprintf(out, STAMP_LEN + 1, "P2 %020lld.%09ld %020lld.%09ld %020llu ",
                     (long long)s->cur.tv_sec, s->cur.tv_nsec, (long long)s->nw.tv_sec,
                     s->nw.tv_nsec, s->ino);
    if (n != STAMP_LEN - 17)
        return false;
    uint64_t sum = stamp_checksum(out, (size_t)n);
    return snprintf(out + n, STAMP_LEN + 1 - (size_t)n, "%016llx\n", (unsigned long long)sum) == 17;
}

static bool timespec_equal(struct timespec a, struct timespec b)
{
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static void stamp_remember(struct mailbox *box, const struct dir_stamp *s)
{
    box->stamp_seen.ok = s->ok;
    box->stamp_seen.cur = s->cur;
    box->stamp_seen.nw = s->nw;
    box->stamp_seen.ino = s->ino;
}

/* Removes the stamp so that the next operation of any process rescans. */
static void stamp_forget(struct mailbox *box)
{
    box->stamp_seen.ok = false;
    unlinkat(box->dir_fd, MAILDIR_SYNC_STAMP, 0);
}

/* Whether the saved stamp describes the directories as `s` captured them. */
static bool stamp_saved_matches(struct mailbox *box, const struct dir_stamp *s)
{
    /* Unchanged since the stamp last matched: any change to cur/ or new/
     * moves an mtime (or cur/'s inode), and the stamp is only ever removed
     * by a process that changed cur/ or found it changed. */
    if (s->ok && box->stamp_seen.ok && box->stamp_seen.ino == s->ino &&
        timespec_equal(box->stamp_seen.cur, s->cur) && timespec_equal(box->stamp_seen.nw, s->nw))
        return true;
    char now[STAMP_LEN + 1];
    if (!stamp_format(s, now))
        return false;
    int fd = openat(box->dir_fd, MAILDIR_SYNC_STAMP, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char saved[STAMP_LEN + 1];
    ssize_t r;
    do
        r = pread(fd, saved, sizeof(saved), 0);
    while (r < 0 && errno == EINTR);
    close(fd);
    /* One byte more than a record is asked for: a longer file is no match. */
    bool match = r == STAMP_LEN && memcmp(saved, now, STAMP_LEN) == 0;
    if (match)
        stamp_remember(box, s);
    return match;
}

static bool stamp_current(struct mailbox *box)
{
    struct dir_stamp s;
    stamp_capture(box, &s);
    return stamp_saved_matches(box, &s);
}

static void stamp_store(struct mailbox *box, const struct dir_stamp *s)
{
    char text[STAMP_LEN + 1];
    bool valid = stamp_format(s, text);
    box->stamp_seen.ok = false; /* until the record is written */
    if (!valid) {
        /* Matches no capture (not a record of this format). */
        memset(text, '-', STAMP_LEN);
        text[STAMP_LEN - 1] = '\n';
    }
    /* A hint only: losing it costs one rescan, so no fsync. The file stays
     * open between changes; one unlinked meanwhile (stamp_forget of any
     * process) is opened again, so the record lands where readers look. */
    ssize_t w = -1;
    struct stat st;
    bool linked = false;
    for (int attempt = 0; attempt < 2 && !linked; attempt++) {
        if (box->stamp_fd < 0) {
            box->stamp_fd = openat(box->dir_fd, MAILDIR_SYNC_STAMP,
                                   O_WRONLY | O_CLOEXEC | (valid ? O_CREAT : 0), 0600);
            if (box->stamp_fd < 0) {
                if (valid || errno != ENOENT)
                    log_warn(COMPONENT, "cannot write sync stamp", "folder=%s error=\"%s\"",
                             box->dir, strerror(errno));
                if (!valid)
                    unlinkat(box->dir_fd, MAILDIR_SYNC_STAMP, 0);
                return;
            }
        }
        do
            w = pwrite(box->stamp_fd, text, STAMP_LEN, 0);
        while (w < 0 && errno == EINTR);
        if (fstat(box->stamp_fd, &st) != 0) {
            st.st_nlink = 1; /* cannot tell: trust the write */
            st.st_size = STAMP_LEN;
        }
        linked = st.st_nlink > 0;
        if (!linked) {
            close(box->stamp_fd);
            box->stamp_fd = -1;
        }
    }
    bool ok = linked && w == STAMP_LEN &&
              (st.st_size <= STAMP_LEN || ftruncate(box->stamp_fd, STAMP_LEN) == 0);
    if (!ok) {
        if (linked)
            log_warn(COMPONENT, "cannot write sync stamp", "folder=%s error=\"%s\"", box->dir,
                     w < 0 || w == STAMP_LEN ? strerror(errno) : "short write");
        /* Whatever is in it now must not be taken for current. */
        unlinkat(box->dir_fd, MAILDIR_SYNC_STAMP, 0);
        if (box->stamp_fd >= 0)
            close(box->stamp_fd);
        box->stamp_fd = -1;
    } else if (valid) {
        stamp_remember(box, s);
    }
}

/* After a scan that started with capture `s` and committed: keep it unless
 * new/ changed too shortly before the capture to rule out a later delivery
 * with the same mtime. */
static void stamp_store_scanned(struct mailbox *box, struct dir_stamp *s)
{
    long long age = (long long)(s->taken.tv_sec - s->nw.tv_sec) * 1000000000LL +
                    (s->taken.tv_nsec - s->nw.tv_nsec);
    if (age < STAMP_FUZZ_NS)
        s->ok = false;
    stamp_store(box, s);
}

/* Under the folder lock, before Petrel changes cur/ itself. */
static void stamp_change_begin(struct mailbox *box, struct dir_stamp *s)
{
    stamp_capture(box, s);
    if (!stamp_saved_matches(box, s))
        s->ok = false; /* something unscanned is there: leave the stamp stale */
}

/* Under the folder lock, right after the change: cur/ as it is now, new/
 * as it was before. Written once the change committed. */
static void stamp_change_end(struct mailbox *box, struct dir_stamp *s)
{
    if (!s->ok)
        return;
    struct stat cur;
    s->ok = fstatat(box->dir_fd, "cur", &cur, 0) == 0;
    if (s->ok) {
        s->cur = cur.st_mtim;
        s->ino = (unsigned long long)cur.st_ino;
    }
}

static void stamp_change_commit(struct mailbox *box, const struct dir_stamp *s)
{
    if (s->ok)
        stamp_store(box, s);
}

/* The stamp of a change, written by the index commit that records it while
 * the folder lock is still held: written after the unlock, a writer that
 * came in between would find cur/ changed and the stamp behind, and every
 * handle would rescan the folder (every delivery, with concurrent ones). */
struct stamp_commit {
    struct mailbox *box;
    const struct dir_stamp *stamp;
};

static void stamp_committed(void *arg)
{
    const struct stamp_commit *c = arg;
    stamp_change_commit(c->box, c->stamp);
}

/* ---------- uidlist ---------- */

/* Writes dovecot-uidlist whole for what the index holds once the open
 * transaction commits: the current view without `gone` (ascending UIDs),
 * then `added` (ascending, above every UID of the view), and `next_uid`.
 * Runs inside the transaction, so under the folder lock: written after the
 * commit it would race with another process appending a line (and, from
 * the view before the commit, would describe the old state). */
static bool uidlist_write_state(struct mailbox *box, uint32_t next_uid, const uint32_t *gone,
                                size_t gone_count, const struct fileindex_record *added,
                                size_t added_count, struct petrel_error *err)
{
    const struct fileindex_header *h = fileindex_get_header(box->index);
    struct uidlist list;
    memset(&list, 0, sizeof(list));
    list.uid_validity = h->uid_validity;
    list.next_uid = next_uid > h->next_uid ? next_uid : h->next_uid;
    memcpy(list.guid, h->guid, 16);
    list.has_guid = true;
    size_t n = fileindex_count(box->index);
    size_t g = 0;
    char ext[32];
    for (size_t i = 0; i < n; i++) {
        const struct fileindex_record *r = fileindex_record_at(box->index, i);
        while (g < gone_count && gone[g] < r->uid)
            g++;
        if (g < gone_count && gone[g] == r->uid)
            continue;
        snprintf(ext, sizeof(ext), "W%llu", (unsigned long long)r->vsize);
        uidlist_add(&list, r->uid, r->filename, ext);
    }
    for (size_t i = 0; i < added_count; i++) {
        snprintf(ext, sizeof(ext), "W%llu", (unsigned long long)added[i].vsize);
        uidlist_add(&list, added[i].uid, added[i].filename, ext);
        if (added[i].uid >= list.next_uid)
            list.next_uid = added[i].uid + 1;
    }
    bool ok =
        uidlist_write(box->dir_fd, box_path(box, MAILDIR_UIDLIST), &list, fsync_enabled(box), err);
    uidlist_free(&list);
    return ok;
}

/* Writes dovecot-uidlist whole from a complete record set (rebuild). */
static bool uidlist_from_records(struct mailbox *box, const struct fileindex_header *h,
                                 const struct fileindex_record *records, size_t count,
                                 struct petrel_error *err)
{
    struct uidlist list;
    memset(&list, 0, sizeof(list));
    list.uid_validity = h->uid_validity;
    list.next_uid = h->next_uid;
    memcpy(list.guid, h->guid, 16);
    list.has_guid = true;
    char ext[32];
    for (size_t i = 0; i < count; i++) {
        snprintf(ext, sizeof(ext), "W%llu", (unsigned long long)records[i].vsize);
        uidlist_add(&list, records[i].uid, records[i].filename, ext);
    }
    bool ok =
        uidlist_write(box->dir_fd, box_path(box, MAILDIR_UIDLIST), &list, fsync_enabled(box), err);
    uidlist_free(&list);
    return ok;
}

/* box->uidlist in step with the file (under the folder lock): lines other
 * handles appended are read on their own (a delivery to a large INBOX
 * does not parse all of it again); anything else reads the whole file. */
static bool uidlist_current(struct mailbox *box, const char *path, struct stat *st, bool *have_st,
                            struct petrel_error *err)
{
    *have_st = box->uidlist_loaded && fstatat(box->dir_fd, maildir_rel(box, path), st, 0) == 0;
    if (*have_st && ((uint64_t)st->st_size == box->uidlist.file_size ||
                     uidlist_read_appended(box->dir_fd, path, &box->uidlist)))
        return true;
    *have_st = false;
    if (box->uidlist_loaded)
        uidlist_free(&box->uidlist);
    box->uidlist_loaded = false;
    memset(&box->uidlist, 0, sizeof(box->uidlist));
    if (!uidlist_read(box->dir_fd, path, &box->uidlist, err))
        return false;
    box->uidlist_loaded = true;
    return true;
}

/* The kept descriptor when an append may go straight through it: the path
 * (stat `st`) still names the file it and box->uidlist describe, of the
 * size read, and the header need not change. Else -1. */
static int uidlist_kept_fd(struct mailbox *box, const struct stat *st, bool have_st)
{
    const struct uidlist *l = &box->uidlist;
    uint32_t last_uid = l->count > 0 ? l->entries[l->count - 1].uid : 0;
    if (box->uidlist_fd < 0 || !have_st || l->version != 3 || l->file_size == 0 ||
        (uint64_t)st->st_size != l->file_size || (uint64_t)st->st_dev != box->uidlist_fd_dev ||
        (uint64_t)st->st_ino != box->uidlist_fd_ino || l->file_dev != box->uidlist_fd_dev ||
        l->file_ino != box->uidlist_fd_ino || last_uid == 0 || l->next_uid > last_uid + 1)
        return -1;
    return box->uidlist_fd;
}

/* After an append through the path: keep the file open for the next one
 * when it is the file box->uidlist now describes (by size). */
static void uidlist_keep_fd(struct mailbox *box, const char *path)
{
    if (box->uidlist_fd >= 0)
        close(box->uidlist_fd);
    box->uidlist_fd = openat(box->dir_fd, maildir_rel(box, path), O_RDWR | O_CLOEXEC);
    struct stat st;
    if (box->uidlist_fd >= 0 &&
        (fstat(box->uidlist_fd, &st) != 0 || (uint64_t)st.st_size != box->uidlist.file_size)) {
        close(box->uidlist_fd);
        box->uidlist_fd = -1;
    }
    if (box->uidlist_fd < 0)
        return;
    /* The file the list describes now (a rewrite made a new one). */
    box->uidlist.file_dev = box->uidlist_fd_dev = (uint64_t)st.st_dev;
    box->uidlist.file_ino = box->uidlist_fd_ino = (uint64_t)st.st_ino;
}

/* Appends one line to dovecot-uidlist (under the folder lock), re-reading
 * the file first when another process changed it. With `sync` false a plain
 * append is not fdatasync'ed here: mailbox_append writes it out and its
 * index commit makes it durable (a rewrite of the whole file still syncs). */
static bool uidlist_note_append(struct mailbox *box, uint32_t uid, const char *base, uint64_t vsize,
                                bool sync, struct petrel_error *err)
{
    /* The index view does not hold the new message before the commit. */
    const struct fileindex_record added = {.uid = uid, .vsize = vsize, .filename = base};
    const char *path = box_path(box, MAILDIR_UIDLIST);
    struct stat st;
    bool have_st;
    if (!uidlist_current(box, path, &st, &have_st, err)) {
        /* Missing or damaged: write it whole from the index instead. */
        return uidlist_write_state(box, uid + 1, NULL, 0, &added, 1, err);
    }
    if ((box->uidlist.count > 0 && box->uidlist.entries[box->uidlist.count - 1].uid >= uid) ||
        box->uidlist.uid_validity != fileindex_get_header(box->index)->uid_validity)
        return uidlist_write_state(box, uid + 1, NULL, 0, &added, 1, err);
    char ext[32];
    snprintf(ext, sizeof(ext), "W%llu", (unsigned long long)vsize);
    size_t from = box->uidlist.count;
    uidlist_add(&box->uidlist, uid, base, ext);
    if (uid >= box->uidlist.next_uid)
        box->uidlist.next_uid = uid + 1;
    bool want_sync = sync && fsync_enabled(box);
    int kept = uidlist_kept_fd(box, &st, have_st);
    path = box_path(box, MAILDIR_UIDLIST);
    bool ok = kept >= 0 ? uidlist_append_fd(kept, path, &box->uidlist, from, want_sync, err)
                        : uidlist_append(box->dir_fd, path, &box->uidlist, from, want_sync, err);
    if (ok && kept < 0)
        uidlist_keep_fd(box, path);
    if (!ok) {
        if (box->uidlist_fd >= 0)
            close(box->uidlist_fd);
        box->uidlist_fd = -1;
        uidlist_free(&box->uidlist);
        box->uidlist_loaded = false;
    }
    return ok;
}

/* dovecot-uidlist keeps the lines of expunged messages until they make up
 * a quarter of it (Dovecot does the same): every reader, Dovecot included,
 * ignores a line whose file is gone, while a rewrite per EXPUNGE costs a new
 * inode, a rename and the whole file. True when it should be rewritten now:
 * stale lines pile up, or the file is missing, damaged or of another
 * UIDVALIDITY. `live` is the number of messages left after the expunge. */
static bool uidlist_worth_compacting(struct mailbox *box, size_t live)
{
    struct petrel_error rerr;
    struct stat st;
    bool have_st;
    if (!uidlist_current(box, box_path(box, MAILDIR_UIDLIST), &st, &have_st, &rerr))
        return true;
    if (box->uidlist.uid_validity != fileindex_get_header(box->index)->uid_validity)
        return true;
    return box->uidlist.count > live + live / 4 + 32;
}

/* ---------- flags on disk ---------- */

static void disk_name(const char *base, uint32_t flags, uint32_t keywords, struct buf *out)
{
    buf_reset(out);
    maildir_filename_build(base, strlen(base), flags, keywords, "", out);
}

/* Renames cur/<from> to cur/<to>; false when the source is gone. */
static bool rename_in_cur(struct mailbox *box, const char *from_sub, const char *from,
                          const char *to, struct petrel_error *err)
{
    char *src = xasprintf("%s/%s/%s", box->dir, from_sub, from);
    char *dst = xasprintf("%s/cur/%s", box->dir, to);
    bool ok = strcmp(src, dst) == 0 ||
              renameat(box->dir_fd, maildir_rel(box, src), box->dir_fd, maildir_rel(box, dst)) == 0;
    if (!ok)
        petrel_error_set(err, errno == ENOENT ? PETREL_ERR_NOT_FOUND : PETREL_ERR_IO,
                         "rename %s: %s", src, strerror(errno));
    free(src);
    free(dst);
    return ok;
}

/* ---------- sync ---------- */

struct sync_state {
    struct mailbox *box;
    struct fileindex_txn *txn;
    struct smap *files;
    bool changed;
};

/* Files with a UID from dovecot-uidlist first (ascending), then the rest
 * by base name. */
static int cmp_new_files(const void *a, const void *b)
{
    const struct disk_file *x = *(const struct disk_file *const *)a;
    const struct disk_file *y = *(const struct disk_file *const *)b;
    if ((x->uid != 0) != (y->uid != 0))
        return x->uid != 0 ? -1 : 1;
    if (x->uid != y->uid)
        return (x->uid > y->uid) - (x->uid < y->uid);
    return strcmp(x->base, y->base);
}

/* dovecot-uidlist as another program (Dovecot) left it, when it belongs to
 * this folder's UIDVALIDITY: the UIDs it gave files the index does not
 * know yet, and how far its UIDs went. */
static bool uidlist_read_same_validity(struct mailbox *box, struct uidlist *ul)
{
    memset(ul, 0, sizeof(*ul));
    struct petrel_error uerr;
    if (!uidlist_read(box->dir_fd, box_path(box, MAILDIR_UIDLIST), ul, &uerr))
        return false;
    if (ul->uid_validity != fileindex_get_header(box->index)->uid_validity) {
        uidlist_free(ul);
        return false;
    }
    return true;
}

/* Files left in tmp/ by a save that never finished (a crash between write
 * and rename) are removed once they are clearly abandoned, as Dovecot does.
 * The change time counts too: a copy hard-links a file into tmp/, which
 * keeps the source's old mtime but sets a new ctime. */
#define TMP_MAX_AGE_SECS (36 * 3600)

static void clean_tmp(struct mailbox *box)
{
    DIR *d = maildir_opendir_sub(box, "tmp");
    if (d != NULL) {
        time_t limit = time(NULL) - TMP_MAX_AGE_SECS;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            struct stat st;
            if (de->d_name[0] == '.' ||
                fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
                !S_ISREG(st.st_mode) || st.st_mtime > limit || st.st_ctime > limit)
                continue;
            if (unlinkat(dirfd(d), de->d_name, 0) == 0)
                log_info(COMPONENT, "removed abandoned tmp file", "folder=%s file=%s", box->dir,
                         de->d_name);
        }
        closedir(d);
    }
}

static bool sync_locked(struct mailbox *box, struct fileindex_txn *txn, struct petrel_error *err)
{
    /* A read-only folder is taken as it is: its files stay where they are
     * (messages in new/ are read from there) and only this handle's view
     * learns of them. */
    bool ro = box->read_only;
    if (!ro)
        clean_tmp(box);
    struct smap *files = smap_new();
    bool ok = scan_dir(box, "cur", false, files, err) && scan_dir(box, "new", true, files, err);
    struct buf name = {0};
    bool changed = false;
    /* Known messages: gone, moved, or flags changed by another program. */
    size_t n = fileindex_count(box->index);
    uint32_t *gone = xcalloc(n + 1, sizeof(uint32_t));
    size_t gone_count = 0;
    for (size_t i = 0; ok && i < n; i++) {
        const struct fileindex_record *r = fileindex_record_at(box->index, i);
        struct disk_file *f = smap_get(files, r->filename);
        if (f == NULL) {
            gone[gone_count++] = r->uid;
            continue;
        }
        f->seen = true;
        uint32_t flags = f->in_new ? r->flags : f->flags;
        uint32_t keywords = f->in_new ? r->keywords : f->keywords;
        disk_name(r->filename, flags, keywords, &name);
        if (!ro && (f->in_new || strcmp(f->name, name.data) != 0)) {
            if (!rename_in_cur(box, f->in_new ? "new" : "cur", f->name, name.data, err))
                continue; /* vanished meanwhile: the next sync sees it */
        }
        if (flags != r->flags || keywords != r->keywords) {
            fileindex_txn_set_flags(txn, r->uid, flags, keywords);
            changed = true;
        }
    }
    for (size_t i = 0; i < gone_count; i++) {
        fileindex_txn_expunge(txn, gone[i]);
        changed = true;
    }
    /* New files: delivered by another program (or saved before a crash). */
    struct disk_file **fresh = NULL;
    size_t fresh_count = 0;
    size_t fresh_cap = 0;
    const char *key = NULL;
    struct disk_file *f = ok ? smap_seek(files, "", false, &key) : NULL;
    while (f != NULL) {
        if (!f->seen) {
            fresh = xgrow(fresh, &fresh_cap, fresh_count + 1, sizeof(*fresh));
            fresh[fresh_count++] = f;
        }
        f = smap_seek(files, key, true, &key);
    }
    /* Keep the UIDs another program gave new files (Dovecot writes them to
     * dovecot-uidlist), and never hand out again a UID it used. */
    uint32_t next_uid = fileindex_get_header(box->index)->next_uid;
    struct uidlist ul;
    bool have_ul = ok && uidlist_read_same_validity(box, &ul);
    if (have_ul && fresh_count > 0) {
        struct smap *by_base = smap_new();
        for (size_t i = 0; i < ul.count; i++)
            smap_put(by_base, ul.entries[i].base, &ul.entries[i]);
        for (size_t i = 0; i < fresh_count; i++) {
            const struct uidlist_entry *ue = smap_get(by_base, fresh[i]->base);
            if (ue != NULL && ue->uid >= next_uid)
                fresh[i]->uid = ue->uid;
        }
        smap_free(by_base, NULL);
    }
    if (fresh_count > 1)
        qsort(fresh, fresh_count, sizeof(*fresh), cmp_new_files);
    struct fileindex_record *added = xcalloc(fresh_count + 1, sizeof(*added));
    size_t added_count = 0;
    for (size_t i = 0; ok && i < fresh_count; i++) {
        f = fresh[i];
        char *path = xasprintf("%s/%s/%s", box->dir, f->in_new ? "new" : "cur", f->name);
        struct petrel_error merr;
        int64_t mtime = file_mtime(box, path);
        bool measured = (f->has_size && f->has_vsize) || measure_file(box, path, f, &merr);
        free(path);
        if (!measured)
            continue;
        disk_name(f->base, f->flags, f->keywords, &name);
        if (!ro && !rename_in_cur(box, f->in_new ? "new" : "cur", f->name, name.data, err))
            continue;
        struct fileindex_record rec = {
            .uid = f->uid >= next_uid ? f->uid : 0,
            .flags = f->flags & MAIL_FLAG_ALL,
            .keywords = f->keywords,
            .size = f->size,
            .vsize = f->vsize,
            .internal_date = mtime,
            .filename = f->base,
        };
        uint32_t uid = fileindex_txn_append(txn, &rec);
        if (uid != 0) {
            rec.uid = uid;
            added[added_count++] = rec;
            next_uid = uid + 1;
        }
        changed = true;
    }
    if (have_ul) {
        if (ok && ul.next_uid > next_uid) {
            fileindex_txn_set_next_uid(txn, ul.next_uid);
            next_uid = ul.next_uid;
            changed = true;
        }
        uidlist_free(&ul);
    }
    if (ok && changed && !ro)
        ok = uidlist_write_state(box, next_uid, gone, gone_count, added, added_count, err);
    free(added);
    free(gone);
    free(fresh);
    buf_free(&name);
    smap_free(files, disk_file_free);
    return ok;
}

bool maildir_sync(struct mailbox *box, bool force, struct petrel_error *err)
{
    if (!force && stamp_current(box))
        return true;
    bool in_memory = false;
    struct fileindex_txn *txn = fileindex_begin_sync(box->index, &in_memory, err);
    if (txn == NULL)
        return false;
    box->read_only = in_memory;
    /* Looked at without the lock, the stamp may have been behind a writer
     * that was between its change to cur/ and its commit; Petrel's writers
     * stamp before they unlock, so under the lock it is the last word. */
    if (!force && stamp_current(box)) {
        fileindex_txn_rollback(txn);
        return true;
    }
    struct dir_stamp stamp;
    stamp_capture(box, &stamp);
    bool ok = sync_locked(box, txn, err);
    if (ok)
        ok = fileindex_txn_commit(txn, err);
    else
        fileindex_txn_rollback(txn);
    if (ok && !box->read_only)
        stamp_store_scanned(box, &stamp);
    return ok;
}

/* ---------- index creation and rebuild ---------- */

struct rebuild_entry {
    uint32_t uid;
    bool known; /* the uid comes from the index (else from dovecot-uidlist) */
    uint64_t modseq;
    int64_t mtime;
    struct disk_file *file;
};

/* By UID; for one UID claimed twice, the index's claim first. */
static int cmp_entries_uid(const void *a, const void *b)
{
    const struct rebuild_entry *x = a;
    const struct rebuild_entry *y = b;
    if (x->uid != y->uid)
        return (x->uid > y->uid) - (x->uid < y->uid);
    if (x->known != y->known)
        return x->known ? -1 : 1;
    return strcmp(x->file->base, y->file->base);
}

/* Builds the complete record set from the disk: UIDs come from the current
 * index when it knows the base, then from dovecot-uidlist, else are new;
 * flags come from the file names. */
static bool rebuild_locked(struct mailbox *box, struct fileindex_txn *txn,
                           struct mailbox_rebuild_stats *stats, struct petrel_error *err)
{
    struct smap *files = smap_new();
    if (!scan_dir(box, "cur", false, files, err) || !scan_dir(box, "new", true, files, err)) {
        smap_free(files, disk_file_free);
        return false;
    }
    struct uidlist ul;
    memset(&ul, 0, sizeof(ul));
    struct petrel_error uerr;
    petrel_error_clear(&uerr);
    bool have_ul = uidlist_read(box->dir_fd, box_path(box, MAILDIR_UIDLIST), &ul, &uerr);
    if (!have_ul && uerr.code != PETREL_ERR_NOT_FOUND)
        log_warn(COMPONENT, "dovecot-uidlist unreadable, ignoring it", "error=\"%s\"",
                 uerr.message);

    struct fileindex_header header = *fileindex_get_header(box->index);
    if (have_ul && ul.uid_validity != header.uid_validity) {
        /* Another UIDVALIDITY epoch: its UIDs mean nothing here. */
        uidlist_free(&ul);
        have_ul = false;
    }
    uint32_t next_uid = header.next_uid;
    if (have_ul && ul.next_uid > next_uid)
        next_uid = ul.next_uid;
    /* Base name -> uidlist entry (a linear search per file would make a
     * rebuild of a large folder quadratic). */
    struct smap *ul_bases = smap_new();
    for (size_t i = 0; have_ul && i < ul.count; i++)
        smap_put(ul_bases, ul.entries[i].base, &ul.entries[i]);

    struct smap *known = smap_new();
    size_t old_count = fileindex_count(box->index);
    for (size_t i = 0; i < old_count; i++) {
        const struct fileindex_record *r = fileindex_record_at(box->index, i);
        smap_put(known, r->filename, (void *)r);
    }

    size_t total = smap_count(files);
    struct rebuild_entry *entries = xcalloc(total + 1, sizeof(*entries));
    size_t n = 0;
    size_t still_known = 0;
    struct buf name = {0};
    const char *key = NULL;
    struct disk_file *f = smap_seek(files, "", false, &key);
    while (f != NULL) {
        stats->scanned++;
        const struct fileindex_record *prior = smap_get(known, f->base);
        /* A message the index knows keeps its internal date (and costs no
         * stat); others get the file's mtime, as a sync gives them. */
        int64_t mtime = prior != NULL ? prior->internal_date : 0;
        bool usable = f->has_size && f->has_vsize;
        if (prior == NULL || !usable) {
            char *path = xasprintf("%s/%s/%s", box->dir, f->in_new ? "new" : "cur", f->name);
            if (prior == NULL)
                mtime = file_mtime(box, path);
            struct petrel_error merr;
            usable = usable || measure_file(box, path, f, &merr);
            free(path);
        }
        disk_name(f->base, f->flags, f->keywords, &name);
        struct petrel_error rerr;
        if (usable && rename_in_cur(box, f->in_new ? "new" : "cur", f->name, name.data, &rerr)) {
            const struct uidlist_entry *ue = smap_get(ul_bases, f->base);
            struct rebuild_entry *e = &entries[n++];
            e->file = f;
            e->mtime = mtime;
            e->uid = prior != NULL ? prior->uid : ue != NULL ? ue->uid : 0;
            e->known = prior != NULL;
            e->modseq = prior != NULL ? prior->modseq : 0;
            if (prior != NULL)
                still_known++;
        }
        f = smap_seek(files, key, true, &key);
    }
    /* Known UIDs first in UID order; a duplicate (damaged uidlist) keeps the
     * first and is renumbered like a new file. */
    qsort(entries, n, sizeof(*entries), cmp_entries_uid);
    size_t first_known = 0;
    while (first_known < n && entries[first_known].uid == 0)
        first_known++;
    for (size_t i = first_known + 1; i < n; i++) {
        if (entries[i].uid == entries[i - 1].uid && entries[i].uid != 0)
            entries[i].uid = 0;
    }
    for (size_t i = first_known; i < n; i++) {
        if (entries[i].uid >= next_uid)
            next_uid = entries[i].uid + 1;
    }
    struct fileindex_record *records = xcalloc(n + 1, sizeof(*records));
    size_t count = 0;
    for (size_t pass = 0; pass < 2; pass++) {
        /* pass 0: preserved UIDs (ascending); pass 1: new ones, by base name */
        for (size_t i = 0; i < n; i++) {
            struct rebuild_entry *e = &entries[i];
            bool preserved = e->uid != 0;
            if ((pass == 0) != preserved)
                continue;
            struct fileindex_record *rec = &records[count++];
            if (preserved) {
                rec->uid = e->uid;
                stats->uids_preserved++;
            } else {
                rec->uid = next_uid++;
                stats->uids_assigned++;
            }
            rec->flags = e->file->flags & MAIL_FLAG_ALL;
            rec->keywords = e->file->keywords;
            rec->modseq = e->modseq;
            rec->size = e->file->size;
            rec->vsize = e->file->vsize;
            rec->internal_date = e->mtime;
            rec->filename = e->file->base;
        }
    }
    stats->orphans_dropped = old_count - still_known;
    header.next_uid = next_uid;
    bool ok = uidlist_from_records(box, &header, records, count, err) &&
              fileindex_txn_replace_all(txn, &header, records, count, err);
    free(records);
    free(entries);
    buf_free(&name);
    smap_free(known, NULL);
    smap_free(ul_bases, NULL);
    smap_free(files, disk_file_free);
    if (have_ul)
        uidlist_free(&ul);
    return ok;
}

bool maildir_index_init(struct mailbox *box, struct petrel_error *err)
{
    /* Identity: from an existing dovecot-uidlist (a Dovecot maildir moving
     * in) or new. */
    uint8_t guid[16];
    uint32_t uid_validity = 0;
    struct uidlist ul;
    memset(&ul, 0, sizeof(ul));
    struct petrel_error uerr;
    if (uidlist_read(box->dir_fd, box_path(box, MAILDIR_UIDLIST), &ul, &uerr) &&
        ul.uid_validity != 0) {
        uid_validity = ul.uid_validity;
        if (ul.has_guid)
            memcpy(guid, ul.guid, 16);
        else
            RAND_bytes(guid, sizeof(guid));
        uidlist_free(&ul);
    } else {
        RAND_bytes(guid, sizeof(guid));
        uid_validity = maildir_uid_validity_next(box);
    }
    const struct fileindex_settings *set = &box->common.user->storage->index_settings;
    if (!fileindex_create(box->dir, guid, uid_validity, set, err) && err->code != PETREL_ERR_EXISTS)
        return false;
    box->index = fileindex_open_in(box->dir, box->dir_fd, set, err);
    if (box->index == NULL)
        return false;
    struct fileindex_txn *txn = fileindex_begin(box->index, err);
    if (txn == NULL)
        return false;
    struct mailbox_rebuild_stats stats;
    memset(&stats, 0, sizeof(stats));
    struct dir_stamp stamp;
    stamp_capture(box, &stamp);
    bool ok = rebuild_locked(box, txn, &stats, err);
    if (ok)
        ok = fileindex_txn_commit(txn, err);
    else
        fileindex_txn_rollback(txn);
    if (ok)
        stamp_store_scanned(box, &stamp);
    return ok;
}

/* ---------- open / close ---------- */

struct mailbox *maildir_mailbox_alloc(struct mail_user *user, const struct namespace_config *ns,
                                      const char *name, char *dir, int dir_fd,
                                      const struct stat *dir_st)
{
    struct mailbox *box = xcalloc(1, sizeof(*box));
    box->dir_fd = dir_fd;
    box->dir_dev = (uint64_t)dir_st->st_dev;
    box->dir_ino = (uint64_t)dir_st->st_ino;
    box->uidlist_fd = -1;
    box->stamp_fd = -1;
    box->recent_fd = -1;
    box->common.user = user;
    box->common.ns = ns;
    box->common.name = xstrdup(maildir_is_inbox(ns, name) ? "INBOX" : name);
    box->dir = dir;
    return box;
}

struct mailbox *maildir_mailbox_open(struct mail_user *user, const struct namespace_config *ns,
                                     const char *name, struct petrel_error *err)
{
    struct buf dir = {0};
    if (!maildir_folder_dir(user, ns, name, &dir, err)) {
        buf_free(&dir);
        return NULL;
    }
    /* One's own INBOX is made on first use; another user's (a shared
     * namespace's instance) only opened. */
    bool inbox = maildir_is_inbox(ns, name) && ns->type == NAMESPACE_PERSONAL;
    struct stat st;
    if (stat(dir.data, &st) != 0 || !S_ISDIR(st.st_mode)) {
        if (!inbox) {
            buf_free(&dir);
            petrel_error_set(err, PETREL_ERR_NOT_FOUND, "folder not found: %s", name);
            return NULL;
        }
    }
    if (inbox && !maildir_make_dirs(dir.data, true, err)) {
        buf_free(&dir);
        return NULL;
    }
    int dir_fd = open(dir.data, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            petrel_error_set(err, PETREL_ERR_NOT_FOUND, "folder not found: %s", name);
        else
            petrel_error_set_errno(err, errno, "cannot open %s: %s", dir.data, strerror(errno));
        buf_free(&dir);
        return NULL;
    }
    struct stat dir_st;
    if (fstat(dir_fd, &dir_st) != 0) {
        petrel_error_set_errno(err, errno, "cannot stat %s: %s", dir.data, strerror(errno));
        close(dir_fd);
        buf_free(&dir);
        return NULL;
    }
    struct mailbox *box = maildir_mailbox_alloc(user, ns, name, buf_steal(&dir), dir_fd, &dir_st);
    const struct fileindex_settings *set = &user->storage->index_settings;
    struct petrel_error oerr;
    petrel_error_clear(&oerr);
    box->index = fileindex_open_in(box->dir, box->dir_fd, set, &oerr);
    bool ok;
    if (box->index != NULL) {
        /* The sync with the files on disk runs before the first operation
         * (ensure_synced), not here: index/rebuild must see the index as it
         * was to report what it preserved, assigned and dropped. */
        ok = true;
    } else if (oerr.code == PETREL_ERR_NOT_FOUND) {
        ok = maildir_index_init(box, err);
        box->synced = ok;
    } else if (oerr.code == PETREL_ERR_INVALID) {
        /* Losing or damaging an index loses no mail: start over from the
         * messages and dovecot-uidlist, which keep the UIDs. */
        log_warn(COMPONENT, "index damaged, rebuilding", "folder=%s error=\"%s\"", box->dir,
                 oerr.message);
        static const char *const index_files[] = {"petrel.index", "petrel.index.log",
                                                  "petrel.index.log.2", "petrel.index.cache"};
        for (size_t i = 0; i < sizeof(index_files) / sizeof(index_files[0]); i++)
            unlinkat(box->dir_fd, index_files[i], 0);
        ok = maildir_index_init(box, err);
        box->synced = ok;
    } else {
        ok = petrel_error_set(err, oerr.code, "%s", oerr.message);
    }
    if (ok)
        ok = maildir_keywords_read(box->dir_fd, box_path(box, MAILDIR_KEYWORDS), &box->keywords,
                                   err);
    if (!ok) {
        mailbox_close(box);
        return NULL;
    }
    return box;
}

void maildir_mailbox_close(struct mailbox *box)
{
    if (box == NULL)
        return;
    if (box->index != NULL) {
        struct petrel_error err;
        if (!fileindex_cache_flush(box->index, &err))
            log_debug(COMPONENT, "cannot write queued cache values", "folder=%s error=\"%s\"",
                      box->dir, err.message);
        fileindex_close(box->index);
    }
    if (box->uidlist_loaded)
        uidlist_free(&box->uidlist);
    if (box->uidlist_fd >= 0)
        close(box->uidlist_fd);
    if (box->stamp_fd >= 0)
        close(box->stamp_fd);
    maildir_recent_release(box);
    if (box->dir_fd >= 0)
        close(box->dir_fd);
    maildir_watch_forget_box(box);
    maildir_keywords_free(&box->keywords);
    buf_free(&box->path);
    free(box->common.name);
    free(box->dir);
    free(box);
}

bool maildir_is_read_only(const struct mailbox *box)
{
    return box->read_only || fileindex_read_only(box->index);
}

size_t maildir_memory_bytes(const struct mailbox *box)
{
    /* A uidlist entry owns two strings: a maildir base name (~60 bytes)
     * and its extensions, with malloc's overhead. */
    size_t n =
        sizeof(*box) + box->uidlist.cap * sizeof(box->uidlist.entries[0]) + box->uidlist.count * 96;
    if (box->index != NULL)
        n += fileindex_memory_bytes(box->index);
    return n;
}

struct maildir_name_source *maildir_names(const struct mailbox *box)
{
    const struct maildir_storage *ms = box->common.user->storage->driver;
    return ms->names;
}

bool maildir_mailbox_is(const struct mailbox *box, const struct namespace_config *ns,
                        const char *name)
{
    return box->common.ns == ns && strcmp(box->common.name, name) == 0 && maildir_dir_current(box);
}

/* The sync mailbox_open leaves to the first operation. */
static bool ensure_synced(struct mailbox *box, struct petrel_error *err)
{
    if (box->synced)
        return true;
    if (!maildir_sync(box, false, err))
        return false;
    box->synced = true;
    return true;
}

bool maildir_mailbox_sync(struct mailbox *box, struct petrel_error *err)
{
    return ensure_synced(box, err) && maildir_sync(box, false, err);
}

/* ---------- reading ---------- */

uint32_t maildir_handle_uid_validity(const struct mailbox *box)
{
    return fileindex_get_header(box->index)->uid_validity;
}

bool maildir_get_info(struct mailbox *box, bool stats, struct mailbox_info *info,
                      struct petrel_error *err)
{
    if (!ensure_synced(box, err) || !fileindex_refresh(box->index, err))
        return false;
    memset(info, 0, sizeof(*info));
    const struct fileindex_header *h = fileindex_get_header(box->index);
    memcpy(info->guid, h->guid, 16);
    info->uid_validity = h->uid_validity;
    info->next_uid = h->next_uid;
    info->highest_modseq = h->highest_modseq;
    size_t n = fileindex_count(box->index);
    info->messages = (uint32_t)n;
    info->unseen = (uint32_t)fileindex_unseen(box->index);
    info->recent = maildir_recent_count(box);
    if (!stats)
        return true;
    for (size_t i = 0; i < n; i++)
        info->size_bytes += fileindex_record_at(box->index, i)->size;
    static const char *const subs[] = {"cur", "new"};
    for (size_t s = 0; s < 2; s++) {
        DIR *d = maildir_opendir_sub(box, subs[s]);
        if (d == NULL)
            continue;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] != '.')
                info->on_disk_count++;
        }
        closedir(d);
    }
    return true;
}

bool maildir_foreach(struct mailbox *box, size_t limit,
                     void (*fn)(const struct mailbox_message *msg, void *ctx), void *ctx,
                     bool *truncated, struct petrel_error *err)
{
    if (!ensure_synced(box, err) || !fileindex_refresh(box->index, err))
        return false;
    size_t n = fileindex_count(box->index);
    *truncated = limit > 0 && n > limit;
    if (limit > 0 && n > limit)
        n = limit;
    struct buf name = {0};
    const char *kw[MAILDIR_MAX_KEYWORDS + 1];
    for (size_t i = 0; i < n; i++) {
        const struct fileindex_record *r = fileindex_record_at(box->index, i);
        size_t kw_count = 0;
        for (unsigned k = 0; k < MAILDIR_MAX_KEYWORDS; k++) {
            if ((r->keywords & (1u << k)) != 0 && box->keywords.names[k] != NULL)
                kw[kw_count++] = box->keywords.names[k];
        }
        kw[kw_count] = NULL;
        disk_name(r->filename, r->flags, r->keywords, &name);
        struct mailbox_message msg = {
            .uid = r->uid,
            .flags = r->flags,
            .modseq = r->modseq,
            .size = r->size,
            .vsize = r->vsize,
            .internal_date = r->internal_date,
            .filename = name.data,
            .keywords = kw,
            .keyword_count = kw_count,
        };
        fn(&msg, ctx);
    }
    buf_free(&name);
    return true;
}

/* ---------- writing ---------- */

static bool resolve_keywords(struct mailbox *box, const char *const *names, uint32_t *mask,
                             struct petrel_error *err)
{
    *mask = 0;
    if (names == NULL || names[0] == NULL)
        return true;
    /* Under the folder lock: re-read, add what is missing, write once. */
    maildir_keywords_free(&box->keywords);
    if (!maildir_keywords_read(box->dir_fd, box_path(box, MAILDIR_KEYWORDS), &box->keywords, err))
        return false;
    bool added = false;
    for (size_t i = 0; names[i] != NULL; i++) {
        int idx = maildir_keywords_find(&box->keywords, names[i]);
        if (idx < 0) {
            idx = maildir_keywords_add(&box->keywords, names[i], err);
            if (idx < 0)
                return false;
            added = true;
        }
        *mask |= 1u << idx;
    }
    if (added)
        return maildir_keywords_write(box->dir_fd, box_path(box, MAILDIR_KEYWORDS), &box->keywords,
                                      fsync_enabled(box), err);
    return true;
}

/* ---------- appending ----------
 *
 * A new message is written into an anonymous file (O_TMPFILE in tmp/) and
 * given its name in cur/ with linkat() once it is complete, so a process
 * killed at any point leaves no file in tmp/ (the kernel frees an
 * anonymous file with its last descriptor) and never a partial one in
 * cur/. Where the file system has no O_TMPFILE (or /proc is missing) a
 * named file in tmp/ is written and hard-linked into cur/ instead, the
 * classic maildir way; tmp/ sweeps remove what a crash leaves there.
 * Linking (not rename) never replaces an existing message: a name taken
 * meanwhile (EEXIST; two storages in one process can pick the same counter
 * within one microsecond) gets a fresh one.
 *
 * Durability (mail.fsync always/optimized). What costs is the disk cache
 * flush every fsync ends with (~3 ms on this project's virtual disks, the
 * same for a 100-byte and a 4 KB write), so an append issues one:
 *   - On a journaling file system that commits metadata in order with a
 *     cache flush (XFS, ext3/ext4 with an active journal:
 *     APPEND_SYNC_JOURNAL; fs_metadata_journaled()), the message bytes are
 *     written out first (sync_file_range, which waits for the write but
 *     does not flush), then under the folder lock come the link into cur/,
 *     the dovecot-uidlist line (written out likewise) and the index
 *     transaction, whose fsync commits the journal: that one commit makes
 *     the link, the new file's blocks and both appends durable, and its
 *     cache flush the data written before it. When mailbox_append returns,
 *     everything it changed is on stable storage.
 *   - Anywhere else (APPEND_SYNC_EACH; ext4 made without a journal too)
 *     every object is fsynced after its
 *     change: the file before it is linked, cur/, the uidlist, the index.
 * Failing before the index commit takes the file back out of cur/: nothing
 * stays behind that was reported as not saved. */

#define APPEND_NAME_TRIES 8

enum append_sync {
    APPEND_SYNC_NONE,    /* mail.fsync: never */
    APPEND_SYNC_JOURNAL, /* one commit (ext4, XFS) */
    APPEND_SYNC_EACH,    /* fsync per object */
};

static enum append_sync append_sync_mode(struct mailbox *box)
{
    if (!fsync_enabled(box))
        return APPEND_SYNC_NONE;
    /* Asked once per handle: the folder does not change file systems. An
     * ext4 without a journal (or one that cannot be told) gets the fsync of
     * every object, or a power loss could lose an acknowledged message. */
    if (box->journaled == 0)
        box->journaled = fs_metadata_journaled(box->dir) ? 1 : -1;
    return box->journaled > 0 ? APPEND_SYNC_JOURNAL : APPEND_SYNC_EACH;
}

/* Starts the write-out of what is cached for `fd` and waits for it, without
 * a cache flush or a journal commit. False only on an I/O error. */
static bool write_out(int fd)
{
    if (sync_file_range(fd, 0, 0,
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                            SYNC_FILE_RANGE_WAIT_AFTER) == 0)
        return true;
    /* Not supported for this file: a full sync does the same and more. */
    return (errno == ESPIPE || errno == EINVAL || errno == ENOSYS) && fdatasync(fd) == 0;
}

struct new_message {
    int fd;
    char *tmp_path; /* the named fallback only */
    bool is_source; /* fd is the caller's file itself (a copy of its descriptor) */
};

/* Where a new message's bytes come from: `data` (in memory), then, with
 * fd >= 0, `flen` bytes of the file `fd` from `foff` (a spooled upload).
 * `linkable`: the file holds exactly the message (no `data`, from offset
 * 0, nothing after) and is an unnamed O_TMPFILE on which nothing else
 * depends, so it may itself be linked into cur/ instead of copied. */
struct append_source {
    const char *data;
    size_t len;
    int fd;
    uint64_t foff;
    uint64_t flen;
    bool linkable;
};

#define APPEND_COPY_CHUNK (64 * 1024)

static bool write_all_fd(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return false;
        }
        p += w;
        len -= (size_t)w;
    }
    return true;
}

/* Appends `len` bytes of `in` from `off` to `out` at its current offset:
 * in the kernel (copy_file_range: no copy through this process; a
 * reflink where the file system can), else through a small buffer. */
static bool copy_fd_range(int in, uint64_t off, uint64_t len, int out)
{
    bool kernel = true;
    char *chunk = NULL;
    bool ok = true;
    while (ok && len > 0) {
        size_t step = len < (1u << 30) ? (size_t)len : (1u << 30);
        if (kernel) {
            loff_t pos = (loff_t)off;
            ssize_t n = copy_file_range(in, &pos, out, NULL, step, 0);
            if (n > 0) {
                off += (uint64_t)n;
                len -= (uint64_t)n;
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            if (n == 0) {
                errno = EIO; /* the file is shorter than promised */
                ok = false;
                break;
            }
            if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP &&
                errno != EBADF) {
                ok = false;
                break;
            }
            kernel = false;
            chunk = xmalloc(APPEND_COPY_CHUNK);
        }
        size_t want = step < APPEND_COPY_CHUNK ? step : APPEND_COPY_CHUNK;
        ssize_t n = pread(in, chunk, want, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            ok = false;
            break;
        }
        ok = write_all_fd(out, chunk, (size_t)n);
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
    free(chunk);
    return ok;
}

static bool write_source(int fd, const struct append_source *src)
{
    if (src->len > 0 && !write_all_fd(fd, src->data, src->len))
        return false;
    return src->fd < 0 || src->flen == 0 || copy_fd_range(src->fd, src->foff, src->flen, fd);
}

static void new_message_discard(struct mailbox *box, struct new_message *m)
{
    if (m->fd >= 0)
        close(m->fd);
    if (m->tmp_path != NULL) {
        unlinkat(box->dir_fd, maildir_rel(box, m->tmp_path), 0);
        free(m->tmp_path);
    }
    m->fd = -1;
    m->tmp_path = NULL;
    m->is_source = false;
}

/* Puts the written bytes on disk as `sync` wants before the file is linked. */
static bool new_message_settle(int fd, enum append_sync sync)
{
    if (sync == APPEND_SYNC_JOURNAL)
        return write_out(fd);
    if (sync == APPEND_SYNC_EACH)
        return fdatasync(fd) == 0;
    return true;
}

/* Writes the bytes into a new file in tmp/: anonymous when it can be, else
 * named tmp/<base>. A linkable source is the new file itself (unless
 * `named`): only put on disk. */
static bool new_message_write(struct mailbox *box, const char *base,
                              const struct append_source *src, enum append_sync sync, bool named,
                              struct new_message *m, struct petrel_error *err)
{
    m->tmp_path = NULL;
    m->is_source = false;
    if (src->linkable && !named) {
        m->fd = fcntl(src->fd, F_DUPFD_CLOEXEC, 0);
        if (m->fd < 0 || !new_message_settle(m->fd, sync)) {
            petrel_error_set(err, PETREL_ERR_IO, "cannot write a new message: %s", strerror(errno));
            new_message_discard(box, m);
            return false;
        }
        m->is_source = true;
        return true;
    }
    m->fd = named ? -1 : openat(box->dir_fd, "tmp", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (m->fd < 0) {
        if (!named && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
            return petrel_error_set_errno(err, errno, "cannot create a file in %s/tmp: %s",
                                          box->dir, strerror(errno));
        m->tmp_path = xasprintf("%s/tmp/%s", box->dir, base);
        m->fd = openat(box->dir_fd, maildir_rel(box, m->tmp_path),
                       O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (m->fd < 0) {
            petrel_error_set_errno(err, errno, "cannot create %s: %s", m->tmp_path,
                                   strerror(errno));
            free(m->tmp_path);
            m->tmp_path = NULL;
            return false;
        }
    }
    if (!write_source(m->fd, src) || !new_message_settle(m->fd, sync)) {
        petrel_error_set_errno(err, errno, "cannot write a new message in %s/tmp: %s", box->dir,
                               strerror(errno));
        new_message_discard(box, m);
        return false;
    }
    return true;
}

/* Names the file cur/<name>; on failure *errno_out says why (EEXIST: the
 * name is taken). */
static bool new_message_link(struct mailbox *box, struct new_message *m, const char *dst,
                             int *errno_out)
{
    int r;
    if (m->tmp_path != NULL) {
        r = linkat(box->dir_fd, maildir_rel(box, m->tmp_path), box->dir_fd, maildir_rel(box, dst),
                   0);
    } else {
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", m->fd);
        r = linkat(AT_FDCWD, proc, box->dir_fd, maildir_rel(box, dst), AT_SYMLINK_FOLLOW);
    }
    *errno_out = r == 0 ? 0 : errno;
    return r == 0;
}

/* Under the folder lock: links the new message into cur/ as
 * <base>:2,<flags>, choosing a fresh base while the name is taken and
 * falling back to a named tmp file when an anonymous one cannot be linked.
 * *dst is the linked path. */
static bool append_link(struct mailbox *box, struct new_message *m, struct buf *base,
                        uint32_t flags, uint32_t mask, const struct append_source *src,
                        uint64_t vsize, enum append_sync sync, char **dst, struct petrel_error *err)
{
    struct buf name = {0};
    bool ok = false;
    for (int tries = 0; tries < APPEND_NAME_TRIES; tries++) {
        buf_reset(&name);
        disk_name(base->data, flags, mask, &name);
        free(*dst);
        *dst = xasprintf("%s/cur/%s", box->dir, name.data);
        int e = 0;
        if (new_message_link(box, m, *dst, &e)) {
            ok = true;
            break;
        }
        bool unlinkable = m->tmp_path == NULL && (e == ENOENT || e == EPERM || e == EXDEV);
        if (e != EEXIST && !unlinkable) {
            petrel_error_set_errno(err, e, "cannot link into %s/cur: %s", box->dir, strerror(e));
            break;
        }
        uint64_t size = (uint64_t)src->len + (src->fd >= 0 ? src->flen : 0);
        if (e == EEXIST) {
            buf_reset(base);
            maildir_filename_new_base(maildir_names(box), size, vsize, base);
        }
        if (unlinkable && m->is_source) {
            /* The caller's file lives elsewhere (another file system):
             * copied into an anonymous file of this folder instead. */
            struct append_source copy = *src;
            copy.linkable = false;
            new_message_discard(box, m);
            if (!new_message_write(box, base->data, &copy, sync, false, m, err))
                break;
        } else if (m->tmp_path != NULL || unlinkable) {
            /* A named file carries its base in tmp/ too: write it again. */
            new_message_discard(box, m);
            if (!new_message_write(box, base->data, src, sync, true, m, err))
                break;
        }
        petrel_error_set(err, PETREL_ERR_IO, "cannot find a free name in %s/cur", box->dir);
    }
    buf_free(&name);
    if (!ok) {
        free(*dst);
        *dst = NULL;
    }
    return ok;
}

/* APPEND_SYNC_JOURNAL: the uidlist line goes to the disk before the index
 * commit, which then makes it durable. */
static void uidlist_write_out(struct mailbox *box)
{
    int fd = openat(box->dir_fd, MAILDIR_UIDLIST, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    if (!write_out(fd))
        log_warn(COMPONENT, "dovecot-uidlist not written out", "folder=%s error=\"%s\"", box->dir,
                 strerror(errno));
    close(fd);
}

/* The vsize of the source: its bytes with every bare LF counted twice,
 * reading the file part in chunks. False on a read error or a file
 * shorter than promised. */
static bool source_vsize(const struct append_source *src, uint64_t *vsize)
{
    *vsize = mailbox_message_vsize(src->data, src->len);
    if (src->fd < 0 || src->flen == 0)
        return true;
    char prev = src->len > 0 ? src->data[src->len - 1] : '\0';
    char *chunk = xmalloc(APPEND_COPY_CHUNK);
    uint64_t off = src->foff, left = src->flen;
    bool ok = true;
    while (left > 0) {
        size_t want = left < APPEND_COPY_CHUNK ? (size_t)left : APPEND_COPY_CHUNK;
        ssize_t n = pread(src->fd, chunk, want, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            ok = false;
            break;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (chunk[i] == '\n' && prev != '\r')
                (*vsize)++;
            prev = chunk[i];
        }
        *vsize += (uint64_t)n;
        off += (uint64_t)n;
        left -= (uint64_t)n;
    }
    free(chunk);
    return ok;
}

static bool append_source(struct mailbox *box, const struct append_source *src, uint32_t flags,
                          const char *const *keywords, int64_t internal_date, uint32_t *uid_out,
                          struct petrel_error *err)
{
    uint64_t len = (uint64_t)src->len + (src->fd >= 0 ? src->flen : 0);
    if (len > MAX_MESSAGE_BYTES)
        return petrel_error_set(err, PETREL_ERR_INVALID, "message too large");
    if ((flags & ~MAIL_FLAG_ALL) != 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "unknown flag bits");
    if (!ensure_synced(box, err))
        return false;
    uint64_t vsize = 0;
    if (!source_vsize(src, &vsize))
        return petrel_error_set(err, PETREL_ERR_IO, "cannot read the message to save: %s",
                                errno != 0 ? strerror(errno) : "file too short");
    struct buf base = {0};
    maildir_filename_new_base(maildir_names(box), len, vsize, &base);
    enum append_sync sync = append_sync_mode(box);
    struct new_message m;
    if (!new_message_write(box, base.data, src, sync, false, &m, err)) {
        buf_free(&base);
        return false;
    }
    if (internal_date > 0) {
        struct timespec ts[2] = {{(time_t)internal_date, 0}, {(time_t)internal_date, 0}};
        futimens(m.fd, ts);
        /* The index says what the file says (a sync or rebuild reads the
         * mtime again): a file system may clamp or refuse the date. */
        struct stat st;
        if (fstat(m.fd, &st) == 0)
            internal_date = (int64_t)st.st_mtime;
    }
    struct fileindex_txn *txn = fileindex_begin(box->index, err);
    bool ok = txn != NULL;
    uint32_t mask = 0;
    char *dst = NULL;
    struct dir_stamp stamp = {.ok = false};
    if (ok)
        ok = resolve_keywords(box, keywords, &mask, err);
    if (ok) {
        stamp_change_begin(box, &stamp);
        ok = append_link(box, &m, &base, flags, mask, src, vsize, sync, &dst, err);
    }
    if (ok && sync == APPEND_SYNC_EACH)
        ok = maildir_fsync_sub(box, "cur", err);
    uint32_t uid = 0;
    if (ok) {
        /* From here the message is in cur/: whatever happens next, a sync
         * finds it again, so it is never lost. */
        struct fileindex_record rec = {
            .flags = flags,
            .keywords = mask,
            .size = len,
            .vsize = vsize,
            .internal_date = internal_date > 0 ? internal_date : (int64_t)time(NULL),
            .filename = base.data,
        };
        uid = fileindex_txn_append(txn, &rec);
        if (uid == 0)
            ok = petrel_error_set(err, PETREL_ERR_IO, "the folder index cannot take more messages");
    }
    if (ok) {
        stamp_change_end(box, &stamp);
        struct petrel_error uerr;
        bool uidlist_noted =
            uidlist_note_append(box, uid, base.data, vsize, sync == APPEND_SYNC_EACH, &uerr);
        if (!uidlist_noted)
            log_warn(COMPONENT, "dovecot-uidlist not updated", "folder=%s error=\"%s\"", box->dir,
                     uerr.message);
        else if (sync == APPEND_SYNC_JOURNAL)
            uidlist_write_out(box);
        struct stamp_commit sc = {box, &stamp};
        fileindex_txn_on_commit(txn, stamp_committed, &sc);
        ok = fileindex_txn_commit(txn, err);
        txn = NULL;
        if (ok) {
            /* The session's view takes the message from the handle. */
            const char *slash = strrchr(dst, '/');
            maildir_watch_expect(box, IN_CREATE, slash != NULL ? slash + 1 : dst);
            if (uidlist_noted)
                maildir_watch_expect_uidlist(box);
        }
    }
    if (txn != NULL)
        fileindex_txn_rollback(txn);
    if (!ok && dst != NULL) {
        /* Reported as not saved, so it must not turn up later: out of cur/
         * again (an index record a failed commit left visible is dropped by
         * the next sync). */
        unlinkat(box->dir_fd, maildir_rel(box, dst), 0);
    }
    new_message_discard(box, &m);
    free(dst);
    buf_free(&base);
    if (ok && uid_out != NULL)
        *uid_out = uid;
    return ok;
}

bool maildir_append(struct mailbox *box, const void *data, size_t len, uint32_t flags,
                    const char *const *keywords, int64_t internal_date, uint32_t *uid_out,
                    struct petrel_error *err)
{
    struct append_source src = {.data = data, .len = len, .fd = -1};
    return append_source(box, &src, flags, keywords, internal_date, uid_out, err);
}

bool maildir_append_file(struct mailbox *box, const void *prefix, size_t prefix_len, int fd,
                         uint64_t offset, uint64_t len, uint32_t flags, const char *const *keywords,
                         int64_t internal_date, uint32_t *uid_out, struct petrel_error *err)
{
    struct append_source src = {
        .data = prefix, .len = prefix_len, .fd = fd, .foff = offset, .flen = len};
    struct stat st;
    if (fstat(fd, &st) != 0)
        return petrel_error_set(err, PETREL_ERR_IO, "cannot read the message to save: %s",
                                strerror(errno));
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size < offset + len)
        return petrel_error_set(err, PETREL_ERR_INVALID, "the message file is shorter than %llu",
                                (unsigned long long)(offset + len));
    /* Only an unnamed file that is exactly the message becomes it: a
     * named one belongs to somebody, and a linked one is a message
     * already (two messages never share a file). */
    src.linkable = prefix_len == 0 && offset == 0 && S_ISREG(st.st_mode) &&
                   (uint64_t)st.st_size == len && st.st_nlink == 0;
    return append_source(box, &src, flags, keywords, internal_date, uid_out, err);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a;
    uint32_t y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

bool maildir_expunge(struct mailbox *box, const uint32_t *uids, size_t uid_count,
                     uint32_t **expunged, size_t *expunged_count, struct petrel_error *err)
{
    *expunged = NULL;
    *expunged_count = 0;
    if (!ensure_synced(box, err))
        return false;
    uint32_t *wanted = NULL;
    if (uids != NULL) {
        wanted = xcalloc(uid_count + 1, sizeof(*wanted));
        memcpy(wanted, uids, uid_count * sizeof(*wanted));
        qsort(wanted, uid_count, sizeof(*wanted), cmp_u32);
    }
    struct fileindex_txn *txn = fileindex_begin(box->index, err);
    if (txn == NULL) {
        free(wanted);
        return false;
    }
    size_t n = fileindex_count(box->index);
    uint32_t *done = xcalloc(n + 1, sizeof(*done));
    size_t done_count = 0;
    struct buf name = {0};
    struct dir_stamp stamp;
    stamp_change_begin(box, &stamp);
    bool vanished = false;
    for (size_t i = 0; i < n; i++) {
        const struct fileindex_record *r = fileindex_record_at(box->index, i);
        if ((r->flags & MAIL_FLAG_DELETED) == 0)
            continue;
        if (wanted != NULL && bsearch(&r->uid, wanted, uid_count, sizeof(*wanted), cmp_u32) == NULL)
            continue;
        disk_name(r->filename, r->flags, r->keywords, &name);
        if (unlinkat(box->dir_fd, maildir_rel(box, box_path(box, "cur/%s", name.data)), 0) != 0) {
            if (errno == ENOENT) {
                /* Another program renamed (flags) or removed it since the
                 * last scan: not expunged here; the next sync sees which. */
                vanished = true;
                continue;
            }
            /* One stuck file does not stop the rest. */
            log_warn(COMPONENT, "cannot expunge message", "folder=%s uid=%u error=\"%s\"", box->dir,
                     r->uid, strerror(errno));
            continue;
        }
        done[done_count++] = r->uid;
        maildir_watch_expect(box, IN_DELETE, name.data);
    }
    if (vanished) {
        stamp.ok = false;
        stamp_forget(box);
    }
    stamp_change_end(box, &stamp);
    buf_free(&name);
    free(wanted);
    for (size_t i = 0; i < done_count; i++)
        fileindex_txn_expunge(txn, done[i]);
    bool ok = true;
    if (done_count > 0) {
        if (maildir_cur_changes_need_fsync(box)) {
            maildir_fsync_sub(box, "cur", NULL);
        }
        struct petrel_error uerr;
        /* Compacted while the folder lock is still held. */
        bool rewrite = uidlist_worth_compacting(box, n - done_count);
        if (rewrite && !uidlist_write_state(box, 0, done, done_count, NULL, 0, &uerr))
            log_warn(COMPONENT, "dovecot-uidlist not updated", "folder=%s error=\"%s\"", box->dir,
                     uerr.message);
        struct stamp_commit sc = {box, &stamp};
        fileindex_txn_on_commit(txn, stamp_committed, &sc);
        ok = fileindex_txn_commit(txn, err);
        if (ok && rewrite && box->uidlist_loaded) {
            uidlist_free(&box->uidlist);
            box->uidlist_loaded = false;
        }
    } else {
        fileindex_txn_rollback(txn);
    }
    if (!ok) {
        maildir_watch_distrust(box); /* files gone that the index still lists */
        free(done);
        return false;
    }
    *expunged = done;
    *expunged_count = done_count;
    return true;
}

bool maildir_set_flags(struct mailbox *box, uint32_t uid, uint32_t flags,
                       const char *const *keywords, struct petrel_error *err)
{
    if ((flags & ~MAIL_FLAG_ALL) != 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "unknown flag bits");
    if (!ensure_synced(box, err))
        return false;
    struct fileindex_txn *txn = fileindex_begin(box->index, err);
    if (txn == NULL)
        return false;
    uint32_t mask = 0;
    const struct fileindex_record *r = fileindex_lookup_uid(box->index, uid);
    bool ok =
        r != NULL || petrel_error_set(err, PETREL_ERR_NOT_FOUND, "no message with UID %u", uid);
    if (ok)
        ok = resolve_keywords(box, keywords, &mask, err);
    struct buf from = {0};
    struct buf to = {0};
    struct dir_stamp stamp = {.ok = false};
    if (ok) {
        r = fileindex_lookup_uid(box->index, uid);
        disk_name(r->filename, r->flags, r->keywords, &from);
        disk_name(r->filename, flags, mask, &to);
        stamp_change_begin(box, &stamp);
        ok = rename_in_cur(box, "cur", from.data, to.data, err);
        if (!ok && err->code == PETREL_ERR_NOT_FOUND)
            stamp_forget(box); /* renamed elsewhere: rescan */
        if (ok)
            ok = fileindex_txn_set_flags(txn, uid, flags, mask);
        stamp_change_end(box, &stamp);
        if (ok && maildir_flag_renames_need_fsync(box))
            ok = maildir_fsync_sub(box, "cur", err);
    }
    if (ok) {
        struct stamp_commit sc = {box, &stamp};
        fileindex_txn_on_commit(txn, stamp_committed, &sc);
        ok = fileindex_txn_commit(txn, err);
    } else {
        fileindex_txn_rollback(txn);
    }
    buf_free(&from);
    buf_free(&to);
    return ok;
}

bool maildir_index_rebuild(struct mailbox *box, struct mailbox_rebuild_stats *stats,
                           struct petrel_error *err)
{
    memset(stats, 0, sizeof(*stats));
    /* The folder lock is held from scan to commit: nothing changes under us. */
    struct fileindex_txn *txn = fileindex_begin(box->index, err);
    if (txn == NULL)
        return false;
    struct dir_stamp stamp;
    stamp_capture(box, &stamp);
    bool ok = rebuild_locked(box, txn, stats, err);
    if (ok) {
        ok = fileindex_txn_commit(txn, err);
    } else {
        fileindex_txn_rollback(txn);
    }
    if (box->uidlist_loaded) {
        uidlist_free(&box->uidlist);
        box->uidlist_loaded = false;
    }
    if (ok) {
        stamp_store_scanned(box, &stamp);
        box->synced = true; /* the rebuild did what a sync would */
    }
    log_info(COMPONENT, "index rebuilt",
             "folder=%s scanned=%llu preserved=%llu assigned=%llu "
             "orphans=%llu ok=%d",
             box->dir, (unsigned long long)stats->scanned,
             (unsigned long long)stats->uids_preserved, (unsigned long long)stats->uids_assigned,
             (unsigned long long)stats->orphans_dropped, ok);
    return ok;
}

bool maildir_index_optimize(struct mailbox *box, struct petrel_error *err)
{
    return ensure_synced(box, err) && fileindex_optimize(box->index, err);
}

bool maildir_cache_purge(struct mailbox *box, uint64_t *carried, uint64_t *reclaimed,
                         struct petrel_error *err)
{
    struct fileindex_purge_stats st = {0, 0};
    if (!ensure_synced(box, err) || !fileindex_cache_purge(box->index, &st, err))
        return false;
    *carried = st.carried;
    *reclaimed = st.reclaimed_bytes;
    return true;
}

/* ---------- shared with the other maildir files (maildir-private.h) ---------- */

bool maildir_ensure_synced(struct mailbox *box, struct petrel_error *err)
{
    return ensure_synced(box, err);
}

bool maildir_fsync_enabled(const struct mailbox *box)
{
    return fsync_enabled(box);
}

bool maildir_cur_changes_need_fsync(struct mailbox *box)
{
    return append_sync_mode(box) == APPEND_SYNC_EACH;
}

bool maildir_flag_renames_need_fsync(struct mailbox *box)
{
    /* "optimized" leaves flag-only changes unflushed by definition. */
    return box->common.user->storage->index_settings.fsync == FILEINDEX_FSYNC_ALWAYS &&
           maildir_cur_changes_need_fsync(box);
}

void maildir_disk_name(const char *base, uint32_t flags, uint32_t keywords, struct buf *out)
{
    disk_name(base, flags, keywords, out);
}

bool maildir_resolve_keywords(struct mailbox *box, const char *const *names, uint32_t *mask,
                              struct petrel_error *err)
{
    return resolve_keywords(box, names, mask, err);
}

bool maildir_rename_in_cur(struct mailbox *box, const char *from_sub, const char *from,
                           const char *to, struct petrel_error *err)
{
    return rename_in_cur(box, from_sub, from, to, err);
}

struct maildir_cur_change {
    struct mailbox *box;
    struct dir_stamp stamp;
};

struct maildir_cur_change *maildir_cur_change_begin(struct mailbox *box)
{
    struct maildir_cur_change *change = xcalloc(1, sizeof(*change));
    change->box = box;
    stamp_change_begin(box, &change->stamp);
    return change;
}

void maildir_cur_change_end(struct mailbox *box, struct maildir_cur_change *change, bool lost)
{
    if (lost) {
        change->stamp.ok = false;
        stamp_forget(box);
    }
    stamp_change_end(box, &change->stamp);
}

static void cur_change_committed(void *arg)
{
    struct maildir_cur_change *change = arg;
    stamp_change_commit(change->box, &change->stamp);
}

void maildir_cur_change_commit_on(struct fileindex_txn *txn, struct maildir_cur_change *change)
{
    fileindex_txn_on_commit(txn, cur_change_committed, change);
}

void maildir_cur_change_drop(struct maildir_cur_change *change)
{
    free(change);
}

bool maildir_uidlist_write_added(struct mailbox *box, const struct fileindex_record *added,
                                 size_t added_count, struct petrel_error *err)
{
    uint32_t next_uid = added_count > 0 ? added[added_count - 1].uid + 1 : 0;
    bool ok = uidlist_write_state(box, next_uid, NULL, 0, added, added_count, err);
    if (box->uidlist_loaded) {
        uidlist_free(&box->uidlist);
        box->uidlist_loaded = false;
    }
    return ok;
}
