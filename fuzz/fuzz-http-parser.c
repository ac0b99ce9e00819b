/* libFuzzer target: the HTTP/1.x request parser (net/http-parser.h).
 * Input layout:
 *   byte 0, 1  seed for the piece sizes of the chunked body (and byte 1
 *              also picks the body limit and a second, small head limit)
 *   byte 2..   the bytes a client sent: request head, then body
 * Steps:
 *   1. http_parse_head() with the server's limits (64 KiB head, 8 KiB
 *      target); invariants on what it returns; http_head_find() on the
 *      headers the server reads; http_percent_decode() on the target.
 *   2. http_parse_head() again with small limits: if that succeeds, the big
 *      limits must give the same head (a limit only ever turns success into
 *      an error, never changes a parse).
 *   3. http_chunked_decode() over what follows the head (the whole input when
 *      the head did not parse) once in one piece and once in pseudo-random
 *      pieces, each piece in its own exact-size allocation so ASan sees any
 *      over-read: both must agree on result, bytes consumed and body. */
#include "core/buf.h"
#include "net/http-parser.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SERVER_MAX_HEAD (64 * 1024)
#define SERVER_MAX_TARGET (8 * 1024)

static uint32_t rng_next(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *s = x;
    return x;
}

static bool within(const char *base, size_t len, struct slice s)
{
    return s.ptr >= base && s.len <= len && (size_t)(s.ptr - base) <= len - s.len;
}

static void check_error(enum http_parse_result r, const struct http_parse_error *err)
{
    (void)r;
    assert(r == HTTP_PARSE_ERROR);
    assert(err->reason != NULL && err->reason[0] != '\0');
    assert(err->status == 400 || err->status == 413 || err->status == 414 ||
           err->status == 417 || err->status == 431 || err->status == 501 ||
           err->status == 505);
}

static void check_head(const char *p, size_t len, const struct http_head *h, size_t head_len)
{
    assert(head_len > 0 && head_len <= len);
    assert(p[head_len - 1] == '\n');
    assert(within(p, head_len, h->method_text) && h->method_text.len > 0);
    assert(within(p, head_len, h->target) && h->target.len > 0);
    assert(h->target.len <= SERVER_MAX_TARGET);
    assert(h->version_minor == 0 || h->version_minor == 1);
    assert(h->header_count <= HTTP_MAX_HEADERS);
    assert(http_method_name(h->method) != NULL);
    for (size_t i = 0; i < h->header_count; i++) {
        const struct http_header *hd = &h->headers[i];
        assert(within(p, head_len, hd->name) && hd->name.len > 0);
        assert(within(p, head_len, hd->value));
        /* Lookup by this header's own name finds a header of that name. */
        char name[128];
        if (hd->name.len < sizeof(name)) {
            memcpy(name, hd->name.ptr, hd->name.len);
            name[hd->name.len] = '\0';
            const struct http_header *f = http_head_find(h, name);
            assert(f != NULL && f <= hd && f->name.len == hd->name.len);
        }
    }
    if (h->chunked) {
        assert(!h->has_content_length);
        assert(h->version_minor == 1);
        assert(http_head_find(h, "transfer-encoding") != NULL);
    }
    if (h->has_content_length)
        assert(http_head_find(h, "Content-Length") != NULL);
    (void)http_head_find(h, "Host");
    (void)http_head_find(h, "Authorization");
    (void)http_head_find(h, "Connection");
    (void)http_head_find(h, "");

    /* The target as the server decodes it (path and query forms). */
    for (int plus = 0; plus <= 1; plus++) {
        char *out = malloc(h->target.len + 1);
        if (http_percent_decode(h->target.ptr, h->target.len, out, plus)) {
            size_t n = strlen(out);
            assert(n <= h->target.len);
        }
        free(out);
    }

    /* Rebasing onto a copy (what the server does) keeps every slice's bytes. */
    if (head_len > 0) {
        char *copy = malloc(head_len);
        memcpy(copy, p, head_len);
        struct http_head moved = *h;
        http_head_rebase(&moved, p, copy);
        assert(moved.target.len == h->target.len &&
               memcmp(moved.target.ptr, h->target.ptr, h->target.len) == 0);
        for (size_t i = 0; i < moved.header_count; i++)
            assert(memcmp(moved.headers[i].value.ptr, h->headers[i].value.ptr,
                          h->headers[i].value.len) == 0);
        free(copy);
    }

    /* Routing split (path, segments, query) exactly as the server does it. */
    struct http_target target;
    if (http_target_parse(h->target.ptr, h->target.len, &target)) {
        assert(target.segment_count <= HTTP_MAX_SEGMENTS);
        for (size_t i = 0; i < target.segment_count; i++) {
            assert(target.segments[i][0] != '\0');
            assert(strcmp(target.segments[i], "..") != 0 && strcmp(target.segments[i], ".") != 0);
        }
        struct http_query_param params[HTTP_MAX_QUERY_PARAMS];
        size_t n = http_query_parse(target.raw_query, params, HTTP_MAX_QUERY_PARAMS);
        assert(n <= HTTP_MAX_QUERY_PARAMS);
        for (size_t i = 0; i < n; i++)
            assert(params[i].key[0] != '\0');
        http_query_free(params, n);
    }
    http_target_free(&target);
}

