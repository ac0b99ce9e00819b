/* Unit tests for the IMAP views of a parsed message: ENVELOPE
 * (protocols/imap/imap-envelope.h), BODY / BODYSTRUCTURE
 * (imap-bodystructure.h), BODY[section]<partial>, BINARY and the sizes
 * (imap-section.h), and Date: parsing (storage/message/message-date.h).
 * Expected strings marked "Dovecot" are what Dovecot 2.3.19 answered for
 * the same message (FETCH through /usr/lib/dovecot/imap); where Dovecot chose
 * a literal for a plain string we send a quoted string, which IMAP treats as
 * the same value. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "protocols/imap/imap-bodystructure.h"
#include "protocols/imap/imap-envelope.h"
#include "protocols/imap/imap-section.h"
#include "storage/message/message-date.h"
#include "storage/message/message-parser.h"

#include <stdlib.h>
#include <string.h>

static const char dovecot_message[] =
    "From: \"Joe Q. Public\" <john.q.public@example.com>\r\n"
    "To: Mary Smith <mary@x.test>, jdoe@example.org, Who? <one@y.test>\r\n"
    "Cc: <boss@nil.test>, \"Giant; \\\"Big\\\" Box\" <sysservices@example.net>\r\n"
    "Bcc: A Group:Ed Jones <c@a.test>,joe@where.test,John <jdoe@one.test>;, Undisclosed "
    "recipients:;\r\n"
    "Reply-To: <@route1,@route2:user@host>\r\n"
    "Subject: =?utf-8?q?caf=C3=A9?= Test\r\n folded\r\n"
    "Date: Fri, 21 Nov 1997 09:55:06 -0600\r\n"
    "Message-ID: <1234@local.machine.example>\r\n"
    "In-Reply-To: <x@y>\r\n"
    "MIME-Version: 1.0\r\n"
    "Content-Type: multipart/Mixed; boundary=\"XX\"\r\n"
    "\r\n"
    "preamble\r\n"
    "--XX\r\n"
    "Content-Type: TEXT/html\r\n"
    "\r\n"
    "<b>hi</b>\r\n"
    "--XX\r\n"
    "Content-Type: message/rfc822\r\n"
    "\r\n"
    "From: x@y\r\n"
    "Subject: inner\r\n"
    "\r\n"
    "inner body\r\n"
    "line2\r\n"
    "--XX\r\n"
    "Content-Type: application/octet-stream; name=foo.bin\r\n"
    "Content-Transfer-Encoding: base64\r\n"
    "Content-Disposition: attachment; filename=\"foo.bin\"\r\n"
    "Content-Language: en, de\r\n"
    "Content-ID: <cid@x>\r\n"
    "Content-Description: a file\r\n"
    "Content-MD5: Q2hlY2sgSW50ZWdyaXR5IQ==\r\n"
    "Content-Location: http://x/y\r\n"
    "\r\n"
    "aGVsbG8=\r\n"
    "--XX--\r\n"
    "epilogue\r\n";

/* Dovecot: BODYSTRUCTURE of dovecot_message. */
static const char dovecot_bodystructure[] =
    "((\"TEXT\" \"html\" (\"charset\" \"us-ascii\") NIL NIL \"7bit\" 9 0 NIL NIL NIL NIL)"
    "(\"message\" \"rfc822\" NIL NIL NIL \"7bit\" 46 (NIL \"inner\" ((NIL NIL \"x\" \"y\")) "
    "((NIL NIL \"x\" \"y\")) ((NIL NIL \"x\" \"y\")) NIL NIL NIL NIL NIL) (\"text\" \"plain\" "
    "(\"charset\" \"us-ascii\") NIL NIL \"7bit\" 17 1 NIL NIL NIL NIL) 4 NIL NIL NIL NIL)"
    "(\"application\" \"octet-stream\" (\"name\" \"foo.bin\") \"<cid@x>\" \"a file\" "
    "\"base64\" 8 \"Q2hlY2sgSW50ZWdyaXR5IQ==\" (\"attachment\" (\"filename\" \"foo.bin\")) "
    "(\"en\" \"de\") \"http://x/y\") \"Mixed\" (\"boundary\" \"XX\") NIL NIL NIL)";

