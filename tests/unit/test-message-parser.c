/* Unit tests for storage/message/message-parser.h: header blocks, the MIME
 * tree, ranges and CRLF sizes in LF and CRLF storage, IMAP part numbering,
 * and a corpus of broken messages (unterminated multiparts, missing
 * boundaries, huge header lines, deep nesting, NUL bytes, mixed line ends)
 * that must parse without harm and within the caps. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "storage/message/message-parser.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses from an exact-size heap copy so over-reads show under ASan. */
struct parsed {
    char *copy;
    struct message msg;
};

static void parse_n(struct parsed *p, const char *text, size_t len,
                    const struct message_limits *limits)
{
    p->copy = malloc(len > 0 ? len : 1);
    assert_non_null(p->copy);
    memcpy(p->copy, text, len);
    message_parse(p->copy, len, limits, &p->msg);
}

static void parse(struct parsed *p, const char *text)
{
    parse_n(p, text, strlen(text), NULL);
}

static void done(struct parsed *p)
{
    message_free(&p->msg);
    free(p->copy);
}

static void assert_range_text(const struct parsed *p, const struct message_range *r,
                              const char *expected)
{
    if (r->len != strlen(expected) || memcmp(p->copy + r->start, expected, r->len) != 0)
        fail_msg("range '%.*s' != '%s'", (int)r->len, p->copy + r->start, expected);
}

/* Every range lies inside the message, children inside their parent's body. */
static void check_tree(const struct parsed *p)
{
    const struct message *m = &p->msg;
    assert_true(m->part_count >= 1);
    for (size_t i = 0; i < m->part_count; i++) {
        const struct message_part *part = &m->parts[i];
        assert_true(part->header.start + part->header.len <= m->len);
        assert_true(part->body.start + part->body.len <= m->len);
        assert_true(part->header.start + part->header.len <= part->body.start);
        assert_true(part->body.lines <= part->body.len);
        assert_true(part->body.bare_lf <= part->body.lines);
        assert_non_null(part->type);
        assert_non_null(part->subtype);
        if (part->parent != MESSAGE_PART_NONE) {
            const struct message_part *pp = &m->parts[part->parent];
            assert_true(part->header.start >= pp->body.start);
            assert_true(part->body.start + part->body.len <= pp->body.start + pp->body.len);
        }
    }
}

static size_t part_at(const struct parsed *p, const char *numbers)
{
    unsigned nums[16];
    size_t n = 0;
    for (const char *s = numbers; *s != '\0' && n < 16;) {
        nums[n++] = (unsigned)strtoul(s, (char **)&s, 10);
        if (*s == '.')
            s++;
    }
    return message_part_by_number(&p->msg, nums, n);
}

static void test_simple_crlf(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "From: a@b.c\r\nSubject: hi\r\n\r\nhello\r\nworld\r\n");
    check_tree(&p);
    assert_int_equal(p.msg.part_count, 1);
    const struct message_part *root = &p.msg.parts[0];
    assert_range_text(&p, &root->header, "From: a@b.c\r\nSubject: hi\r\n\r\n");
    assert_range_text(&p, &root->body, "hello\r\nworld\r\n");
    assert_int_equal(root->body.lines, 2);
    assert_int_equal(message_range_crlf_size(&root->body), 14);
    assert_string_equal(root->type, "text");
    assert_string_equal(root->subtype, "plain");
    assert_false(root->has_content_type);
    assert_true(root->is_message);
    done(&p);
}

static void test_lf_only_sizes_match_crlf(void **state)
{
    (void)state;
    struct parsed a, b;
    parse(&a, "Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\none\r\n--b\r\n"
              "Content-Type: text/html\r\n\r\n<p>two</p>\r\nx\r\n--b--\r\n");
    parse(&b, "Content-Type: multipart/mixed; boundary=b\n\n--b\n\none\n--b\n"
              "Content-Type: text/html\n\n<p>two</p>\nx\n--b--\n");
    check_tree(&a);
    check_tree(&b);
    assert_int_equal(a.msg.part_count, b.msg.part_count);
    for (size_t i = 0; i < a.msg.part_count; i++) {
        const struct message_part *x = &a.msg.parts[i], *y = &b.msg.parts[i];
        assert_int_equal(message_range_crlf_size(&x->header), message_range_crlf_size(&y->header));
        assert_int_equal(message_range_crlf_size(&x->body), message_range_crlf_size(&y->body));
        assert_int_equal(x->body.lines, y->body.lines);
        assert_int_equal(x->header.bare_lf, 0);
        assert_int_equal(x->body.bare_lf, 0);
    }
    assert_range_text(&b, &b.msg.parts[2].body, "<p>two</p>\nx");
    assert_int_equal(b.msg.parts[2].body.lines, 1);
    assert_int_equal(b.msg.parts[2].body.bare_lf, 1);
    done(&a);
    done(&b);
}

