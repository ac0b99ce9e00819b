/* Unit tests for the IMAP grammar modules on top of the command parser:
 * sequence sets (imap-seqset.h), FETCH items (imap-fetch-items.h), SEARCH
 * programs (imap-search.h, including RFC 3501's and RFC 4731's examples),
 * dates (imap-date.h) and response quoting (imap-quote.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/error.h"
#include "protocols/imap/imap-date.h"
#include "protocols/imap/imap-fetch-items.h"
#include "protocols/imap/imap-parser.h"
#include "protocols/imap/imap-qresync.h"
#include "protocols/imap/imap-quote.h"
#include "protocols/imap/imap-search.h"
#include "protocols/imap/imap-seqset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses one complete command line; the parser keeps it alive. */
static const struct imap_command *command(struct imap_parser *p, const char *line)
{
    size_t used = 0;
    enum imap_parse_result r = imap_parser_parse_all(p, line, strlen(line), &used);
    if (r != IMAP_PARSE_COMMAND)
        fail_msg("not a command (%d): %s", (int)r, line);
    return imap_parser_command(p);
}

static char *seqset_text(const char *in, uint32_t max)
{
    struct imap_seqset set = {0};
    struct petrel_error err;
    if (!imap_seqset_parse(in, strlen(in), max, 0, &set, &err)) {
        assert_int_equal(set.count, 0);
        imap_seqset_free(&set);
        return NULL;
    }
    struct buf out = {0};
    imap_seqset_format(&set, &out);
    imap_seqset_free(&set);
    return buf_steal(&out);
}

static void expect_seqset(const char *in, uint32_t max, const char *want)
{
    char *got = seqset_text(in, max);
    if (got == NULL)
        fail_msg("'%s' rejected", in);
    if (strcmp(got, want) != 0)
        fail_msg("'%s' (max %u): got '%s', want '%s'", in, (unsigned)max, got, want);
    free(got);
}

