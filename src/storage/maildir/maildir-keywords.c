/* dovecot-keywords (see maildir-keywords.h).
 *
 * Dovecot 2.3 (src/lib-storage/index/maildir/maildir-keywords.c) reads
 * "<index> <name>" lines: the index is a plain decimal below 26, the name is
 * the rest of the line and must not be empty; lines without a space or with
 * a bad index are skipped, a later line for the same index wins, names are
 * looked up case-insensitively. It writes the used slots in index order and
 * replaces the file by rename. Readers cache the file by its mtime (whole
 * seconds), so every rewrite must move the mtime forward: we do the same. */
#include "storage/maildir/maildir-keywords.h"

#include "core/buf.h"
#include "core/fs-util.h"
#include "core/xalloc.h"
#include "storage/maildir/maildir-filename.h" /* MAILDIR_MAX_KEYWORDS */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#define KEYWORDS_MAX_FILE (1024u * 1024)

/* Stores one slot, replacing what was there. */
static void set_slot(struct maildir_keywords *kw, unsigned idx, const char *name, size_t len)
{
    free(kw->names[idx]);
    kw->names[idx] = xstrndup(name, len);
}

/* One line without its newline; false when it is skipped. */
static bool parse_line(const char *p, size_t len, struct maildir_keywords *out)
{
    if (len > 0 && p[len - 1] == '\r')
        len--;
    if (len == 0)
        return true; /* blank lines carry nothing */
    const char *sp = memchr(p, ' ', len);
    if (sp == NULL || sp == p)
        return false;
    unsigned idx = 0;
    for (const char *d = p; d < sp; d++) {
        if (*d < '0' || *d > '9' || idx >= MAILDIR_MAX_KEYWORDS)
            return false;
        idx = idx * 10 + (unsigned)(*d - '0');
    }
    const char *name = sp + 1;
    size_t name_len = len - (size_t)(name - p);
    if (idx >= MAILDIR_MAX_KEYWORDS || name_len == 0 || memchr(name, '\0', name_len) != NULL)
        return false;
    set_slot(out, idx, name, name_len);
    return true;
}

bool maildir_keywords_parse(const char *text, size_t len, struct maildir_keywords *out)
{
    memset(out, 0, sizeof(*out));
    bool all_good = true;
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl != NULL ? (size_t)(nl - text) : len;
        if (!parse_line(text + pos, end - pos, out))
            all_good = false;
        pos = end + 1;
    }
    return all_good;
}

bool maildir_keywords_read(int dir_fd, const char *path, struct maildir_keywords *out,
                           struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    char *data;
    size_t len;
    struct petrel_error rerr;
    if (!fs_read_file_at(dir_fd, path, KEYWORDS_MAX_FILE, &data, &len, &rerr)) {
        if (rerr.code == PETREL_ERR_NOT_FOUND)
            return true;
        if (err != NULL)
            *err = rerr;
        return false;
    }
    (void)maildir_keywords_parse(data, len, out);
    free(data);
    return true;
}

bool maildir_keywords_write(int dir_fd, const char *path, const struct maildir_keywords *kw,
                            bool fsync, struct petrel_error *err)
{
    struct buf text = {0};
    for (unsigned i = 0; i < MAILDIR_MAX_KEYWORDS; i++) {
        const char *name = kw->names[i];
        if (name == NULL)
            continue;
        if (name[0] == '\0' || strpbrk(name, "\r\n") != NULL) {
            buf_free(&text);
            return petrel_error_set(err, PETREL_ERR_INVALID, "keyword %u cannot be stored", i);
        }
        buf_printf(&text, "%u %s\n", i, name);
    }
    struct stat old;
    const char *file = fs_at_name(dir_fd, path);
    bool had_old = fstatat(dir_fd, file, &old, 0) == 0;
    bool ok =
        fs_write_atomic_at(dir_fd, path, text.data != NULL ? text.data : "", text.len, fsync, err);
    buf_free(&text);
    if (!ok)
        return false;
    /* Move the mtime forward so readers that cache by mtime re-read. */
    struct stat now;
    if (had_old && fstatat(dir_fd, file, &now, 0) == 0 && now.st_mtime <= old.st_mtime) {
        struct timespec times[2];
        times[0].tv_sec = 0;
        times[0].tv_nsec = UTIME_OMIT;
        times[1].tv_sec = old.st_mtime + 1;
        times[1].tv_nsec = 0;
        if (utimensat(dir_fd, file, times, 0) != 0)
            return petrel_error_set_errno(err, errno, "utimensat %s: %s", path, strerror(errno));
    }
    return true;
}

int maildir_keywords_find(const struct maildir_keywords *kw, const char *name)
{
    for (int i = 0; i < MAILDIR_MAX_KEYWORDS; i++) {
        if (kw->names[i] != NULL && strcasecmp(kw->names[i], name) == 0)
            return i;
    }
    return -1;
}

int maildir_keywords_add(struct maildir_keywords *kw, const char *name, struct petrel_error *err)
{
    if (!mail_keyword_valid(name)) {
        petrel_error_set(err, PETREL_ERR_INVALID, "invalid keyword name");
        return -1;
    }
    int idx = maildir_keywords_find(kw, name);
    if (idx >= 0)
        return idx;
    for (int i = 0; i < MAILDIR_MAX_KEYWORDS; i++) {
        if (kw->names[i] == NULL) {
            kw->names[i] = xstrdup(name);
            return i;
        }
    }
    petrel_error_set(err, PETREL_ERR_LIMIT, "all %d maildir keyword letters are in use",
                     MAILDIR_MAX_KEYWORDS);
    return -1;
}

void maildir_keywords_free(struct maildir_keywords *kw)
{
    for (int i = 0; i < MAILDIR_MAX_KEYWORDS; i++) {
        free(kw->names[i]);
        kw->names[i] = NULL;
    }
}
