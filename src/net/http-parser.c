#include "net/http-parser.h"

#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Content-Length: at most 19 digits, as before (far above any limit). */
#define HTTP_MAX_DECIMAL 9999999999999999999ULL

static bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static enum http_method method_from(struct slice s)
{
    static const struct {
        const char *name;
        enum http_method m;
    } methods[] = {
        {"GET", HTTP_GET},         {"HEAD", HTTP_HEAD},   {"POST", HTTP_POST},
        {"PUT", HTTP_PUT},         {"PATCH", HTTP_PATCH}, {"DELETE", HTTP_DELETE},
        {"OPTIONS", HTTP_OPTIONS},
    };
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        if (slice_eq(s, methods[i].name))
            return methods[i].m;
    }
    return HTTP_METHOD_OTHER;
}

const char *http_method_name(enum http_method method)
{
    switch (method) {
    case HTTP_GET:
        return "GET";
    case HTTP_HEAD:
        return "HEAD";
    case HTTP_POST:
        return "POST";
    case HTTP_PUT:
        return "PUT";
    case HTTP_PATCH:
        return "PATCH";
    case HTTP_DELETE:
        return "DELETE";
    case HTTP_OPTIONS:
        return "OPTIONS";
    case HTTP_METHOD_OTHER:
        break;
    }
    return "OTHER";
}

static enum http_parse_result fail(struct http_parse_error *err, int status, const char *reason)
{
    err->status = status;
    err->reason = reason;
    return HTTP_PARSE_ERROR;
}

/* Finds the end of the line starting at `p`: returns the index of '\n'
 * or -1. Bare CR inside a line is an error reported by the caller. */
static long line_end(const char *data, size_t start, size_t len)
{
    const char *nl = memchr(data + start, '\n', len - start);
    return nl == NULL ? -1 : (long)(nl - data);
}

/* Does the comma-separated header value contain `token`? */
static bool has_token(struct slice v, const char *token)
{
    size_t tl = strlen(token);
    size_t i = 0;
    while (i < v.len) {
        while (i < v.len && (v.ptr[i] == ' ' || v.ptr[i] == '\t' || v.ptr[i] == ','))
            i++;
        size_t start = i;
        while (i < v.len && v.ptr[i] != ',')
            i++;
        size_t end = i;
        while (end > start && (v.ptr[end - 1] == ' ' || v.ptr[end - 1] == '\t'))
            end--;
        if (end - start == tl && strncasecmp(v.ptr + start, token, tl) == 0)
            return true;
    }
    return false;
}

enum http_parse_result http_parse_head(const char *data, size_t len, size_t max_head,
                                       size_t max_target, struct http_head *out, size_t *head_len,
                                       struct http_parse_error *err)
{
    size_t pos = 0;
    /* RFC 9112 2.2: ignore at least one empty line before the request line. */
    while (pos < len && pos < max_head && (data[pos] == '\r' || data[pos] == '\n') && pos < 4)
        pos++; /* pos <= scan_len below, so line_end() never gets start > len */
    size_t scan_len = len < max_head ? len : max_head;
    long eol = line_end(data, pos, scan_len);
    if (eol < 0) {
        if (len >= max_head)
            return fail(err, 431, "request line too long");
        return HTTP_PARSE_INCOMPLETE;
    }
    memset(out, 0, sizeof(*out));
    size_t line_len = (size_t)eol - pos;
    if (line_len > 0 && data[pos + line_len - 1] == '\r')
        line_len--;
    const char *line = data + pos;

    /* METHOD SP target SP HTTP/1.x */
    size_t i = 0;
    while (i < line_len && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0 || i >= line_len || line[i] != ' ')
        return fail(err, 400, "malformed request line");
    out->method_text.ptr = line;
    out->method_text.len = i;
    out->method = method_from(out->method_text);
    size_t tstart = ++i;
    while (i < line_len && line[i] != ' ') {
        unsigned char c = (unsigned char)line[i];
        if (c < 0x21 || c == 0x7f)
            return fail(err, 400, "invalid character in request target");
        i++;
    }
    if (i == tstart || i >= line_len)
        return fail(err, 400, "malformed request line");
    out->target.ptr = line + tstart;
    out->target.len = i - tstart;
    if (out->target.len > max_target)
        return fail(err, 414, "request target too long");
    if (out->target.ptr[0] != '/' &&
        !(out->target.len == 1 && out->target.ptr[0] == '*' && out->method == HTTP_OPTIONS))
        return fail(err, 400, "request target must be an absolute path");
    i++;
    struct slice version = {line + i, line_len - i};
    if (version.len != 8 || memcmp(version.ptr, "HTTP/1.", 7) != 0) {
        if (version.len >= 5 && memcmp(version.ptr, "HTTP/", 5) == 0)
            return fail(err, 505, "HTTP version not supported");
        return fail(err, 400, "malformed request line");
    }
    if (version.ptr[7] != '0' && version.ptr[7] != '1')
        return fail(err, 505, "HTTP version not supported");
    out->version_minor = version.ptr[7] - '0';
    out->keep_alive = out->version_minor == 1;

