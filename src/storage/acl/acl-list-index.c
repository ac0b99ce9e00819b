/* The ACL list index of a namespace (see acl-list-index.h). */
#include "storage/acl/acl-list-index.h"

#include "core/fs-util.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "storage/acl/acl-registry.h"
#include "storage/acl/acl-rights.h"
#include "storage/fileindex/fileindex.h" /* FILEINDEX_FSYNC_NEVER */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define COMPONENT "acl"

/* ---------- rows in memory ---------- */

static int row_compare(const char *folder, const struct acl_id *id, const struct acl_index_row *r)
{
    int c = strcmp(folder, r->folder);
    return c != 0 ? c : acl_id_compare(id, &r->entry.id);
}

/* Index of the first row of `folder` (or where it would go). */
static size_t folder_start(const struct acl_index *idx, const char *folder)
{
    size_t lo = 0, hi = idx->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(idx->rows[mid].folder, folder) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t folder_end(const struct acl_index *idx, size_t from, const char *folder)
{
    while (from < idx->count && strcmp(idx->rows[from].folder, folder) == 0)
        from++;
    return from;
}

static void remove_range(struct acl_index *idx, size_t from, size_t to)
{
    if (from == to)
        return;
    for (size_t i = from; i < to; i++)
        free(idx->rows[i].folder);
    memmove(&idx->rows[from], &idx->rows[to], (idx->count - to) * sizeof(idx->rows[0]));
    idx->count -= to - from;
}

static void insert_at(struct acl_index *idx, size_t pos, const char *folder,
                      const struct acl_entry *e)
{
    idx->rows = xgrow(idx->rows, &idx->cap, idx->count + 1, sizeof(idx->rows[0]));
    if (pos < idx->count)
        memmove(&idx->rows[pos + 1], &idx->rows[pos], (idx->count - pos) * sizeof(idx->rows[0]));
    idx->rows[pos].folder = xstrdup(folder);
    idx->rows[pos].entry = *e;
    idx->count++;
}

bool acl_list_index_set_folder(struct acl_index *idx, const char *folder,
                               const struct acl_list *list)
{
    size_t from = folder_start(idx, folder);
    size_t to = folder_end(idx, from, folder);
    if (to - from == list->count) {
        bool same = true;
        for (size_t i = 0; same && i < list->count; i++) {
            const struct acl_entry *a = &idx->rows[from + i].entry;
            same = acl_id_compare(&a->id, &list->entries[i].id) == 0 &&
                   a->rights == list->entries[i].rights;
        }
        if (same)
            return false;
    }
    remove_range(idx, from, to);
    for (size_t i = 0; i < list->count; i++) {
        if (list->entries[i].rights != 0)
            insert_at(idx, from++, folder, &list->entries[i]);
    }
    return true;
}

/* Whether `name` is `folder` or below it. */
static bool in_subtree(const char *name, const char *folder, size_t flen, char sep)
{
    if (strncmp(name, folder, flen) != 0)
        return false;
    return name[flen] == '\0' || (sep != 0 && name[flen] == sep);
}

bool acl_list_index_remove_folder(struct acl_index *idx, const char *folder, char sep)
{
    size_t flen = strlen(folder);
    size_t w = 0;
    bool changed = false;
    for (size_t i = 0; i < idx->count; i++) {
        if (in_subtree(idx->rows[i].folder, folder, flen, sep)) {
            free(idx->rows[i].folder);
            changed = true;
            continue;
        }
        idx->rows[w++] = idx->rows[i];
    }
    idx->count = w;
    return changed;
}

static int sort_rows(const void *a, const void *b)
{
    const struct acl_index_row *ra = a, *rb = b;
    return row_compare(ra->folder, &ra->entry.id, rb);
}

bool acl_list_index_rename_folder(struct acl_index *idx, const char *old_name, const char *new_name,
                                  char sep)
{
    if (strcmp(old_name, new_name) == 0)
        return false;
    size_t olen = strlen(old_name);
    bool any = false;
    for (size_t i = 0; !any && i < idx->count; i++)
        any = in_subtree(idx->rows[i].folder, old_name, olen, sep);
    bool changed = acl_list_index_remove_folder(idx, new_name, sep);
    if (!any)
        return changed;
    for (size_t i = 0; i < idx->count; i++) {
        struct acl_index_row *r = &idx->rows[i];
        if (!in_subtree(r->folder, old_name, olen, sep))
            continue;
        struct buf name = {0};
        buf_append_str(&name, new_name);
        buf_append_str(&name, r->folder + olen);
        buf_append_char(&name, '\0');
        free(r->folder);
        r->folder = xstrdup(name.data);
        buf_free(&name);
    }
    qsort(idx->rows, idx->count, sizeof(idx->rows[0]), sort_rows);
    return true;
}

bool acl_list_index_folder(const struct acl_index *idx, const char *folder, struct acl_list *out)
{
    acl_list_clear(out);
    size_t from = folder_start(idx, folder);
    size_t to = folder_end(idx, from, folder);
    for (size_t i = from; i < to; i++)
        acl_list_modify(out, &idx->rows[i].entry.id, idx->rows[i].entry.rights, ACL_MODIFY_REPLACE);
    return to > from;
}

bool acl_list_index_equal(const struct acl_index *a, const struct acl_index *b)
{
    if (a->count != b->count)
        return false;
    for (size_t i = 0; i < a->count; i++) {
        if (row_compare(a->rows[i].folder, &a->rows[i].entry.id, &b->rows[i]) != 0 ||
            a->rows[i].entry.rights != b->rows[i].entry.rights)
            return false;
    }
    return true;
}

void acl_list_index_clear(struct acl_index *idx)
{
    for (size_t i = 0; i < idx->count; i++)
        free(idx->rows[i].folder);
    idx->count = 0;
}

void acl_list_index_free(struct acl_index *idx)
{
    acl_list_index_clear(idx);
    free(idx->rows);
    memset(idx, 0, sizeof(*idx));
}

/* ---------- the text form ---------- */

static void escape_folder(const char *name, struct buf *out)
{
    static const char hex[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++) {
        switch (*p) {
        case '\\':
            buf_append_str(out, "\\\\");
            break;
        case '\t':
            buf_append_str(out, "\\t");
            break;
        case '\n':
            buf_append_str(out, "\\n");
            break;
        case '\r':
            buf_append_str(out, "\\r");
            break;
        default:
            if (*p < 0x20 || *p == 0x7f) {
                char esc[4] = {'\\', 'x', hex[*p >> 4], hex[*p & 15]};
                buf_append(out, esc, 4);
            } else {
                buf_append_char(out, (char)*p);
            }
        }
    }
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Unescapes `len` bytes into `out` (NUL-terminated). False on a bad
 * escape, a raw control byte or an escaped NUL. */
static bool unescape_folder(const char *s, size_t len, struct buf *out, const char **why)
{
    buf_reset(out);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            *why = "a control byte in a folder name";
            return false;
        }
        if (c != '\\') {
            buf_append_char(out, (char)c);
            continue;
        }
        if (++i >= len) {
            *why = "a backslash at the end of a folder name";
            return false;
        }
        switch (s[i]) {
        case '\\':
            buf_append_char(out, '\\');
            break;
        case 't':
            buf_append_char(out, '\t');
            break;
        case 'n':
            buf_append_char(out, '\n');
            break;
        case 'r':
            buf_append_char(out, '\r');
            break;
        case 'x': {
            int hi = i + 1 < len ? hex_value(s[i + 1]) : -1;
            int lo = i + 2 < len ? hex_value(s[i + 2]) : -1;
            int v = hi * 16 + lo;
            /* Only what the writer escapes this way: one text, one index. */
            if (hi < 0 || lo < 0 || v == 0 || (v >= 0x20 && v != 0x7f) || v == '\t' || v == '\n' ||
                v == '\r') {
                *why = "a bad \\x escape in a folder name";
                return false;
            }
            buf_append_char(out, (char)v);
            i += 2;
            break;
        }
        default:
            *why = "an unknown escape in a folder name";
            return false;
        }
    }
    buf_append_char(out, '\0');
    return true;
}

