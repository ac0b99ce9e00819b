/* libFuzzer target: the POP3 command-line parser
 * (protocols/pop3/pop3-parser.h), the RETR/TOP wire-form writer
 * (pop3-body.h) and the UIDL format checker (pop3-uidl.h).
 * Input layout:
 *   byte 0     seed for the split points of the streamed feed and TOP's count
 *   byte 1     limits: bits 0-1 pick max_line (8192, 4, 16, 255), bits 2-3
 *              max_args (4, 0, 1, 2)
 *   byte 2..   the bytes a client sent; a 0x01 byte at the start of a line
 *              makes the next line a raw (SASL response) line, as the server
 *              does after a "+ " challenge
 * Steps:
 *   1. The client bytes fed at once, in pseudo-random pieces (each in its own
 *      exact-size allocation so ASan sees any over-read) and, for shorter
 *      inputs, byte by byte: the transcripts of events must be identical, and
 *      every command must satisfy the parser's promises (upper-case printable
 *      keyword, no spaces in arguments, rest as long as it says, limits).
 *      Every argument also goes through pop3_parse_number(), which must agree
 *      with strtoull.
 *   2. The same bytes as a stored message through RETR's writer, in one
 *      piece and in random pieces: identical output, CRLF-terminated lines,
 *      no line "." before the terminator, un-stuffing gives the message with
 *      CRLF line ends, and the length matches pop3_body_size(). TOP's output
 *      must be a prefix of RETR's, cut at a line boundary.
 *   3. The bytes (to the first NUL) as a uidl_format: when accepted, every
 *      expansion is 1..70 printable characters without spaces. */
#include "core/buf.h"
#include "core/error.h"
#include "protocols/pop3/pop3-body.h"
#include "protocols/pop3/pop3-parser.h"
#include "protocols/pop3/pop3-uidl.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t rng_next(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *s = x;
    return x;
}

static void check_number(const char *arg)
{
    uint64_t v = 0;
    bool ok = pop3_parse_number(arg, UINT64_MAX, &v);
    size_t n = strlen(arg);
    bool digits = n > 0 && n <= 20 && strspn(arg, "0123456789") == n;
    if (!digits) {
        assert(!ok);
        return;
    }
    /* 20 digits may overflow: then it must be refused. */
    char canon[32];
    const char *p = arg;
    while (*p == '0' && p[1] != '\0')
        p++;
    if (ok) {
        snprintf(canon, sizeof(canon), "%llu", (unsigned long long)v);
        assert(strcmp(canon, p) == 0);
        uint64_t small = 0;
        if (v > 1000)
            assert(!pop3_parse_number(arg, 1000, &small));
    } else {
        assert(strlen(p) == 20 && strcmp(p, "18446744073709551615") > 0);
    }
}

static void describe(struct pop3_parser *p, enum pop3_parse_result r,
                     const struct pop3_parser_limits *lim, bool check, struct buf *t)
{
    if (r == POP3_PARSE_COMMAND) {
        const struct pop3_command *c = pop3_parser_command(p);
        assert(c != NULL && pop3_parser_error(p) == NULL);
        size_t klen = strlen(c->name);
        assert(klen >= 1 && klen <= POP3_MAX_KEYWORD);
        for (size_t i = 0; i < klen; i++)
            assert(c->name[i] > 0x20 && c->name[i] < 0x7f &&
                   !(c->name[i] >= 'a' && c->name[i] <= 'z'));
        assert(c->arg_count <= lim->max_args);
        assert(strlen(c->rest) == c->rest_len && c->rest_len < lim->max_line);
        buf_printf(t, "C%s", c->name);
        for (size_t i = 0; i < c->arg_count; i++) {
            size_t n = strlen(c->args[i]);
            assert(n > 0 && memchr(c->args[i], ' ', n) == NULL);
            buf_printf(t, "|%s", c->args[i]);
            if (check)
                check_number(c->args[i]);
        }
        buf_printf(t, "|%s\n", c->rest);
    } else if (r == POP3_PARSE_LINE) {
        size_t len = 0;
        const char *line = pop3_parser_line(p, &len);
        assert(line != NULL && line[len] == '\0' && len <= lim->max_line);
        assert(memchr(line, '\n', len) == NULL);
        buf_printf(t, "L%zu:", len);
        buf_append(t, line, len);
        buf_append_char(t, '\n');
    } else {
        const struct pop3_parse_error *e = pop3_parser_error(p);
        assert(r == POP3_PARSE_ERROR && e != NULL && e->message[0] != '\0');
        assert(pop3_parser_command(p) == NULL);
        assert(e->fatal == (e->code == POP3_PARSE_ERR_LINE_TOO_LONG));
        buf_printf(t, "E%d%d%s\n", (int)e->fatal, (int)e->code, e->message);
    }
}

