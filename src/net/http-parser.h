/* HTTP/1.x request parsing over plain byte ranges (no I/O, fuzzable).
 * http_parse_head() parses a request line and header block; header slices
 * point into the caller's bytes. http_chunked_decode() decodes a chunked
 * request body incrementally. Both reject what could smuggle requests
 * (Content-Length together with Transfer-Encoding, conflicting lengths,
 * obsolete line folding, bare CR) with a status and reason. */
#ifndef PETREL_NET_HTTP_PARSER_H
#define PETREL_NET_HTTP_PARSER_H

#include "core/buf.h"
#include "core/slice.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum http_method {
    HTTP_GET,
    HTTP_HEAD,
    HTTP_POST,
    HTTP_PUT,
    HTTP_PATCH,
    HTTP_DELETE,
    HTTP_OPTIONS,
    HTTP_METHOD_OTHER,
};

#define HTTP_MAX_HEADERS 64

struct http_header {
    struct slice name;
    struct slice value;
};

struct http_head {
    enum http_method method;
    struct slice method_text;
    struct slice target;
    int version_minor; /* HTTP/1.<minor> */
    size_t header_count;
    struct http_header headers[HTTP_MAX_HEADERS];
    bool has_content_length;
    uint64_t content_length;
    bool chunked;
    bool keep_alive;
    bool expect_continue;
};

enum http_parse_result { HTTP_PARSE_OK, HTTP_PARSE_INCOMPLETE, HTTP_PARSE_ERROR };

struct http_parse_error {
    int status; /* 400, 414, 431, 501, 505 */
    const char *reason;
};

/* Parses the head at the start of `data`. OK: *head_len is the number of
 * bytes up to and including the blank line. INCOMPLETE: more bytes needed
 * (ERROR 431 instead once `len` reaches `max_head` without a blank line). */
enum http_parse_result http_parse_head(const char *data, size_t len, size_t max_head,
                                       size_t max_target, struct http_head *out, size_t *head_len,
                                       struct http_parse_error *err);

/* Moves every slice of `head` from bytes at `old_base` to the same offsets
 * in a copy at `new_base` (the caller copied the head there). */
void http_head_rebase(struct http_head *head, const char *old_base, const char *new_base);

/* Case-insensitive header lookup; the first match or NULL. */
const struct http_header *http_head_find(const struct http_head *head, const char *name);
const char *http_method_name(enum http_method method);

struct http_chunked {
    int state;
    uint64_t remaining;
    size_t line_len;
    uint64_t total;
};

/* Feeds `len` bytes; decoded data is appended to `out`. *consumed tells how
 * much input was used. OK once the last chunk and trailers are read. An
 * oversize body (total > max_total) is an ERROR with status 413. */
enum http_parse_result http_chunked_decode(struct http_chunked *st, const char *in, size_t len,
                                           size_t *consumed, struct buf *out, uint64_t max_total,
                                           struct http_parse_error *err);

#define HTTP_MAX_SEGMENTS 32
#define HTTP_MAX_QUERY_PARAMS 64

/* A request target split for routing: the decoded path, its decoded
 * segments (empty segments skipped) and the raw query. */
struct http_target {
    char *path;
    char *raw_query; /* NULL when there is none */
    char *segments[HTTP_MAX_SEGMENTS];
    size_t segment_count;
};

/* Splits and decodes an origin-form target. False for a bad escape, a NUL
 * byte, a "." or ".." segment, or more than HTTP_MAX_SEGMENTS segments; the
 * target must be freed with http_target_free() either way. */
bool http_target_parse(const char *target, size_t len, struct http_target *out);
void http_target_free(struct http_target *t);

struct http_query_param {
    char *key;
    char *value;
};

/* Splits "a=1&b=x%20y" into decoded pairs (at most `max`; pairs with an
 * empty key or a bad escape are skipped). Returns the count; free with
 * http_query_free(). */
size_t http_query_parse(const char *raw, struct http_query_param *out, size_t max);
void http_query_free(struct http_query_param *params, size_t count);

/* Percent-decodes `len` bytes into `out` (NUL-terminated, size >= len+1);
 * `plus_is_space` for query strings. False on a bad escape or a NUL byte. */
bool http_percent_decode(const char *in, size_t len, char *out, bool plus_is_space);

#endif