static void test_mixed_line_ends(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "A: 1\nB: 2\r\n\nline\r\nline\nlast");
    check_tree(&p);
    const struct message_part *root = &p.msg.parts[0];
    assert_range_text(&p, &root->header, "A: 1\nB: 2\r\n\n");
    assert_int_equal(root->header.bare_lf, 2);
    assert_range_text(&p, &root->body, "line\r\nline\nlast");
    assert_int_equal(root->body.lines, 2);
    assert_int_equal(message_range_crlf_size(&root->body), 16);
    done(&p);
}

static void test_header_fields(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "Subject: one\r\n two\r\nX-No-Colon line\r\nTo : x@y\r\n\tz@w\r\n\r\nbody");
    const struct message_part *root = &p.msg.parts[0];
    struct message_header_field f;
    size_t pos = root->header.start;
    assert_true(message_header_next(p.copy, &root->header, &pos, &f));
    assert_true(message_header_is(p.copy, &f, "subject"));
    struct buf v = {0};
    message_header_unfold(&v, p.copy + f.value_start, f.value_len);
    assert_string_equal(buf_cstr(&v), "one two");
    assert_true(message_header_next(p.copy, &root->header, &pos, &f));
    assert_false(f.has_colon);
    assert_true(message_header_next(p.copy, &root->header, &pos, &f));
    assert_true(message_header_is(p.copy, &f, "TO"));
    buf_reset(&v);
    message_header_unfold(&v, p.copy + f.value_start, f.value_len);
    assert_string_equal(buf_cstr(&v), "x@y\tz@w");
    assert_false(message_header_next(p.copy, &root->header, &pos, &f));
    buf_free(&v);
    done(&p);
}

static const char nested_message[] =
    "From: outer@x\r\n"
    "Content-Type: multipart/mixed; boundary=\"outer\"\r\n"
    "\r\n"
    "preamble\r\n"
    "--outer\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "\r\n"
    "first\r\n"
    "--outer\r\n"
    "Content-Type: message/rfc822\r\n"
    "\r\n"
    "From: inner@x\r\n"
    "Content-Type: multipart/alternative; boundary=outer-inner\r\n"
    "\r\n"
    "--outer-inner\r\n"
    "\r\n"
    "plain\r\n"
    "--outer-inner\r\n"
    "Content-Type: text/html\r\n"
    "\r\n"
    "<b>html</b>\r\n"
    "--outer-inner--\r\n"
    "--outer\r\n"
    "Content-Type: application/pdf; name*0=\"long\"; name*1=\".pdf\"\r\n"
    "Content-Disposition: attachment;\r\n filename*=utf-8''%e2%82%ac.pdf\r\n"
    "Content-Transfer-Encoding: base64\r\n"
    "\r\n"
    "JVBERi0=\r\n"
    "--outer--  \r\n"
    "epilogue\r\n";

static void test_nested_tree_and_numbers(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, nested_message);
    check_tree(&p);
    /* root, text, message/rfc822, inner message, 2 alternatives, pdf */
    assert_int_equal(p.msg.part_count, 7);
    assert_false(p.msg.hit_limit);
    const struct message_part *parts = p.msg.parts;
    assert_int_equal(parts[0].kind, MESSAGE_PART_MULTIPART);
    assert_int_equal(parts[0].child_count, 3);
    assert_int_equal(parts[2].kind, MESSAGE_PART_MESSAGE);
    assert_true(parts[3].is_message);
    assert_int_equal(parts[3].kind, MESSAGE_PART_MULTIPART);
    assert_range_text(&p, &parts[1].body, "first");
    assert_range_text(&p, &parts[4].body, "plain");
    assert_range_text(&p, &parts[5].body, "<b>html</b>");
    assert_range_text(&p, &parts[6].body, "JVBERi0=");
    assert_string_equal(message_param_find(parts[6].params, parts[6].param_count, "name"),
                        "long.pdf");
    assert_string_equal(parts[6].disposition, "attachment");
    assert_string_equal(message_param_find(parts[6].disposition_params,
                                           parts[6].disposition_param_count, "filename*"),
                        "utf-8''%e2%82%ac.pdf");
    assert_string_equal(parts[6].encoding, "base64");
    /* The boundary "outer" is a prefix of "outer-inner": kept apart. */
    assert_int_equal(part_at(&p, "1"), 1);
    assert_int_equal(part_at(&p, "2"), 2);
    assert_int_equal(part_at(&p, "2.1"), 4);
    assert_int_equal(part_at(&p, "2.2"), 5);
    assert_int_equal(part_at(&p, "3"), 6);
    assert_int_equal(part_at(&p, "4"), MESSAGE_PART_NONE);
    assert_int_equal(part_at(&p, "1.1"), MESSAGE_PART_NONE);
    assert_int_equal(part_at(&p, "2.3"), MESSAGE_PART_NONE);
    assert_int_equal(message_part_message(&p.msg, 2), 3);
    assert_int_equal(message_part_message(&p.msg, 1), MESSAGE_PART_NONE);
    done(&p);
}