/* Feeds `len` bytes in pieces chosen by `rng` (NULL: all at once, `step`
 * bytes at a time when non-zero) and returns the transcript. */
static void run(const char *in, size_t len, const struct pop3_parser_limits *lim, uint32_t *rng,
                size_t step, bool check, struct buf *t)
{
    struct pop3_parser *p = pop3_parser_new(lim);
    size_t pos = 0;
    bool at_line_start = true;
    bool fatal = false;
    while (pos < len && !fatal) {
        if (at_line_start && in[pos] == '\x01') {
            pop3_parser_expect_line(p);
            pos++;
            continue;
        }
        size_t piece = len - pos;
        if (rng != NULL) {
            uint32_t x = rng_next(rng);
            piece = (x & 3) == 0 ? 1 : (x >> 2) % ((x & 3) == 1 ? 16 : 512);
            if (piece == 0)
                piece = 1;
        } else if (step > 0) {
            piece = step;
        }
        if (piece > len - pos)
            piece = len - pos;
        /* A marker of the next line is never fed with this one. */
        const char *nl = memchr(in + pos, '\n', piece);
        if (nl != NULL)
            piece = (size_t)(nl - (in + pos)) + 1;
        char *copy = malloc(piece);
        memcpy(copy, in + pos, piece);
        size_t off = 0;
        while (off < piece) {
            size_t used = SIZE_MAX;
            enum pop3_parse_result r = pop3_parser_feed(p, copy + off, piece - off, &used);
            assert(used <= piece - off);
            off += used;
            if (r == POP3_PARSE_NEED_MORE) {
                assert(off == piece);
                assert(pop3_parser_command(p) == NULL && pop3_parser_error(p) == NULL);
                break;
            }
            /* A complete line ends at a LF: the rest of this piece is empty. */
            assert(off == piece || r == POP3_PARSE_ERROR);
            describe(p, r, lim, check, t);
            if (r == POP3_PARSE_ERROR && pop3_parser_error(p)->fatal) {
                size_t again = SIZE_MAX;
                assert(pop3_parser_feed(p, "NOOP\r\n", 6, &again) == POP3_PARSE_ERROR &&
                       again == 0);
                fatal = true;
                break;
            }
        }
        free(copy);
        pos += piece;
        at_line_start = in[pos - 1] == '\n';
    }
    if (!fatal)
        buf_printf(t, "end %d", (int)pop3_parser_in_line(p));
    pop3_parser_free(p);
}

/* The wire form written in pieces from `rng` (NULL: one call). */
static void write_body(const char *msg, size_t len, bool top, uint64_t lines, uint32_t *rng,
                       struct buf *out)
{
    struct pop3_body_writer w;
    pop3_body_init(&w, msg, len, top, lines);
    for (;;) {
        size_t max = rng != NULL ? 1 + rng_next(rng) % 64 : SIZE_MAX / 2;
        size_t before = out->len;
        bool done = pop3_body_write(&w, out, max);
        assert(done || out->len > before);
        if (done)
            break;
    }
}