static bool parse_fail(struct acl_index *idx, char *why, size_t why_size, size_t line,
                       const char *reason)
{
    acl_list_index_clear(idx);
    snprintf(why, why_size, "line %zu: %s", line, reason);
    return false;
}

bool acl_list_index_parse(const char *data, size_t len, struct acl_index *idx, char *why,
                          size_t why_size)
{
    acl_list_index_clear(idx);
    size_t hlen = strlen(ACL_LIST_INDEX_HEADER);
    if (len < hlen + 1 || memcmp(data, ACL_LIST_INDEX_HEADER, hlen) != 0 || data[hlen] != '\n')
        return parse_fail(idx, why, why_size, 1, "not a Petrel ACL list index (bad header)");
    size_t pos = hlen + 1;
    size_t line = 1;
    struct buf folder = {0};
    bool ok = true;
    while (ok && pos < len) {
        line++;
        const char *start = data + pos;
        const char *nl = memchr(start, '\n', len - pos);
        if (nl == NULL) {
            ok = parse_fail(idx, why, why_size, line, "the last line has no line feed");
            break;
        }
        size_t llen = (size_t)(nl - start);
        pos += llen + 1;
        const char *t1 = memchr(start, '\t', llen);
        const char *t2 = t1 != NULL ? memchr(t1 + 1, '\t', llen - (size_t)(t1 + 1 - start)) : NULL;
        if (t1 == NULL || t2 == NULL) {
            ok = parse_fail(idx, why, why_size, line, "a row needs three tab-separated fields");
            break;
        }
        const char *reason = NULL;
        if (!unescape_folder(start, (size_t)(t1 - start), &folder, &reason)) {
            ok = parse_fail(idx, why, why_size, line, reason);
            break;
        }
        struct acl_entry e;
        if (!acl_id_parse(t1 + 1, (size_t)(t2 - t1 - 1), &e.id, &reason)) {
            ok = parse_fail(idx, why, why_size, line, reason);
            break;
        }
        const char *rights = t2 + 1;
        size_t rlen = llen - (size_t)(rights - start);
        /* Only real letters, canonical order, no duplicates: the writer's
         * form, so that a row has one spelling. */
        char bad = 0;
        e.rights = 0;
        char canon[14];
        if (rlen == 0 || !acl_rights_parse(rights, rlen, &e.rights, &bad) ||
            strlen(acl_rights_str(e.rights, false, canon)) != rlen ||
            memcmp(canon, rights, rlen) != 0) {
            ok = parse_fail(idx, why, why_size, line,
                            "rights must be real letters in canonical order (lrswipkxtea)");
            break;
        }
        /* Rows in order, each (folder, identifier) once. */
        if (idx->count > 0 && row_compare(folder.data, &e.id, &idx->rows[idx->count - 1]) <= 0) {
            ok = parse_fail(idx, why, why_size, line, "rows out of order or repeated");
            break;
        }
        insert_at(idx, idx->count, folder.data, &e);
    }
    buf_free(&folder);
    return ok;
}