/* Dovecot: BODY of dovecot_message. */
static const char dovecot_body[] =
    "((\"TEXT\" \"html\" (\"charset\" \"us-ascii\") NIL NIL \"7bit\" 9 0)(\"message\" "
    "\"rfc822\" NIL NIL NIL \"7bit\" 46 (NIL \"inner\" ((NIL NIL \"x\" \"y\")) ((NIL NIL \"x\" "
    "\"y\")) ((NIL NIL \"x\" \"y\")) NIL NIL NIL NIL NIL) (\"text\" \"plain\" (\"charset\" "
    "\"us-ascii\") NIL NIL \"7bit\" 17 1) 4)(\"application\" \"octet-stream\" (\"name\" "
    "\"foo.bin\") \"<cid@x>\" \"a file\" \"base64\" 8) \"Mixed\")";

/* Dovecot's ENVELOPE, with its two literals written as quoted strings. */
static const char dovecot_envelope[] =
    "(\"Fri, 21 Nov 1997 09:55:06 -0600\" \"=?utf-8?q?caf=C3=A9?= Test folded\" "
    "((\"Joe Q. Public\" NIL \"john.q.public\" \"example.com\")) "
    "((\"Joe Q. Public\" NIL \"john.q.public\" \"example.com\")) "
    "((NIL \"@route1,@route2\" \"user\" \"host\")) "
    "((\"Mary Smith\" NIL \"mary\" \"x.test\")(NIL NIL \"jdoe\" \"example.org\")"
    "(\"Who?\" NIL \"one\" \"y.test\")) "
    "((NIL NIL \"boss\" \"nil.test\")(\"Giant; \\\"Big\\\" Box\" NIL \"sysservices\" "
    "\"example.net\")) "
    "((NIL NIL \"A Group\" NIL)(\"Ed Jones\" NIL \"c\" \"a.test\")(NIL NIL \"joe\" "
    "\"where.test\")(\"John\" NIL \"jdoe\" \"one.test\")(NIL NIL NIL NIL)"
    "(NIL NIL \"Undisclosed recipients\" NIL)(NIL NIL NIL NIL)) "
    "\"<x@y>\" \"<1234@local.machine.example>\")";

struct parsed {
    char *copy;
    size_t len;
    struct message msg;
};

static void parse_n(struct parsed *p, const char *text, size_t len)
{
    p->copy = malloc(len > 0 ? len : 1);
    assert_non_null(p->copy);
    memcpy(p->copy, text, len);
    p->len = len;
    message_parse(p->copy, len, NULL, &p->msg);
}

static void parse(struct parsed *p, const char *text)
{
    parse_n(p, text, strlen(text));
}

/* The same text with every CRLF turned into LF (how some stores keep mail). */
static char *lf_only(const char *text)
{
    char *out = malloc(strlen(text) + 1);
    assert_non_null(out);
    size_t n = 0;
    for (const char *s = text; *s != '\0'; s++) {
        if (!(s[0] == '\r' && s[1] == '\n'))
            out[n++] = *s;
    }
    out[n] = '\0';
    return out;
}

static void done(struct parsed *p)
{
    message_free(&p->msg);
    free(p->copy);
}

static void expect_structure(const struct parsed *p, bool extended, const char *expected)
{
    struct buf b = {0};
    imap_bodystructure_append(&b, &p->msg, 0, extended);
    if (strcmp(buf_cstr(&b), expected) != 0)
        fail_msg("got\n%s\nwant\n%s", buf_cstr(&b), expected);
    buf_free(&b);
}

static void expect_envelope(const struct parsed *p, const char *expected)
{
    struct buf b = {0};
    imap_envelope_append(&b, p->copy, &p->msg.parts[0].header);
    if (strcmp(buf_cstr(&b), expected) != 0)
        fail_msg("got\n%s\nwant\n%s", buf_cstr(&b), expected);
    buf_free(&b);
}

