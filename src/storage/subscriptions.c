/* Dovecot's `subscriptions` file (see subscriptions.h).
 *
 * What Dovecot 2.3 writes (src/lib-storage/list/subscription-file.c and
 * src/lib/strescape.c, checked against files written by Dovecot 2.3.19):
 * - "V\t2\n\n", then one line per subscribed folder: its levels joined by
 *   TAB. Each level is the storage name, which for Maildir++ is modified
 *   UTF-7 ("Ünïcødé" is "&ANw-n&AO8-c&APg-d&AOk-"), escaped with
 *   str_append_tabescaped(): 0x01 -> 0x01 '1', TAB -> 0x01 't',
 *   CR -> 0x01 'r', LF -> 0x01 'n'. Unescaping maps 0x01 followed by any
 *   other byte to that byte and drops a 0x01 at the end.
 * - "INBOX" in any case is written as "INBOX".
 * - Readers drop a CR before the LF and take a last line without LF;
 *   an entry ending in the separator has it removed.
 * - Version 0 (no header): one storage name per line with the storage's
 *   separator ('.' for Maildir++, '/' for the fs layout), no escaping. We
 *   split those at both, which is exact for every name Petrel can create
 *   (mailbox-name.h forbids '.' and '/' inside a level).
 * Levels that are not valid modified UTF-7 but valid UTF-8 (files written
 * with mailbox_list_utf8=yes) are taken as they are. Other lines are
 * skipped; the next write drops them, as Dovecot does. */
#include "storage/subscriptions.h"

#include "core/bsearch-insert.h"
#include "core/buf.h"
#include "core/fs-util.h"
#include "core/log.h"
#include "core/utf8.h"
#include "core/xalloc.h"
#include "storage/mailbox-name.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define COMPONENT "subscriptions"
#define SUBS_MAX_FILE (64u * 1024 * 1024)
/* Namespace prefix plus folder name (mailbox-name.h allows 1024 bytes). */
#define SUBS_MAX_NAME 4096u

static const char v2_header[] = "V\t2\n\n";
#define V2_HEADER_LEN (sizeof(v2_header) - 1)

/* ---------- the sorted set ---------- */

static int name_cmp(const void *key, const void *element)
{
    return strcmp(key, *(char *const *)element);
}

/* Index where `name` is or would go; *found says which. */
static size_t find_pos(const struct subscriptions *subs, const char *name, bool *found)
{
    return bsearch_insert_pos(name, subs->names, subs->count, sizeof(subs->names[0]), name_cmp,
                              found);
}

/* Inserts a copy; false when it was there. */
static bool set_insert(struct subscriptions *subs, const char *name)
{
    bool found;
    size_t pos = find_pos(subs, name, &found);
    if (found)
        return false;
    subs->names = xgrow(subs->names, &subs->cap, subs->count + 1, sizeof(subs->names[0]));
    memmove(&subs->names[pos + 1], &subs->names[pos], (subs->count - pos) * sizeof(char *));
    subs->names[pos] = xstrdup(name);
    subs->count++;
    return true;
}

static bool set_remove(struct subscriptions *subs, const char *name)
{
    bool found;
    size_t pos = find_pos(subs, name, &found);
    if (!found)
        return false;
    free(subs->names[pos]);
    memmove(&subs->names[pos], &subs->names[pos + 1], (subs->count - pos - 1) * sizeof(char *));
    subs->count--;
    return true;
}

static const char *canonical(const char *name);

bool subscriptions_contains(const struct subscriptions *subs, const char *name)
{
    bool found;
    (void)find_pos(subs, canonical(name), &found);
    return found;
}

void subscriptions_free(struct subscriptions *subs)
{
    for (size_t i = 0; i < subs->count; i++)
        free(subs->names[i]);
    free(subs->names);
    memset(subs, 0, sizeof(*subs));
}

/* "inbox" in any case is INBOX (RFC 3501), as Dovecot stores it. */
static const char *canonical(const char *name)
{
    return mailbox_name_is_inbox(name) ? "INBOX" : name;
}

/* ---------- parsing ---------- */

/* Appends one stored level, decoded to UTF-8; false when it is neither
 * modified UTF-7 nor UTF-8. */
static bool append_level(const char *level, size_t len, struct buf *out)
{
    char *copy = xstrndup(level, len);
    bool ok = mailbox_name_from_mutf7(copy, out);
    if (!ok && utf8_valid(copy, len)) {
        buf_append(out, copy, len);
        ok = true;
    }
    free(copy);
    return ok;
}

/* Dovecot's tab-unescaping of one level. */
static void tab_unescape(const char *p, size_t len, struct buf *out)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] != '\001') {
            buf_append_char(out, p[i]);
            continue;
        }
        if (++i == len)
            break;
        static const char code[] = "1trn";
        static const char byte[] = "\001\t\r\n";
        const char *k = memchr(code, p[i], sizeof(code) - 1);
        buf_append_char(out, k != NULL ? byte[k - code] : p[i]);
    }
}