void acl_list_index_format(const struct acl_index *idx, struct buf *out)
{
    buf_append_str(out, ACL_LIST_INDEX_HEADER "\n");
    for (size_t i = 0; i < idx->count; i++) {
        const struct acl_index_row *r = &idx->rows[i];
        char letters[14];
        escape_folder(r->folder, out);
        buf_append_char(out, '\t');
        acl_id_format(&r->entry.id, out);
        buf_append_char(out, '\t');
        buf_append_str(out, acl_rights_str(r->entry.rights, false, letters));
        buf_append_char(out, '\n');
    }
}

/* ---------- visibility ---------- */

size_t acl_list_index_visible_in(const struct acl_index *idx, const struct acl_identity *who,
                                 void (*visit)(void *arg, const char *folder, uint32_t rights),
                                 void *arg)
{
    struct acl_identity other = *who;
    other.owner = false;
    struct acl_list list = {0};
    size_t visited = 0;
    for (size_t i = 0; i < idx->count;) {
        const char *folder = idx->rows[i].folder;
        size_t end = folder_end(idx, i, folder);
        if (folder[0] != '\0') {
            acl_list_clear(&list);
            for (size_t j = i; j < end; j++)
                acl_list_modify(&list, &idx->rows[j].entry.id, idx->rows[j].entry.rights,
                                ACL_MODIFY_REPLACE);
            uint32_t rights = acl_list_rights(&list, &other);
            if ((rights & ACL_LOOKUP) != 0) {
                visit(arg, folder, rights);
                visited++;
            }
        }
        i = end;
    }
    acl_list_free(&list);
    return visited;
}