static void test_single_part_numbering(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "Content-Type: message/rfc822\r\n\r\nSubject: in\r\n\r\nbody\r\n");
    check_tree(&p);
    assert_int_equal(p.msg.part_count, 2);
    assert_int_equal(part_at(&p, "1"), 0);
    assert_int_equal(part_at(&p, "1.1"), 1);
    assert_int_equal(part_at(&p, "2"), MESSAGE_PART_NONE);
    assert_int_equal(part_at(&p, "1.1.1"), MESSAGE_PART_NONE);
    assert_range_text(&p, &p.msg.parts[1].body, "body\r\n");
    done(&p);
}

static void test_digest_default(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "Content-Type: multipart/digest; boundary=d\n\n--d\n\nSubject: a\n\nA\n--d--\n");
    check_tree(&p);
    assert_int_equal(p.msg.part_count, 3);
    assert_true(message_part_is(&p.msg.parts[1], "message", "rfc822"));
    assert_int_equal(p.msg.parts[1].kind, MESSAGE_PART_MESSAGE);
    done(&p);
}

static void test_content_type_forms(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "Content-Type: (comment) Text / HTML (c) ; charset = \"utf\\\"8\" ;"
              " format=flowed; name=my file.txt\r\n\r\n");
    const struct message_part *r = &p.msg.parts[0];
    assert_string_equal(r->type, "Text");
    assert_string_equal(r->subtype, "HTML");
    assert_int_equal(r->param_count, 3);
    assert_string_equal(message_param_find(r->params, r->param_count, "CHARSET"), "utf\"8");
    assert_string_equal(message_param_find(r->params, r->param_count, "name"), "my file.txt");
    done(&p);
    parse(&p, "Content-Type: garbage\r\nContent-Language: en-US (x), de\r\n"
              "Content-ID: <a@b>\r\nContent-Description: d\r\nContent-Location: u\r\n"
              "Content-MD5: m\r\n\r\n");
    r = &p.msg.parts[0];
    assert_string_equal(r->type, "text");
    assert_false(r->has_content_type);
    assert_int_equal(r->language_count, 2);
    assert_string_equal(r->languages[0], "en-US");
    assert_string_equal(r->languages[1], "de");
    assert_string_equal(r->id, "<a@b>");
    assert_string_equal(r->description, "d");
    assert_string_equal(r->location, "u");
    assert_string_equal(r->md5, "m");
    done(&p);
}

/* ---- the broken corpus ---- */

static void test_unterminated_multipart(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "Content-Type: multipart/mixed; boundary=x\r\n\r\n--x\r\n\r\none\r\n--x\r\n"
              "\r\ntwo, never closed\r\n");
    check_tree(&p);
    assert_int_equal(p.msg.part_count, 3);
    assert_range_text(&p, &p.msg.parts[2].body, "two, never closed\r\n");
    done(&p);
}

static void test_boundary_never_found(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "Content-Type: multipart/mixed; boundary=x\r\n\r\n--y\r\ntext\r\n");
    check_tree(&p);
    assert_int_equal(p.msg.part_count, 1);
    assert_int_equal(p.msg.parts[0].kind, MESSAGE_PART_MULTIPART);
    done(&p);
    parse(&p, "Content-Type: multipart/mixed\r\n\r\n--x\r\ntext\r\n");
    check_tree(&p);
    assert_int_equal(p.msg.parts[0].kind, MESSAGE_PART_LEAF);
    done(&p);
}