static void check_chunked(const char *body, size_t body_len, uint32_t seed, uint64_t max_total)
{
    /* Reference: everything in one call. */
    struct http_chunked st1;
    memset(&st1, 0, sizeof(st1));
    struct buf out1 = {0};
    struct http_parse_error err1 = {0, NULL};
    size_t used1 = SIZE_MAX;
    enum http_parse_result r1 =
        http_chunked_decode(&st1, body, body_len, &used1, &out1, max_total, &err1);
    assert(used1 <= body_len);
    assert(out1.len <= max_total);
    assert(out1.len == st1.total);
    if (r1 == HTTP_PARSE_INCOMPLETE)
        assert(used1 == body_len);
    else if (r1 == HTTP_PARSE_ERROR)
        check_error(r1, &err1);

    /* The same bytes in pieces, as they come off a socket. */
    struct http_chunked st2;
    memset(&st2, 0, sizeof(st2));
    struct buf out2 = {0};
    struct http_parse_error err2 = {0, NULL};
    enum http_parse_result r2 = HTTP_PARSE_INCOMPLETE;
    size_t off = 0;
    uint32_t rng = seed | 1;
    bool last_empty = false;
    while (off < body_len) {
        uint32_t x = rng_next(&rng);
        size_t piece;
        switch (x & 3) {
        case 0:
            piece = 1;
            break;
        case 1:
            piece = (x >> 2) % 8;
            break;
        case 2:
            piece = (x >> 2) % 64;
            break;
        default:
            piece = (x >> 2) % 4096;
            break;
        }
        if (piece == 0 && last_empty)
            piece = 1;
        last_empty = piece == 0;
        if (piece > body_len - off)
            piece = body_len - off;
        char *copy = malloc(piece == 0 ? 1 : piece);
        if (piece > 0)
            memcpy(copy, body + off, piece);
        size_t used = SIZE_MAX;
        r2 = http_chunked_decode(&st2, copy, piece, &used, &out2, max_total, &err2);
        free(copy);
        assert(used <= piece);
        off += used;
        assert(out2.len <= max_total);
        if (r2 != HTTP_PARSE_INCOMPLETE)
            break;
        assert(used == piece);
    }
    assert(r1 == r2);
    assert(off == used1);
    assert(out1.len == out2.len);
    assert(out1.len == 0 || memcmp(out1.data, out2.data, out1.len) == 0);
    if (r1 == HTTP_PARSE_ERROR)
        assert(err1.status == err2.status);
    if (r2 == HTTP_PARSE_OK) {
        /* A finished body takes no more bytes. */
        size_t used = SIZE_MAX;
        enum http_parse_result r3 =
            http_chunked_decode(&st2, "0\r\n\r\n", 5, &used, &out2, max_total, &err2);
        assert(r3 == HTTP_PARSE_OK && used == 0);
    }
    buf_free(&out1);
    buf_free(&out2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint32_t seed = (uint32_t)data[0] | (uint32_t)data[1] << 8;
    uint8_t sel = data[1];
    const char *p = (const char *)data + 2;
    size_t len = size - 2;

    static const uint64_t max_totals[4] = {0, 64, 4096, 1024 * 1024};
    uint64_t max_total = max_totals[sel & 3];

    struct http_head head;
    size_t head_len = SIZE_MAX;
    struct http_parse_error err = {0, NULL};
    enum http_parse_result r =
        http_parse_head(p, len, SERVER_MAX_HEAD, SERVER_MAX_TARGET, &head, &head_len, &err);
    const char *body = p;
    size_t body_len = len;
    if (r == HTTP_PARSE_OK) {
        check_head(p, len, &head, head_len);
        body = p + head_len;
        body_len = len - head_len;
    } else if (r == HTTP_PARSE_ERROR) {
        check_error(r, &err);
    } else {
        assert(len < SERVER_MAX_HEAD);
    }

    /* Small limits, as a stricter server would set them. */
    size_t small_head = 1 + (size_t)(sel >> 2) * 16;
    size_t small_target = 1 + (size_t)(sel >> 2) * 4;
    struct http_head head2;
    size_t head_len2 = SIZE_MAX;
    struct http_parse_error err2 = {0, NULL};
    enum http_parse_result r2 =
        http_parse_head(p, len, small_head, small_target, &head2, &head_len2, &err2);
    if (r2 == HTTP_PARSE_OK) {
        assert(r == HTTP_PARSE_OK);
        assert(head_len2 == head_len && head_len2 <= small_head);
        assert(head2.header_count == head.header_count);
        assert(head2.chunked == head.chunked && head2.content_length == head.content_length);
    } else if (r2 == HTTP_PARSE_ERROR) {
        check_error(r2, &err2);
    } else {
        assert(len < small_head);
    }

    check_chunked(body, body_len, seed, max_total);
    return 0;
}
