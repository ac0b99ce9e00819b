/* Unit tests for net/http-parser.h: request heads, smuggling defences,
 * keep-alive rules, the chunked body decoder and percent-decoding. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net/http-parser.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HEAD 8192
#define MAX_TARGET 2048

/* Parses `len` bytes from an exact-size heap copy so a read past the end
 * shows up under AddressSanitizer. */
static enum http_parse_result parse_n(const char *text, size_t len, size_t max_head,
                                      size_t max_target, struct http_head *head, size_t *head_len,
                                      struct http_parse_error *err)
{
    char *copy = malloc(len > 0 ? len : 1);
    assert_non_null(copy);
    memcpy(copy, text, len);
    enum http_parse_result r =
        http_parse_head(copy, len, max_head, max_target, head, head_len, err);
    /* Slices point into the copy: re-point them at the caller's text. */
    if (r == HTTP_PARSE_OK) {
        head->method_text.ptr = text + (head->method_text.ptr - copy);
        head->target.ptr = text + (head->target.ptr - copy);
        for (size_t i = 0; i < head->header_count; i++) {
            head->headers[i].name.ptr = text + (head->headers[i].name.ptr - copy);
            head->headers[i].value.ptr = text + (head->headers[i].value.ptr - copy);
        }
    }
    free(copy);
    return r;
}

static enum http_parse_result parse(const char *text, struct http_head *head, size_t *head_len,
                                    struct http_parse_error *err)
{
    return parse_n(text, strlen(text), MAX_HEAD, MAX_TARGET, head, head_len, err);
}

static void assert_slice(struct slice s, const char *expected)
{
    if (s.len != strlen(expected) || memcmp(s.ptr, expected, s.len) != 0)
        fail_msg("slice '%.*s' != '%s'", (int)s.len, s.ptr, expected);
}

/* Expects an ERROR with `status`; returns the reason. */
static const char *expect_error(const char *text, int status)
{
    struct http_head head;
    size_t head_len = 0;
    struct http_parse_error err = {0};
    enum http_parse_result r = parse(text, &head, &head_len, &err);
    if (r != HTTP_PARSE_ERROR)
        fail_msg("expected error %d, got result %d for: %s", status, (int)r, text);
    if (err.status != status)
        fail_msg("expected status %d, got %d (%s) for: %s", status, err.status,
                 err.reason != NULL ? err.reason : "", text);
    assert_non_null(err.reason);
    assert_true(err.reason[0] != '\0');
    return err.reason;
}

static void expect_ok(const char *text, struct http_head *head)
{
    size_t head_len = 0;
    struct http_parse_error err = {0};
    enum http_parse_result r = parse(text, head, &head_len, &err);
    if (r != HTTP_PARSE_OK)
        fail_msg("expected OK, got %d (%d %s) for: %s", (int)r, err.status,
                 err.reason != NULL ? err.reason : "", text);
}

/* ---- request heads ---------------------------------------------------- */

static void test_request_line_and_headers_are_sliced(void **state)
{
    const char *req = "GET /api/backend/health?x=1 HTTP/1.1\r\n"
                      "Host: example.org\r\n"
                      "X-Padded: \t value with  spaces \t \r\n"
                      "X-Empty:\r\n"
                      "\r\n"
                      "BODY";
    struct http_head head;
    size_t head_len = 0;
    struct http_parse_error err;
    assert_int_equal(parse(req, &head, &head_len, &err), HTTP_PARSE_OK);
    assert_int_equal(head_len, strlen(req) - 4);
    assert_int_equal(head.method, HTTP_GET);
    assert_slice(head.method_text, "GET");
    assert_slice(head.target, "/api/backend/health?x=1");
    assert_int_equal(head.version_minor, 1);
    assert_int_equal(head.header_count, 3);
    assert_slice(head.headers[0].name, "Host");
    assert_slice(head.headers[0].value, "example.org");
    assert_slice(head.headers[1].name, "X-Padded");
    assert_slice(head.headers[1].value, "value with  spaces");
    assert_slice(head.headers[2].name, "X-Empty");
    assert_slice(head.headers[2].value, "");
    assert_false(head.has_content_length);
    assert_false(head.chunked);
    assert_true(head.keep_alive);
    assert_false(head.expect_continue);
}