    pos = (size_t)eol + 1;
    bool saw_te = false;
    for (;;) {
        eol = line_end(data, pos, scan_len);
        if (eol < 0) {
            if (len >= max_head)
                return fail(err, 431, "request header block too large");
            return HTTP_PARSE_INCOMPLETE;
        }
        size_t hl = (size_t)eol - pos;
        const char *h = data + pos;
        if (hl > 0 && h[hl - 1] == '\r')
            hl--;
        pos = (size_t)eol + 1;
        if (hl == 0)
            break;
        if (h[0] == ' ' || h[0] == '\t')
            return fail(err, 400, "obsolete header line folding");
        size_t c = 0;
        while (c < hl && is_tchar((unsigned char)h[c]))
            c++;
        if (c == 0 || c >= hl || h[c] != ':')
            return fail(err, 400, "malformed header field");
        if (out->header_count == HTTP_MAX_HEADERS)
            return fail(err, 431, "too many header fields");
        size_t vs = c + 1;
        while (vs < hl && (h[vs] == ' ' || h[vs] == '\t'))
            vs++;
        size_t ve = hl;
        while (ve > vs && (h[ve - 1] == ' ' || h[ve - 1] == '\t'))
            ve--;
        for (size_t k = vs; k < ve; k++) {
            unsigned char ch = (unsigned char)h[k];
            if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
                return fail(err, 400, "invalid character in header value");
        }
        struct http_header *hdr = &out->headers[out->header_count++];
        hdr->name.ptr = h;
        hdr->name.len = c;
        hdr->value.ptr = h + vs;
        hdr->value.len = ve - vs;

        if (slice_eq_ci(hdr->name, "Content-Length")) {
            uint64_t v;
            if (!slice_parse_u64(hdr->value, HTTP_MAX_DECIMAL, &v))
                return fail(err, 400, "invalid Content-Length");
            if (out->has_content_length && v != out->content_length)
                return fail(err, 400, "conflicting Content-Length headers");
            out->has_content_length = true;
            out->content_length = v;
        } else if (slice_eq_ci(hdr->name, "Transfer-Encoding")) {
            saw_te = true;
            /* Only "chunked", once: any other coding (even under chunked) would
             * reach the handler undecoded. */
            if (out->chunked || !slice_eq_ci(hdr->value, "chunked"))
                return fail(err, 501, "unsupported transfer coding");
            if (out->version_minor == 0)
                return fail(err, 400, "chunked transfer coding in HTTP/1.0");
            out->chunked = true;
        } else if (slice_eq_ci(hdr->name, "Connection")) {
            if (has_token(hdr->value, "close"))
                out->keep_alive = false;
            else if (has_token(hdr->value, "keep-alive"))
                out->keep_alive = true;
        } else if (slice_eq_ci(hdr->name, "Expect")) {
            if (!slice_eq_ci(hdr->value, "100-continue"))
                return fail(err, 417, "unsupported expectation");
            out->expect_continue = out->version_minor == 1;
        }
    }
    if (saw_te && out->has_content_length)
        return fail(err, 400, "both Content-Length and Transfer-Encoding present");
    *head_len = pos;
    return HTTP_PARSE_OK;
}

static void rebase(struct slice *s, const char *old_base, const char *new_base)
{
    if (s->ptr != NULL)
        s->ptr = new_base + (s->ptr - old_base);
}

void http_head_rebase(struct http_head *head, const char *old_base, const char *new_base)
{
    rebase(&head->method_text, old_base, new_base);
    rebase(&head->target, old_base, new_base);
    for (size_t i = 0; i < head->header_count; i++) {
        rebase(&head->headers[i].name, old_base, new_base);
        rebase(&head->headers[i].value, old_base, new_base);
    }
}

const struct http_header *http_head_find(const struct http_head *head, const char *name)
{
    for (size_t i = 0; i < head->header_count; i++) {
        if (slice_eq_ci(head->headers[i].name, name))
            return &head->headers[i];
    }
    return NULL;
}