static void test_inner_missing_close(void **state)
{
    (void)state;
    struct parsed p;
    /* The inner multipart is never closed: the outer boundary ends it. */
    parse(&p, "Content-Type: multipart/mixed; boundary=a\n\n--a\n"
              "Content-Type: multipart/mixed; boundary=b\n\n--b\n\ninner\n--a\n\nlast\n--a--\n");
    check_tree(&p);
    assert_int_equal(p.msg.part_count, 4);
    assert_range_text(&p, &p.msg.parts[2].body, "inner");
    assert_range_text(&p, &p.msg.parts[3].body, "last");
    done(&p);
}

static void test_header_without_body(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "Subject: only a header\r\nFrom: x@y");
    check_tree(&p);
    assert_int_equal(p.msg.parts[0].body.len, 0);
    assert_int_equal(p.msg.parts[0].header.len, p.msg.len);
    done(&p);
    parse(&p, "");
    check_tree(&p);
    assert_int_equal(p.msg.part_count, 1);
    done(&p);
    /* A part whose header runs into the next boundary. */
    parse(&p, "Content-Type: multipart/mixed; boundary=q\n\n--q\nX-A: 1\n--q\n\nb\n--q--\n");
    check_tree(&p);
    assert_int_equal(p.msg.part_count, 3);
    assert_range_text(&p, &p.msg.parts[1].header, "X-A: 1");
    assert_int_equal(p.msg.parts[1].body.len, 0);
    done(&p);
}

static void test_nul_bytes_and_8bit(void **state)
{
    (void)state;
    static const char msg[] = "Subject: a\0b\xff\r\nContent-Type: text/plain; x=\0\r\n\r\nbo\0dy";
    struct parsed p;
    parse_n(&p, msg, sizeof(msg) - 1, NULL);
    check_tree(&p);
    assert_int_equal(p.msg.parts[0].body.len, 5);
    assert_int_equal(p.msg.parts[0].param_count, 1);
    done(&p);
}

static void test_huge_header_line(void **state)
{
    (void)state;
    size_t n = 1 << 20;
    char *msg = malloc(n + 64);
    assert_non_null(msg);
    strcpy(msg, "Subject: ");
    memset(msg + 9, 'x', n);
    strcpy(msg + 9 + n, "\r\n\r\nbody");
    struct parsed p;
    parse_n(&p, msg, strlen(msg), NULL);
    check_tree(&p);
    assert_range_text(&p, &p.msg.parts[0].body, "body");
    done(&p);
    free(msg);
}

/* `levels` multiparts inside each other, each with its own boundary. */
static char *deep_message(unsigned levels)
{
    struct buf b = {0};
    for (unsigned i = 0; i < levels; i++)
        buf_printf(&b, "Content-Type: multipart/mixed; boundary=\"b%u\"\r\n\r\n--b%u\r\n", i, i);
    buf_append_str(&b, "\r\ndeepest\r\n");
    for (unsigned i = levels; i-- > 0;)
        buf_printf(&b, "--b%u--\r\n", i);
    return buf_steal(&b);
}

static void test_nesting_200_levels(void **state)
{
    (void)state;
    char *msg = deep_message(200);
    struct parsed p;
    parse(&p, msg);
    check_tree(&p);
    assert_true(p.msg.hit_limit);
    unsigned max_depth = 0;
    for (size_t i = 0; i < p.msg.part_count; i++) {
        if (p.msg.parts[i].depth > max_depth)
            max_depth = p.msg.parts[i].depth;
    }
    assert_int_equal(max_depth, MESSAGE_DEFAULT_MAX_DEPTH);
    done(&p);
    /* Deep message/rfc822 nesting as well. */
    struct buf b = {0};
    for (int i = 0; i < 300; i++)
        buf_append_str(&b, "Content-Type: message/rfc822\n\n");
    buf_append_str(&b, "Subject: x\n\nend\n");
    parse(&p, buf_cstr(&b));
    check_tree(&p);
    assert_true(p.msg.hit_limit);
    assert_int_equal(p.msg.part_count, MESSAGE_DEFAULT_MAX_DEPTH + 1);
    done(&p);
    buf_free(&b);
    free(msg);
}

