/* Unit tests for protocols/imap/imap-parser.h: every input is fed in one
 * piece, byte by byte and in small chunks (each chunk in its own exact-size
 * allocation), and all three must give the same transcript of events:
 *   "+"            a literal continuation request
 *   "C(tag NAME args)"  a command; args as a:atom q:quoted l:literal
 *                  l8:literal8 NIL (...)
 *   "E(tag,code,message)" / "F(...)" a non-fatal / fatal error
 *   "..."          input ended inside a command */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "protocols/imap/imap-parser.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void describe_bytes(struct buf *b, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '\\')
            buf_printf(b, "\\x%02x", c);
        else
            buf_append_char(b, (char)c);
    }
}

static void describe_args(struct buf *b, const struct imap_arg *args, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const struct imap_arg *a = &args[i];
        buf_append_char(b, ' ');
        switch (a->type) {
        case IMAP_ARG_NIL:
            buf_append_str(b, "NIL");
            break;
        case IMAP_ARG_ATOM:
            buf_append_str(b, "a:");
            describe_bytes(b, a->str, a->len);
            break;
        case IMAP_ARG_QUOTED:
            buf_append_str(b, "q:");
            describe_bytes(b, a->str, a->len);
            break;
        case IMAP_ARG_LITERAL:
            buf_append_str(b, a->literal8 ? "l8:" : "l:");
            describe_bytes(b, a->str, a->len);
            break;
        case IMAP_ARG_LIST:
            buf_append_str(b, "(");
            describe_args(b, a->list, a->count);
            buf_append_str(b, " )");
            break;
        }
        if (a->type != IMAP_ARG_LIST)
            assert_int_equal(a->str[a->len], '\0');
    }
}

static const char *code_name(enum imap_parse_error_code code)
{
    switch (code) {
    case IMAP_PARSE_ERR_SYNTAX:
        return "syntax";
    case IMAP_PARSE_ERR_LINE_TOO_LONG:
        return "long";
    case IMAP_PARSE_ERR_TOO_BIG:
        return "toobig";
    case IMAP_PARSE_ERR_LIMIT:
        return "limit";
    case IMAP_PARSE_ERR_REFUSED:
        return "refused";
    }
    return "?";
}

static void record(struct buf *t, struct imap_parser *p, enum imap_parse_result r)
{
    if (r == IMAP_PARSE_LITERAL_CONTINUATION) {
        buf_append_str(t, "+");
    } else if (r == IMAP_PARSE_COMMAND) {
        const struct imap_command *c = imap_parser_command(p);
        assert_non_null(c);
        assert_null(imap_parser_error(p));
        buf_printf(t, "C(%s %s", c->tag, c->name);
        describe_args(t, c->args, c->arg_count);
        buf_append_str(t, ")");
    } else if (r == IMAP_PARSE_ERROR) {
        const struct imap_parse_error *e = imap_parser_error(p);
        assert_non_null(e);
        assert_null(imap_parser_command(p));
        buf_printf(t, "%s(%s,%s,%s)", e->fatal ? "F" : "E", e->tag != NULL ? e->tag : "*",
                   code_name(e->code), e->message);
    }
}

/* Feeds `len` bytes in chunks of `step` (0: all at once). */
static char *transcript(const char *data, size_t len, const struct imap_parser_limits *limits,
                        size_t step)
{
    struct imap_parser *p = imap_parser_new(limits);
    struct buf t = {0};
    size_t pos = 0;
    bool fatal = false;
    while (pos < len && !fatal) {
        size_t end = step == 0 || len - pos < step ? len : pos + step;
        char *chunk = malloc(end - pos);
        memcpy(chunk, data + pos, end - pos);
        size_t off = 0;
        while (off < end - pos) {
            size_t used = SIZE_MAX;
            enum imap_parse_result r = imap_parser_feed(p, chunk + off, end - pos - off, &used);
            assert_true(used <= end - pos - off);
            off += used;
            record(&t, p, r);
            if (r == IMAP_PARSE_ERROR && imap_parser_error(p)->fatal) {
                fatal = true;
                /* Stays failed and consumes nothing. */
                size_t again = SIZE_MAX;
                assert_int_equal(imap_parser_feed(p, "x\r\n", 3, &again), IMAP_PARSE_ERROR);
                assert_int_equal(again, 0);
                break;
            }
            if (r == IMAP_PARSE_NEED_MORE) {
                assert_int_equal(off, end - pos);
                break;
            }
        }
        free(chunk);
        pos = end;
    }
    if (!fatal && imap_parser_in_command(p))
        buf_append_str(&t, "...");
    imap_parser_free(p);
    return buf_steal(&t);
}

