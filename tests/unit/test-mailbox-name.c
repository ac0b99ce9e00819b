/* Unit tests for storage/mailbox-name.h: modified UTF-7 (RFC 3501 5.1.3) both
 * ways, strict decoding, and the folder name rules. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/mailbox-name.h"

#include <stdlib.h>
#include <string.h>

static void assert_encodes(const char *utf8, const char *mutf7)
{
    struct buf out = {0};
    if (!mailbox_name_to_mutf7(utf8, &out))
        fail_msg("encoding \"%s\" failed", utf8);
    assert_string_equal(buf_cstr(&out), mutf7);
    buf_reset(&out);
    if (!mailbox_name_from_mutf7(mutf7, &out))
        fail_msg("decoding \"%s\" failed", mutf7);
    assert_string_equal(buf_cstr(&out), utf8);
    buf_free(&out);
}

static void assert_decode_rejected(const char *mutf7)
{
    struct buf out = {0};
    buf_append_str(&out, "keep");
    if (mailbox_name_from_mutf7(mutf7, &out))
        fail_msg("decoded invalid \"%s\" as \"%s\"", mutf7, buf_cstr(&out));
    /* What was in the buffer before stays, nothing is added. */
    assert_string_equal(buf_cstr(&out), "keep");
    buf_free(&out);
}

static void test_rfc3501_examples(void **state)
{
    (void)state;
    /* RFC 3501 5.1.3: "~peter/mail/台北/日本語". */
    assert_encodes("~peter/mail/\xe5\x8f\xb0\xe5\x8c\x97/\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
                   "~peter/mail/&U,BTFw-/&ZeVnLIqe-");
    /* Plain ASCII is itself; '&' is "&-". */
    assert_encodes("", "");
    assert_encodes("INBOX", "INBOX");
    assert_encodes("&", "&-");
    assert_encodes("Tom & Jerry", "Tom &- Jerry");
    assert_encodes("&&", "&-&-");
    assert_encodes("a-b&-c", "a-b&--c");
    assert_encodes(" !\"#$%'()*+,-./:;<=>?@[\\]^_`{|}~", " !\"#$%'()*+,-./:;<=>?@[\\]^_`{|}~");
}

static void test_non_ascii(void **state)
{
    (void)state;
    /* Values Dovecot 2.3.19 wrote to disk. */
    assert_encodes("\303\234n\303\257c\303\270d\303\251", "&ANw-n&AO8-c&APg-d&AOk-");
    assert_encodes("Tab\tName", "Tab&AAk-Name");
    /* One, two and three UTF-16 units in a shift (all padding cases). */
    assert_encodes("\xc3\xa9", "&AOk-");
    assert_encodes("\xc3\xa9\xc3\xa9", "&AOkA6Q-");
    assert_encodes("\xc3\xa9\xc3\xa9\xc3\xa9", "&AOkA6QDp-");
    assert_encodes("\xc3\xa9-", "&AOk--");
    /* Non-BMP: surrogate pairs. */
    assert_encodes("\xf0\x9f\x98\x80", "&2D3eAA-");
    assert_encodes("\xf0\x90\x80\x80", "&2ADcAA-");
    assert_encodes("\xf4\x8f\xbf\xbf", "&2,,f,w-");
    assert_encodes("a\xf0\x9f\x98\x80\xc3\xa9z", "a&2D3eAADp-z");
    /* Controls and DEL are shifted. */
    assert_encodes("\x01\x7f", "&AAEAfw-");
}

static void test_long_names(void **state)
{
    (void)state;
    /* Long runs of non-ASCII stay one shift and decode back. */
    size_t n = 3000;
    char *utf8 = malloc(n * 4 + 1);
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(utf8 + len, "\xf0\x9f\x98\x80", 4);
        len += 4;
    }
    utf8[len] = '\0';
    struct buf out = {0};
    assert_true(mailbox_name_to_mutf7(utf8, &out));
    assert_int_equal(strchr(buf_cstr(&out) + 1, '&'), NULL); /* a single shift */
    struct buf back = {0};
    assert_true(mailbox_name_from_mutf7(buf_cstr(&out), &back));
    assert_string_equal(buf_cstr(&back), utf8);
    buf_free(&out);
    buf_free(&back);
    free(utf8);
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    const char *bad[] = {
        "\xff",
        "\xc3",
        "a\xc3(",
        "\xc0\xaf", /* overlong */
        "\xe0\x80\xaf",
        "\xed\xa0\x80",
        /* surrogate */ "\xf4\x90\x80\x80",
        "\xf8\x88\x80\x80\x80",
        "\x80",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct buf out = {0};
        buf_append_str(&out, "keep");
        if (mailbox_name_to_mutf7(bad[i], &out))
            fail_msg("encoded invalid UTF-8 #%zu", i);
        assert_string_equal(buf_cstr(&out), "keep");
        buf_free(&out);
    }
}