static void test_dovecot_bodystructure(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, dovecot_message);
    expect_structure(&p, true, dovecot_bodystructure);
    expect_structure(&p, false, dovecot_body);
    expect_envelope(&p, dovecot_envelope);
    assert_int_equal(imap_section_rfc822_size(&p.msg), 1000); /* Dovecot */
    done(&p);
    /* Stored with LF only: IMAP sees the same CRLF message. */
    char *lf = lf_only(dovecot_message);
    parse(&p, lf);
    expect_structure(&p, true, dovecot_bodystructure);
    assert_int_equal(imap_section_rfc822_size(&p.msg), 1000);
    done(&p);
    free(lf);
}

static void test_dovecot_digest_and_defaults(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\nA\r\n--b\r\n"
              "Content-Type: multipart/digest; boundary=c\r\n\r\n--c\r\n\r\nSubject: d\r\n\r\n"
              "D\r\n--c--\r\n--b\r\n");
    /* Dovecot */
    expect_structure(
        &p, true,
        "((\"text\" \"plain\" (\"charset\" \"us-ascii\") NIL NIL \"7bit\" 1 0 NIL NIL NIL NIL)"
        "((\"message\" \"rfc822\" NIL NIL NIL \"7bit\" 15 (NIL \"d\" NIL NIL NIL NIL NIL NIL NIL "
        "NIL) (\"text\" \"plain\" (\"charset\" \"us-ascii\") NIL NIL \"7bit\" 1 0 NIL NIL NIL "
        "NIL) 2 NIL NIL NIL NIL) \"digest\" (\"boundary\" \"c\") NIL NIL NIL)(\"text\" \"plain\" "
        "(\"charset\" \"us-ascii\") NIL NIL \"7bit\" 0 0 NIL NIL NIL NIL) \"mixed\" "
        "(\"boundary\" \"b\") NIL NIL NIL)");
    assert_int_equal(imap_section_rfc822_size(&p.msg), 142); /* Dovecot */
    done(&p);
    /* Dovecot: an empty last part right before an outer boundary (the line
     * end there belongs to the boundary; found by fuzz-mime). */
    parse(&p, "Content-Type: multipart/mixed; boundary=a\r\n\r\n--a\r\n"
              "Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\n--a\r\n\r\n"
              "last\r\n--a--\r\n");
    expect_structure(&p, true,
                     "(((\"text\" \"plain\" (\"charset\" \"us-ascii\") NIL NIL \"7bit\" 0 0 "
                     "NIL NIL NIL NIL) \"mixed\" (\"boundary\" \"b\") NIL NIL NIL)(\"text\" "
                     "\"plain\" (\"charset\" \"us-ascii\") NIL NIL \"7bit\" 4 0 NIL NIL NIL "
                     "NIL) \"mixed\" (\"boundary\" \"a\") NIL NIL NIL)");
    done(&p);
    /* Dovecot: a multipart without a boundary shows one empty text part. */
    parse(&p, "Content-Type: multipart/mixed\r\n\r\nx\r\n");
    expect_structure(&p, true,
                     "((\"text\" \"plain\" (\"charset\" \"us-ascii\") NIL NIL \"7bit\" 0 0 NIL "
                     "NIL NIL NIL) \"mixed\" NIL NIL NIL NIL)");
    done(&p);
    /* Dovecot: the us-ascii default goes after the parameters sent. */
    parse(&p, "Content-Type: text/plain; format=flowed; Name*0=\"a b\"; name*1=c\r\n\r\nbody\n");
    expect_structure(&p, false,
                     "(\"text\" \"plain\" (\"format\" \"flowed\" \"Name\" \"a bc\" \"charset\" "
                     "\"us-ascii\") NIL NIL \"7bit\" 6 1)");
    done(&p);
}