static void expect_n(const char *data, size_t len, const struct imap_parser_limits *limits,
                     const char *expected)
{
    static const size_t steps[] = {0, 1, 2, 3, 7, 64};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        char *got = transcript(data, len, limits, steps[i]);
        if (strcmp(got, expected) != 0)
            fail_msg("step %zu:\n got: %s\nwant: %s", steps[i], got, expected);
        free(got);
    }
}

static void expect(const char *data, const char *expected)
{
    expect_n(data, strlen(data), NULL, expected);
}

static void test_simple_commands(void **state)
{
    (void)state;
    expect("a1 noop\r\n", "C(a1 NOOP)");
    expect("a1 NOOP\n", "C(a1 NOOP)");
    expect("A2 LOGIN \"user\" \"pa\\\"ss\\\\\"\r\n", "C(A2 LOGIN q:user q:pa\"ss\\x5c)");
    expect("A3 login nil NIL\r\n", "C(A3 LOGIN NIL NIL)");
    expect("A4 STORE 1:3,5 +FLAGS.SILENT (\\Seen \\Deleted $Junk)\r\n",
           "C(A4 STORE a:1:3,5 a:+FLAGS.SILENT ( a:\\x5cSeen a:\\x5cDeleted a:$Junk ))");
    expect("A5 UID FETCH 1:* (UID MODSEQ) (CHANGEDSINCE 12345)\r\n",
           "C(A5 UID a:FETCH a:1:* ( a:UID a:MODSEQ ) ( a:CHANGEDSINCE a:12345 ))");
    expect("A6 SEARCH NOT (OR SEEN (FLAGGED)) ()\r\n",
           "C(A6 SEARCH a:NOT ( a:OR a:SEEN ( a:FLAGGED ) ) ( ))");
    expect("A7 LIST \"\" %\r\n", "C(A7 LIST q: a:%)");
    expect("A8 SELECT \"Entw\xc3\xbcrfe\"\r\n", "C(A8 SELECT q:Entw\\xc3\\xbcrfe)");
    /* Extra spaces are tolerated, as by Dovecot. */
    expect("A9 NOOP  x \r\n", "C(A9 NOOP a:x)");
    /* Empty lines between commands are ignored. */
    expect("\r\n\nA1 NOOP\r\n\r\n", "C(A1 NOOP)");
}

static void test_fetch_sections(void **state)
{
    (void)state;
    expect("A1 FETCH 1 (FLAGS BODY.PEEK[HEADER.FIELDS (From \"To\")]<0.100>)\r\n",
           "C(A1 FETCH a:1 ( a:FLAGS a:BODY.PEEK[HEADER.FIELDS (From \"To\")]<0.100> ))");
    expect("A2 FETCH 1:* BINARY[1.2]<0.10>\r\n", "C(A2 FETCH a:1:* a:BINARY[1.2]<0.10>)");
    expect("A3 FETCH * (BODY[] BODY[TEXT])\r\n", "C(A3 FETCH a:* ( a:BODY[] a:BODY[TEXT] ))");
    /* Without a well-formed section '[' is an ordinary ATOM-CHAR. */
    expect("A4 FETCH 1 BODY[HEADER.FIELDS (A\r\n", "E(A4,syntax,Missing ')')");
    expect("A5 FETCH 1 BODY[HEADER.FIELDS (A))]\r\n", "E(A5,syntax,Unexpected ')')");
    expect("A6 FETCH 1 BODY[[]]\r\n", "C(A6 FETCH a:1 a:BODY[[]])");
    expect("A7 LOGIN pa[ss w[o]rd[\r\n", "C(A7 LOGIN a:pa[ss a:w[o]rd[)");
    expect("A8 X a[\"b\r\n", "E(A8,syntax,Missing space between arguments)");
    expect("[1 NOOP\r\n", "C([1 NOOP)");
}