static void test_seqset_parse(void **state)
{
    (void)state;
    expect_seqset("1:5,7,9:*", 12, "1:5,7,9:12");
    expect_seqset("1", 0, "1");
    expect_seqset("*", 7, "7");
    expect_seqset("*", 0, "");
    expect_seqset("1:*", 0, "1");
    expect_seqset("5:*", 3, "3:5"); /* RFC 9051 6.4.8 */
    expect_seqset("3:1", 9, "1:3");
    expect_seqset("1,2,3,5,4", 9, "1:5");
    expect_seqset("1:3,2:6,10,8:9", 9, "1:6,8:10");
    expect_seqset("4294967295", 1, "4294967295");
    expect_seqset("4294967294:*", 4294967295u, "4294967294:4294967295");
    expect_seqset("1:4294967295,7", 3, "1:4294967295");
    static const char *const bad[] = {"",     "0",     "1:0", "0:3", "1:",    ":1",
                                      "1,,2", ",1",    "1,",  "a",   "1 2",   "4294967296",
                                      "01",   "1:2:3", "-1",  "$",   "1:*:2", "**"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *got = seqset_text(bad[i], 10);
        if (got != NULL)
            fail_msg("'%s' accepted as '%s'", bad[i], got);
    }
    struct imap_seqset set = {0};
    struct petrel_error err;
    assert_true(imap_seqset_parse("$", 1, 10, IMAP_SEQSET_ALLOW_SEARCHRES, &set, &err));
    assert_true(set.searchres);
    assert_int_equal(set.count, 0);
    assert_false(imap_seqset_parse("$", 1, 10, 0, &set, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    imap_seqset_free(&set);
}

static void test_seqset_use(void **state)
{
    (void)state;
    struct imap_seqset set = {0};
    struct petrel_error err;
    assert_true(imap_seqset_parse("9:*,2,4:5", 9, 11, 0, &set, &err));
    assert_false(imap_seqset_contains(&set, 0));
    assert_false(imap_seqset_contains(&set, 1));
    assert_true(imap_seqset_contains(&set, 2));
    assert_false(imap_seqset_contains(&set, 3));
    assert_true(imap_seqset_contains(&set, 5));
    assert_true(imap_seqset_contains(&set, 11));
    assert_false(imap_seqset_contains(&set, 12));
    assert_int_equal(imap_seqset_count(&set), 6);
    struct imap_seqset_iter it = {0, 0};
    uint32_t v = 0;
    uint32_t seen[8];
    size_t n = 0;
    while (n < 8 && imap_seqset_iter_next(&set, &it, &v))
        seen[n++] = v;
    assert_int_equal(n, 6);
    static const uint32_t want[] = {2, 4, 5, 9, 10, 11};
    assert_memory_equal(seen, want, sizeof(want));
    /* Building a set (COPYUID, APPENDUID, ESEARCH ALL). */
    imap_seqset_clear(&set);
    imap_seqset_add(&set, 304, 304);
    imap_seqset_add(&set, 319, 320);
    imap_seqset_add(&set, 321, 321);
    imap_seqset_add(&set, 1, 0); /* 0 is ignored */
    imap_seqset_add(&set, 100, 50);
    imap_seqset_add(&set, 305, 318);
    imap_seqset_add(&set, 0, 0);
    struct buf out = {0};
    imap_seqset_format(&set, &out);
    assert_string_equal(out.data, "1,50:100,304:321");
    imap_seqset_add(&set, UINT32_MAX, UINT32_MAX);
    imap_seqset_add(&set, UINT32_MAX - 1, UINT32_MAX);
    buf_reset(&out);
    imap_seqset_format(&set, &out);
    assert_string_equal(out.data, "1,50:100,304:321,4294967294:4294967295");
    assert_int_equal(imap_seqset_count(&set), 1 + 51 + 18 + 2);
    buf_free(&out);
    imap_seqset_free(&set);
}

static bool fetch(struct imap_parser *p, const char *line, struct imap_fetch_items *items,
                  struct petrel_error *err)
{
    const struct imap_command *c = command(p, line);
    assert_true(c->arg_count >= 2);
    return imap_fetch_items_parse(&c->args[1], c->arg_count > 2 ? &c->args[2] : NULL, items, err);
}

static char *body_name(const struct imap_fetch_body *b)
{
    struct buf out = {0};
    imap_fetch_body_name(b, &out);
    return buf_steal(&out);
}

static const char *formatted(const struct imap_seqset *set)
{
    static char out[256];
    struct buf b = {0};
    imap_seqset_format(set, &b);
    snprintf(out, sizeof(out), "%s", buf_cstr(&b));
    buf_free(&b);
    return out;
}

/* imap_seqset_add keeps the set sorted and merged whatever the order;
 * numbers added one by one in ascending order extend the last range in
 * place (a mass expunge's VANISHED: 200,000 UIDs must not sort 200,000
 * times). */
static void test_seqset_add(void **state)
{
    (void)state;
    struct imap_seqset set = {0};
    for (uint32_t uid = 1; uid <= 200000; uid++)
        imap_seqset_add(&set, uid, uid);
    assert_int_equal(set.count, 1);
    assert_string_equal(formatted(&set), "1:200000");
    imap_seqset_clear(&set);
    /* runs with gaps (UIDs 1 2, 4 5, 7 8, ...): each second UID touches the
     * last of many ranges, which used to sort the whole set */
    for (uint32_t k = 0; k < 100000; k++) {
        imap_seqset_add(&set, 3 * k + 1, 3 * k + 1);
        imap_seqset_add(&set, 3 * k + 2, 3 * k + 2);
    }
    assert_int_equal(set.count, 100000);
    assert_int_equal(set.ranges[99999].lo, 299998);
    assert_int_equal(set.ranges[99999].hi, 299999);
    imap_seqset_clear(&set);
    for (uint32_t uid = 1; uid <= 200000; uid++)
        imap_seqset_add(&set, uid, uid);
    imap_seqset_add(&set, 200002, 200002); /* a gap: a new range */
    imap_seqset_add(&set, 200001, 200001); /* fills it: one range again */
    assert_string_equal(formatted(&set), "1:200002");
    imap_seqset_clear(&set);
    static const uint32_t order[][2] = {{10, 12}, {20, 20}, {13, 13}, {5, 6}, {21, 25},
                                        {7, 9},  {30, 31}, {24, 29}, {1, 1}};
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
        imap_seqset_add(&set, order[i][0], order[i][1]);
    assert_string_equal(formatted(&set), "1,5:13,20:31");
    imap_seqset_add(&set, 40, UINT32_MAX);
    imap_seqset_add(&set, 50, 60); /* inside the open-ended last range */
    imap_seqset_add(&set, UINT32_MAX, UINT32_MAX);
    assert_string_equal(formatted(&set), "1,5:13,20:31,40:4294967295");
    imap_seqset_add(&set, 14, 39); /* joins everything from 5 */
    assert_string_equal(formatted(&set), "1,5:4294967295");
    imap_seqset_free(&set);
}

static void test_fetch_items(void **state)
{
    (void)state;
    struct imap_parser *p = imap_parser_new(NULL);
    struct imap_fetch_items it;
    struct petrel_error err;

    assert_true(fetch(p, "a FETCH 1 FAST\r\n", &it, &err));
    assert_int_equal(it.attrs, IMAP_FETCH_FLAGS | IMAP_FETCH_INTERNALDATE | IMAP_FETCH_RFC822_SIZE);
    imap_fetch_items_free(&it);
    assert_true(fetch(p, "a FETCH 1 all\r\n", &it, &err));
    assert_int_equal(it.attrs, IMAP_FETCH_FLAGS | IMAP_FETCH_INTERNALDATE | IMAP_FETCH_RFC822_SIZE |
                                   IMAP_FETCH_ENVELOPE);
    imap_fetch_items_free(&it);
    assert_true(fetch(p, "a FETCH 1 FULL\r\n", &it, &err));
    assert_true((it.attrs & IMAP_FETCH_BODY) != 0);
    imap_fetch_items_free(&it);

    assert_true(fetch(p,
                      "a FETCH 1:* (UID FLAGS RFC822.SIZE BODYSTRUCTURE MODSEQ RFC822.HEADER "
                      "BODY.PEEK[HEADER.FIELDS (From \"X-Spam\")]<0.100> BODY[1.2.MIME] "
                      "BINARY.PEEK[1.2]<5.10> BINARY.SIZE[3] BODY[] body[text])\r\n",
                      &it, &err));
    assert_int_equal(it.attrs, IMAP_FETCH_UID | IMAP_FETCH_FLAGS | IMAP_FETCH_RFC822_SIZE |
                                   IMAP_FETCH_BODYSTRUCTURE | IMAP_FETCH_MODSEQ |
                                   IMAP_FETCH_RFC822_HEADER);
    assert_int_equal(it.body_count, 6);
    const struct imap_fetch_body *b = &it.bodies[0];
    assert_int_equal(b->kind, IMAP_FETCH_BODY_SECTION);
    assert_true(b->peek);
    assert_int_equal(b->text, IMAP_SECTION_HEADER_FIELDS);
    assert_int_equal(b->field_count, 2);
    assert_string_equal(b->fields[0], "From");
    assert_string_equal(b->fields[1], "X-Spam");
    assert_true(b->partial);
    assert_int_equal(b->partial_start, 0);
    assert_int_equal(b->partial_count, 100);
    char *name = body_name(b);
    assert_string_equal(name, "BODY[HEADER.FIELDS (From X-Spam)]<0>");
    free(name);
    b = &it.bodies[1];
    assert_int_equal(b->part_count, 2);
    assert_int_equal(b->parts[0], 1);
    assert_int_equal(b->parts[1], 2);
    assert_int_equal(b->text, IMAP_SECTION_MIME);
    assert_false(b->peek);
    name = body_name(b);
    assert_string_equal(name, "BODY[1.2.MIME]");
    free(name);
    b = &it.bodies[2];
    assert_int_equal(b->kind, IMAP_FETCH_BINARY_SECTION);
    name = body_name(b);
    assert_string_equal(name, "BINARY[1.2]<5>");
    free(name);
    b = &it.bodies[3];
    assert_int_equal(b->kind, IMAP_FETCH_BINARY_SIZE);
    name = body_name(b);
    assert_string_equal(name, "BINARY.SIZE[3]");
    free(name);
    name = body_name(&it.bodies[4]);
    assert_string_equal(name, "BODY[]");
    free(name);
    assert_int_equal(it.bodies[5].text, IMAP_SECTION_TEXT);
    assert_true(imap_fetch_items_set_seen(&it));
    imap_fetch_items_free(&it);

    assert_true(fetch(p, "a FETCH 1 (BODY.PEEK[] FLAGS) (CHANGEDSINCE 12345)\r\n", &it, &err));
    assert_true(it.changedsince);
    assert_int_equal(it.changedsince_modseq, 12345);
    assert_true((it.attrs & IMAP_FETCH_MODSEQ) != 0);
    assert_false(imap_fetch_items_set_seen(&it));
    imap_fetch_items_free(&it);

    static const char *const bad[] = {
        "a FETCH 1 FOO\r\n",
        "a FETCH 1 (FLAGS ALL)\r\n",
        "a FETCH 1 ()\r\n",
        "a FETCH 1 (FLAGS (UID))\r\n",
        "a FETCH 1 \"FLAGS\"\r\n",
        "a FETCH 1 BODY.PEEK\r\n",
        "a FETCH 1 BODY[MIME]\r\n",
        "a FETCH 1 BODY[1.0]\r\n",
        "a FETCH 1 BODY[0]\r\n",
        "a FETCH 1 BODY[1.]\r\n",
        "a FETCH 1 BODY[.1]\r\n",
        "a FETCH 1 BODY[1..2]\r\n",
        "a FETCH 1 BODY[HEADERS]\r\n",
        "a FETCH 1 BODY[HEADER.FIELDS]\r\n",
        "a FETCH 1 BODY[HEADER.FIELDS ()]\r\n",
        "a FETCH 1 BODY[HEADER.FIELDS (a:b)]\r\n",
        "a FETCH 1 BODY[TEXT x]\r\n",
        "a FETCH 1 BODY[]<0.0>\r\n",
        "a FETCH 1 BODY[]<0>\r\n",
        "a FETCH 1 BODY[]<a.1>\r\n",
        "a FETCH 1 BODY[]x\r\n",
        "a FETCH 1 BINARY[TEXT]\r\n",
        "a FETCH 1 BINARY[1.HEADER]\r\n",
        "a FETCH 1 BINARY.SIZE[1]<0.10>\r\n",
        "a FETCH 1 BOD[]\r\n",
        "a FETCH 1 BODY[4294967296]\r\n",
        /* 21 digits are over the cap even when the value is small */
        "a FETCH 1 BODY[000000000000000000001]\r\n",
        "a FETCH 1 BODY[]<000000000000000000001.5>\r\n",
        "a FETCH 1 BODY[]<1.000000000000000000005>\r\n",
        "a FETCH 1 FLAGS (CHANGEDSINCE 000000000000000000001)\r\n",
        "a FETCH 1 FLAGS (CHANGEDSINCE)\r\n",
        "a FETCH 1 FLAGS (CHANGEDSINCE 0)\r\n",
        "a FETCH 1 FLAGS (CHANGEDSINCE x)\r\n",
        "a FETCH 1 FLAGS (CHANGEDSINCE 9223372036854775808)\r\n",
        "a FETCH 1 FLAGS (VANISHED)\r\n",
        "a FETCH 1 FLAGS ()\r\n",
        "a FETCH 1 FLAGS CHANGEDSINCE\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err.message[0] = '\0';
        if (fetch(p, bad[i], &it, &err))
            fail_msg("accepted: %s", bad[i]);
        assert_int_equal(err.code, PETREL_ERR_INVALID);
        assert_true(err.message[0] != '\0');
        assert_int_equal(it.body_count, 0);
        assert_null(it.bodies);
    }
    imap_parser_free(p);
}

static bool search(struct imap_parser *p, const char *line, struct imap_search_program *prog,
                   struct petrel_error *err)
{
    const struct imap_command *c = command(p, line);
    return imap_search_parse(c->args, c->arg_count, 50, 500, prog, err);
}

static void test_search_rfc_examples(void **state)
{
    (void)state;
    struct imap_parser *p = imap_parser_new(NULL);
    struct imap_search_program prog;
    struct petrel_error err;

    /* RFC 3501 6.4.4 */
    assert_true(
        search(p, "A282 SEARCH FLAGGED SINCE 1-Feb-1994 NOT FROM \"Smith\"\r\n", &prog, &err));
    assert_int_equal(prog.root.key, IMAP_SEARCH_AND);
    assert_int_equal(prog.root.child_count, 3);
    assert_int_equal(prog.root.children[0].key, IMAP_SEARCH_FLAGGED);
    assert_int_equal(prog.root.children[1].key, IMAP_SEARCH_SINCE);
    assert_int_equal(prog.root.children[1].day, 8797);
    const struct imap_search_node *not = &prog.root.children[2];
    assert_int_equal(not ->key, IMAP_SEARCH_NOT);
    assert_int_equal(not ->child_count, 1);
    assert_int_equal(not ->children[0].key, IMAP_SEARCH_FROM);
    assert_string_equal(not ->children[0].str, "Smith");
    assert_int_equal(imap_search_needs(&prog), IMAP_SEARCH_NEEDS_FLAGS |
                                                   IMAP_SEARCH_NEEDS_INTERNALDATE |
                                                   IMAP_SEARCH_NEEDS_HEADER);
    assert_false(prog.has_return);
    imap_search_program_free(&prog);

    assert_true(search(p, "A283 SEARCH TEXT \"string not in mailbox\"\r\n", &prog, &err));
    assert_int_equal(prog.root.children[0].key, IMAP_SEARCH_TEXT);
    assert_int_equal(imap_search_needs(&prog), IMAP_SEARCH_NEEDS_HEADER | IMAP_SEARCH_NEEDS_BODY);
    imap_search_program_free(&prog);

    assert_true(search(p, "A284 SEARCH CHARSET UTF-8 TEXT {6}\r\nXXXXXX\r\n", &prog, &err));
    assert_true(prog.charset_utf8);
    assert_string_equal(prog.root.children[0].str, "XXXXXX");
    imap_search_program_free(&prog);

    /* RFC 3501 6.4.4: OR, parenthesised groups, sequence sets. */
    assert_true(search(p, "A1 SEARCH OR (DELETED 1:5) NOT (SEEN UID 2,4:*)\r\n", &prog, &err));
    const struct imap_search_node * or = &prog.root.children[0];
    assert_int_equal(or->key, IMAP_SEARCH_OR);
    assert_int_equal(or->child_count, 2);
    assert_int_equal(or->children[0].key, IMAP_SEARCH_AND);
    assert_int_equal(or->children[0].children[1].key, IMAP_SEARCH_SEQSET);
    assert_true(imap_seqset_contains(& or->children[0].children[1].set, 5));
    const struct imap_search_node *uid = & or->children[1].children[0].children[1];
    assert_int_equal(uid->key, IMAP_SEARCH_UID);
    assert_true(imap_seqset_contains(&uid->set, 500));
    assert_false(imap_seqset_contains(&uid->set, 501));
    imap_search_program_free(&prog);

    /* RFC 4731 ESEARCH and RFC 5182 SEARCHRES. */
    assert_true(
        search(p, "A282 SEARCH RETURN (MIN COUNT) FLAGGED SINCE 1-Feb-1994\r\n", &prog, &err));
    assert_true(prog.has_return);
    assert_int_equal(prog.return_options, IMAP_SEARCH_RETURN_MIN | IMAP_SEARCH_RETURN_COUNT);
    imap_search_program_free(&prog);
    assert_true(search(p, "A283 SEARCH RETURN () UNSEEN\r\n", &prog, &err));
    assert_int_equal(prog.return_options, IMAP_SEARCH_RETURN_ALL);
    imap_search_program_free(&prog);
    assert_true(search(p, "A1 SEARCH RETURN (SAVE) CHARSET us-ascii UID $\r\n", &prog, &err));
    assert_int_equal(prog.return_options, IMAP_SEARCH_RETURN_SAVE);
    assert_false(prog.charset_utf8);
    assert_true(prog.root.children[0].set.searchres);
    imap_search_program_free(&prog);

    /* RFC 7162 3.1.5 */
    assert_true(search(p, "a SEARCH MODSEQ \"/flags/\\\\draft\" all 620162338\r\n", &prog, &err));
    const struct imap_search_node *ms = &prog.root.children[0];
    assert_int_equal(ms->key, IMAP_SEARCH_MODSEQ);
    assert_string_equal(ms->modseq_entry, "/flags/\\draft");
    assert_int_equal(ms->modseq_entry_type, IMAP_SEARCH_ENTRY_ALL);
    assert_int_equal(ms->number, 620162338);
    assert_int_equal(imap_search_needs(&prog), IMAP_SEARCH_NEEDS_MODSEQ);
    imap_search_program_free(&prog);
    assert_true(search(p, "a SEARCH OR NOT MODSEQ 720162338 LARGER 50000\r\n", &prog, &err));
    assert_int_equal(imap_search_needs(&prog), IMAP_SEARCH_NEEDS_MODSEQ | IMAP_SEARCH_NEEDS_SIZE);
    imap_search_program_free(&prog);
    imap_parser_free(p);
}

static void test_search_every_key(void **state)
{
    (void)state;
    struct imap_parser *p = imap_parser_new(NULL);
    struct imap_search_program prog;
    struct petrel_error err;
    const char *line =
        "a SEARCH ALL ANSWERED BCC b BEFORE 01-Jan-2000 BODY x CC c DELETED DRAFT FLAGGED "
        "FROM f HEADER X-Foo \"\" KEYWORD $Junk LARGER 10 NEW NOT OLD ON 29-Feb-2000 "
        "OR RECENT SEEN SENTBEFORE 1-Jan-1970 SENTON 31-Dec-1969 SENTSINCE 2-feb-2024 "
        "SINCE 3-MAR-2003 SMALLER 20 SUBJECT s TEXT t TO t UID 1 UNANSWERED UNDELETED "
        "UNDRAFT UNFLAGGED UNKEYWORD k UNSEEN 1,3 *\r\n";
    assert_true(search(p, line, &prog, &err));
    assert_int_equal(prog.root.child_count, 34);
    static const enum imap_search_key keys[] = {
        IMAP_SEARCH_ALL,     IMAP_SEARCH_ANSWERED,   IMAP_SEARCH_BCC,        IMAP_SEARCH_BEFORE,
        IMAP_SEARCH_BODY,    IMAP_SEARCH_CC,         IMAP_SEARCH_DELETED,    IMAP_SEARCH_DRAFT,
        IMAP_SEARCH_FLAGGED, IMAP_SEARCH_FROM,       IMAP_SEARCH_HEADER,     IMAP_SEARCH_KEYWORD,
        IMAP_SEARCH_LARGER,  IMAP_SEARCH_NEW,        IMAP_SEARCH_NOT,        IMAP_SEARCH_ON,
        IMAP_SEARCH_OR,      IMAP_SEARCH_SENTBEFORE, IMAP_SEARCH_SENTON,     IMAP_SEARCH_SENTSINCE,
        IMAP_SEARCH_SINCE,   IMAP_SEARCH_SMALLER,    IMAP_SEARCH_SUBJECT,    IMAP_SEARCH_TEXT,
        IMAP_SEARCH_TO,      IMAP_SEARCH_UID,        IMAP_SEARCH_UNANSWERED, IMAP_SEARCH_UNDELETED,
        IMAP_SEARCH_UNDRAFT, IMAP_SEARCH_UNFLAGGED,  IMAP_SEARCH_UNKEYWORD,  IMAP_SEARCH_UNSEEN,
        IMAP_SEARCH_SEQSET,  IMAP_SEARCH_SEQSET,
    };
    /* NOT OLD and OR RECENT SEEN take their operands as children. */
    size_t k = 0;
    for (size_t i = 0; i < prog.root.child_count && k < sizeof(keys) / sizeof(keys[0]); i++) {
        if (prog.root.children[i].key != keys[k])
            fail_msg("child %zu: key %d, want %d", i, (int)prog.root.children[i].key, (int)keys[k]);
        k++;
    }
    assert_int_equal(prog.root.children[14].children[0].key, IMAP_SEARCH_OLD);
    assert_int_equal(prog.root.children[16].children[1].key, IMAP_SEARCH_SEEN);
    assert_string_equal(prog.root.children[10].header_name, "X-Foo");
    assert_string_equal(prog.root.children[10].str, "");
    assert_int_equal(prog.root.children[17].day, 0);
    assert_int_equal(prog.root.children[18].day, -1);
    assert_int_equal(prog.root.children[12].number, 10);
    imap_search_program_free(&prog);
    imap_parser_free(p);
}

static void test_search_errors(void **state)
{
    (void)state;
    struct imap_parser *p = imap_parser_new(NULL);
    struct imap_search_program prog;
    struct petrel_error err;
    static const char *const bad[] = {
        "a SEARCH\r\n",
        "a SEARCH FOO\r\n",
        "a SEARCH FROM\r\n",
        "a SEARCH FROM (x)\r\n",
        "a SEARCH HEADER X\r\n",
        "a SEARCH HEADER \"\" x\r\n",
        "a SEARCH HEADER a:b x\r\n",
        "a SEARCH SINCE 30-Feb-2000\r\n",
        "a SEARCH SINCE 29-Feb-2001\r\n",
        "a SEARCH SINCE 1-Foo-2000\r\n",
        "a SEARCH SINCE 1-Feb-94\r\n",
        "a SEARCH SINCE 001-Feb-1994\r\n",
        "a SEARCH BEFORE\r\n",
        "a SEARCH LARGER x\r\n",
        "a SEARCH LARGER -1\r\n",
        "a SEARCH SMALLER 99999999999999999999\r\n",
        "a SEARCH UID\r\n",
        "a SEARCH UID x\r\n",
        "a SEARCH UID (1)\r\n",
        "a SEARCH 0\r\n",
        "a SEARCH 1:x\r\n",
        "a SEARCH NOT\r\n",
        "a SEARCH OR SEEN\r\n",
        "a SEARCH ()\r\n",
        "a SEARCH (SEEN ())\r\n",
        "a SEARCH \"SEEN\"\r\n",
        "a SEARCH RETURN\r\n",
        "a SEARCH RETURN MIN SEEN\r\n",
        "a SEARCH RETURN (FOO) SEEN\r\n",
        "a SEARCH RETURN (MIN)\r\n",
        "a SEARCH CHARSET\r\n",
        "a SEARCH CHARSET UTF-8\r\n",
        "a SEARCH MODSEQ\r\n",
        "a SEARCH MODSEQ x\r\n",
        "a SEARCH MODSEQ \"/flags/\\\\seen\" all\r\n",
        "a SEARCH MODSEQ \"/flags/\\\\seen\" none 5\r\n",
        "a SEARCH MODSEQ 9223372036854775808\r\n",
        /* 21 digits are over the cap even when the value is small */
        "a SEARCH MODSEQ 000000000000000000001\r\n",
        "a SEARCH LARGER 000000000000000000001\r\n",
        "a SEARCH CHARSET UTF-8 RETURN (MIN) SEEN\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (search(p, bad[i], &prog, &err))
            fail_msg("accepted: %s", bad[i]);
        assert_int_equal(err.code, PETREL_ERR_INVALID);
        assert_null(prog.root.children);
    }
    assert_false(search(p, "a SEARCH CHARSET ISO-8859-1 TEXT x\r\n", &prog, &err));
    assert_int_equal(err.code, PETREL_ERR_UNSUPPORTED);
    /* Depth cap: NOT NOT ... and nested groups. */
    struct buf deep = {0};
    buf_append_str(&deep, "a SEARCH");
    for (int i = 0; i < IMAP_SEARCH_MAX_DEPTH + 1; i++)
        buf_append_str(&deep, " NOT");
    buf_append_str(&deep, " SEEN\r\n");
    assert_false(search(p, deep.data, &prog, &err));
    buf_reset(&deep);
    buf_append_str(&deep, "a SEARCH");
    for (int i = 0; i < IMAP_SEARCH_MAX_DEPTH; i++)
        buf_append_str(&deep, " NOT");
    buf_append_str(&deep, " SEEN\r\n");
    assert_true(search(p, deep.data, &prog, &err));
    imap_search_program_free(&prog);
    buf_free(&deep);
    imap_parser_free(p);
}

static void test_dates(void **state)
{
    (void)state;
    int32_t day = 0;
    assert_true(imap_date_parse("1-Feb-1994", 10, &day));
    assert_int_equal(day, 8797);
    assert_true(imap_date_parse("01-feb-1994", 11, &day));
    assert_int_equal(day, 8797);
    assert_true(imap_date_parse("1-Jan-1970", 10, &day));
    assert_int_equal(day, 0);
    assert_true(imap_date_parse("29-Feb-2000", 11, &day));
    assert_true(imap_date_parse("31-Dec-1969", 11, &day));
    assert_int_equal(day, -1);
    static const char *const bad[] = {
        "",          "1-Feb-1994 ", " 1-Feb-1994", "0-Feb-1994", "32-Jan-1994", "29-Feb-1900",
        "1-Feb-199", "1-Feb-19944", "1/Feb/1994",  "1-Fev-1994", "1-Feb-199x",  "100-Feb-1994"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (imap_date_parse(bad[i], strlen(bad[i]), &day))
            fail_msg("accepted: '%s'", bad[i]);

    int64_t t = 0;
    int tz = 0;
    const char *dt = "17-Jul-1996 02:44:25 -0700";
    assert_true(imap_datetime_parse(dt, strlen(dt), &t, &tz));
    assert_int_equal(t, 837596665);
    assert_int_equal(tz, -420);
    struct buf out = {0};
    imap_datetime_format(&out, t, tz);
    assert_string_equal(out.data, dt);
    dt = " 7-Jul-1996 02:44:25 +0130";
    assert_true(imap_datetime_parse(dt, strlen(dt), &t, &tz));
    assert_int_equal(tz, 90);
    buf_reset(&out);
    imap_datetime_format(&out, t, tz);
    assert_string_equal(out.data, "07-Jul-1996 02:44:25 +0130");
    buf_reset(&out);
    imap_datetime_format(&out, -1, 0);
    assert_string_equal(out.data, "31-Dec-1969 23:59:59 +0000");
    static const char *const bad_dt[] = {
        "17-Jul-1996 02:44:25",      "17-Jul-1996 24:00:00 +0000",  "17-Jul-1996 02:44:25 0700",
        "17-Jul-1996 2:44:25 +0000", " 17-Jul-1996 02:44:25 +0000", "17-Jul-1996 02:44:25 +0060"};
    for (size_t i = 0; i < sizeof(bad_dt) / sizeof(bad_dt[0]); i++)
        if (imap_datetime_parse(bad_dt[i], strlen(bad_dt[i]), &t, &tz))
            fail_msg("accepted: '%s'", bad_dt[i]);
    buf_free(&out);
}

static void expect_quote(void (*fn)(struct buf *, const char *, size_t, unsigned), const char *s,
                         size_t len, unsigned flags, const char *want)
{
    struct buf out = {0};
    fn(&out, s, len, flags);
    if (out.len != strlen(want) || memcmp(out.data, want, out.len) != 0)
        fail_msg("got '%s', want '%s'", out.data, want);
    buf_free(&out);
}

static void test_quote(void **state)
{
    (void)state;
    expect_quote(imap_quote_astring, "INBOX", 5, 0, "INBOX");
    expect_quote(imap_quote_astring, "a]b", 3, 0, "a]b");
    expect_quote(imap_quote_astring, "", 0, 0, "\"\"");
    expect_quote(imap_quote_astring, "nil", 3, 0, "\"nil\"");
    expect_quote(imap_quote_astring, "a b", 3, 0, "\"a b\"");
    expect_quote(imap_quote_astring, "a%", 2, 0, "\"a%\"");
    expect_quote(imap_quote_astring, "say \"hi\" \\o/", 12, 0, "\"say \\\"hi\\\" \\\\o/\"");
    expect_quote(imap_quote_string, "INBOX", 5, 0, "\"INBOX\"");
    expect_quote(imap_quote_string, "a\r\nb", 4, 0, "{4}\r\na\r\nb");
    struct buf nul = {0};
    imap_quote_string(&nul, "a\0b", 3, 0);
    assert_int_equal(nul.len, 8);
    /* RFC 3501 allows no NUL in a literal: 0x80 takes its place. */
    assert_memory_equal(nul.data, "{3}\r\na\x80" "b", 8);
    buf_free(&nul);
    expect_quote(imap_quote_string, "caf\xc3\xa9", 5, 0, "{5}\r\ncaf\xc3\xa9");
    expect_quote(imap_quote_string, "caf\xc3\xa9", 5, IMAP_QUOTE_UTF8, "\"caf\xc3\xa9\"");
    expect_quote(imap_quote_nstring, NULL, 0, 0, "NIL");
    expect_quote(imap_quote_nstring, "", 0, 0, "\"\"");
    char *long_text = malloc(IMAP_QUOTE_MAX_QUOTED + 1);
    memset(long_text, 'x', IMAP_QUOTE_MAX_QUOTED + 1);
    struct buf out = {0};
    imap_quote_string(&out, long_text, IMAP_QUOTE_MAX_QUOTED + 1, 0);
    assert_true(strncmp(out.data, "{1025}\r\nxxx", 11) == 0);
    buf_reset(&out);
    imap_quote_mailbox(&out, "INBOX", 0);
    imap_quote_mailbox(&out, "&AOk-t&AOk-", 0);
    assert_string_equal(out.data, "\"INBOX\"\"&AOk-t&AOk-\"");
    buf_reset(&out);
    imap_quote_datetime(&out, 837596665, -420);
    assert_string_equal(out.data, "\"17-Jul-1996 02:44:25 -0700\"");
    buf_free(&out);
    free(long_text);

    /* What is written parses back to the same bytes. */
    static const char *const samples[] = {"",  "x",   "NIL",    "a b",         "\"", "\\",
                                          "(", "{3}", "a\r\nb", "caf\xc3\xa9", "*",  "]"};
    struct imap_parser *p = imap_parser_new(NULL);
    for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
        struct buf line = {0};
        buf_append_str(&line, "t X ");
        imap_quote_astring(&line, samples[i], strlen(samples[i]), 0);
        buf_append_str(&line, "\r\n");
        const struct imap_command *c = command(p, line.data);
        assert_int_equal(c->arg_count, 1);
        assert_string_equal(c->args[0].str, samples[i]);
        buf_free(&line);
    }
    imap_parser_free(p);
}

/* QRESYNC's numbers: 1 to 20 digits (leading zeros count), above 0. */
static void test_qresync_numbers(void **state)
{
    (void)state;
    struct imap_parser *p = imap_parser_new(NULL);
    struct imap_qresync_param q;
    memset(&q, 0, sizeof(q));
    const struct imap_command *c =
        command(p, "a X (00000000000000000007 00000000000000000005)\r\n");
    assert_true(imap_qresync_parse(&c->args[0], &q));
    assert_int_equal(q.uid_validity, 7);
    assert_int_equal(q.modseq, 5);
    imap_qresync_param_free(&q);
    static const char *const bad[] = {
        "a X (000000000000000000007 5)\r\n",
        "a X (7 000000000000000000005)\r\n",
        "a X (0 5)\r\n",
        "a X (7 0)\r\n",
        "a X (4294967296 5)\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        c = command(p, bad[i]);
        memset(&q, 0, sizeof(q));
        if (imap_qresync_parse(&c->args[0], &q))
            fail_msg("accepted: %s", bad[i]);
    }
    imap_parser_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seqset_parse),
        cmocka_unit_test(test_seqset_use),
        cmocka_unit_test(test_seqset_add),
        cmocka_unit_test(test_fetch_items),
        cmocka_unit_test(test_search_rfc_examples),
        cmocka_unit_test(test_search_every_key),
        cmocka_unit_test(test_search_errors),
        cmocka_unit_test(test_qresync_numbers),
        cmocka_unit_test(test_dates),
        cmocka_unit_test(test_quote),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