/* Decodes one line into a UTF-8 name with '/' between levels. */
static bool decode_line(const char *line, size_t len, bool v2, struct buf *name)
{
    buf_reset(name);
    if (memchr(line, '\0', len) != NULL)
        return false;
    struct buf level = {0};
    bool ok = true;
    size_t start = 0;
    for (size_t i = 0; i <= len && ok; i++) {
        bool sep = i == len || (v2 ? line[i] == '\t' : (line[i] == '/' || line[i] == '.'));
        if (!sep)
            continue;
        if (start > 0)
            buf_append_char(name, '/');
        buf_reset(&level);
        if (v2)
            tab_unescape(line + start, i - start, &level);
        else
            buf_append(&level, line + start, i - start);
        if (memchr(buf_cstr(&level), '\0', level.len) != NULL)
            ok = false;
        else
            ok = append_level(buf_cstr(&level), level.len, name);
        start = i + 1;
    }
    buf_free(&level);
    if (!ok)
        return false;
    /* Entries ending in the separator mean the folder itself. */
    while (name->len > 0 && name->data[name->len - 1] == '/')
        name->len--;
    if (name->data != NULL)
        name->data[name->len] = '\0';
    return name->len > 0;
}

/* Parses into `out` (initialised by the caller); returns lines skipped. */
static size_t parse_into(const char *text, size_t len, struct subscriptions *out)
{
    bool v2 = len >= V2_HEADER_LEN && memcmp(text, v2_header, V2_HEADER_LEN) == 0;
    size_t pos = v2 ? V2_HEADER_LEN : 0;
    size_t skipped = 0;
    struct buf name = {0};
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl != NULL ? (size_t)(nl - text) : len;
        size_t line_len = end - pos;
        if (line_len > 0 && text[end - 1] == '\r')
            line_len--;
        if (line_len > 0) {
            if (decode_line(text + pos, line_len, v2, &name))
                set_insert(out, canonical(buf_cstr(&name)));
            else
                skipped++;
        }
        pos = end + 1;
    }
    buf_free(&name);
    return skipped;
}

bool subscriptions_parse(const char *text, size_t len, struct subscriptions *out)
{
    memset(out, 0, sizeof(*out));
    return parse_into(text, len, out) == 0;
}

bool subscriptions_read(const char *path, struct subscriptions *out, struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    char *data;
    size_t len;
    struct petrel_error rerr;
    if (!fs_read_file(path, SUBS_MAX_FILE, &data, &len, &rerr)) {
        if (rerr.code == PETREL_ERR_NOT_FOUND)
            return true;
        if (err != NULL)
            *err = rerr;
        return false;
    }
    size_t skipped = parse_into(data, len, out);
    free(data);
    if (skipped > 0) {
        char q[512];
        log_warn(COMPONENT, "skipped malformed subscription lines", "path=%s skipped=%zu",
                 log_quote(q, sizeof(q), path), skipped);
    }
    return true;
}

/* ---------- formatting ---------- */

static void tab_escape(const char *p, size_t len, struct buf *out)
{
    for (size_t i = 0; i < len; i++) {
        switch (p[i]) {
        case '\001':
            buf_append(out, "\0011", 2);
            break;
        case '\t':
            buf_append(out, "\001t", 2);
            break;
        case '\r':
            buf_append(out, "\001r", 2);
            break;
        case '\n':
            buf_append(out, "\001n", 2);
            break;
        default:
            buf_append_char(out, p[i]);
            break;
        }
    }
}

static void format_name(const char *name, struct buf *out)
{
    struct buf level = {0};
    const char *p = name;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t len = slash != NULL ? (size_t)(slash - p) : strlen(p);
        char *raw = xstrndup(p, len);
        buf_reset(&level);
        if (!mailbox_name_to_mutf7(raw, &level)) {
            /* Not UTF-8 (cannot come from parse or add): keep the bytes. */
            buf_reset(&level);
            buf_append(&level, raw, len);
        }
        free(raw);
        tab_escape(buf_cstr(&level), level.len, out);
        if (slash == NULL)
            break;
        buf_append_char(out, '\t');
        p = slash + 1;
    }
    buf_free(&level);
    buf_append_char(out, '\n');
}

char *subscriptions_format(const struct subscriptions *subs, size_t *len)
{
    struct buf out = {0};
    buf_append(&out, v2_header, V2_HEADER_LEN);
    for (size_t i = 0; i < subs->count; i++)
        format_name(subs->names[i], &out);
    if (len != NULL)
        *len = out.len;
    return buf_steal(&out);
}

/* ---------- locked changes ---------- */

enum subs_op { SUBS_ADD, SUBS_REMOVE };

/* Names that survive a write and a read unchanged. The caller validates
 * folder names; these checks only keep the file well-formed. */