static void test_literals(void **state)
{
    (void)state;
    static const char login[] = "A1 LOGIN {4}\r\nuser {5}\r\np\0s\"s\r\n";
    expect_n(login, sizeof(login) - 1, NULL, "++C(A1 LOGIN l:user l:p\\x00s\"s)");
    static const char plus[] = "A1 APPEND INBOX {5+}\r\nhel\0o\r\nA2 NOOP\r\n";
    expect_n(plus, sizeof(plus) - 1, NULL, "C(A1 APPEND a:INBOX l:hel\\x00o)C(A2 NOOP)");
    static const char bin[] = "A1 APPEND INBOX (\\Seen) ~{3}\r\n\0\1\2\r\n";
    expect_n(bin, sizeof(bin) - 1, NULL,
             "+C(A1 APPEND a:INBOX ( a:\\x5cSeen ) l8:\\x00\\x01\\x02)");
    static const char bin_plus[] = "A1 APPEND INBOX ~{2+}\r\n\r\n\r\n";
    expect_n(bin_plus, sizeof(bin_plus) - 1, NULL, "C(A1 APPEND a:INBOX l8:\\x0d\\x0a)");
    expect("A1 X {0}\r\n\r\n", "+C(A1 X l:)");
    expect("A1 X ({0}\r\n {1+}\r\n))\r\n", "+C(A1 X ( l: l:) ))");
    /* A literal is a complete token: a space or ')' must follow. */
    expect("A1 X {1}\r\nab\r\n", "+E(A1,syntax,Missing space between arguments)");
    /* Literal inside lists, continuing the list on the next line. */
    expect("A1 X (a {2}\r\nbc d)\r\n", "+C(A1 X ( a:a l:bc a:d ))");
    expect("A1 X {3}\r\nab", "+...");
}

static void test_literal_progress(void **state)
{
    (void)state;
    struct imap_parser *p = imap_parser_new(NULL);
    size_t used = 0;
    const char *head = "A1 APPEND INBOX {10}\r\n";
    assert_false(imap_parser_in_command(p));
    assert_int_equal(imap_parser_feed(p, head, strlen(head), &used),
                     IMAP_PARSE_LITERAL_CONTINUATION);
    assert_int_equal(used, strlen(head));
    assert_true(imap_parser_in_command(p));
    assert_int_equal(imap_parser_literal_remaining(p), 10);
    assert_int_equal(imap_parser_feed(p, "abc", 3, &used), IMAP_PARSE_NEED_MORE);
    assert_int_equal(imap_parser_literal_remaining(p), 7);
    assert_int_equal(imap_parser_feed(p, "defghij\r\nA2", 11, &used), IMAP_PARSE_COMMAND);
    assert_int_equal(used, 9);
    assert_int_equal(imap_parser_literal_remaining(p), 0);
    const struct imap_command *c = imap_parser_command(p);
    assert_string_equal(c->args[1].str, "abcdefghij");
    /* Reset drops a half-received command. */
    assert_int_equal(imap_parser_feed(p, "A2 NO", 5, &used), IMAP_PARSE_NEED_MORE);
    assert_true(imap_parser_in_command(p));
    imap_parser_reset(p);
    assert_false(imap_parser_in_command(p));
    assert_int_equal(imap_parser_parse_all(p, "A3 X {1}\r\nz\r\n", 13, &used), IMAP_PARSE_COMMAND);
    assert_int_equal(used, 13);
    assert_string_equal(imap_parser_command(p)->args[0].str, "z");
    imap_parser_free(p);
}

static void test_literal_limits(void **state)
{
    (void)state;
    struct imap_parser_limits lim;
    imap_parser_limits_default(&lim);
    lim.max_literal = 100;
    lim.non_sync_max = 100;
    /* Synchronizing over the cap: BAD, no continuation, the client's next
     * command is parsed normally. */
    const char *s = "A1 APPEND INBOX {101}\r\nA2 NOOP\r\n";
    expect_n(s, strlen(s), &lim, "E(A1,toobig,Literal too large)C(A2 NOOP)");
    s = "A1 APPEND INBOX {100}\r\n";
    expect_n(s, strlen(s), &lim, "+...");
    /* Non-synchronizing over the cap: the data is coming, close. */
    s = "A1 APPEND INBOX {101+}\r\nxxxx";
    expect_n(s, strlen(s), &lim, "F(A1,toobig,Non-synchronizing literal too large)");
    /* LITERAL-: {n+} only up to 4096. */
    lim.max_literal = 1 << 20;
    lim.non_sync_max = IMAP_LITERAL_MINUS_MAX;
    s = "A1 APPEND INBOX {4097+}\r\n";
    expect_n(s, strlen(s), &lim, "F(A1,toobig,Non-synchronizing literal too large)");
    s = "A1 APPEND INBOX {4097}\r\n";
    expect_n(s, strlen(s), &lim, "+...");
    char *big = malloc(4200);
    int n = snprintf(big, 4200, "A1 APPEND INBOX {4096+}\r\n");
    memset(big + n, 'x', 4096);
    memcpy(big + n + 4096, "\r\n", 2);
    char *got = transcript(big, (size_t)n + 4098, &lim, 0);
    assert_true(strncmp(got, "C(A1 APPEND a:INBOX l:xxx", 25) == 0);
    free(got);
    free(big);
    /* Sizes that overflow are over any limit. */
    expect("A1 X {99999999999999999999999}\r\nA2 NOOP\r\n",
           "E(A1,toobig,Literal too large)C(A2 NOOP)");
    expect("A1 X {18446744073709551616+}\r\n", "F(A1,toobig,Non-synchronizing literal too large)");
    expect("A1 X {18446744073709551615}\r\n", "E(A1,toobig,Literal too large)");
}