static void test_header_lookup_is_case_insensitive_and_returns_first(void **state)
{
    struct http_head head;
    expect_ok("GET / HTTP/1.1\r\nX-Twice: one\r\nHOST: h\r\nx-twice: two\r\n\r\n", &head);
    const struct http_header *h = http_head_find(&head, "host");
    assert_non_null(h);
    assert_slice(h->value, "h");
    h = http_head_find(&head, "X-TWICE");
    assert_non_null(h);
    assert_slice(h->value, "one");
    assert_null(http_head_find(&head, "X-Missing"));
    assert_null(http_head_find(&head, "X-Twic"));
}

static void test_methods_are_recognised_case_sensitively(void **state)
{
    static const struct {
        const char *text;
        enum http_method method;
    } cases[] = {
        {"GET", HTTP_GET},           {"HEAD", HTTP_HEAD},         {"POST", HTTP_POST},
        {"PUT", HTTP_PUT},           {"PATCH", HTTP_PATCH},       {"DELETE", HTTP_DELETE},
        {"OPTIONS", HTTP_OPTIONS},   {"BREW", HTTP_METHOD_OTHER}, {"get", HTTP_METHOD_OTHER},
        {"GETS", HTTP_METHOD_OTHER},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char req[128];
        snprintf(req, sizeof(req), "%s /x HTTP/1.1\r\n\r\n", cases[i].text);
        struct http_head head;
        expect_ok(req, &head);
        assert_int_equal(head.method, cases[i].method);
        assert_slice(head.method_text, cases[i].text);
    }
    assert_string_equal(http_method_name(HTTP_GET), "GET");
    assert_string_equal(http_method_name(HTTP_OPTIONS), "OPTIONS");
    assert_string_equal(http_method_name(HTTP_DELETE), "DELETE");
}

static void test_options_asterisk_form_only_for_options(void **state)
{
    struct http_head head;
    expect_ok("OPTIONS * HTTP/1.1\r\n\r\n", &head);
    assert_slice(head.target, "*");
    expect_error("GET * HTTP/1.1\r\n\r\n", 400);
}

static void test_leading_empty_lines_are_skipped(void **state)
{
    const char *req = "\r\nGET / HTTP/1.1\r\n\r\n";
    struct http_head head;
    size_t head_len = 0;
    struct http_parse_error err;
    assert_int_equal(parse(req, &head, &head_len, &err), HTTP_PARSE_OK);
    assert_int_equal(head_len, strlen(req));
    assert_slice(head.target, "/");
}

static void test_bare_lf_line_endings_are_accepted(void **state)
{
    const char *req = "POST /a HTTP/1.1\nContent-Length: 3\n\nabc";
    struct http_head head;
    size_t head_len = 0;
    struct http_parse_error err;
    assert_int_equal(parse(req, &head, &head_len, &err), HTTP_PARSE_OK);
    assert_int_equal(head_len, strlen(req) - 3);
    assert_true(head.has_content_length);
    assert_int_equal(head.content_length, 3);
}

/* Every proper prefix of a valid request is INCOMPLETE; the whole is OK. */
static void check_every_split_point(const char *req)
{
    size_t n = strlen(req);
    for (size_t k = 0; k < n; k++) {
        struct http_head head;
        size_t head_len = 12345;
        struct http_parse_error err = {0};
        enum http_parse_result r = parse_n(req, k, MAX_HEAD, MAX_TARGET, &head, &head_len, &err);
        if (r != HTTP_PARSE_INCOMPLETE)
            fail_msg("prefix of %zu/%zu bytes gave %d (%d %s)", k, n, (int)r, err.status,
                     err.reason != NULL ? err.reason : "");
        assert_int_equal(head_len, 12345); /* untouched until OK */
    }
    struct http_head head;
    size_t head_len = 0;
    struct http_parse_error err;
    assert_int_equal(parse_n(req, n, MAX_HEAD, MAX_TARGET, &head, &head_len, &err), HTTP_PARSE_OK);
    assert_int_equal(head_len, n);
}

