/* dovecot-uidlist reader and writer (see maildir-uidlist.h).
 *
 * What Dovecot 2.3 does, and so what we do (maildir-uidlist.c in
 * src/lib-storage/index/maildir/, checked against files written by
 * Dovecot 2.3.19):
 * - Header "3 V<uidvalidity> N<nextuid> G<guid>" then any other fields,
 *   each a one-letter key and its value, separated by single spaces. Unknown
 *   keys are kept and written back after G. V and N are plain decimals, G is
 *   32 hex digits (written in lower case). V or N missing or 0: broken file.
 * - Record "<uid>[ <field>...] :<filename>": every field starts with an
 *   upper-case letter (W vsize, S size, P POP3 UIDL, O POP3 order, G GUID)
 *   and runs to the next space. Everything after the ':' is the file name;
 *   Dovecot writes the part before the first ':' (the base) and so do we.
 * - UIDs are strictly ascending and below 2^32-1. A base name listed again
 *   under a higher UID replaces the earlier line (Dovecot: "Duplicate file
 *   entry", after a message was moved back into the folder).
 * - Appends add lines without touching the header, so the next UID is
 *   max(N, last UID + 1). A line without its newline at the end of the file
 *   is an interrupted append and is ignored, as Dovecot's reader does.
 * - Lines may end in CRLF (Dovecot's line reader drops the CR).
 * - Version 1 (Courier's courierimapuiddb layout): "1 <uidvalidity>
 *   <nextuid>" and "<uid> <filename>"; every UID must be below nextuid.
 * Stricter than Dovecot, so that whatever we accept is written back the
 * same: a line with a NUL byte, a header with control characters, a field
 * not starting with 'A'..'Z', a base name ending in CR, a UID that does not
 * fit in 32 bits make the whole file invalid (Dovecot would drop the field
 * or misread the number). A zero-filled tail after a crash is an
 * unterminated line and ignored. */
#include "storage/maildir/maildir-uidlist.h"

#include "core/bsearch-insert.h"
#include "core/buf.h"
#include "core/fs-util.h"
#include "core/slice.h"
#include "core/xalloc.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* Largest dovecot-uidlist we read (a million messages take about 60 MB). */
#define UIDLIST_MAX_FILE (512u * 1024 * 1024)

struct header {
    unsigned version;
    uint32_t uid_validity;
    uint32_t next_uid;
    bool has_guid;
    uint8_t guid[16];
    struct buf extra;
};

static bool fail_at(struct petrel_error *err, const char *name, size_t line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool fail_at(struct petrel_error *err, const char *name, size_t line, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return petrel_error_set(err, PETREL_ERR_INVALID, "%s:%zu: %s", name, line, msg);
}

/* A short printable excerpt of file bytes for error messages (they end up
 * in logs and JSON replies, so only printable ASCII). */
static const char *excerpt(const char *p, size_t len, char *out, size_t size)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n + 4 < size; i++) {
        unsigned char c = (unsigned char)p[i];
        out[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    if (n < len && n + 3 < size) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
    return out;
}

/* Strict unsigned decimal (digits only, fits in 32 bits). */
static bool parse_u32(const char *p, size_t len, uint32_t *out)
{
    if (len == 0)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(p[i] - '0');
        if (v > UINT32_MAX)
            return false;
    }
    *out = (uint32_t)v;
    return true;
}