/* One command's literals in memory share one budget: past it a literal is
 * refused (no sink takes it here), however small, and the next command is
 * parsed normally. */
static void test_literal_memory_budget(void **state)
{
    (void)state;
    struct imap_parser_limits lim;
    imap_parser_limits_default(&lim);
    lim.max_memory_literals = 10;
    const char *s = "A1 X {4+}\r\nabcd {4+}\r\nefgh {4+}\r\nijkl\r\nA2 NOOP\r\n";
    expect_n(s, strlen(s), &lim, "E(A1,toobig,Literal too large)C(A2 NOOP)");
    s = "A1 X {4}\r\nabcd {4}\r\nefgh {4}\r\n";
    expect_n(s, strlen(s), &lim, "++E(A1,toobig,Literal too large)");
    /* Within it: every literal kept; the budget is per command. */
    s = "A1 X {4+}\r\nabcd {6+}\r\nefghij\r\nA2 X {10+}\r\n0123456789\r\n";
    expect_n(s, strlen(s), &lim, "C(A1 X l:abcd l:efghij)C(A2 X l:0123456789)");
}

static void test_line_limit(void **state)
{
    (void)state;
    struct imap_parser_limits lim;
    imap_parser_limits_default(&lim);
    lim.max_line = 32;
    const char *s = "A1 NOOP 0123456789012345678901\r\nA2 NOOP\r\n";
    expect_n(s, strlen(s), &lim, "C(A1 NOOP a:0123456789012345678901)C(A2 NOOP)");
    s = "A1 NOOP 01234567890123456789012\r\nA2 NOOP\r\n";
    expect_n(s, strlen(s), &lim, "E(A1,long,Command line too long)C(A2 NOOP)");
    /* The limit spans the command's lines, literals excluded. */
    s = "A1 X {1+}\r\nz 0123456789012345678\r\nA2 NOOP\r\n";
    expect_n(s, strlen(s), &lim, "E(A1,long,Command line too long)C(A2 NOOP)");
    s = "A1 X {20+}\r\n01234567890123456789 a\r\nA2 NOOP\r\n";
    expect_n(s, strlen(s), &lim, "C(A1 X l:01234567890123456789 a:a)C(A2 NOOP)");
    /* A long line ending in a non-synchronizing literal: the literal's bytes
     * are skipped, not taken for commands. */
    s = "A1 APPEND INBOX xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx {9+}\r\nA3 NOOP\r\n\r\nA2 NOOP\r\n";
    expect_n(s, strlen(s), &lim, "E(A1,long,Command line too long)C(A2 NOOP)");
    /* The same with a synchronizing literal: the client waits for "+". */
    s = "A1 APPEND INBOX xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx {9}\r\nA2 NOOP\r\n";
    expect_n(s, strlen(s), &lim, "E(A1,long,Command line too long)C(A2 NOOP)");
    /* No tag seen before the limit: untagged BAD. */
    s = "A123456789012345678901234567890123456789 NOOP\r\nA2 NOOP\r\n";
    expect_n(s, strlen(s), &lim, "E(*,long,Command line too long)C(A2 NOOP)");
    /* Still inside the over-long line. */
    s = "A1 NOOP 0123456789012345678901234567890123456789";
    expect_n(s, strlen(s), &lim, "...");
}

static void test_arg_limits(void **state)
{
    (void)state;
    struct imap_parser_limits lim;
    imap_parser_limits_default(&lim);
    lim.max_depth = 3;
    lim.max_args = 5;
    const char *s = "A1 X (((a)))\r\n";
    expect_n(s, strlen(s), &lim, "C(A1 X ( ( ( a:a ) ) ))");
    s = "A1 X ((((a))))\r\nA2 NOOP\r\n";
    expect_n(s, strlen(s), &lim, "E(A1,limit,Lists nested too deeply)C(A2 NOOP)");
    s = "A1 X a b c d e\r\n";
    expect_n(s, strlen(s), &lim, "C(A1 X a:a a:b a:c a:d a:e)");
    s = "A1 X a b c d e f\r\nA2 NOOP\r\n";
    expect_n(s, strlen(s), &lim, "E(A1,limit,Too many arguments)C(A2 NOOP)");
    s = "A1 X BODY[((((x))))]\r\n";
    expect_n(s, strlen(s), &lim, "E(A1,syntax,Missing space between arguments)");
    s = "A1 X BODY[(((x)))]\r\n";
    expect_n(s, strlen(s), &lim, "C(A1 X a:BODY[(((x)))])");
}

