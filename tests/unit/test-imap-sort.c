/* Unit tests for imap-sort.h: base subject extraction by the rules of RFC
 * 5256 2.1, sort-criteria parsing (RFC 5256 3, RFC 5957), key comparison
 * with REVERSE and the sequence-number tie-break (2.3), the first address
 * of a header (addr-mailbox and the RFC 5957 display form). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/error.h"
#include "core/xalloc.h"
#include "protocols/imap/imap-parser.h"
#include "protocols/imap/imap-sort.h"

#include <stdlib.h>
#include <string.h>

static char *base(const char *subject, bool *reply)
{
    struct buf b = {0};
    bool r = imap_base_subject(subject, strlen(subject), &b);
    if (reply != NULL)
        *reply = r;
    char *s = xstrdup(buf_cstr(&b));
    buf_free(&b);
    return s;
}

static void expect_base(const char *subject, const char *want, bool want_reply)
{
    bool reply = false;
    char *got = base(subject, &reply);
    if (strcmp(got, want) != 0 || reply != want_reply)
        fail_msg("base(\"%s\") = \"%s\" reply=%d, want \"%s\" reply=%d", subject, got, reply, want,
                 want_reply);
    free(got);
}

static void test_base_subject_rfc5256_rules(void **state)
{
    (void)state;
    /* (1) white space: tabs and runs become one space. */
    expect_base("hello\t  world", "hello world", false);
    expect_base("", "", false);
    /* (2) subj-trailer: "(fwd)" and white space at the end, repeatedly. */
    expect_base("Subject (fwd)", "Subject", true);
    expect_base("Subject (FWD) (fwd)  ", "Subject", true);
    expect_base("Subject(fwd)", "Subject", true);
    /* (3) subj-leader: *subj-blob subj-refwd, and leading WSP. */
    expect_base("Re: Subject", "Subject", true);
    expect_base("RE: re: Fwd: fw: FW:Subject", "Subject", true);
    expect_base("Re [2]: Subject", "Subject", true);
    expect_base("[list] Re: Subject", "Subject", true);
    expect_base("[a][b] fwd: Subject", "Subject", true);
    expect_base("   Subject", "Subject", false);
    /* Not a leader: "re" not followed by ":". */
    expect_base("Review: Subject", "Review: Subject", false);
    expect_base("Re Subject", "Re Subject", false);
    /* (4) a blob goes when something is left after it... */
    expect_base("[list] Subject", "Subject", false);
    expect_base("[a] [b] Subject", "Subject", false);
    /* ...but not when it is all there is. */
    expect_base("[list]", "[list]", false);
    expect_base("[a] [b]", "[b]", false);
    /* (5) leaders and blobs in turn. */
    expect_base("[list] [x] Re: [y] Subject", "Subject", true);
    /* (6) "[fwd: ...]" unwrapped, then from (2) again. */
    expect_base("[fwd: Subject]", "Subject", true);
    expect_base("[Fwd: Re: Subject (fwd)]", "Subject", true);
    expect_base("Re: [fwd: Subject] (fwd)", "Subject", true);
    expect_base("[fwd: [list] Subject]", "Subject", true);
    /* "[fwd:" without its "]" at the end is an ordinary blob-less text. */
    expect_base("[fwd: Subject", "[fwd: Subject", false);
    /* Non-ASCII text (already decoded) passes through. */
    expect_base("Re: Gr\xc3\xbc\xc3\x9f"
                "e",
                "Gr\xc3\xbc\xc3\x9f"
                "e",
                true);
}

static void test_casemap(void **state)
{
    (void)state;
    char s[] = "aBc\xc3\xa9z";
    imap_casemap(s, strlen(s));
    assert_string_equal(s, "ABC\xc3\xa9Z");
}

/* Builds an argument list from atoms. */
static struct imap_arg atom(const char *s)
{
    return (struct imap_arg){.type = IMAP_ARG_ATOM, .str = s, .len = strlen(s)};
}

static bool parse_keys(const char *const *words, size_t n, struct imap_sort_program *prog)
{
    struct imap_arg items[20];
    for (size_t i = 0; i < n; i++)
        items[i] = atom(words[i]);
    struct imap_arg list = {.type = IMAP_ARG_LIST, .list = items, .count = n};
    struct petrel_error err;
    return imap_sort_parse(&list, prog, &err);
}