enum chunk_state {
    CHUNK_SIZE,
    CHUNK_EXT_BWS, /* whitespace after the size: only ';' or CR may follow */
    CHUNK_EXT,
    CHUNK_SIZE_LF,
    CHUNK_DATA,
    CHUNK_DATA_CR,
    CHUNK_DATA_LF,
    CHUNK_TRAILER,
    CHUNK_TRAILER_LF,
    CHUNK_DONE,
};

#define CHUNK_MAX_LINE 4096

enum http_parse_result http_chunked_decode(struct http_chunked *st, const char *in, size_t len,
                                           size_t *consumed, struct buf *out, uint64_t max_total,
                                           struct http_parse_error *err)
{
    size_t i = 0;
    enum http_parse_result result = HTTP_PARSE_INCOMPLETE;
    while (i < len && result == HTTP_PARSE_INCOMPLETE) {
        char c = in[i];
        switch (st->state) {
        case CHUNK_SIZE: {
            int digit = hex_digit_value(c);
            if (digit >= 0) {
                if (st->line_len >= 15) {
                    *consumed = i;
                    return fail(err, 400, "chunk size too large");
                }
                st->remaining = st->remaining * 16 + (uint64_t)digit;
                st->line_len++;
                i++;
                break;
            }
            if (st->line_len == 0) {
                *consumed = i;
                return fail(err, 400, "malformed chunk size");
            }
            if (c == ';') {
                st->state = CHUNK_EXT;
            } else if (c == ' ' || c == '\t') {
                st->state = CHUNK_EXT_BWS;
            } else if (c == '\r') {
                st->state = CHUNK_SIZE_LF;
            } else if (c == '\n') {
                /* A bare LF: a proxy in front may frame the body differently
                 * (request smuggling), so only CRLF ends a chunk line. */
                *consumed = i;
                return fail(err, 400, "chunk line not ended by CRLF");
            } else {
                *consumed = i;
                return fail(err, 400, "malformed chunk size");
            }
            i++;
            break;
        }
        case CHUNK_EXT_BWS:
            /* RFC 9112 7.1.1: chunk-ext = *( BWS ";" ... ). "5 x" is no
             * extension, and a proxy in front may not read it as one. */
            if (++st->line_len > CHUNK_MAX_LINE) {
                *consumed = i;
                return fail(err, 400, "chunk extension too long");
            }
            if (c == ';')
                st->state = CHUNK_EXT;
            else if (c == '\r')
                st->state = CHUNK_SIZE_LF;
            else if (c != ' ' && c != '\t') {
                *consumed = i;
                return fail(err, 400, "malformed chunk extension");
            }
            i++;
            break;
        case CHUNK_EXT:
            /* Control characters (NUL, a lone LF or CR, DEL) have no place
             * in an extension (tokens, quoted strings, HTAB); parsers
             * disagree about them, which is what smuggling needs. */
            if (c != '\r' && c != '\t' && ((unsigned char)c < 0x20 || c == 0x7f)) {
                *consumed = i;
                return fail(err, 400,
                            c == '\n' ? "chunk line not ended by CRLF"
                                      : "control character in a chunk extension");
            }
            if (c == '\n') {
                *consumed = i;
                return fail(err, 400, "chunk line not ended by CRLF");
            }
            if (++st->line_len > CHUNK_MAX_LINE) {
                *consumed = i;
                return fail(err, 400, "chunk extension too long");
            }
            if (c == '\r')
                st->state = CHUNK_SIZE_LF;
            i++;
            break;
        case CHUNK_SIZE_LF:
            if (c != '\n') {
                *consumed = i;
                return fail(err, 400, "malformed chunk line ending");
            }
            i++;
            st->line_len = 0;
            if (st->remaining == 0) {
                st->state = CHUNK_TRAILER;
            } else {
                if (st->total > max_total || st->remaining > max_total - st->total) {
                    *consumed = i;
                    return fail(err, 413, "request body too large");
                }
                st->state = CHUNK_DATA;
            }
            break;
        case CHUNK_DATA: {
            size_t avail = len - i;
            size_t take = st->remaining < avail ? (size_t)st->remaining : avail;
            buf_append(out, in + i, take);
            i += take;
            st->remaining -= take;
            st->total += take;
            if (st->remaining == 0)
                st->state = CHUNK_DATA_CR;
            break;
        }
        case CHUNK_DATA_CR:
            if (c == '\r') {
                st->state = CHUNK_DATA_LF;
                i++;
            } else {
                *consumed = i;
                return fail(err, 400, "missing CRLF after chunk data");
            }
            break;
        case CHUNK_DATA_LF:
            if (c != '\n') {
                *consumed = i;
                return fail(err, 400, "missing CRLF after chunk data");
            }
            i++;
            st->state = CHUNK_SIZE;
            st->line_len = 0;
            st->remaining = 0;
            break;
        case CHUNK_TRAILER:
            /* Trailer lines are skipped; an empty line ends the body. Each
             * ends in CRLF, as the chunk lines do. */
            if (c == '\n') {
                *consumed = i;
                return fail(err, 400, "chunk trailer line not ended by CRLF");
            }
            if (c == '\r') {
                st->state = CHUNK_TRAILER_LF;
                i++;
                break;
            }
            if (++st->line_len > CHUNK_MAX_LINE) {
                *consumed = i;
                return fail(err, 431, "chunk trailer too long");
            }
            i++;
            break;
        case CHUNK_TRAILER_LF: {
            if (c != '\n') {
                *consumed = i;
                return fail(err, 400, "chunk trailer line not ended by CRLF");
            }
            bool empty = st->line_len == 0;
            st->line_len = 0;
            i++;
            st->state = CHUNK_TRAILER;
            if (empty) {
                st->state = CHUNK_DONE;
                result = HTTP_PARSE_OK;
            }
            break;
        }
        default:
            result = HTTP_PARSE_OK;
            break;
        }
    }
    *consumed = i;
    return result;
}