/* Broken commands, each followed by a good one that must parse. */
static void test_broken_corpus(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        const char *want;
    } cases[] = {
        {"A1 FETCH 1 (FLAGS\r\n", "E(A1,syntax,Missing ')')"},
        {"A1 FETCH 1 FLAGS)\r\n", "E(A1,syntax,Unexpected ')')"},
        {"A1 FETCH 1 ((FLAGS)\r\n", "E(A1,syntax,Missing ')')"},
        {"A1 LOGIN \"user\r\n", "E(A1,syntax,Unterminated quoted string)"},
        {"A1 LOGIN \"us\\er\"\r\n", "E(A1,syntax,Invalid escape in quoted string)"},
        {"A1 LOGIN \"user\\\"\r\n", "E(A1,syntax,Unterminated quoted string)"},
        {"A1 LOGIN \"a\rb\"\r\n", "E(A1,syntax,CR without LF in command line)"},
        {"A1 NOOP\rA3 NOOP\r\n", "E(A1,syntax,CR without LF in command line)"},
        {"A1 LOGIN a\"b\"\r\n", "E(A1,syntax,Missing space between arguments)"},
        {"A1 LOGIN \"a\"b\r\n", "E(A1,syntax,Missing space between arguments)"},
        {"A1 X (a)(b)\r\n", "E(A1,syntax,Missing space between arguments)"},
        {"A1 X {-1}\r\n", "E(A1,syntax,Invalid literal size)"},
        {"A1 X {}\r\n", "E(A1,syntax,Invalid literal size)"},
        {"A1 X {5\r\n", "E(A1,syntax,Invalid literal announcement)"},
        {"A1 X {5-}\r\n", "E(A1,syntax,Invalid literal announcement)"},
        {"A1 X {5}x\r\n", "E(A1,syntax,Literal announcement must end the line)"},
        {"A1 X {5} \r\n", "E(A1,syntax,Literal announcement must end the line)"},
        {"A1 X ab{5}\r\n", "E(A1,syntax,Missing space between arguments)"},
        {"A1 X a\x01\r\n", "E(A1,syntax,Missing space between arguments)"},
        {"A1 X \x01\r\n", "E(A1,syntax,Invalid character in arguments)"},
        {"A1 X caf\xc3\xa9\r\n", "E(A1,syntax,Missing space between arguments)"},
        {"+ X\r\n", "E(*,syntax,Missing or invalid tag)"},
        {" A1 NOOP\r\n", "E(*,syntax,Missing or invalid tag)"},
        {"* NOOP\r\n", "E(*,syntax,Missing or invalid tag)"},
        {"A1+ NOOP\r\n", "E(*,syntax,Invalid character in tag)"},
        {"A1\r\n", "E(A1,syntax,Missing command name)"},
        {"A1 \r\n", "E(A1,syntax,Missing command name)"},
        {"A1 {3}\r\n", "E(A1,syntax,Missing command name)"},
        {"A1 NO(OP\r\n", "E(A1,syntax,Invalid character in command name)"},
        {"A1 X BODY[{3}]\r\n", "E(A1,syntax,Missing space between arguments)"},
        /* A syntax error on a line ending in {n+}: the literal is skipped. */
        {"A1 X ) {7+}\r\nA2 NOOP\r\n", "E(A1,syntax,Unexpected ')')"},
        {"A1 X \"a\\q\" ~{7+}\r\nA2 NOOP more\r\n", "E(A1,syntax,Invalid escape in quoted string)"},
        /* ... and over the limit even then: close. */
        {"A1 X ) {99999999999+}\r\n", "F(A1,syntax,Unexpected ')')"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct buf in = {0};
        buf_append_str(&in, cases[i].in);
        buf_append_str(&in, "A3 NOOP\r\n");
        struct buf want = {0};
        buf_append_str(&want, cases[i].want);
        if (want.data[0] != 'F')
            buf_append_str(&want, "C(A3 NOOP)");
        expect_n(in.data, in.len, NULL, want.data);
        buf_free(&in);
        buf_free(&want);
    }
    static const char nul[] = "A1 LOGIN a\0b\r\nA3 NOOP\r\n";
    expect_n(nul, sizeof(nul) - 1, NULL, "E(A1,syntax,NUL byte in command line)C(A3 NOOP)");
}

