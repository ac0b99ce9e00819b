/* The TAB-separated line framing (line-fields.h).
 *
 * Escaping is the smallest set that lets a field hold any byte but NUL:
 * backslash, TAB (the separator), LF (the terminator) and CR (so a line
 * never ends in CR on the wire, which line-oriented tools strip). Writing is
 * canonical: a field has exactly one escaped form, so a line that splits
 * and is written again gives the same bytes. */
#include "net/line-fields.h"

#include <inttypes.h>
#include <string.h>

/* ---------- reading ---------- */

bool line_fields_split(char *line, size_t len, const struct line_fields_limits *limits,
                       char **fields, size_t *count, struct petrel_error *err)
{
    *count = 0;
    if (len == 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "empty line");
    if (len > limits->max_len)
        return petrel_error_set(err, PETREL_ERR_INVALID, "line longer than %zu bytes",
                                limits->max_len);
    /* Unescaping only ever shortens a field, so the write position never
     * overtakes the read position and the split happens in place. The last
     * field's terminator goes to line[len], where the LF was. */
    size_t w = 0;
    fields[(*count)++] = line;
    for (size_t r = 0; r < len; r++) {
        char c = line[r];
        if (c == '\0')
            return petrel_error_set(err, PETREL_ERR_INVALID, "NUL byte at offset %zu", r);
        if (c == '\t') {
            if (*count == limits->max_fields)
                return petrel_error_set(err, PETREL_ERR_INVALID, "more than %zu fields",
                                        limits->max_fields);
            line[w++] = '\0';
            fields[(*count)++] = line + w;
            continue;
        }
        if (c != '\\') {
            line[w++] = c;
            continue;
        }
        if (r + 1 == len)
            return petrel_error_set(err, PETREL_ERR_INVALID, "backslash at the end of the line");
        char e = line[++r];
        switch (e) {
        case '\\':
            line[w++] = '\\';
            break;
        case 't':
            line[w++] = '\t';
            break;
        case 'n':
            line[w++] = '\n';
            break;
        case 'r':
            line[w++] = '\r';
            break;
        case '\0':
            return petrel_error_set(err, PETREL_ERR_INVALID, "NUL byte at offset %zu", r);
        default:
            if (e == '0' && limits->name_escaped_nul)
                return petrel_error_set(err, PETREL_ERR_INVALID,
                                        "escaped NUL at offset %zu (fields cannot hold NUL)",
                                        r - 1);
            return petrel_error_set(err, PETREL_ERR_INVALID, "bad escape '\\%c' at offset %zu",
                                    (e >= 0x21 && e < 0x7f) ? e : '?', r - 1);
        }
    }
    line[w] = '\0';
    return true;
}

const char *line_fields_param(char *const *fields, size_t count, size_t first, const char *key,
                              bool flags)
{
    size_t key_len = strlen(key);
    for (size_t i = first; i < count; i++) {
        const char *f = fields[i];
        if (strncmp(f, key, key_len) != 0)
            continue;
        if (f[key_len] == '=')
            return f + key_len + 1;
        if (flags && f[key_len] == '\0')
            return f + key_len; /* a flag: "" */
    }
    return NULL;
}

bool line_fields_token_valid(const char *s, size_t max, const char *extra)
{
    size_t n = 0;
    for (const char *p = s; *p != '\0'; p++, n++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-' || strchr(extra, c) != NULL;
        if (!ok || n == max)
            return false;
    }
    return n > 0;
}

/* ---------- writing ---------- */

static void append_escaped(struct buf *out, const char *s)
{
    const char *run = s;
    for (const char *p = s; *p != '\0'; p++) {
        const char *esc;
        switch (*p) {
        case '\\':
            esc = "\\\\";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        default:
            continue;
        }
        buf_append(out, run, (size_t)(p - run));
        buf_append(out, esc, 2);
        run = p + 1;
    }
    buf_append_str(out, run);
}

/* An empty first field leaves `out` empty, so the next field gets no
 * separator before it: lines start with a verb, which is never empty. */
static void start_field(struct buf *out)
{
    if (out->len > 0 && out->data[out->len - 1] != '\n')
        buf_append_char(out, '\t');
}

void line_fields_add(struct buf *out, const char *field)
{
    start_field(out);
    append_escaped(out, field);
}

void line_fields_add_param(struct buf *out, const char *key, const char *value)
{
    start_field(out);
    append_escaped(out, key);
    buf_append_char(out, '=');
    append_escaped(out, value);
}

void line_fields_add_uint(struct buf *out, uint64_t value)
{
    start_field(out);
    buf_printf(out, "%" PRIu64, value);
}

void line_fields_end(struct buf *out)
{
    buf_append_char(out, '\n');
}