static bool check_name(const char *name, struct petrel_error *err)
{
    size_t len = strlen(name);
    if (len == 0 || len > SUBS_MAX_NAME)
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "subscription name is empty or longer than %u bytes",
                                SUBS_MAX_NAME);
    if (!utf8_valid(name, len))
        return petrel_error_set(err, PETREL_ERR_INVALID, "subscription name is not UTF-8");
    if (name[len - 1] == '/')
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "subscription name ends with the separator");
    return true;
}

/* The lock is a flock on "<file>.lock" that exists only while held: Dovecot
 * uses the same name for its dotlock (its new file is written there and
 * renamed over the old one) and waits about 30 seconds for any such file
 * before overriding it, so a lock file left in place would stall Dovecot's
 * next SUBSCRIBE. Whoever creates the file removes it when done; a waiter
 * that wakes up on a removed (or replaced) file starts over. A lock file we
 * did not create is not removed (it may be Dovecot's). Returns the
 * descriptor or -1. */
static int lock_take(const char *lock_path, bool *created, struct petrel_error *err)
{
    for (int attempt = 0; attempt < 1000; attempt++) {
        *created = true;
        int fd = open(lock_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST) {
            *created = false;
            fd = open(lock_path, O_RDWR | O_CLOEXEC);
            if (fd < 0 && errno == ENOENT)
                continue; /* released meanwhile */
        }
        if (fd < 0) {
            petrel_error_set_errno(err, errno, "cannot open %s: %s", lock_path, strerror(errno));
            return -1;
        }
        int rc;
        while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR)
            ;
        if (rc != 0) {
            petrel_error_set_errno(err, errno, "cannot lock %s: %s", lock_path, strerror(errno));
            close(fd);
            return -1;
        }
        struct stat held, now;
        if (fstat(fd, &held) == 0 && stat(lock_path, &now) == 0 && held.st_ino == now.st_ino &&
            held.st_dev == now.st_dev)
            return fd;
        close(fd); /* removed or replaced while we waited */
    }
    petrel_error_set(err, PETREL_ERR_UNAVAILABLE, "cannot lock %s: it keeps being replaced",
                     lock_path);
    return -1;
}

static void lock_release(const char *lock_path, int fd, bool created)
{
    struct stat held, now;
    if (created && fstat(fd, &held) == 0 && stat(lock_path, &now) == 0 &&
        held.st_ino == now.st_ino && held.st_dev == now.st_dev)
        unlink(lock_path);
    close(fd); /* releases the flock */
}

/* Takes the lock, re-reads, applies, writes when something changed. */
static bool modify(const char *path, enum subs_op op, char *const *names, size_t count,
                   size_t *changed_count, struct petrel_error *err)
{
    *changed_count = 0;
    if (op == SUBS_ADD) {
        for (size_t i = 0; i < count; i++) {
            if (!check_name(names[i], err))
                return false;
        }
    }
    char *dir = fs_dirname(path);
    bool ok = fs_mkdir_p(dir, 0700, err);
    free(dir);
    if (!ok)
        return false;
    char *lock_path = xasprintf("%s.lock", path);
    bool created = false;
    int lock_fd = lock_take(lock_path, &created, err);
    if (lock_fd < 0) {
        free(lock_path);
        return false;
    }
    struct subscriptions subs;
    ok = subscriptions_read(path, &subs, err);
    if (ok) {
        for (size_t i = 0; i < count; i++) {
            const char *name = canonical(names[i]);
            if (op == SUBS_ADD ? set_insert(&subs, name) : set_remove(&subs, name))
                (*changed_count)++;
        }
        if (*changed_count > 0) {
            size_t len;
            char *text = subscriptions_format(&subs, &len);
            ok = fs_write_atomic(path, text, len, true, err);
            free(text);
        }
        subscriptions_free(&subs);
    }
    lock_release(lock_path, lock_fd, created);
    free(lock_path);
    if (!ok)
        *changed_count = 0;
    return ok;
}

bool subscriptions_add(const char *path, const char *name, bool *changed, struct petrel_error *err)
{
    size_t n;
    char *const names[1] = {(char *)name};
    bool ok = modify(path, SUBS_ADD, names, 1, &n, err);
    if (changed != NULL)
        *changed = n > 0;
    return ok;
}

bool subscriptions_remove(const char *path, const char *name, bool *changed,
                          struct petrel_error *err)
{
    size_t n;
    char *const names[1] = {(char *)name};
    bool ok = modify(path, SUBS_REMOVE, names, 1, &n, err);
    if (changed != NULL)
        *changed = n > 0;
    return ok;
}

bool subscriptions_add_many(const char *path, char *const *names, size_t count, size_t *added,
                            struct petrel_error *err)
{
    size_t n;
    bool ok = modify(path, SUBS_ADD, names, count, &n, err);
    if (added != NULL)
        *added = n;
    return ok;
}
