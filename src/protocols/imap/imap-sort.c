/* SORT criteria, their comparison and the RFC 5256 string rules (see
 * imap-sort.h). */
#include "protocols/imap/imap-sort.h"

#include "core/stable-sort.h"
#include "core/xalloc.h"
#include "protocols/imap/imap-envelope.h"
#include "storage/message/message-decode.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    enum imap_sort_key key;
} sort_keys[] = {
    {"ARRIVAL", IMAP_SORT_ARRIVAL},
    {"CC", IMAP_SORT_CC},
    {"DATE", IMAP_SORT_DATE},
    {"FROM", IMAP_SORT_FROM},
    {"SIZE", IMAP_SORT_SIZE},
    {"SUBJECT", IMAP_SORT_SUBJECT},
    {"TO", IMAP_SORT_TO},
    {"DISPLAYFROM", IMAP_SORT_DISPLAYFROM},
    {"DISPLAYTO", IMAP_SORT_DISPLAYTO},
};

bool imap_sort_parse(const struct imap_arg *list, struct imap_sort_program *out,
                     struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    if (list == NULL || list->type != IMAP_ARG_LIST)
        return petrel_error_set(err, PETREL_ERR_INVALID, "Sort criteria must be a list");
    if (list->count == 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "Empty sort criteria");
    bool reverse = false;
    for (size_t i = 0; i < list->count; i++) {
        const struct imap_arg *a = &list->list[i];
        if (imap_arg_atom_equals(a, "REVERSE")) {
            if (reverse)
                return petrel_error_set(err, PETREL_ERR_INVALID, "REVERSE REVERSE");
            reverse = true;
            continue;
        }
        size_t k = 0;
        size_t nkeys = sizeof(sort_keys) / sizeof(sort_keys[0]);
        while (k < nkeys && !imap_arg_atom_equals(a, sort_keys[k].name))
            k++;
        if (k == nkeys)
            return petrel_error_set(err, PETREL_ERR_INVALID, "Unknown sort key");
        if (out->count == IMAP_SORT_MAX_KEYS)
            return petrel_error_set(err, PETREL_ERR_INVALID, "Too many sort keys");
        out->keys[out->count].key = sort_keys[k].key;
        out->keys[out->count].reverse = reverse;
        out->count++;
        reverse = false;
    }
    if (reverse)
        return petrel_error_set(err, PETREL_ERR_INVALID, "REVERSE needs a sort key after it");
    return true;
}

bool imap_sort_needs_header(const struct imap_sort_program *prog)
{
    for (size_t i = 0; i < prog->count; i++) {
        if (prog->keys[i].key != IMAP_SORT_ARRIVAL && prog->keys[i].key != IMAP_SORT_SIZE)
            return true;
    }
    return false;
}

static int cmp_i64(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b ? 1 : 0;
}

static int cmp_key(enum imap_sort_key key, const struct imap_sort_facts *a,
                   const struct imap_sort_facts *b)
{
    switch (key) {
    case IMAP_SORT_ARRIVAL:
        return cmp_i64(a->arrival, b->arrival);
    case IMAP_SORT_DATE:
        return cmp_i64(a->date, b->date);
    case IMAP_SORT_SIZE:
        return a->size < b->size ? -1 : a->size > b->size ? 1 : 0;
    case IMAP_SORT_CC:
        return strcmp(a->cc, b->cc);
    case IMAP_SORT_FROM:
        return strcmp(a->from, b->from);
    case IMAP_SORT_TO:
        return strcmp(a->to, b->to);
    case IMAP_SORT_SUBJECT:
        return strcmp(a->subject, b->subject);
    case IMAP_SORT_DISPLAYFROM:
        return strcmp(a->display_from, b->display_from);
    case IMAP_SORT_DISPLAYTO:
        return strcmp(a->display_to, b->display_to);
    }
    return 0;
}

int imap_sort_compare(const struct imap_sort_program *prog, const struct imap_sort_facts *a,
                      const struct imap_sort_facts *b)
{
    for (size_t i = 0; i < prog->count; i++) {
        int c = cmp_key(prog->keys[i].key, a, b);
        if (c != 0)
            return prog->keys[i].reverse ? -c : c;
    }
    /* RFC 5256 2.3: exact matches in sequence order, whatever REVERSE says. */
    return a->seq < b->seq ? -1 : a->seq > b->seq ? 1 : 0;
}