static void check_body(const char *msg, size_t len, uint32_t seed)
{
    struct buf whole = {0};
    write_body(msg, len, false, 0, NULL, &whole);
    uint32_t rng = seed;
    struct buf pieces = {0};
    write_body(msg, len, false, 0, &rng, &pieces);
    assert(whole.len == pieces.len && memcmp(whole.data, pieces.data, whole.len) == 0);

    /* Lines of the wire form: CRLF each, the last one "." alone. */
    assert(whole.len >= 3 && memcmp(whole.data + whole.len - 3, ".\r\n", 3) == 0);
    struct buf plain = {0};
    size_t stuffed = 0;
    size_t pos = 0;
    size_t end = whole.len - 3;
    while (pos < end) {
        const char *lf = memchr(whole.data + pos, '\n', end - pos);
        assert(lf != NULL);
        size_t at = (size_t)(lf - whole.data);
        assert(at > pos && whole.data[at - 1] == '\r');
        size_t n = at + 1 - pos;
        assert(!(n == 3 && whole.data[pos] == '.')); /* no premature terminator */
        if (whole.data[pos] == '.') {
            assert(n > 3 && whole.data[pos + 1] == '.');
            stuffed++;
            buf_append(&plain, whole.data + pos + 1, n - 1);
        } else {
            buf_append(&plain, whole.data + pos, n);
        }
        pos = at + 1;
    }
    /* Un-stuffed, it is the message with CRLF line ends (and a final one). */
    struct buf expect = {0};
    for (size_t i = 0; i < len; i++) {
        if (msg[i] == '\n' && (i == 0 || msg[i - 1] != '\r'))
            buf_append_char(&expect, '\r');
        buf_append_char(&expect, msg[i]);
    }
    bool missing_eol = len > 0 && msg[len - 1] != '\n';
    if (missing_eol)
        buf_append(&expect, "\r\n", 2);
    assert(plain.len == expect.len &&
           (plain.len == 0 || memcmp(plain.data, expect.data, plain.len) == 0));
    assert(whole.len == pop3_body_size(msg, len) + stuffed + (missing_eol ? 2 : 0) + 3);

    /* TOP: a prefix of RETR's lines. */
    uint64_t lines = seed % 8;
    if ((seed & 0x100) != 0)
        lines = UINT64_MAX - (seed & 3);
    rng = seed * 7 + 1;
    struct buf top = {0};
    write_body(msg, len, true, lines, (seed & 0x200) != 0 ? &rng : NULL, &top);
    assert(top.len >= 3 && top.len <= whole.len);
    assert(memcmp(top.data, whole.data, top.len - 3) == 0);
    assert(memcmp(top.data + top.len - 3, ".\r\n", 3) == 0);
    assert(top.len == 3 || top.data[top.len - 4] == '\n');
    if ((seed & 0x100) != 0)
        assert(top.len == whole.len); /* more lines than any message has */

    buf_free(&whole);
    buf_free(&pieces);
    buf_free(&plain);
    buf_free(&expect);
    buf_free(&top);
}

static void check_uidl(const char *in, size_t len)
{
    size_t n = strnlen(in, len < 256 ? len : 256);
    char *format = malloc(n + 1);
    memcpy(format, in, n);
    format[n] = '\0';
    struct petrel_error err;
    if (pop3_uidl_format_check(format, &err)) {
        static const uint32_t values[][2] = {{0, 0}, {1, 1}, {UINT32_MAX, UINT32_MAX}, {42, 7}};
        for (size_t i = 0; i < 4; i++) {
            struct buf out = {0};
            pop3_uidl_format(format, values[i][0], values[i][1], &out);
            assert(out.len >= 1 && out.len <= POP3_UIDL_MAX);
            for (size_t k = 0; k < out.len; k++)
                assert(out.data[k] >= 0x21 && out.data[k] <= 0x7e);
            buf_free(&out);
        }
    } else {
        assert(err.message[0] != '\0');
    }
    free(format);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint32_t seed = (uint32_t)data[0] * 2654435761u + 1;
    uint8_t sel = data[1];
    const char *in = (const char *)data + 2;
    size_t len = size - 2;

    static const size_t lines[4] = {POP3_DEFAULT_LINE, 4, 16, 255};
    static const size_t args[4] = {POP3_DEFAULT_ARGS, 0, 1, 2};
    struct pop3_parser_limits lim = {.max_line = lines[sel & 3], .max_args = args[(sel >> 2) & 3]};

    struct buf whole = {0};
    run(in, len, &lim, NULL, 0, true, &whole);
    uint32_t rng = seed;
    struct buf pieces = {0};
    run(in, len, &lim, &rng, 0, false, &pieces);
    assert(whole.len == pieces.len && memcmp(whole.data, pieces.data, whole.len) == 0);
    if (len <= 4096) {
        struct buf bytes = {0};
        run(in, len, &lim, NULL, 1, false, &bytes);
        assert(whole.len == bytes.len && memcmp(whole.data, bytes.data, whole.len) == 0);
        buf_free(&bytes);
    }
    buf_free(&whole);
    buf_free(&pieces);

    check_body(in, len, seed);
    check_uidl(in, len);
    return 0;
}