static void test_dovecot_address_edge_cases(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "From: undisclosed-recipients\r\nSender: \r\n"
              "To: \"john smith\"@example.com, pete@silly.test (Pete Comment), Pete(A \\) chap) "
              "<pete(his account)@silly.test(his host)>, <>, @, a@, \"\" <x@y>\r\n"
              "Cc: Mary  Smith   Jr <m@x>, =?utf-8?b?w6k=?= <e@x>, caf\xc3\xa9 <c@x>\r\n"
              "Bcc: g: ;\r\nSubject: \r\nMessage-ID: \r\n <abc@def>\r\n\r\nbody\n");
    /* Dovecot */
    expect_envelope(
        &p, "(NIL \"\" ((NIL NIL \"undisclosed-recipients\" \"MISSING_DOMAIN\")) ((NIL NIL "
            "\"undisclosed-recipients\" \"MISSING_DOMAIN\")) ((NIL NIL \"undisclosed-recipients\" "
            "\"MISSING_DOMAIN\")) ((NIL NIL \"john smith\" \"example.com\")(\"Pete Comment\" NIL "
            "\"pete\" \"silly.test\")(\"Pete\" NIL \"pete\" \"silly.test\")(NIL NIL "
            "\"MISSING_MAILBOX\" \"MISSING_DOMAIN\")(NIL NIL \"MISSING_MAILBOX\" "
            "\"MISSING_DOMAIN\")(NIL NIL \"a\" \"MISSING_DOMAIN\")(NIL NIL \"x\" \"y\")) "
            "((\"Mary Smith Jr\" NIL \"m\" \"x\")(\"=?utf-8?b?w6k=?=\" NIL \"e\" \"x\")({5}\r\n"
            "caf\xc3\xa9 NIL \"c\" \"x\")) ((NIL NIL \"g\" NIL)(NIL NIL NIL NIL)) NIL "
            "\" <abc@def>\")");
    done(&p);
    parse(&p, "Subject: no addresses\n\n");
    expect_envelope(&p, "(NIL \"no addresses\" NIL NIL NIL NIL NIL NIL NIL NIL)");
    done(&p);
}

static void test_nstring_forms(void **state)
{
    (void)state;
    struct buf b = {0};
    imap_envelope_append_nstring(&b, NULL, 0);
    buf_append_char(&b, ' ');
    imap_envelope_append_nstring(&b, "a\"b\\c", 5);
    buf_append_char(&b, ' ');
    imap_envelope_append_nstring(&b, "x\ny", 3);
    buf_append_char(&b, ' ');
    imap_envelope_append_nstring(&b, "n\0l", 3);
    assert_string_equal(buf_cstr(&b), "NIL \"a\\\"b\\\\c\" {3}\r\nx\ny \"n l\"");
    buf_free(&b);
}

/* ---- sections ---- */

static char *fetch(const struct parsed *p, const char *spec, bool partial, uint64_t start,
                   uint64_t count)
{
    struct imap_section sec;
    struct petrel_error err = {0};
    if (!imap_section_parse(spec, strlen(spec), &sec, &err))
        fail_msg("section '%s': %s", spec, err.message);
    struct buf b = {0};
    if (!imap_section_fetch(&p->msg, &sec, partial, start, count, &b, &err)) {
        buf_free(&b);
        return NULL;
    }
    return buf_steal(&b);
}

static void expect_section(const struct parsed *p, const char *spec, bool partial, uint64_t start,
                           uint64_t count, const char *expected)
{
    char *got = fetch(p, spec, partial, start, count);
    if (got == NULL)
        fail_msg("section '%s' not found", spec);
    if (strcmp(got, expected) != 0)
        fail_msg("section '%s': got '%s' want '%s'", spec, got, expected);
    free(got);
}