static void test_pipelining(void **state)
{
    (void)state;
    struct imap_parser *p = imap_parser_new(NULL);
    const char *in = "A1 NOOP\r\nA2 CHECK\r\nA3 LOG";
    size_t len = strlen(in);
    size_t used = 0;
    assert_int_equal(imap_parser_feed(p, in, len, &used), IMAP_PARSE_COMMAND);
    assert_int_equal(used, 9);
    assert_string_equal(imap_parser_command(p)->name, "NOOP");
    size_t used2 = 0;
    assert_int_equal(imap_parser_feed(p, in + used, len - used, &used2), IMAP_PARSE_COMMAND);
    assert_string_equal(imap_parser_command(p)->tag, "A2");
    used += used2;
    assert_int_equal(imap_parser_feed(p, in + used, len - used, &used2), IMAP_PARSE_NEED_MORE);
    assert_null(imap_parser_command(p));
    assert_int_equal(imap_parser_feed(p, "OUT\r\n", 5, &used2), IMAP_PARSE_COMMAND);
    assert_string_equal(imap_parser_command(p)->name, "LOGOUT");
    imap_parser_free(p);
}

static void test_arg_helpers(void **state)
{
    (void)state;
    struct imap_parser *p = imap_parser_new(NULL);
    size_t used = 0;
    const char *in = "A1 X nil \"NIL\" flags (a)\r\n";
    assert_int_equal(imap_parser_parse_all(p, in, strlen(in), &used), IMAP_PARSE_COMMAND);
    const struct imap_command *c = imap_parser_command(p);
    assert_int_equal(c->arg_count, 4);
    assert_true(imap_arg_atom_equals(&c->args[0], "NIL"));
    assert_string_equal(imap_arg_astring(&c->args[0]), "nil");
    assert_null(imap_arg_nstring(&c->args[0]));
    assert_false(imap_arg_atom_equals(&c->args[1], "NIL"));
    assert_string_equal(imap_arg_nstring(&c->args[1]), "NIL");
    assert_true(imap_arg_atom_equals(&c->args[2], "FLAGS"));
    assert_false(imap_arg_atom_equals(&c->args[2], "FLAG"));
    assert_null(imap_arg_astring(&c->args[3]));
    assert_false(imap_arg_atom_equals(&c->args[3], "a"));
    imap_parser_free(p);
}

/* ---------- the literal sink (large APPEND literals go to a spool) ---------- */

struct test_spool {
    struct buf data;
    uint64_t size;
    char command[16];
    size_t arg_index;
};

struct test_sink {
    size_t opened, closed;
    bool accept; /* spool APPEND literals after the first argument */
};

static void *test_sink_open(void *ctx, const char *command, size_t arg_index, uint64_t size,
                            bool literal8)
{
    struct test_sink *st = ctx;
    (void)literal8;
    if (!st->accept || strcmp(command, "APPEND") != 0 || arg_index == 0)
        return NULL;
    struct test_spool *sp = calloc(1, sizeof(*sp));
    sp->size = size;
    snprintf(sp->command, sizeof(sp->command), "%s", command);
    sp->arg_index = arg_index;
    st->opened++;
    return sp;
}

static void test_sink_write(void *ctx, void *spool, const void *data, size_t len)
{
    (void)ctx;
    struct test_spool *sp = spool;
    assert_true(sp->data.len + len <= sp->size);
    buf_append(&sp->data, data, len);
}

static void test_sink_close(void *ctx, void *spool)
{
    struct test_sink *st = ctx;
    struct test_spool *sp = spool;
    st->closed++;
    buf_free(&sp->data);
    free(sp);
}

/* Feeds `in` in 3-byte pieces, answering continuations; the last result. */
static enum imap_parse_result feed_pieces(struct imap_parser *p, const char *in, size_t len,
                                          size_t *continuations)
{
    enum imap_parse_result r = IMAP_PARSE_NEED_MORE;
    size_t pos = 0;
    while (pos < len) {
        size_t piece = len - pos < 3 ? len - pos : 3;
        size_t used = 0;
        r = imap_parser_feed(p, in + pos, piece, &used);
        pos += used;
        if (r == IMAP_PARSE_LITERAL_CONTINUATION)
            (*continuations)++;
        else if (r != IMAP_PARSE_NEED_MORE)
            return r;
    }
    return r;
}