static void test_parse_criteria(void **state)
{
    (void)state;
    struct imap_sort_program p;
    const char *ok1[] = {"REVERSE", "date", "Subject", "DISPLAYFROM", "displayto",
                         "ARRIVAL", "CC",   "FROM",    "SIZE",        "TO"};
    assert_true(parse_keys(ok1, 10, &p));
    assert_int_equal(p.count, 9);
    assert_int_equal(p.keys[0].key, IMAP_SORT_DATE);
    assert_true(p.keys[0].reverse);
    assert_false(p.keys[1].reverse);
    assert_int_equal(p.keys[2].key, IMAP_SORT_DISPLAYFROM);
    assert_int_equal(p.keys[3].key, IMAP_SORT_DISPLAYTO);
    assert_true(imap_sort_needs_header(&p));
    const char *only_cheap[] = {"ARRIVAL", "REVERSE", "SIZE"};
    assert_true(parse_keys(only_cheap, 3, &p));
    assert_false(imap_sort_needs_header(&p));
    const char *bad1[] = {"REVERSE"};
    assert_false(parse_keys(bad1, 1, &p));
    const char *bad2[] = {"DATE", "MOOSE"};
    assert_false(parse_keys(bad2, 2, &p));
    const char *bad3[] = {"REVERSE", "REVERSE", "DATE"};
    assert_false(parse_keys(bad3, 3, &p));
    assert_false(parse_keys(NULL, 0, &p)); /* "()" */
    const char *many[17];
    for (size_t i = 0; i < 17; i++)
        many[i] = "DATE";
    assert_false(parse_keys(many, 17, &p));
    struct imap_arg not_list = atom("DATE");
    struct petrel_error err;
    assert_false(imap_sort_parse(&not_list, &p, &err));
}

static struct imap_sort_facts fact(uint32_t seq, int64_t date, uint64_t size, const char *subject,
                                   const char *from)
{
    struct imap_sort_facts f = {0};
    f.seq = f.number = seq;
    f.arrival = f.date = date;
    f.size = size;
    f.subject = (char *)subject;
    f.from = f.to = f.cc = f.display_from = f.display_to = (char *)from;
    return f;
}

static void test_sort_order_reverse_and_ties(void **state)
{
    (void)state;
    struct imap_sort_facts v[5] = {
        fact(1, 30, 100, "B", "X"), fact(2, 10, 100, "A", "Y"), fact(3, 30, 50, "B", "X"),
        fact(4, 20, 100, "A", "X"), fact(5, 30, 100, "B", "X"),
    };
    struct imap_sort_program p;
    const char *k1[] = {"REVERSE", "DATE"};
    assert_true(parse_keys(k1, 2, &p));
    imap_sort_facts(&p, v, 5);
    /* 1, 3, 5 share the date: sequence order, REVERSE or not. */
    uint32_t want1[] = {1, 3, 5, 4, 2};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(v[i].seq, want1[i]);
    const char *k2[] = {"SUBJECT", "REVERSE", "SIZE", "FROM"};
    assert_true(parse_keys(k2, 4, &p));
    imap_sort_facts(&p, v, 5);
    uint32_t want2[] = {4, 2, 1, 5, 3};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(v[i].seq, want2[i]);
}

static void first(const char *value, const char *want_mailbox, const char *want_display)
{
    struct buf m = {0}, d = {0};
    imap_sort_first_address(value, strlen(value), &m, &d);
    assert_string_equal(buf_cstr(&m), want_mailbox);
    assert_string_equal(buf_cstr(&d), want_display);
    buf_free(&m);
    buf_free(&d);
}

static void test_first_address(void **state)
{
    (void)state;
    first("\"Charlie Brown\" <charlie@a.org>, bob@b.org", "charlie", "Charlie Brown");
    first("alice@a.org", "alice", "alice@a.org");
    first("<user (comment)@ (comment) domain.org>", "user", "user@domain.org");
    first("=?utf-8?q?Andr=C3=A9?= <zed@a.org>", "zed", "Andr\xc3\xa9");
    first("\"\" <empty@a.org>", "empty", "empty@a.org");
    /* A group's first member; an empty group gives nothing. */
    first("Team: one@g.org, two@g.org;", "one", "one@g.org");
    first("Team: ;", "", "");
    first("", "", "");
    first("undisclosed-recipients:;", "", "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base_subject_rfc5256_rules),
        cmocka_unit_test(test_casemap),
        cmocka_unit_test(test_parse_criteria),
        cmocka_unit_test(test_sort_order_reverse_and_ties),
        cmocka_unit_test(test_first_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