static void test_invalid_mutf7(void **state)
{
    (void)state;
    assert_decode_rejected("&");           /* unterminated */
    assert_decode_rejected("&AOk");        /* unterminated */
    assert_decode_rejected("a&AOk-&AOk-"); /* two shifts in a row */
    assert_decode_rejected("&AGE-");       /* shifted printable ASCII 'a' */
    assert_decode_rejected("&ACY-");       /* shifted '&' */
    assert_decode_rejected("&AAA-");       /* NUL */
    assert_decode_rejected("&AA-");        /* no complete unit */
    assert_decode_rejected("&AOl-");       /* non-zero padding bits */
    assert_decode_rejected("&AOkA-");      /* leftover 6+ bits */
    assert_decode_rejected("&2D0-");       /* lone high surrogate */
    assert_decode_rejected("&3gA-");       /* lone low surrogate */
    assert_decode_rejected("&2D3YPQ-");    /* high followed by high */
    assert_decode_rejected("&AO=-");       /* '=' is not modified BASE64 */
    assert_decode_rejected("&AO/-");       /* '/' is not modified BASE64 */
    assert_decode_rejected("caf\xc3\xa9"); /* raw 8-bit */
    assert_decode_rejected("tab\there");   /* raw control */
    assert_decode_rejected("del\x7f");
    assert_decode_rejected("&-&");
}

static void assert_valid(const char *name, char sep)
{
    struct petrel_error err = {0};
    if (!mailbox_name_validate(name, sep, &err))
        fail_msg("\"%s\" rejected: %s", name, err.message);
}

static void assert_invalid(const char *name, char sep, const char *message)
{
    struct petrel_error err = {0};
    if (mailbox_name_validate(name, sep, &err))
        fail_msg("\"%s\" accepted", name);
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    if (strstr(err.message, message) == NULL)
        fail_msg("\"%s\": message \"%s\" lacks \"%s\"", name, err.message, message);
}

static void test_validate(void **state)
{
    (void)state;
    assert_valid("INBOX", '/');
    assert_valid("Archive/2024/Q1", '/');
    assert_valid("Archive.2024", '.');
    assert_valid("\xe5\x8f\xb0\xe5\x8c\x97/\xf0\x9f\x98\x80", '/');
    assert_valid("sp ace/&amp", '/');
    assert_valid("~peter", '/');
    assert_invalid("", '/', "empty");
    assert_invalid("/a", '/', "empty level");
    assert_invalid("a/", '/', "empty level");
    assert_invalid("a//b", '/', "empty level");
    assert_invalid("a/./b", '/', "'.'");
    assert_invalid("a/../b", '/', "'.'");
    assert_invalid("a.b", '/', "'.' inside a level");
    assert_invalid("a/b", '.', "'/' inside a level");
    assert_invalid("a\\b", '/', "'\\' inside a level");
    assert_invalid("tab\tx", '/', "control");
    assert_invalid("del\x7f", '/', "control");
    assert_invalid("c1\xc2\x85", '/', "control");
    assert_invalid("bad\xff", '/', "UTF-8");
    assert_invalid("\xed\xa0\x80", '/', "UTF-8");
    /* Limits: 16 levels, 1024 bytes. */
    char name[2048];
    strcpy(name, "a");
    for (int i = 1; i < MAILBOX_NAME_MAX_LEVELS; i++)
        strcat(name, "/a");
    assert_valid(name, '/');
    strcat(name, "/a");
    assert_invalid(name, '/', "deeper than 16 levels");
    memset(name, 'x', MAILBOX_NAME_MAX);
    name[MAILBOX_NAME_MAX] = '\0';
    assert_valid(name, '/');
    name[MAILBOX_NAME_MAX] = 'x';
    name[MAILBOX_NAME_MAX + 1] = '\0';
    assert_invalid(name, '/', "longer than 1024 bytes");
}

static void test_is_inbox(void **state)
{
    (void)state;
    assert_true(mailbox_name_is_inbox("INBOX"));
    assert_true(mailbox_name_is_inbox("inbox"));
    assert_true(mailbox_name_is_inbox("InBoX"));
    assert_false(mailbox_name_is_inbox("INBOX/sub"));
    assert_false(mailbox_name_is_inbox("INBOX "));
    assert_false(mailbox_name_is_inbox(""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc3501_examples), cmocka_unit_test(test_non_ascii),
        cmocka_unit_test(test_long_names),       cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_invalid_mutf7),    cmocka_unit_test(test_validate),
        cmocka_unit_test(test_is_inbox),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