static int compare_sort(const void *a, const void *b, void *ctx)
{
    return imap_sort_compare(ctx, a, b);
}

void imap_sort_facts(const struct imap_sort_program *prog, struct imap_sort_facts *facts,
                     size_t count)
{
    stable_sort(facts, count, sizeof(*facts), compare_sort, (void *)prog);
}

void imap_append_ordered_set(struct buf *out, const uint32_t *v, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && v[j + 1] == v[j] + 1)
            j++;
        if (i > 0)
            buf_append_char(out, ',');
        if (j == i)
            buf_printf(out, "%u", v[i]);
        else
            buf_printf(out, "%u:%u", v[i], v[j]);
        i = j + 1;
    }
}

void imap_sort_facts_free(struct imap_sort_facts *f)
{
    free(f->subject);
    free(f->from);
    free(f->to);
    free(f->cc);
    free(f->display_from);
    free(f->display_to);
    f->subject = f->from = f->to = f->cc = f->display_from = f->display_to = NULL;
}

void imap_casemap(char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (s[i] >= 'a' && s[i] <= 'z')
            s[i] = (char)(s[i] - 'a' + 'A');
    }
}

/* ---------- base subject (RFC 5256 2.1) ---------- */

static bool is_wsp(char c)
{
    return c == ' ' || c == '\t';
}

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* subj-blob = "[" *BLOBCHAR "]" *WSP at s[i]; the length or 0. */
static size_t match_blob(const char *s, size_t i, size_t end)
{
    if (i >= end || s[i] != '[')
        return 0;
    size_t k = i + 1;
    while (k < end && s[k] != '[' && s[k] != ']')
        k++;
    if (k >= end || s[k] != ']')
        return 0;
    k++;
    while (k < end && is_wsp(s[k]))
        k++;
    return k - i;
}

/* subj-refwd = ("re" / ("fw" ["d"])) *WSP [subj-blob] ":" at s[i]. */
static size_t match_refwd(const char *s, size_t i, size_t end)
{
    size_t k = i;
    if (k + 2 <= end && lower(s[k]) == 'r' && lower(s[k + 1]) == 'e') {
        k += 2;
    } else if (k + 2 <= end && lower(s[k]) == 'f' && lower(s[k + 1]) == 'w') {
        k += 2;
        if (k < end && lower(s[k]) == 'd')
            k++;
    } else {
        return 0;
    }
    while (k < end && is_wsp(s[k]))
        k++;
    k += match_blob(s, k, end);
    if (k >= end || s[k] != ':')
        return 0;
    return k + 1 - i;
}

/* subj-leader = (*subj-blob subj-refwd) / WSP at s[i]; sets *refwd when a
 * reply/forward marker was part of it. */
static size_t match_leader(const char *s, size_t i, size_t end, bool *refwd)
{
    if (i < end && is_wsp(s[i]))
        return 1;
    size_t k = i;
    for (;;) {
        size_t r = match_refwd(s, k, end);
        if (r > 0) {
            *refwd = true;
            return k + r - i;
        }
        size_t b = match_blob(s, k, end);
        if (b == 0)
            return 0;
        k += b;
    }
}