static void test_part_and_header_caps(void **state)
{
    (void)state;
    struct buf b = {0};
    buf_append_str(&b, "Content-Type: multipart/mixed; boundary=z\n\n");
    for (int i = 0; i < 50; i++)
        buf_append_str(&b, "--z\n\npart\n");
    buf_append_str(&b, "--z--\n");
    struct message_limits limits;
    message_limits_default(&limits);
    limits.max_parts = 10;
    limits.max_headers = 2;
    struct parsed p;
    parse_n(&p, b.data, b.len, &limits);
    check_tree(&p);
    assert_int_equal(p.msg.part_count, 10);
    assert_true(p.msg.hit_limit);
    assert_int_equal(p.msg.parts[0].body.len + p.msg.parts[0].header.len, b.len);
    done(&p);
    buf_reset(&b);
    buf_append_str(&b, "A: 1\nB: 2\nContent-Type: text/html\n\n");
    parse_n(&p, b.data, b.len, &limits);
    assert_string_equal(p.msg.parts[0].subtype, "plain"); /* third field not read */
    assert_true(p.msg.hit_limit);
    done(&p);
    buf_free(&b);
}

static void test_many_boundaries_is_linear(void **state)
{
    (void)state;
    /* 100 open boundaries and 200k lines starting with "--": must be quick. */
    struct buf b = {0};
    for (unsigned i = 0; i < 99; i++)
        buf_printf(&b, "Content-Type: multipart/mixed; boundary=\"%060u\"\n\n--%060u\n", i, i);
    for (unsigned i = 0; i < 200000; i++)
        buf_append_str(&b, "--000000000000000000000000000000000000000000000000000000000x\n");
    struct parsed p;
    parse_n(&p, b.data, b.len, NULL);
    check_tree(&p);
    done(&p);
    buf_free(&b);
}

/* message_header_block is parts[0].header of a full parse, for line-end
 * mixes, missing blank lines and bodies that look like headers, and for
 * random byte strings made of the characters that matter. */
static void assert_header_block_matches(const char *data, size_t len)
{
    struct message m;
    message_parse(data, len, NULL, &m);
    struct message_range hb = message_header_block(data, len);
    assert_int_equal(hb.start, m.parts[0].header.start);
    assert_int_equal(hb.len, m.parts[0].header.len);
    assert_int_equal(hb.lines, m.parts[0].header.lines);
    assert_int_equal(hb.bare_lf, m.parts[0].header.bare_lf);
    message_free(&m);
}

static void test_header_block_without_parse(void **state)
{
    (void)state;
    static const char *const cases[] = {
        "",
        "\r\n",
        "\n",
        "Subject: x\r\n\r\nbody\r\n",
        "Subject: x\n\nbody\n",
        "Subject: x\r\nFrom: y\r\n",
        "Subject: x",
        "Subject: x\r",
        "Subject: x\r\r\nmore: y\r\n\r\nbody",
        "Subject: x\n\r\nbody",
        "Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\npart\r\n--b--\r\n",
        "Content-Type: multipart/mixed; boundary=b\r\n--b\r\nX: 1\r\n\r\n--b--\r\n",
        "A: 1\r\n folded\r\n\tagain\r\n \r\nnot the end\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_header_block_matches(cases[i], strlen(cases[i]));
    static const char alphabet[] = "\r\n\r\n :-ab\t";
    uint32_t x = 2463534242u;
    char text[64];
    for (int round = 0; round < 20000; round++) {
        size_t len = (size_t)(round % 64);
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            text[i] = alphabet[x % (sizeof(alphabet) - 1)];
        }
        assert_header_block_matches(text, len);
    }
}

static void test_boundary_whitespace_and_prefix(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "Content-Type: multipart/mixed; boundary=ab\n\n--ab \t\n\none\n--abc\nstill one\n"
              "--ab--\t\n");
    check_tree(&p);
    assert_int_equal(p.msg.part_count, 2);
    assert_range_text(&p, &p.msg.parts[1].body, "one\n--abc\nstill one");
    done(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simple_crlf),
        cmocka_unit_test(test_lf_only_sizes_match_crlf),
        cmocka_unit_test(test_mixed_line_ends),
        cmocka_unit_test(test_header_fields),
        cmocka_unit_test(test_nested_tree_and_numbers),
        cmocka_unit_test(test_single_part_numbering),
        cmocka_unit_test(test_digest_default),
        cmocka_unit_test(test_content_type_forms),
        cmocka_unit_test(test_unterminated_multipart),
        cmocka_unit_test(test_boundary_never_found),
        cmocka_unit_test(test_inner_missing_close),
        cmocka_unit_test(test_header_without_body),
        cmocka_unit_test(test_nul_bytes_and_8bit),
        cmocka_unit_test(test_huge_header_line),
        cmocka_unit_test(test_nesting_200_levels),
        cmocka_unit_test(test_part_and_header_caps),
        cmocka_unit_test(test_many_boundaries_is_linear),
        cmocka_unit_test(test_boundary_whitespace_and_prefix),
        cmocka_unit_test(test_header_block_without_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