static void test_literal_sink(void **state)
{
    (void)state;
    struct test_sink st = {.accept = true};
    struct imap_literal_sink sink = {.threshold = 4,
                                     .max_memory = 8,
                                     .open = test_sink_open,
                                     .write = test_sink_write,
                                     .close = test_sink_close,
                                     .ctx = &st};
    struct imap_parser *p = imap_parser_new(NULL);
    imap_parser_set_sink(p, &sink);
    /* MULTIAPPEND: the big literals go to spools, the small one and the
     * mailbox name (argument 0, even when big) stay in memory. */
    static const char in[] = "a APPEND {6}\r\nINBOX1 (\\Seen) {10}\r\n0123456789 {3+}\r\nabc"
                             " ~{7}\r\nx\0y\r\nzz\r\n";
    size_t cont = 0;
    assert_int_equal(feed_pieces(p, in, sizeof(in) - 1, &cont), IMAP_PARSE_COMMAND);
    assert_int_equal(cont, 3);
    const struct imap_command *c = imap_parser_command(p);
    assert_int_equal(c->arg_count, 5);
    assert_null(c->args[0].spool);
    assert_memory_equal(c->args[0].str, "INBOX1", 7);
    const struct test_spool *sp = c->args[2].spool;
    assert_non_null(sp);
    assert_null(c->args[2].str);
    assert_int_equal(c->args[2].len, 10);
    assert_int_equal(sp->arg_index, 2);
    assert_memory_equal(sp->data.data, "0123456789", 10);
    assert_null(c->args[3].spool);
    assert_memory_equal(c->args[3].str, "abc", 4);
    sp = c->args[4].spool;
    assert_non_null(sp);
    assert_true(c->args[4].literal8);
    assert_int_equal(sp->data.len, 7);
    assert_memory_equal(sp->data.data, "x\0y\r\nzz", 7);
    assert_int_equal(st.opened, 2);
    assert_int_equal(st.closed, 0);
    /* The next command frees the spools of this one. */
    size_t used = 0;
    assert_int_equal(imap_parser_feed(p, "b NOOP\r\n", 8, &used), IMAP_PARSE_COMMAND);
    assert_int_equal(st.closed, 2);

    /* A literal the sink declines is refused over max_memory: synchronising
     * before the continuation, non-synchronising after its bytes. */
    static const char big[] = "c SEARCH TEXT {9}\r\n";
    cont = 0;
    assert_int_equal(feed_pieces(p, big, sizeof(big) - 1, &cont), IMAP_PARSE_ERROR);
    assert_int_equal(cont, 0);
    const struct imap_parse_error *e = imap_parser_error(p);
    assert_int_equal(e->code, IMAP_PARSE_ERR_TOO_BIG);
    assert_false(e->fatal);
    assert_string_equal(e->tag, "c");
    static const char big_plus[] = "d SEARCH TEXT {9+}\r\n123456789 ALL\r\ne NOOP\r\n";
    cont = 0;
    assert_int_equal(feed_pieces(p, big_plus, sizeof(big_plus) - 1 - 8, &cont), IMAP_PARSE_ERROR);
    e = imap_parser_error(p);
    assert_int_equal(e->code, IMAP_PARSE_ERR_TOO_BIG);
    assert_false(e->fatal);
    assert_string_equal(e->tag, "d");
    assert_int_equal(feed_pieces(p, "e NOOP\r\n", 8, &cont), IMAP_PARSE_COMMAND);
    assert_string_equal(imap_parser_command(p)->tag, "e");
    /* In memory up to max_memory when declined. */
    assert_int_equal(feed_pieces(p, "f SEARCH TEXT {8}\r\n12345678\r\n", 29, &cont),
                     IMAP_PARSE_COMMAND);
    assert_memory_equal(imap_parser_command(p)->args[1].str, "12345678", 9);

    /* A command abandoned in the middle of a spooled literal: the spool is
     * closed by reset (STARTTLS, logout) and by free. */
    static const char half[] = "g APPEND INBOX {20}\r\n0123456789";
    assert_int_equal(feed_pieces(p, half, sizeof(half) - 1, &cont), IMAP_PARSE_NEED_MORE);
    assert_int_equal(st.opened, 3);
    assert_int_equal(imap_parser_literal_remaining(p), 10);
    imap_parser_reset(p);
    assert_int_equal(st.closed, 3);
    /* Release while a command is still arriving: nothing happens. */
    assert_int_equal(feed_pieces(p, half, sizeof(half) - 1, &cont), IMAP_PARSE_NEED_MORE);
    imap_parser_release_literals(p);
    assert_int_equal(st.closed, 3);
    assert_int_equal(feed_pieces(p, "0123456789\r\n", 12, &cont), IMAP_PARSE_COMMAND);
    /* Once the command is answered the server releases its spools, before
     * any next command arrives; the next feed does not close them again. */
    imap_parser_release_literals(p);
    assert_int_equal(st.closed, 4);
    /* The same after an ERROR (a malformed line after a spooled literal). */
    static const char bad[] = "h APPEND INBOX {5}\r\n01234 (\\Seen\r\n";
    assert_int_equal(feed_pieces(p, bad, sizeof(bad) - 1, &cont), IMAP_PARSE_ERROR);
    assert_int_equal(st.opened, 5);
    imap_parser_release_literals(p);
    assert_int_equal(st.closed, 5);
    assert_int_equal(feed_pieces(p, "i NOOP\r\n", 8, &cont), IMAP_PARSE_COMMAND);
    assert_int_equal(st.closed, 5);
    assert_int_equal(feed_pieces(p, half, sizeof(half) - 1, &cont), IMAP_PARSE_NEED_MORE);
    imap_parser_free(p);
    assert_int_equal(st.opened, 6);
    assert_int_equal(st.closed, 6);
}