bool imap_base_subject(const char *subject, size_t len, struct buf *out)
{
    /* (1) tabs and line breaks become spaces, runs of spaces one space. */
    struct buf t = {0};
    for (size_t i = 0; i < len; i++) {
        char c = subject[i];
        if (c == '\t' || c == '\r' || c == '\n')
            c = ' ';
        if (c == ' ' && t.len > 0 && t.data[t.len - 1] == ' ')
            continue;
        buf_append_char(&t, c);
    }
    const char *s = t.data != NULL ? t.data : "";
    size_t start = 0, end = t.len;
    bool reply = false;
    for (;;) {
        /* (2) trailing subj-trailer = "(fwd)" / WSP, repeatedly. */
        for (;;) {
            if (end > start && is_wsp(s[end - 1])) {
                end--;
            } else if (end - start >= 5 && lower(s[end - 5]) == '(' && lower(s[end - 4]) == 'f' &&
                       lower(s[end - 3]) == 'w' && lower(s[end - 2]) == 'd' && s[end - 1] == ')') {
                end -= 5;
                reply = true;
            } else {
                break;
            }
        }
        /* (3)-(5) leaders, then a blob that leaves a non-empty base. */
        for (;;) {
            bool changed = false;
            size_t l;
            while ((l = match_leader(s, start, end, &reply)) > 0) {
                start += l;
                changed = true;
            }
            size_t b = match_blob(s, start, end);
            if (b > 0) {
                /* subj-base must keep a non-white-space character. */
                bool rest = false;
                for (size_t k = start + b; k < end && !rest; k++)
                    rest = !is_wsp(s[k]);
                if (rest) {
                    start += b;
                    changed = true;
                }
            }
            if (!changed)
                break;
        }
        /* (6) "[fwd:" ... "]" around the rest: unwrap, back to (2). */
        if (end - start >= 6 && s[start] == '[' && lower(s[start + 1]) == 'f' &&
            lower(s[start + 2]) == 'w' && lower(s[start + 3]) == 'd' && s[start + 4] == ':' &&
            s[end - 1] == ']') {
            start += 5;
            end -= 1;
            reply = true;
            continue;
        }
        break;
    }
    buf_append(out, s + start, end - start);
    buf_free(&t);
    return reply;
}

/* ---------- the first address ---------- */

/* One nstring of imap_envelope_append_addresses()'s output at *pos: NIL
 * (false), "quoted" or {n}\r\n literal (true, its bytes into `out`). */
static bool read_nstring(const struct buf *b, size_t *pos, struct buf *out)
{
    size_t i = *pos;
    while (i < b->len && b->data[i] == ' ')
        i++;
    if (i + 3 <= b->len && memcmp(b->data + i, "NIL", 3) == 0) {
        *pos = i + 3;
        return false;
    }
    if (i < b->len && b->data[i] == '"') {
        i++;
        while (i < b->len && b->data[i] != '"') {
            if (b->data[i] == '\\' && i + 1 < b->len)
                i++;
            buf_append_char(out, b->data[i]);
            i++;
        }
        *pos = i + 1;
        return true;
    }
    if (i < b->len && b->data[i] == '{') {
        size_t n = 0;
        i++;
        while (i < b->len && b->data[i] >= '0' && b->data[i] <= '9')
            n = n * 10 + (size_t)(b->data[i++] - '0');
        i += 3; /* "}\r\n" */
        if (i + n > b->len)
            n = i < b->len ? b->len - i : 0;
        buf_append(out, b->data + i, n);
        *pos = i + n;
        return true;
    }
    *pos = b->len;
    return false;
}

void imap_sort_first_address(const char *value, size_t len, struct buf *mailbox,
                             struct buf *display)
{
    struct buf list = {0};
    imap_envelope_append_addresses(&list, value, len);
    size_t pos = 0;
    /* "((name adl mailbox host)(...))": skip group markers (host NIL). */
    while (pos < list.len) {
        while (pos < list.len && list.data[pos] != '(')
            pos++;
        if (pos < list.len && pos + 1 < list.len && list.data[pos + 1] == '(')
            pos++;
        if (pos >= list.len)
            break;
        pos++;
        struct buf name = {0}, adl = {0}, mbox = {0}, host = {0};
        bool has_name = read_nstring(&list, &pos, &name);
        read_nstring(&list, &pos, &adl);
        bool has_mbox = read_nstring(&list, &pos, &mbox);
        bool has_host = read_nstring(&list, &pos, &host);
        bool found = has_mbox && has_host;
        if (found) {
            buf_append(mailbox, mbox.data, mbox.len);
            struct buf decoded = {0};
            if (has_name && name.len > 0)
                message_header_decode(buf_cstr(&name), name.len, &decoded);
            if (decoded.len > 0) {
                buf_append(display, decoded.data, decoded.len);
            } else {
                buf_append(display, mbox.data, mbox.len);
                buf_append_char(display, '@');
                buf_append(display, host.data, host.len);
            }
            buf_free(&decoded);
        }
        buf_free(&name);
        buf_free(&adl);
        buf_free(&mbox);
        buf_free(&host);
        if (found)
            break;
    }
    buf_free(&list);
}