static void test_dovecot_sections(void **state)
{
    (void)state;
    char *lf = lf_only(dovecot_message);
    struct parsed p;
    parse(&p, lf);
    /* All Dovecot's answers for the LF-stored message. */
    expect_section(&p, "1", false, 0, 0, "<b>hi</b>");
    expect_section(&p, "2.HEADER", false, 0, 0, "From: x@y\r\nSubject: inner\r\n\r\n");
    expect_section(&p, "2.TEXT", true, 2, 5, "ner b");
    expect_section(&p, "HEADER.FIELDS (FROM SUBJECT)", false, 0, 0,
                   "From: \"Joe Q. Public\" <john.q.public@example.com>\r\n"
                   "Subject: =?utf-8?q?caf=C3=A9?= Test\r\n folded\r\n\r\n");
    expect_section(&p, "2.1", false, 0, 0, "inner body\r\nline2");
    expect_section(&p, "TEXT", true, 0, 20, "preamble\r\n--XX\r\nCont");
    char *mime = fetch(&p, "3.MIME", false, 0, 0);
    assert_non_null(mime);
    assert_int_equal(strlen(mime), 289);
    assert_true(strncmp(mime, "Content-Type: application/octet-stream; name=foo.bin\r\n", 54) == 0);
    free(mime);
    struct buf b = {0};
    struct petrel_error err = {0};
    unsigned three[] = {3};
    assert_true(imap_section_binary(&p.msg, three, 1, false, 0, 0, &b, &err));
    assert_string_equal(buf_cstr(&b), "hello");
    uint64_t size = 0;
    assert_true(imap_section_binary_size(&p.msg, three, 1, &size, &err));
    assert_int_equal(size, 5);
    buf_free(&b);
    done(&p);
    free(lf);
}

static void test_sections_more(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "Subject: s\nX-A: 1\nx-a: 2\n\tmore\nTo: t\n\nline1\nline2\n");
    expect_section(&p, "", false, 0, 0,
                   "Subject: s\r\nX-A: 1\r\nx-a: 2\r\n\tmore\r\nTo: t\r\n\r\nline1\r\nline2\r\n");
    expect_section(&p, "HEADER.FIELDS.NOT (X-A \"subject\")", false, 0, 0, "To: t\r\n\r\n");
    expect_section(&p, "header.fields (x-a)", false, 0, 0, "X-A: 1\r\nx-a: 2\r\n\tmore\r\n\r\n");
    expect_section(&p, "1", false, 0, 0, "line1\r\nline2\r\n");
    expect_section(&p, "1.MIME", false, 0, 0,
                   "Subject: s\r\nX-A: 1\r\nx-a: 2\r\n\tmore\r\nTo: t\r\n\r\n");
    expect_section(&p, "TEXT", true, 4, 100, "1\r\nline2\r\n");
    expect_section(&p, "TEXT", true, 100, 5, "");
    expect_section(&p, "TEXT", true, 6, 0, "");
    assert_null(fetch(&p, "2", false, 0, 0));
    assert_null(fetch(&p, "1.1", false, 0, 0));
    done(&p);

    struct imap_section sec;
    struct petrel_error err = {0};
    static const char *const bad[] = {"MIME",
                                      "1.",
                                      ".1",
                                      "0",
                                      "HEADER.FIELDS",
                                      "HEADER.FIELDS ()",
                                      "1.FOO",
                                      "HEADERX",
                                      "TEXT.1",
                                      "HEADER.FIELDS (a"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (imap_section_parse(bad[i], strlen(bad[i]), &sec, &err))
            fail_msg("section '%s' accepted", bad[i]);
    }
}