/* refuse(): asked for every literal before it is accepted; it sees the
 * command's first argument and the bytes of the later literals so far. */
static struct imap_parser *refuse_parser;
static char refuse_first[32];
static uint64_t refuse_later;

static const char *test_sink_refuse(void *ctx, const char *command, size_t arg_index, uint64_t size,
                                    bool non_sync)
{
    (void)non_sync;
    struct test_sink *st = ctx;
    st->opened += 100; /* counted apart from open() */
    const char *first = NULL;
    size_t len = 0;
    refuse_first[0] = '\0';
    if (imap_parser_first_arg(refuse_parser, &first, &len) && len < sizeof(refuse_first)) {
        memcpy(refuse_first, first, len);
        refuse_first[len] = '\0';
    }
    refuse_later = imap_parser_later_literal_bytes(refuse_parser);
    return strcmp(command, "APPEND") == 0 && arg_index > 0 && size > 5 ? "[OVERQUOTA] big" : NULL;
}

static void test_literal_refused(void **state)
{
    (void)state;
    struct test_sink st = {.accept = false};
    struct imap_literal_sink sink = {.threshold = 4,
                                     .max_memory = 1024,
                                     .open = test_sink_open,
                                     .write = test_sink_write,
                                     .close = test_sink_close,
                                     .refuse = test_sink_refuse,
                                     .ctx = &st};
    struct imap_parser *p = imap_parser_new(NULL);
    refuse_parser = p;
    imap_parser_set_sink(p, &sink);
    /* A small message is asked for; the big second one is refused before
     * its continuation, and the command with it. */
    static const char in[] = "a APPEND INBOX {3}\r\nabc {6}\r\n";
    size_t cont = 0;
    assert_int_equal(feed_pieces(p, in, sizeof(in) - 1, &cont), IMAP_PARSE_ERROR);
    assert_int_equal(cont, 1);
    const struct imap_parse_error *e = imap_parser_error(p);
    assert_int_equal(e->code, IMAP_PARSE_ERR_REFUSED);
    assert_false(e->fatal);
    assert_string_equal(e->tag, "a");
    assert_string_equal(e->message, "[OVERQUOTA] big");
    assert_int_equal(st.opened, 200);
    assert_string_equal(refuse_first, "INBOX");
    assert_int_equal(refuse_later, 3); /* the first message's literal */
    /* A refused non-synchronising literal is on its way: it and the rest
     * of the command (a second {n+} too) are read and dropped, then the
     * NO; the next command is parsed as ever. */
    static const char plus[] = "b APPEND {6}\r\nDrafts {6+}\r\n123456 {2+}\r\nxy\r\n";
    static const char next[] = "c NOOP\r\n";
    st.opened = 0;
    size_t used = 0;
    assert_int_equal(imap_parser_parse_all(p, plus, sizeof(plus) - 1, &used), IMAP_PARSE_ERROR);
    assert_int_equal(used, sizeof(plus) - 1);
    e = imap_parser_error(p);
    assert_int_equal(e->code, IMAP_PARSE_ERR_REFUSED);
    assert_string_equal(e->tag, "b");
    assert_string_equal(e->message, "[OVERQUOTA] big");
    assert_int_equal(st.opened, 200);            /* the name's literal and the message's */
    assert_string_equal(refuse_first, "Drafts"); /* a literal mailbox name */
    assert_int_equal(refuse_later, 0);
    assert_int_equal(imap_parser_parse_all(p, next, sizeof(next) - 1, &used), IMAP_PARSE_COMMAND);
    assert_string_equal(imap_parser_command(p)->name, "NOOP");
    imap_parser_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simple_commands), cmocka_unit_test(test_fetch_sections),
        cmocka_unit_test(test_literals),        cmocka_unit_test(test_literal_progress),
        cmocka_unit_test(test_literal_limits),  cmocka_unit_test(test_line_limit),
        cmocka_unit_test(test_literal_memory_budget),
        cmocka_unit_test(test_arg_limits),      cmocka_unit_test(test_broken_corpus),
        cmocka_unit_test(test_pipelining),      cmocka_unit_test(test_arg_helpers),
        cmocka_unit_test(test_literal_sink),    cmocka_unit_test(test_literal_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