int acl_list_index_visible(struct mail_user *owner, const struct namespace_config *ns,
                           const struct acl_identity *who,
                           void (*visit)(void *arg, const char *folder, uint32_t rights), void *arg,
                           struct petrel_error *err)
{
    struct acl_index idx = {0};
    int r = acl_list_index_read(owner, ns, &idx, err);
    if (r < 0) {
        acl_list_index_free(&idx);
        return -1;
    }
    size_t n = acl_list_index_visible_in(&idx, who, visit, arg);
    acl_list_index_free(&idx);
    return n > (size_t)INT32_MAX ? INT32_MAX : (int)n;
}

/* ---------- on disk ---------- */

static bool root_path(struct mail_user *owner, const struct namespace_config *ns, const char *file,
                      struct buf *out, struct petrel_error *err)
{
    if (!mail_user_namespace_root(owner, ns, out, err))
        return false;
    buf_append_char(out, '/');
    buf_append_str(out, file);
    buf_append_char(out, '\0');
    return true;
}

static int read_path(const char *path, struct acl_index *idx, struct petrel_error *err)
{
    acl_list_index_clear(idx);
    char *data = NULL;
    size_t got = 0;
    int ret =
        fs_read_regular_file(path, "ACL list index", ACL_LIST_INDEX_MAX, &data, &got, NULL, err);
    if (ret == 1) {
        char why[160];
        if (!acl_list_index_parse(data, got, idx, why, sizeof(why))) {
            petrel_error_set(err, PETREL_ERR_INVALID, "%s: %s", path, why);
            ret = -1;
        }
    }
    free(data);
    return ret;
}

bool acl_list_index_path(struct mail_user *owner, const struct namespace_config *ns,
                         struct buf *out, struct petrel_error *err)
{
    buf_reset(out);
    return root_path(owner, ns, ACL_LIST_INDEX_FILE, out, err);
}

int acl_list_index_read_file(const char *path, struct acl_index *idx, struct petrel_error *err)
{
    return read_path(path, idx, err);
}

int acl_list_index_read(struct mail_user *owner, const struct namespace_config *ns,
                        struct acl_index *idx, struct petrel_error *err)
{
    struct buf path = {0};
    int r = -1;
    acl_list_index_clear(idx);
    if (root_path(owner, ns, ACL_LIST_INDEX_FILE, &path, err))
        r = read_path(path.data, idx, err);
    buf_free(&path);
    return r;
}