static void test_binary_decoding(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "Content-Type: multipart/mixed; boundary=b\n\n"
              "--b\nContent-Transfer-Encoding: base64\n\naGVs\n!!bG8g\nd29y*bGQ=garbage\n"
              "--b\nContent-Transfer-Encoding: Quoted-Printable\n\n"
              "caf=C3=A9 =\nsoft  \nhard=3d=zz=4\n"
              "--b\nContent-Transfer-Encoding: x-uuencode\n\nbegin\n"
              "--b\n\nplain\nlf\n"
              "--b--\n");
    struct buf b = {0};
    struct petrel_error err = {0};
    unsigned n[1];
    n[0] = 1;
    assert_true(imap_section_binary(&p.msg, n, 1, false, 0, 0, &b, &err));
    assert_string_equal(buf_cstr(&b), "hello world");
    buf_reset(&b);
    assert_true(imap_section_binary(&p.msg, n, 1, true, 6, 3, &b, &err));
    assert_string_equal(buf_cstr(&b), "wor");
    n[0] = 2;
    buf_reset(&b);
    assert_true(imap_section_binary(&p.msg, n, 1, false, 0, 0, &b, &err));
    assert_string_equal(buf_cstr(&b), "caf\xc3\xa9 soft\r\nhard==zz=4");
    uint64_t size = 0;
    assert_true(imap_section_binary_size(&p.msg, n, 1, &size, &err));
    assert_int_equal(size, b.len);
    n[0] = 3;
    assert_false(imap_section_binary(&p.msg, n, 1, false, 0, 0, &b, &err));
    assert_int_equal(err.code, PETREL_ERR_UNSUPPORTED);
    assert_false(imap_section_binary_size(&p.msg, n, 1, &size, &err));
    assert_int_equal(err.code, PETREL_ERR_UNSUPPORTED);
    n[0] = 4;
    buf_reset(&b);
    assert_true(imap_section_binary(&p.msg, n, 1, false, 0, 0, &b, &err));
    assert_string_equal(buf_cstr(&b), "plain\r\nlf");
    assert_true(imap_section_binary_size(&p.msg, n, 1, &size, &err));
    assert_int_equal(size, 9);
    n[0] = 9;
    assert_false(imap_section_binary(&p.msg, n, 1, false, 0, 0, &b, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    buf_free(&b);
    done(&p);
}

/* ---- dates ---- */

static void expect_date(const char *text, int64_t epoch, int zone)
{
    int64_t got = 0;
    int got_zone = 99999;
    if (!message_date_parse(text, strlen(text), &got, &got_zone))
        fail_msg("date '%s' rejected", text);
    if (got != epoch || got_zone != zone)
        fail_msg("date '%s': %lld %d, want %lld %d", text, (long long)got, got_zone,
                 (long long)epoch, zone);
}

static void test_dates(void **state)
{
    (void)state;
    /* 1997-11-21 15:55:06 UTC = 880127706 */
    expect_date("Fri, 21 Nov 1997 09:55:06 -0600", 880127706, -360);
    expect_date("21 Nov 1997 09:55:06 -0600", 880127706, -360);
    expect_date("Fri, 21 Nov 97 09:55:06 CST", 880127706, -360);
    expect_date("  Fri , 21 (c) Nov 1997 15:55:06 GMT (comment)", 880127706, 0);
    expect_date("21 nov 1997 15:55:06 UT", 880127706, 0);
    expect_date("21 November 1997 16:55:06 +0100", 880127706, 60);
    expect_date("21 Nov 1997 15:55 Z", 880127706 - 6, 0);
    expect_date("21 Nov 1997 15:55:06", 880127706, 0);
    expect_date("21-Nov-1997 10:55:06 EST", 880127706, -300);
    expect_date("Thu, 1 Jan 1970 00:00:00 +0000", 0, 0);
    expect_date("1 Jan 70 00:00:00 +0000", 0, 0);
    expect_date("1 Jan 2049 00:00:00 +0000", 2493072000, 0);
    expect_date("1 Jan 49 00:00:00 +0000", 2493072000, 0);
    expect_date("1 Jan 149 00:00:00 +0000", 2493072000, 0);
    expect_date("29 Feb 2000 00:00:00 -0430", 951782400 + 16200, -270);
    static const char *const bad[] = {"",
                                      "Fri",
                                      "32 Nov 1997 09:55:06 +0000",
                                      "29 Feb 1900 00:00:00 +0000",
                                      "21 Foo 1997 09:55:06 +0000",
                                      "21 Nov 1997 24:00:00 +0000",
                                      "21 Nov 1997 09:60 +0000",
                                      "21 Nov 1997 09:55:06 +01",
                                      "21 Nov 1997 09:55:06 +0160",
                                      "21 Nov 1997 09:55:06 +9959",
                                      "21 Nov 1 09:55:06",
                                      "21 Nov 1997"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t e;
        int z;
        if (message_date_parse(bad[i], strlen(bad[i]), &e, &z))
            fail_msg("date '%s' accepted", bad[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dovecot_bodystructure),
        cmocka_unit_test(test_dovecot_digest_and_defaults),
        cmocka_unit_test(test_dovecot_address_edge_cases),
        cmocka_unit_test(test_nstring_forms),
        cmocka_unit_test(test_dovecot_sections),
        cmocka_unit_test(test_sections_more),
        cmocka_unit_test(test_binary_decoding),
        cmocka_unit_test(test_dates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