static bool parse_guid(const char *p, size_t len, uint8_t guid[16])
{
    if (len != 32)
        return false;
    for (size_t i = 0; i < 16; i++) {
        int hi = hex_digit_value(p[2 * i]), lo = hex_digit_value(p[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        guid[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static void header_free(struct header *h)
{
    buf_free(&h->extra);
}

/* Parses the first line (without its newline). */
/* The next space-separated field from *p on (false at `end`). */
static bool next_field(const char **p, const char *end, struct slice *field)
{
    while (*p < end && **p == ' ')
        (*p)++;
    field->ptr = *p;
    while (*p < end && **p != ' ')
        (*p)++;
    field->len = (size_t)(*p - field->ptr);
    return field->len > 0;
}

static bool parse_header(const char *name, struct slice line, struct header *h,
                         struct petrel_error *err)
{
    memset(h, 0, sizeof(*h));
    char ex[48];
    const char *p = line.ptr, *end = line.ptr + line.len;
    if (line.len < 2 || p[0] < '0' || p[0] > '9' || p[1] != ' ')
        return fail_at(err, name, 1, "corrupted header (invalid version number)");
    h->version = (unsigned)(p[0] - '0');
    p += 2;
    if (h->version == 1) {
        const char *sp = memchr(p, ' ', (size_t)(end - p));
        const char *second = sp;
        while (second != NULL && second < end && *second == ' ')
            second++;
        if (sp == NULL || !parse_u32(p, (size_t)(sp - p), &h->uid_validity) ||
            !parse_u32(second, (size_t)(end - second), &h->next_uid))
            return fail_at(err, name, 1, "corrupted header (version 1)");
    } else if (h->version == 3) {
        struct slice field;
        while (next_field(&p, end, &field)) {
            char key = field.ptr[0];
            const char *value = field.ptr + 1;
            size_t vlen = field.len - 1;
            if (key == 'V') {
                if (!parse_u32(value, vlen, &h->uid_validity))
                    return fail_at(err, name, 1, "invalid UIDVALIDITY \"%s\"",
                                   excerpt(value, vlen, ex, sizeof(ex)));
            } else if (key == 'N') {
                if (!parse_u32(value, vlen, &h->next_uid))
                    return fail_at(err, name, 1, "invalid next UID \"%s\"",
                                   excerpt(value, vlen, ex, sizeof(ex)));
            } else if (key == 'G') {
                if (!parse_guid(value, vlen, h->guid))
                    return fail_at(err, name, 1, "invalid folder GUID \"%s\"",
                                   excerpt(value, vlen, ex, sizeof(ex)));
                h->has_guid = true;
            } else {
                if (h->extra.len > 0)
                    buf_append_char(&h->extra, ' ');
                buf_append(&h->extra, field.ptr, field.len);
            }
        }
    } else {
        return fail_at(err, name, 1, "unsupported version %u", h->version);
    }
    if (h->uid_validity == 0 || h->next_uid == 0)
        return fail_at(err, name, 1, "broken header (uidvalidity %u, next UID %u)", h->uid_validity,
                       h->next_uid);
    return true;
}

/* Open-addressing set of base names -> entry index, for duplicate lines. */
struct base_index {
    size_t *slots; /* entry index + 1; 0 = empty */
    size_t cap;
};

static uint64_t hash_base(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Returns the slot for `base` (holding 0 when absent). */
static size_t *base_index_slot(struct base_index *bi, const struct uidlist *list, const char *base)
{
    size_t mask = bi->cap - 1;
    for (size_t i = (size_t)hash_base(base) & mask;; i = (i + 1) & mask) {
        size_t v = bi->slots[i];
        if (v == 0 || strcmp(list->entries[v - 1].base, base) == 0)
            return &bi->slots[i];
    }
}

static void entry_free(struct uidlist_entry *e)
{
    free(e->base);
    free(e->extensions);
    e->base = NULL;
    e->extensions = NULL;
}

/* Normalises extension fields (single spaces) into out; false when a field
 * does not start with an upper-case letter. */
static bool parse_extensions(const char *p, const char *end, struct buf *out, const char **bad,
                             size_t *bad_len)
{
    struct slice field;
    while (next_field(&p, end, &field)) {
        if (field.ptr[0] < 'A' || field.ptr[0] > 'Z') {
            *bad = field.ptr;
            *bad_len = field.len;
            return false;
        }
        if (out->len > 0)
            buf_append_char(out, ' ');
        buf_append(out, field.ptr, field.len);
    }
    return true;
}

static bool parse_record(const char *name, size_t lineno, struct slice line, unsigned version,
                         uint32_t prev_uid, uint32_t hdr_next_uid, uint32_t *uid_out,
                         struct slice *base_out, struct buf *ext, struct petrel_error *err)
{
    char ex[48];
    const char *p = line.ptr, *end = line.ptr + line.len;
    uint64_t uid = 0;
    const char *digits = p;
    while (p < end && *p >= '0' && *p <= '9') {
        uid = uid * 10 + (uint64_t)(*p - '0');
        if (uid > UINT32_MAX)
            return fail_at(err, name, lineno, "UID too large");
        p++;
    }
    if (p == digits || uid == 0 || p == end || *p != ' ')
        return fail_at(err, name, lineno, "invalid data \"%s\"",
                       excerpt(line.ptr, line.len, ex, sizeof(ex)));
    if (uid >= UINT32_MAX)
        return fail_at(err, name, lineno, "UID too high (%llu)", (unsigned long long)uid);
    if (uid <= prev_uid)
        return fail_at(err, name, lineno, "UIDs not ordered (%llu after %u)",
                       (unsigned long long)uid, prev_uid);
    if (version == 1 && uid >= hdr_next_uid)
        return fail_at(err, name, lineno, "UID %llu not below next UID %u", (unsigned long long)uid,
                       hdr_next_uid);
    while (p < end && *p == ' ')
        p++;
    buf_reset(ext);
    if (version == 3) {
        const char *colon = p;
        /* Fields run until one starts with ':'. */
        while (colon < end && *colon != ':') {
            while (colon < end && *colon != ' ')
                colon++;
            while (colon < end && *colon == ' ')
                colon++;
        }
        if (colon == end)
            return fail_at(err, name, lineno, "missing ':' before the file name");
        const char *bad = NULL;
        size_t bad_len = 0;
        if (!parse_extensions(p, colon, ext, &bad, &bad_len))
            return fail_at(err, name, lineno, "invalid extension field \"%s\"",
                           excerpt(bad, bad_len, ex, sizeof(ex)));
        p = colon + 1;
    }
    if (p == end)
        return fail_at(err, name, lineno, "empty file name");
    if (memchr(p, '/', (size_t)(end - p)) != NULL)
        return fail_at(err, name, lineno, "broken file name (contains '/')");
    const char *info = memchr(p, ':', (size_t)(end - p));
    size_t base_len = info != NULL ? (size_t)(info - p) : (size_t)(end - p);
    if (base_len == 0)
        return fail_at(err, name, lineno, "empty base file name");
    if (p[base_len - 1] == '\r')
        return fail_at(err, name, lineno, "carriage return at the end of the base file name");
    *uid_out = (uint32_t)uid;
    base_out->ptr = p;
    base_out->len = base_len;
    return true;
}

/* Next complete line from [*pos, len); false at the end (a trailing line
 * without newline is not returned). */
static bool next_line(const char *text, size_t len, size_t *pos, struct slice *line)
{
    if (*pos >= len)
        return false;
    const char *nl = memchr(text + *pos, '\n', len - *pos);
    if (nl == NULL)
        return false;
    line->ptr = text + *pos;
    line->len = (size_t)(nl - line->ptr);
    if (line->len > 0 && line->ptr[line->len - 1] == '\r')
        line->len--;
    *pos = (size_t)(nl - text) + 1;
    return true;
}

bool uidlist_parse(const char *name, const char *text, size_t len, struct uidlist *out,
                   struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    size_t pos = 0;
    struct slice line;
    if (!next_line(text, len, &pos, &line))
        return fail_at(err, name, 1, len == 0 ? "empty file" : "header line not terminated");
    for (size_t i = 0; i < line.len; i++) {
        if ((unsigned char)line.ptr[i] < 0x20)
            return fail_at(err, name, 1, "control character in the header");
    }
    struct header h;
    if (!parse_header(name, line, &h, err)) {
        header_free(&h);
        return false;
    }
    out->uid_validity = h.uid_validity;
    out->next_uid = h.next_uid;
    out->version = h.version;
    out->has_guid = h.has_guid;
    memcpy(out->guid, h.guid, sizeof(out->guid));
    out->extra_header = buf_steal(&h.extra);

    struct base_index bi = {NULL, 0};
    struct buf ext = {0};
    bool ok = true;
    size_t removed = 0;
    uint32_t prev_uid = 0;
    size_t consumed = pos;
    for (size_t lineno = 2; next_line(text, len, &pos, &line); lineno++) {
        uint32_t uid = 0;
        struct slice base = {NULL, 0};
        if (line.len > 0 && line.ptr[line.len - 1] == '\r') {
            ok = fail_at(err, name, lineno, "stray carriage return at the end of the line");
            break;
        }
        if (memchr(line.ptr, '\0', line.len) != NULL) {
            ok = fail_at(err, name, lineno, "NUL byte in the line");
            break;
        }
        if (!parse_record(name, lineno, line, h.version, prev_uid, h.next_uid, &uid, &base, &ext,
                          err)) {
            ok = false;
            break;
        }
        consumed = pos;
        prev_uid = uid;
        if (out->count + 1 > bi.cap / 2) {
            /* Grow and rehash (live entries only). */
            size_t ncap = bi.cap == 0 ? 64 : bi.cap * 2;
            free(bi.slots);
            bi.slots = xcalloc(ncap, sizeof(size_t));
            bi.cap = ncap;
            for (size_t i = 0; i < out->count; i++) {
                if (out->entries[i].base != NULL)
                    *base_index_slot(&bi, out, out->entries[i].base) = i + 1;
            }
        }
        out->entries = xgrow(out->entries, &out->cap, out->count + 1, sizeof(out->entries[0]));
        struct uidlist_entry *e = &out->entries[out->count];
        e->uid = uid;
        e->base = xstrndup(base.ptr, base.len);
        e->extensions = xstrdup(buf_cstr(&ext));
        size_t *slot = base_index_slot(&bi, out, e->base);
        if (*slot != 0) {
            /* Listed again under a higher UID: the new line wins. */
            entry_free(&out->entries[*slot - 1]);
            removed++;
        }
        *slot = out->count + 1;
        out->count++;
    }
    free(bi.slots);
    buf_free(&ext);
    header_free(&h);
    if (!ok) {
        uidlist_free(out);
        return false;
    }
    if (removed > 0) {
        size_t w = 0;
        for (size_t i = 0; i < out->count; i++) {
            if (out->entries[i].base != NULL)
                out->entries[w++] = out->entries[i];
        }
        out->count = w;
    }
    if (prev_uid != 0 && out->next_uid <= prev_uid)
        out->next_uid = prev_uid + 1;
    out->file_size = consumed;
    return true;
}

bool uidlist_read(int dir_fd, const char *path, struct uidlist *out, struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    struct stat before, after;
    const char *name = fs_at_name(dir_fd, path);
    bool known = fstatat(dir_fd, name, &before, 0) == 0;
    char *data;
    size_t len;
    if (!fs_read_file_at(dir_fd, path, UIDLIST_MAX_FILE, &data, &len, err))
        return false;
    bool ok = uidlist_parse(path, data, len, out, err);
    free(data);
    /* The identity counts only when the file read is the one stat saw on
     * both sides of the read (not replaced meanwhile). */
    if (ok && known && fstatat(dir_fd, name, &after, 0) == 0 && after.st_ino == before.st_ino &&
        after.st_dev == before.st_dev && (uint64_t)after.st_size == (uint64_t)len) {
        out->file_dev = (uint64_t)after.st_dev;
        out->file_ino = (uint64_t)after.st_ino;
    }
    return ok;
}

/* Parses appended lines (text holds only complete lines) into new entries
 * of `list`; false, with `list` as it was, on anything unusual. */
static bool add_appended_lines(const char *path, struct uidlist *list, const char *text, size_t len)
{
    size_t old_count = list->count;
    uint32_t prev_uid = old_count > 0 ? list->entries[old_count - 1].uid : 0;
    struct buf ext = {0};
    size_t pos = 0;
    struct slice line;
    bool ok = true;
    while (ok && next_line(text, len, &pos, &line)) {
        uint32_t uid = 0;
        struct slice base = {NULL, 0};
        ok = line.len > 0 && line.ptr[line.len - 1] != '\r' &&
             memchr(line.ptr, '\0', line.len) == NULL &&
             parse_record(path, 0, line, list->version, prev_uid, list->next_uid, &uid, &base, &ext,
                          NULL);
        if (!ok)
            break;
        char *name = xstrndup(base.ptr, base.len);
        /* A name listed again under a higher UID needs the whole read's
         * "the later line wins". */
        if (uidlist_find_base(list, name) != NULL) {
            free(name);
            ok = false;
            break;
        }
        list->entries = xgrow(list->entries, &list->cap, list->count + 1, sizeof(list->entries[0]));
        struct uidlist_entry *e = &list->entries[list->count++];
        e->uid = uid;
        e->base = name;
        e->extensions = xstrdup(buf_cstr(&ext));
        prev_uid = uid;
    }
    buf_free(&ext);
    if (!ok || pos != len) {
        while (list->count > old_count)
            entry_free(&list->entries[--list->count]);
        return false;
    }
    if (prev_uid != 0 && list->next_uid <= prev_uid)
        list->next_uid = prev_uid + 1;
    list->file_size += len;
    return true;
}

bool uidlist_read_appended(int dir_fd, const char *path, struct uidlist *list)
{
    if (list->file_ino == 0 || list->file_size == 0 || list->version != 3)
        return false;
    int fd = openat(dir_fd, fs_at_name(dir_fd, path), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    bool ok = false;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_ino == list->file_ino &&
        (uint64_t)st.st_dev == list->file_dev && (uint64_t)st.st_size >= list->file_size &&
        (uint64_t)st.st_size - list->file_size < UIDLIST_MAX_FILE) {
        /* One byte before the tail: the last line read must still end
         * there, or the file is not what we read. */
        size_t want = (size_t)((uint64_t)st.st_size - list->file_size) + 1;
        char *data = xmalloc(want);
        size_t got = 0;
        if (fs_pread_all(fd, data, want, list->file_size - 1, &got) && got == want &&
            data[0] == '\n')
            ok = add_appended_lines(path, list, data + 1, want - 1);
        free(data);
    }
    close(fd);
    return ok;
}

/* ---------- writing ---------- */

/* The writers refuse only what the line format cannot carry, so anything
 * uidlist_parse() accepted is written back as it was read. */

/* Space-separated fields, each starting with 'A'..'Z'. */
static bool valid_extensions(const char *ext)
{
    for (const char *p = ext; *p != '\0';) {
        if (*p < 'A' || *p > 'Z')
            return false;
        while (*p != '\0' && *p != ' ') {
            if (*p == '\n')
                return false;
            p++;
        }
        if (*p == ' ' && (p[1] == '\0' || p[1] == ' '))
            return false;
        if (*p == ' ')
            p++;
    }
    return true;
}

/* Ends the line, so no trailing CR (readers drop one). */
static bool valid_base(const char *base)
{
    if (base == NULL || base[0] == '\0' || strpbrk(base, "/:\n") != NULL)
        return false;
    return base[strlen(base) - 1] != '\r';
}

/* Other header fields: space-separated, none of them V, N or G. */
static bool valid_extra_header(const char *extra)
{
    if (extra == NULL || extra[0] == '\0')
        return true;
    if (strchr(extra, '\n') != NULL || extra[strlen(extra) - 1] == '\r')
        return false;
    for (const char *p = extra; *p != '\0';) {
        if (*p == ' ' || *p == 'V' || *p == 'N' || *p == 'G')
            return false;
        while (*p != '\0' && *p != ' ')
            p++;
        if (*p == ' ' && p[1] == '\0')
            return false;
        if (*p == ' ')
            p++;
    }
    return true;
}

static bool check_entries(const struct uidlist *list, size_t from, struct petrel_error *err)
{
    uint32_t prev = from > 0 ? list->entries[from - 1].uid : 0;
    for (size_t i = from; i < list->count; i++) {
        const struct uidlist_entry *e = &list->entries[i];
        if (e->uid == 0 || e->uid == UINT32_MAX || e->uid <= prev)
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "uidlist: UID %u out of order or out of range", e->uid);
        if (!valid_base(e->base))
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "uidlist: invalid base name for UID %u", e->uid);
        if (e->extensions != NULL && !valid_extensions(e->extensions))
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "uidlist: invalid extension fields for UID %u", e->uid);
        prev = e->uid;
    }
    return true;
}

/* Entries from `from` on may be appended to the file. */
static bool check_append(const struct uidlist *list, size_t from, struct petrel_error *err)
{
    if (from > list->count)
        return petrel_error_set(err, PETREL_ERR_INVALID, "uidlist: append from %zu of %zu", from,
                                list->count);
    return check_entries(list, from, err);
}

static void format_entries(const struct uidlist *list, size_t from, struct buf *out)
{
    for (size_t i = from; i < list->count; i++) {
        const struct uidlist_entry *e = &list->entries[i];
        buf_printf(out, "%u", e->uid);
        if (e->extensions != NULL && e->extensions[0] != '\0') {
            buf_append_char(out, ' ');
            buf_append_str(out, e->extensions);
        }
        buf_append(out, " :", 2);
        buf_append_str(out, e->base);
        buf_append_char(out, '\n');
    }
}

/* The whole file. `guid` is the one to write (the list's or a fresh one). */
static bool format_all(const struct uidlist *list, const uint8_t guid[16], struct buf *out,
                       struct petrel_error *err)
{
    if (list->uid_validity == 0 || list->next_uid == 0)
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "uidlist: UIDVALIDITY and next UID must be set");
    if (!valid_extra_header(list->extra_header))
        return petrel_error_set(err, PETREL_ERR_INVALID, "uidlist: invalid extra header fields");
    if (!check_entries(list, 0, err))
        return false;
    uint32_t next_uid = list->next_uid;
    if (list->count > 0 && next_uid <= list->entries[list->count - 1].uid)
        next_uid = list->entries[list->count - 1].uid + 1;
    buf_printf(out, "3 V%u N%u G", list->uid_validity, next_uid);
    for (size_t i = 0; i < 16; i++)
        buf_printf(out, "%02x", guid[i]);
    if (list->extra_header != NULL && list->extra_header[0] != '\0') {
        buf_append_char(out, ' ');
        buf_append_str(out, list->extra_header);
    }
    buf_append_char(out, '\n');
    format_entries(list, 0, out);
    return true;
}

bool uidlist_format(const struct uidlist *list, struct buf *out, struct petrel_error *err)
{
    if (!list->has_guid)
        return petrel_error_set(err, PETREL_ERR_INVALID, "uidlist: no folder GUID");
    size_t start = out->len;
    if (format_all(list, list->guid, out, err))
        return true;
    out->len = start;
    if (out->data != NULL)
        out->data[start] = '\0';
    return false;
}

static void random_guid(uint8_t guid[16])
{
    size_t got = 0;
    while (got < 16) {
        ssize_t r = getrandom(guid + got, 16 - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            petrel_fatal("getrandom failed: %s", strerror(errno));
        got += (size_t)r;
    }
}

/* Writes the whole file; `size_out` gets its length. */
static bool write_whole(int dir_fd, const char *path, const struct uidlist *list,
                        const uint8_t guid[16], bool fsync, uint64_t *size_out,
                        struct petrel_error *err)
{
    struct buf text = {0};
    bool ok = format_all(list, guid, &text, err) &&
              fs_write_atomic_at(dir_fd, path, text.data, text.len, fsync, err);
    if (ok && size_out != NULL)
        *size_out = text.len;
    buf_free(&text);
    return ok;
}

bool uidlist_write(int dir_fd, const char *path, const struct uidlist *list, bool fsync,
                   struct petrel_error *err)
{
    uint8_t guid[16];
    if (list->has_guid)
        memcpy(guid, list->guid, sizeof(guid));
    else
        random_guid(guid);
    return write_whole(dir_fd, path, list, guid, fsync, NULL, err);
}

/* Rewrites for uidlist_append, keeping a next UID the file already promised
 * (never lowers it) and stamping a GUID when the list has none. */
static bool append_rewrite(int dir_fd, const char *path, struct uidlist *list,
                           const struct header *file_hdr, bool fsync, struct petrel_error *err)
{
    if (file_hdr != NULL && file_hdr->uid_validity == list->uid_validity &&
        file_hdr->next_uid > list->next_uid)
        list->next_uid = file_hdr->next_uid;
    if (!list->has_guid) {
        if (file_hdr != NULL && file_hdr->has_guid)
            memcpy(list->guid, file_hdr->guid, sizeof(list->guid));
        else
            random_guid(list->guid);
        list->has_guid = true;
    }
    uint64_t size = 0;
    if (!write_whole(dir_fd, path, list, list->guid, fsync, &size, err))
        return false;
    list->file_size = size;
    return true;
}

static bool write_all_at(int fd, const char *data, size_t len, off_t off)
{
    while (len > 0) {
        ssize_t w = pwrite(fd, data, len, off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        data += w;
        len -= (size_t)w;
        off += w;
    }
    return true;
}

/* Reads the first line of the open file (up to 64 KiB). */
static bool read_first_line(int fd, struct buf *out)
{
    char chunk[4096];
    off_t off = 0;
    while (out->len < 65536) {
        ssize_t r = pread(fd, chunk, sizeof(chunk), off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        const char *nl = memchr(chunk, '\n', (size_t)r);
        if (nl != NULL) {
            buf_append(out, chunk, (size_t)(nl - chunk));
            if (out->len > 0 && out->data[out->len - 1] == '\r')
                out->len--;
            return true;
        }
        buf_append(out, chunk, (size_t)r);
        off += r;
    }
    return false;
}

static bool same_header(const struct header *h, const struct uidlist *list)
{
    const char *extra = list->extra_header != NULL ? list->extra_header : "";
    return h->version == 3 && h->uid_validity == list->uid_validity && list->has_guid &&
           h->has_guid && memcmp(h->guid, list->guid, sizeof(h->guid)) == 0 &&
           strcmp(buf_cstr(&h->extra), extra) == 0;
}

/* Writes entries [from, list->count) at list->file_size of the open file;
 * a partial write is taken back so the file stays well-formed. */
static bool append_lines(int fd, const char *path, struct uidlist *list, size_t from, bool fsync,
                         struct petrel_error *err)
{
    struct buf lines = {0};
    format_entries(list, from, &lines);
    bool ok = true;
    if (lines.len > 0) {
        if (!write_all_at(fd, lines.data, lines.len, (off_t)list->file_size)) {
            int e = errno;
            if (ftruncate(fd, (off_t)list->file_size) != 0) {
                /* nothing more to do: readers ignore an unterminated line */
            }
            ok = petrel_error_set_errno(err, e, "append to %s: %s", path,
                                        e != 0 ? strerror(e) : "short write");
        } else if (fsync && fdatasync(fd) != 0) {
            ok = petrel_error_set_errno(err, errno, "fdatasync %s: %s", path, strerror(errno));
        }
    }
    if (ok)
        list->file_size += lines.len;
    buf_free(&lines);
    return ok;
}

bool uidlist_append(int dir_fd, const char *path, struct uidlist *list, size_t from, bool fsync,
                    struct petrel_error *err)
{
    if (!check_append(list, from, err))
        return false;
    if (list->file_size == 0)
        return append_rewrite(dir_fd, path, list, NULL, fsync, err);
    int fd = openat(dir_fd, fs_at_name(dir_fd, path), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return append_rewrite(dir_fd, path, list, NULL, fsync, err);
        return petrel_error_set_errno(err, errno, "cannot open %s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return petrel_error_set_errno(err, e, "fstat %s: %s", path, strerror(e));
    }
    struct buf first = {0};
    struct header h;
    memset(&h, 0, sizeof(h));
    bool have_hdr = read_first_line(fd, &first) &&
                    parse_header(path, (struct slice){first.data, first.len}, &h, NULL);
    buf_free(&first);

    /* Appending keeps the header: readers take max(N, last UID + 1). */
    uint32_t last_uid = list->count > 0 ? list->entries[list->count - 1].uid : 0;
    uint32_t implied_next = have_hdr ? h.next_uid : 0;
    if (last_uid != 0 && implied_next <= last_uid)
        implied_next = last_uid + 1;
    bool can_append = (uint64_t)st.st_size == list->file_size && have_hdr &&
                      same_header(&h, list) && list->next_uid <= implied_next;
    if (!can_append) {
        close(fd);
        bool ok = append_rewrite(dir_fd, path, list, have_hdr ? &h : NULL, fsync, err);
        header_free(&h);
        return ok;
    }
    header_free(&h);
    bool ok = append_lines(fd, path, list, from, fsync, err);
    if (close(fd) != 0 && ok)
        ok = petrel_error_set_errno(err, errno, "close %s: %s", path, strerror(errno));
    return ok;
}

bool uidlist_append_fd(int fd, const char *path, struct uidlist *list, size_t from, bool fsync,
                       struct petrel_error *err)
{
    return check_append(list, from, err) && append_lines(fd, path, list, from, fsync, err);
}

/* ---------- in memory ---------- */

void uidlist_add(struct uidlist *list, uint32_t uid, const char *base, const char *extensions)
{
    PETREL_ASSERT(list->count == 0 || uid > list->entries[list->count - 1].uid);
    list->entries = xgrow(list->entries, &list->cap, list->count + 1, sizeof(list->entries[0]));
    struct uidlist_entry *e = &list->entries[list->count++];
    e->uid = uid;
    const char *colon = strchr(base, ':');
    e->base = colon != NULL ? xstrndup(base, (size_t)(colon - base)) : xstrdup(base);
    e->extensions = xstrdup(extensions != NULL ? extensions : "");
}

const struct uidlist_entry *uidlist_find_uid(const struct uidlist *list, uint32_t uid)
{
    size_t i = bsearch_u32_lower(list->entries, list->count, sizeof(*list->entries),
                                 offsetof(struct uidlist_entry, uid), uid);
    return i < list->count && list->entries[i].uid == uid ? &list->entries[i] : NULL;
}

const struct uidlist_entry *uidlist_find_base(const struct uidlist *list, const char *base)
{
    for (size_t i = 0; i < list->count; i++) {
        if (strcmp(list->entries[i].base, base) == 0)
            return &list->entries[i];
    }
    return NULL;
}

void uidlist_free(struct uidlist *list)
{
    for (size_t i = 0; i < list->count; i++)
        entry_free(&list->entries[i]);
    free(list->entries);
    free(list->extra_header);
    memset(list, 0, sizeof(*list));
}