static void test_every_prefix_of_a_valid_request_is_incomplete(void **state)
{
    check_every_split_point("POST /api/backend/users/alice%40example.org HTTP/1.1\r\n"
                            "Host: localhost:9105\r\n"
                            "Authorization: Bearer abc\r\n"
                            "Content-Type: application/json\r\n"
                            "Content-Length: 17\r\n"
                            "Connection: keep-alive\r\n"
                            "\r\n");
    check_every_split_point("GET / HTTP/1.0\n\n");
    check_every_split_point("\r\nPUT /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
}

static void test_oversize_head_is_431(void **state)
{
    /* Headers that never end: INCOMPLETE below the limit, 431 at it. */
    char req[600];
    strcpy(req, "GET / HTTP/1.1\r\n");
    while (strlen(req) < 500)
        strcat(req, "X-Filler: aaaaaaaaaaaaaaaa\r\n");
    size_t n = strlen(req);
    struct http_head head;
    size_t head_len;
    struct http_parse_error err = {0};
    assert_int_equal(parse_n(req, n, n + 1, MAX_TARGET, &head, &head_len, &err),
                     HTTP_PARSE_INCOMPLETE);
    assert_int_equal(parse_n(req, n, n, MAX_TARGET, &head, &head_len, &err), HTTP_PARSE_ERROR);
    assert_int_equal(err.status, 431);

    /* A complete head that is larger than the limit is refused too. */
    strcat(req, "\r\n");
    err.status = 0;
    assert_int_equal(parse_n(req, strlen(req), 100, MAX_TARGET, &head, &head_len, &err),
                     HTTP_PARSE_ERROR);
    assert_int_equal(err.status, 431);
    assert_int_equal(parse_n(req, strlen(req), strlen(req), MAX_TARGET, &head, &head_len, &err),
                     HTTP_PARSE_OK);

    /* A request line with no end at all. */
    char line[300];
    memset(line, 'a', sizeof(line));
    memcpy(line, "GET /", 5);
    err.status = 0;
    assert_int_equal(parse_n(line, sizeof(line), 256, MAX_TARGET, &head, &head_len, &err),
                     HTTP_PARSE_ERROR);
    assert_int_equal(err.status, 431);
}

static void test_too_many_headers_is_431(void **state)
{
    char req[4096];
    strcpy(req, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < HTTP_MAX_HEADERS; i++)
        sprintf(req + strlen(req), "X-H%d: v\r\n", i);
    size_t at_limit = strlen(req);
    strcat(req, "\r\n");
    struct http_head head;
    expect_ok(req, &head);
    assert_int_equal(head.header_count, HTTP_MAX_HEADERS);
    strcpy(req + at_limit, "X-One-More: v\r\n\r\n");
    expect_error(req, 431);
}

static void test_long_target_is_414(void **state)
{
    char req[256];
    char target[101];
    memset(target, 'a', 100);
    target[0] = '/';
    target[100] = '\0';
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\n\r\n", target);
    struct http_head head;
    size_t head_len;
    struct http_parse_error err = {0};
    assert_int_equal(parse_n(req, strlen(req), MAX_HEAD, 100, &head, &head_len, &err),
                     HTTP_PARSE_OK);
    assert_int_equal(head.target.len, 100);
    assert_int_equal(parse_n(req, strlen(req), MAX_HEAD, 99, &head, &head_len, &err),
                     HTTP_PARSE_ERROR);
    assert_int_equal(err.status, 414);
}

static void test_garbage_and_malformed_request_lines_are_400(void **state)
{
    expect_error("hello\r\n\r\n", 400);
    expect_error("\x16\x03\x01\x02\x05\x01\x01\xfc\x03\x03\n\r\n", 400);
    expect_error("GET\r\n\r\n", 400);
    expect_error("GET /\r\n\r\n", 400);
    expect_error("GET  / HTTP/1.1\r\n\r\n", 400);
    expect_error(" GET / HTTP/1.1\r\n\r\n", 400);
    expect_error("GET / FOO/1.1\r\n\r\n", 400);
    expect_error("GET / http/1.1\r\n\r\n", 400);
    expect_error("GET http://example.org/ HTTP/1.1\r\n\r\n", 400);
    expect_error("GET x HTTP/1.1\r\n\r\n", 400);
    expect_error("G(T / HTTP/1.1\r\n\r\n", 400);
    expect_error("GET /a\x01z HTTP/1.1\r\n\r\n", 400);
    expect_error("GET /a\x7fz HTTP/1.1\r\n\r\n", 400);
    expect_error("GET /\r HTTP/1.1\r\n\r\n", 400);
    /* Junk after the version (a bare CR, a space, a word) is refused; it reads
     * as an unknown version, so 505 is as good as 400 here. */
    static const char *const junk_after_version[] = {
        "GET / HTTP/1.1\r\r\n\r\n",
        "GET / HTTP/1.1\rX\r\n\r\n",
        "GET / HTTP/1.1 \r\n\r\n",
        "GET / HTTP/1.1 extra\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(junk_after_version) / sizeof(junk_after_version[0]); i++) {
        struct http_head head;
        size_t head_len;
        struct http_parse_error err = {0};
        assert_int_equal(parse(junk_after_version[i], &head, &head_len, &err), HTTP_PARSE_ERROR);
        assert_true(err.status == 400 || err.status == 505);
    }
}

static void test_malformed_header_fields_are_400(void **state)
{
    expect_error("GET / HTTP/1.1\r\nNo colon here\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nName : x\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\n: no name\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", 400);
    /* Bare CR inside a value. */
    expect_error("GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nX: a\r\r\n\r\n", 400);
}

static void test_obsolete_line_folding_is_400(void **state)
{
    const char *reason =
        expect_error("GET / HTTP/1.1\r\nX-Long: part one\r\n  part two\r\n\r\n", 400);
    assert_non_null(strstr(reason, "folding"));
    expect_error("GET / HTTP/1.1\r\nX-Long: part one\r\n\tpart two\r\n\r\n", 400);
    /* Whitespace before the first header. */
    expect_error("GET / HTTP/1.1\r\n Host: x\r\n\r\n", 400);
}

static void test_content_length_is_parsed(void **state)
{
    struct http_head head;
    expect_ok("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &head);
    assert_true(head.has_content_length);
    assert_int_equal(head.content_length, 0);
    expect_ok("POST / HTTP/1.1\r\ncontent-length:   1048576  \r\n\r\n", &head);
    assert_int_equal(head.content_length, 1048576);
    /* The same value twice is tolerated. */
    expect_ok("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", &head);
    assert_int_equal(head.content_length, 5);
}

static void test_bad_or_conflicting_content_length_is_400(void **state)
{
    const char *reason =
        expect_error("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400);
    assert_non_null(strstr(reason, "Content-Length"));
    expect_error("POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400);
    expect_error("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400);
    expect_error("POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", 400);
    expect_error("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 400);
    expect_error("POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", 400);
    expect_error("POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", 400);
    expect_error("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400);
}

static void test_content_length_with_transfer_encoding_is_400(void **state)
{
    const char *reason = expect_error(
        "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
    assert_non_null(strstr(reason, "Transfer-Encoding"));
    expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400);
}

static void test_chunked_transfer_encoding_is_accepted(void **state)
{
    struct http_head head;
    expect_ok("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &head);
    assert_true(head.chunked);
    assert_false(head.has_content_length);
    expect_ok("POST / HTTP/1.1\r\ntransfer-encoding: Chunked \r\n\r\n", &head);
    assert_true(head.chunked);
}

static void test_transfer_coding_other_than_chunked_is_501(void **state)
{
    expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501);
    expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", 501);
    expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 501);
    expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n", 501);
    /* We decode no coding but chunked, so a body compressed under chunked
     * cannot be handed to a handler as if it were plain. */
    expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501);
    expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
                 501);
    /* Chunked twice would leave one layer of chunking in the body. */
    expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 501);
    expect_error(
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501);
}

static void test_chunked_in_http_1_0_is_400(void **state)
{
    expect_error("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
}

static void test_unsupported_http_versions_are_505(void **state)
{
    expect_error("GET / HTTP/2.0\r\n\r\n", 505);
    expect_error("GET / HTTP/1.2\r\n\r\n", 505);
    expect_error("GET / HTTP/0.9\r\n\r\n", 505);
    expect_error("GET / HTTP/1.10\r\n\r\n", 505);
    expect_error("GET / HTTP/3\r\n\r\n", 505);
}

static bool keep_alive_of(const char *req)
{
    struct http_head head;
    expect_ok(req, &head);
    return head.keep_alive;
}

static void test_keep_alive_rules_follow_version_and_connection(void **state)
{
    assert_true(keep_alive_of("GET / HTTP/1.1\r\n\r\n"));
    assert_false(keep_alive_of("GET / HTTP/1.1\r\nConnection: close\r\n\r\n"));
    assert_false(keep_alive_of("GET / HTTP/1.1\r\nConnection: Upgrade, CLOSE\r\n\r\n"));
    assert_true(keep_alive_of("GET / HTTP/1.1\r\nConnection: closed\r\n\r\n"));
    assert_true(keep_alive_of("GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n"));
    assert_false(keep_alive_of("GET / HTTP/1.0\r\n\r\n"));
    assert_true(keep_alive_of("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    assert_true(keep_alive_of("GET / HTTP/1.0\r\nConnection: Upgrade , Keep-Alive\r\n\r\n"));
    assert_false(keep_alive_of("GET / HTTP/1.0\r\nConnection: close\r\n\r\n"));
    assert_false(keep_alive_of("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"));

    struct http_head head;
    expect_ok("GET / HTTP/1.0\r\n\r\n", &head);
    assert_int_equal(head.version_minor, 0);
}

static void test_expect_100_continue(void **state)
{
    struct http_head head;
    expect_ok("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n", &head);
    assert_true(head.expect_continue);
    expect_ok("POST / HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n", &head);
    assert_true(head.expect_continue);
    /* HTTP/1.0 clients do not get an interim response. */
    expect_ok("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n", &head);
    assert_false(head.expect_continue);
    expect_ok("POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\n", &head);
    assert_false(head.expect_continue);
    expect_error("POST / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n", 417);
}

/* ---- chunked bodies --------------------------------------------------- */

static const char chunked_body[] = "4\r\nWiki\r\n"
                                   "5;name=value;flag\r\npedia\r\n"
                                   "E\r\n in\r\n\r\nchunks.\r\n"
                                   "a \r\n0123456789\r\n"
                                   "0\r\n"
                                   "X-Trailer: one\r\n"
                                   "X-Other: two\r\n"
                                   "\r\n";
static const char chunked_decoded[] = "Wikipedia in\r\n\r\nchunks.0123456789";

static void test_chunked_body_decodes_in_one_piece(void **state)
{
    struct http_chunked st = {0};
    struct buf out = {0};
    struct http_parse_error err = {0};
    /* Followed by the next pipelined request, which must not be consumed. */
    char in[sizeof(chunked_body) + 32];
    snprintf(in, sizeof(in), "%sGET / HTTP/1.1\r\n", chunked_body);
    size_t consumed = 0;
    assert_int_equal(http_chunked_decode(&st, in, strlen(in), &consumed, &out, 1 << 20, &err),
                     HTTP_PARSE_OK);
    assert_int_equal(consumed, strlen(chunked_body));
    assert_int_equal(out.len, strlen(chunked_decoded));
    assert_memory_equal(out.data, chunked_decoded, out.len);
    assert_int_equal(st.total, strlen(chunked_decoded));

    /* Once done, further input is left alone. */
    assert_int_equal(http_chunked_decode(&st, "xyz", 3, &consumed, &out, 1 << 20, &err),
                     HTTP_PARSE_OK);
    assert_int_equal(consumed, 0);
    assert_int_equal(out.len, strlen(chunked_decoded));
    buf_free(&out);
}

static void test_chunked_body_decodes_byte_by_byte(void **state)
{
    struct http_chunked st = {0};
    struct buf out = {0};
    struct http_parse_error err = {0};
    size_t n = strlen(chunked_body);
    for (size_t i = 0; i < n; i++) {
        char byte = chunked_body[i]; /* a one-byte buffer: over-reads are caught */
        size_t consumed = 99;
        enum http_parse_result r =
            http_chunked_decode(&st, &byte, 1, &consumed, &out, 1 << 20, &err);
        assert_int_equal(consumed, 1);
        if (i + 1 < n) {
            if (r != HTTP_PARSE_INCOMPLETE)
                fail_msg("byte %zu gave %d (%d %s)", i, (int)r, err.status,
                         err.reason != NULL ? err.reason : "");
        } else {
            assert_int_equal(r, HTTP_PARSE_OK);
        }
    }
    assert_int_equal(out.len, strlen(chunked_decoded));
    assert_memory_equal(out.data, chunked_decoded, out.len);
    buf_free(&out);
}

static void test_chunked_body_decodes_at_every_split_point(void **state)
{
    size_t n = strlen(chunked_body);
    for (size_t k = 0; k <= n; k++) {
        struct http_chunked st = {0};
        struct buf out = {0};
        struct http_parse_error err = {0};
        size_t consumed = 0;
        enum http_parse_result r =
            http_chunked_decode(&st, chunked_body, k, &consumed, &out, 1 << 20, &err);
        assert_int_equal(consumed, k);
        if (k < n) {
            assert_int_equal(r, HTTP_PARSE_INCOMPLETE);
            r = http_chunked_decode(&st, chunked_body + k, n - k, &consumed, &out, 1 << 20, &err);
            assert_int_equal(consumed, n - k);
        }
        assert_int_equal(r, HTTP_PARSE_OK);
        assert_int_equal(out.len, strlen(chunked_decoded));
        assert_memory_equal(out.data, chunked_decoded, out.len);
        buf_free(&out);
    }
}

static void test_empty_chunked_body(void **state)
{
    struct http_chunked st = {0};
    struct buf out = {0};
    struct http_parse_error err = {0};
    size_t consumed = 0;
    assert_int_equal(http_chunked_decode(&st, "0\r\n\r\n", 5, &consumed, &out, 0, &err),
                     HTTP_PARSE_OK);
    assert_int_equal(consumed, 5);
    assert_int_equal(out.len, 0);
    buf_free(&out);
}

static enum http_parse_result decode_all(const char *in, uint64_t max_total, struct buf *out,
                                         struct http_parse_error *err)
{
    struct http_chunked st = {0};
    size_t consumed = 0;
    return http_chunked_decode(&st, in, strlen(in), &consumed, out, max_total, err);
}

static void expect_chunked_error(const char *in, uint64_t max_total, int status)
{
    struct buf out = {0};
    struct http_parse_error err = {0};
    enum http_parse_result r = decode_all(in, max_total, &out, &err);
    if (r != HTTP_PARSE_ERROR || err.status != status)
        fail_msg("'%s': expected error %d, got result %d status %d", in, status, (int)r,
                 err.status);
    buf_free(&out);

    /* Byte by byte reaches the same verdict. */
    struct http_chunked st = {0};
    r = HTTP_PARSE_INCOMPLETE;
    for (size_t i = 0; in[i] != '\0' && r == HTTP_PARSE_INCOMPLETE; i++) {
        size_t consumed;
        r = http_chunked_decode(&st, in + i, 1, &consumed, &out, max_total, &err);
    }
    assert_int_equal(r, HTTP_PARSE_ERROR);
    assert_int_equal(err.status, status);
    buf_free(&out);
}

/* A proxy in front may end a chunk line at a bare LF differently than we
 * would (request smuggling): every chunk line, the CRLF after the data and
 * each trailer line must end in CRLF. */
static void test_chunked_body_with_bare_lf_is_400(void **state)
{
    expect_chunked_error("3\nabc\r\n0\r\n\r\n", 100, 400);     /* size line */
    expect_chunked_error("3;ext\nabc\r\n0\r\n\r\n", 100, 400); /* after an extension */
    expect_chunked_error("3\r\nabc\n0\r\n\r\n", 100, 400);     /* after the data */
    expect_chunked_error("3\r\nabc\r\n0\n\r\n", 100, 400);     /* last chunk */
    expect_chunked_error("3\r\nabc\r\n0\r\n\n", 100, 400);     /* empty trailer line */
    expect_chunked_error("3\r\nabc\r\n0\r\nX: y\n\r\n", 100, 400); /* a trailer */
    expect_chunked_error("3\nabc\n0\n\n", 100, 400);              /* all of them */
    expect_chunked_error("3\r\nabc\r\n0\r\nX: y\rz\r\n\r\n", 100, 400); /* CR alone */
}

/* Chunk extensions as RFC 9112 7.1.1 has them: only whitespace and then
 * ';' may follow the size, and no control character but HTAB inside. */
static void test_chunk_extension_grammar(void **state)
{
    expect_chunked_error("5 x\r\nhello\r\n0\r\n\r\n", 100, 400);
    expect_chunked_error("5\tx\r\nhello\r\n0\r\n\r\n", 100, 400);
    expect_chunked_error("5;a\x01\r\nhello\r\n0\r\n\r\n", 100, 400);
    expect_chunked_error("5;a\x7f\r\nhello\r\n0\r\n\r\n", 100, 400);
    struct buf out = {0};
    struct http_parse_error err = {0};
    assert_int_equal(decode_all("5 ;a=b\r\nhello\r\n3 \t\r\nabc\r\n0;x=\"1\t2\"\r\n\r\n", 100,
                                &out, &err),
                     HTTP_PARSE_OK);
    assert_string_equal(buf_cstr(&out), "helloabc");
    buf_free(&out);
}

static void test_chunked_body_over_max_total_is_413(void **state)
{
    struct buf out = {0};
    struct http_parse_error err = {0};
    assert_int_equal(decode_all("5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n", 8, &out, &err),
                     HTTP_PARSE_OK);
    assert_string_equal(buf_cstr(&out), "helloabc");
    buf_free(&out);
    expect_chunked_error("9\r\nhelloabcd\r\n0\r\n\r\n", 8, 413);
    expect_chunked_error("5\r\nhello\r\n4\r\nabcd\r\n0\r\n\r\n", 8, 413);
    /* Refused on the size line, before any of the data arrives. */
    expect_chunked_error("fffffffffffffff\r\n", 1 << 20, 413);
}

static void test_malformed_chunk_sizes_are_400(void **state)
{
    expect_chunked_error("\r\n", 100, 400);
    expect_chunked_error("x\r\n", 100, 400);
    expect_chunked_error("-1\r\n", 100, 400);
    expect_chunked_error("+1\r\n", 100, 400);
    expect_chunked_error("0x5\r\nhello\r\n", 100, 400);
    expect_chunked_error(";ext\r\n", 100, 400);
    expect_chunked_error("5\rX", 100, 400);
    /* 16 hex digits could overflow 64 bits: refused. */
    expect_chunked_error("1000000000000000\r\n", UINT64_MAX, 400);
    expect_chunked_error("0000000000000001\r\n", UINT64_MAX, 400);
}

static void test_missing_crlf_after_chunk_data_is_400(void **state)
{
    expect_chunked_error("5\r\nhelloX\r\n0\r\n\r\n", 100, 400);
    expect_chunked_error("5\r\nhello\rX0\r\n\r\n", 100, 400);
    expect_chunked_error("3\r\nhello\r\n0\r\n\r\n", 100, 400);
}

static void test_overlong_extension_and_trailer_are_refused(void **state)
{
    size_t n = 5000;
    char *in = malloc(n + 16);
    assert_non_null(in);
    strcpy(in, "1;");
    memset(in + 2, 'e', n);
    strcpy(in + 2 + n, "\r\nx\r\n0\r\n\r\n");
    expect_chunked_error(in, 100, 400);

    strcpy(in, "0\r\nX: ");
    memset(in + 6, 't', n);
    strcpy(in + 6 + n, "\r\n\r\n");
    expect_chunked_error(in, 100, 431);
    free(in);
}

/* ---- percent-decoding ------------------------------------------------- */

static void expect_decoded(const char *in, bool plus, const char *expected)
{
    char out[128];
    if (!http_percent_decode(in, strlen(in), out, plus))
        fail_msg("'%s' refused", in);
    assert_string_equal(out, expected);
}

static void expect_refused(const char *in)
{
    char out[128];
    if (http_percent_decode(in, strlen(in), out, true))
        fail_msg("'%s' accepted", in);
    if (http_percent_decode(in, strlen(in), out, false))
        fail_msg("'%s' accepted", in);
}

static void test_percent_decode_escapes(void **state)
{
    expect_decoded("", false, "");
    expect_decoded("plain", false, "plain");
    expect_decoded("alice%40example.org", false, "alice@example.org");
    expect_decoded("a%2Fb%2fc", false, "a/b/c");
    expect_decoded("%41%42%43", false, "ABC");
    expect_decoded("caf%C3%A9", false, "caf\xc3\xa9");
    expect_decoded("100%25", false, "100%");
}

static void test_percent_decode_plus_only_in_queries(void **state)
{
    expect_decoded("a+b", true, "a b");
    expect_decoded("a+b", false, "a+b");
    expect_decoded("a%2Bb", true, "a+b");
    expect_decoded("a%20b", false, "a b");
}

static void test_percent_decode_refuses_nul_and_bad_escapes(void **state)
{
    expect_refused("%00");
    expect_refused("abc%00def");
    expect_refused("%");
    expect_refused("abc%");
    expect_refused("%4");
    expect_refused("%4g");
    expect_refused("%g4");
    expect_refused("%%41");
    expect_refused("% 41");
}

static void test_percent_decode_respects_length(void **state)
{
    char out[16];
    /* Only the first 5 bytes are input: "ab%41". */
    assert_true(http_percent_decode("ab%41zz", 5, out, false));
    assert_string_equal(out, "abA");
    /* An escape cut by the length is refused, not read past. */
    assert_false(http_percent_decode("ab%41", 4, out, false));
    assert_false(http_percent_decode("ab%41", 3, out, false));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_line_and_headers_are_sliced),
        cmocka_unit_test(test_header_lookup_is_case_insensitive_and_returns_first),
        cmocka_unit_test(test_methods_are_recognised_case_sensitively),
        cmocka_unit_test(test_options_asterisk_form_only_for_options),
        cmocka_unit_test(test_leading_empty_lines_are_skipped),
        cmocka_unit_test(test_bare_lf_line_endings_are_accepted),
        cmocka_unit_test(test_every_prefix_of_a_valid_request_is_incomplete),
        cmocka_unit_test(test_oversize_head_is_431),
        cmocka_unit_test(test_too_many_headers_is_431),
        cmocka_unit_test(test_long_target_is_414),
        cmocka_unit_test(test_garbage_and_malformed_request_lines_are_400),
        cmocka_unit_test(test_malformed_header_fields_are_400),
        cmocka_unit_test(test_obsolete_line_folding_is_400),
        cmocka_unit_test(test_content_length_is_parsed),
        cmocka_unit_test(test_bad_or_conflicting_content_length_is_400),
        cmocka_unit_test(test_content_length_with_transfer_encoding_is_400),
        cmocka_unit_test(test_chunked_transfer_encoding_is_accepted),
        cmocka_unit_test(test_transfer_coding_other_than_chunked_is_501),
        cmocka_unit_test(test_chunked_in_http_1_0_is_400),
        cmocka_unit_test(test_unsupported_http_versions_are_505),
        cmocka_unit_test(test_keep_alive_rules_follow_version_and_connection),
        cmocka_unit_test(test_expect_100_continue),
        cmocka_unit_test(test_chunked_body_decodes_in_one_piece),
        cmocka_unit_test(test_chunked_body_decodes_byte_by_byte),
        cmocka_unit_test(test_chunked_body_decodes_at_every_split_point),
        cmocka_unit_test(test_chunked_body_with_bare_lf_is_400),
        cmocka_unit_test(test_chunk_extension_grammar),
        cmocka_unit_test(test_empty_chunked_body),
        cmocka_unit_test(test_chunked_body_over_max_total_is_413),
        cmocka_unit_test(test_malformed_chunk_sizes_are_400),
        cmocka_unit_test(test_missing_crlf_after_chunk_data_is_400),
        cmocka_unit_test(test_overlong_extension_and_trailer_are_refused),
        cmocka_unit_test(test_percent_decode_escapes),
        cmocka_unit_test(test_percent_decode_plus_only_in_queries),
        cmocka_unit_test(test_percent_decode_refuses_nul_and_bad_escapes),
        cmocka_unit_test(test_percent_decode_respects_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