bool http_percent_decode(const char *in, size_t len, char *out, bool plus_is_space)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        if (c == '%') {
            if (i + 2 >= len)
                return false;
            int hi = hex_digit_value(in[i + 1]);
            int lo = hex_digit_value(in[i + 2]);
            if (hi < 0 || lo < 0)
                return false;
            c = (char)(hi * 16 + lo);
            if (c == '\0')
                return false;
            i += 2;
        } else if (c == '+' && plus_is_space) {
            c = ' ';
        }
        out[o++] = c;
    }
    out[o] = '\0';
    return true;
}

bool http_target_parse(const char *t, size_t len, struct http_target *out)
{
    memset(out, 0, sizeof(*out));
    const char *q = memchr(t, '?', len);
    size_t path_len = q != NULL ? (size_t)(q - t) : len;
    if (q != NULL)
        out->raw_query = xstrndup(q + 1, len - path_len - 1);
    const char *hash = memchr(t, '#', path_len);
    if (hash != NULL)
        path_len = (size_t)(hash - t);
    out->path = xmalloc(path_len + 1);
    if (!http_percent_decode(t, path_len, out->path, false))
        return false;
    size_t i = 0;
    while (i < path_len) {
        while (i < path_len && t[i] == '/')
            i++;
        if (i >= path_len)
            break;
        size_t start = i;
        while (i < path_len && t[i] != '/')
            i++;
        if (out->segment_count == HTTP_MAX_SEGMENTS)
            return false;
        char *seg = xmalloc(i - start + 1);
        if (!http_percent_decode(t + start, i - start, seg, false) || strcmp(seg, "..") == 0 ||
            strcmp(seg, ".") == 0) {
            free(seg);
            return false;
        }
        out->segments[out->segment_count++] = seg;
    }
    return true;
}

void http_target_free(struct http_target *t)
{
    free(t->path);
    free(t->raw_query);
    for (size_t i = 0; i < t->segment_count; i++)
        free(t->segments[i]);
    memset(t, 0, sizeof(*t));
}

size_t http_query_parse(const char *raw, struct http_query_param *out, size_t max)
{
    size_t count = 0;
    const char *p = raw;
    while (p != NULL && *p != '\0' && count < max) {
        const char *amp = strchr(p, '&');
        size_t len = amp != NULL ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t klen = eq != NULL ? (size_t)(eq - p) : len;
        if (klen > 0) {
            char *key = xmalloc(klen + 1);
            const char *vstart = eq != NULL ? eq + 1 : p + len;
            size_t vlen = eq != NULL ? len - klen - 1 : 0;
            char *value = xmalloc(vlen + 1);
            if (http_percent_decode(p, klen, key, true) &&
                http_percent_decode(vstart, vlen, value, true)) {
                out[count].key = key;
                out[count].value = value;
                count++;
            } else {
                free(key);
                free(value);
            }
        }
        p += len;
        if (*p == '&')
            p++;
    }
    return count;
}

void http_query_free(struct http_query_param *params, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        free(params[i].key);
        free(params[i].value);
    }
}