bool acl_list_index_update(struct mail_user *owner, const struct namespace_config *ns,
                           bool (*change)(struct acl_index *idx, void *ctx,
                                          struct petrel_error *err),
                           void *ctx, struct petrel_error *err)
{
    struct buf lock_path = {0};
    struct buf path = {0};
    if (!root_path(owner, ns, ACL_LIST_INDEX_LOCK, &lock_path, err) ||
        !root_path(owner, ns, ACL_LIST_INDEX_FILE, &path, err)) {
        buf_free(&lock_path);
        buf_free(&path);
        return false;
    }
    int fd = open(lock_path.data, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    buf_free(&lock_path);
    if (fd < 0) {
        int e = errno;
        buf_free(&path);
        return e == ENOENT ? petrel_error_set(err, PETREL_ERR_NOT_FOUND, "namespace root not found")
                           : petrel_error_set_errno(err, e, "cannot open the ACL list index lock");
    }
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            int e = errno;
            close(fd);
            buf_free(&path);
            return petrel_error_set_errno(err, e, "cannot lock the ACL list index");
        }
    }
    struct acl_index idx = {0};
    struct acl_index before = {0};
    struct petrel_error rerr;
    petrel_error_clear(&rerr);
    int r = read_path(path.data, &idx, &rerr);
    if (r < 0 && rerr.code != PETREL_ERR_INVALID) {
        /* Not readable now (I/O): rewriting it from this change alone would
         * lose the other folders' rows. */
        *err = rerr;
        close(fd);
        buf_free(&path);
        acl_list_index_free(&idx);
        return false;
    }
    if (r < 0)
        /* An unreadable index is rebuilt from what the change gives: the
         * writer's rows are right, the rest comes back with acl/rebuild. */
        log_error(COMPONENT, "ACL list index unusable: rewritten", "user=%s error=\"%s\"",
                  mail_user_name(owner), rerr.message);
    for (size_t i = 0; i < idx.count; i++)
        insert_at(&before, before.count, idx.rows[i].folder, &idx.rows[i].entry);
    bool ok = change(&idx, ctx, err);
    bool changed = ok && (r < 0 || !acl_list_index_equal(&before, &idx));
    if (ok && changed) {
        struct buf text = {0};
        acl_list_index_format(&idx, &text);
        /* fsync as mail.fsync says: the index can be reseeded from the
         * files (acl/rebuild), and a torn one is refused whole. */
        bool sync = mail_storage_config(mail_user_storage(owner))->fsync != FILEINDEX_FSYNC_NEVER;
        ok = fs_write_atomic(path.data, text.data, text.len, sync, err);
        buf_free(&text);
    }
    /* Under the lock, so one owner's registry changes are queued in the
     * order of the index writes (a synchronous driver's done before the
     * next write). */
    if (ok && changed)
        acl_registry_sync_owner(owner, ns, &before, &idx);
    close(fd); /* releases the lock */
    acl_list_index_free(&idx);
    acl_list_index_free(&before);
    buf_free(&path);
    return ok;
}

static uint64_t stamp_of(const struct stat *st)
{
    const uint64_t parts[] = {(uint64_t)st->st_ino, (uint64_t)st->st_dev, (uint64_t)st->st_size,
                              (uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec};
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        h ^= parts[i];
        h *= 1099511628211ull;
    }
    return h != 0 ? h : 1;
}

int acl_list_index_refresh(struct mail_user *owner, const struct namespace_config *ns,
                           struct acl_index_snapshot *snap, struct petrel_error *err)
{
    struct buf path = {0};
    if (!root_path(owner, ns, ACL_LIST_INDEX_FILE, &path, err)) {
        buf_free(&path);
        acl_list_index_clear(&snap->idx);
        snap->stamp = 0;
        return -1;
    }
    struct stat st;
    int r;
    if (lstat(path.data, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) {
            acl_list_index_clear(&snap->idx);
            snap->stamp = 0;
            snap->present = false;
            r = 0;
        } else {
            petrel_error_set_errno(err, errno, "cannot look at the ACL list index");
            acl_list_index_clear(&snap->idx);
            snap->stamp = 0;
            r = -1;
        }
    } else if (snap->stamp != 0 && snap->present && stamp_of(&st) == snap->stamp) {
        r = 1; /* the file read last */
    } else {
        /* Stamp first: a change after it makes the next look read again. */
        uint64_t s = stamp_of(&st);
        r = read_path(path.data, &snap->idx, err);
        snap->stamp = r > 0 ? s : 0;
        snap->present = r > 0;
    }
    buf_free(&path);
    return r;
}

void acl_list_index_snapshot_free(struct acl_index_snapshot *snap)
{
    acl_list_index_free(&snap->idx);
    memset(snap, 0, sizeof(*snap));
}

struct set_folder {
    const char *folder;
    const struct acl_list *list;
};

static bool set_folder_change(struct acl_index *idx, void *ctx, struct petrel_error *err)
{
    (void)err;
    const struct set_folder *s = ctx;
    acl_list_index_set_folder(idx, s->folder, s->list);
    return true;
}

bool acl_list_index_write_folder(struct mail_user *owner, const struct namespace_config *ns,
                                 const char *folder, const struct acl_list *list,
                                 struct petrel_error *err)
{
    struct set_folder s = {.folder = folder, .list = list};
    return acl_list_index_update(owner, ns, set_folder_change, &s, err);
}
