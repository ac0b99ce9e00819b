/* Unit tests for imap-thread.h: RFC 5256 3.1 ORDEREDSUBJECT and 3.2
 * REFERENCES step by step (the id table and dummies of step 1, the
 * In-Reply-To fallback, duplicate Message-IDs, loops, pruning of step 4,
 * the subject grouping of step 6 in each of its merge cases, sibling order
 * of step 7) and the response syntax of section 4 (thread-members,
 * thread-nested, a dummy as "((a)(b))"). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "protocols/imap/imap-thread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define M(n, date, subject, id, refs, irt)                                                         \
    {                                                                                              \
        (n), (date), (subject), (id), (refs), (irt)                                                \
    }

static void expect(bool references, const struct imap_thread_msg *m, size_t n, const char *want)
{
    struct buf out = {0};
    if (references)
        imap_thread_references(m, n, &out);
    else
        imap_thread_orderedsubject(m, n, &out);
    if (strcmp(buf_cstr(&out), want) != 0)
        fail_msg("%s: got \"%s\", want \"%s\"", references ? "REFERENCES" : "ORDEREDSUBJECT",
                 buf_cstr(&out), want);
    buf_free(&out);
}

/* The set the e2e test uses: a tree, a missing parent, a subject join. */
static const struct imap_thread_msg tree[] = {
    M(1, 1000, "Thread A", "<a@x>", NULL, NULL),
    M(2, 1100, "Re: Thread A", "<b@x>", NULL, "<a@x>"),
    M(3, 1200, "Re: Thread A", "<c@x>", "<a@x> <b@x>", NULL),
    M(4, 1130, "RE: thread a", "<d@x>", "<a@x>", NULL),
    M(5, 900, "Re: Lost parent", "<e@x>", "<missing@x>", NULL),
    M(6, 930, "Re: Lost parent", "<f@x>", "<missing@x>", NULL),
    M(7, 800, "Other", "<g@x>", NULL, NULL),
    M(8, 1300, "Re: Other", "<h@x>", NULL, NULL),
};

static void test_references_tree(void **state)
{
    (void)state;
    /* 2 and 4 are siblings under 1 by date; 5 and 6 share a dummy (the
     * missing parent); 8 joins 7 by subject as a reply (step 6.C). */
    expect(true, tree, 8, "(7 8)((5)(6))(1 (2 3)(4))");
    expect(true, tree, 0, "");
}

static void test_orderedsubject(void **state)
{
    (void)state;
    expect(false, tree, 8, "(7 8)(5 6)(1 (2)(4)(3))");
    /* A single message per subject: one thread each, by date. */
    const struct imap_thread_msg m[] = {
        M(1, 20, "b", NULL, NULL, NULL),
        M(2, 10, "a", NULL, NULL, NULL),
        M(3, 10, "Re: c", NULL, NULL, NULL),
    };
    expect(false, m, 3, "(2)(3)(1)");
}

static void test_dummy_chain_pruned(void **state)
{
    (void)state;
    /* x -> y -> 1 with x and y missing: both dummies go (4.B at the root
     * with a single child, 4.B below the root). */
    const struct imap_thread_msg one[] = {
        M(1, 0, "s", "<m@x>", "<x@x> <y@x>", NULL),
    };
    expect(true, one, 1, "(1)");
    /* A truncated References: 2 names only <b>, which 1's References put
     * under <a>; a and b are dummies, b is spliced away, a stays as the
     * root holding two children. */
    const struct imap_thread_msg two[] = {
        M(1, 0, "s1", "<c@x>", "<a@x> <b@x>", NULL),
        M(2, 1, "s2", "<d@x>", "<b@x>", NULL),
    };
    expect(true, two, 2, "((1)(2))");
}

static void test_in_reply_to_fallback_and_duplicates(void **state)
{
    (void)state;
    /* References without a valid id: In-Reply-To's first id is used. */
    const struct imap_thread_msg irt[] = {
        M(1, 0, "p", "<a@x>", NULL, NULL),
        M(2, 1, "q", "<b@x>", "garbage <nonsense>", "<a@x> <zz@x>"),
    };
    expect(true, irt, 2, "(1 2)");
    /* A duplicate Message-ID: only the first message owns it. */
    const struct imap_thread_msg dup[] = {
        M(1, 0, "p", "<a@x>", NULL, NULL),
        M(2, 1, "q", "<a@x>", NULL, NULL),
        M(3, 2, "r", "<c@x>", "<a@x>", NULL),
    };
    expect(true, dup, 3, "(1 3)(2)");
    /* No Message-ID at all: a message of its own. */
    const struct imap_thread_msg none[] = {
        M(1, 5, "p", NULL, NULL, NULL),
        M(2, 1, "q", "", "<a@x>", NULL),
    };
    expect(true, none, 2, "(2)(1)");
}

static void test_loops_are_not_made(void **state)
{
    (void)state;
    /* 1 says it answers 2, 2 says it answers 1: the second link would make
     * a loop and is not made. */
    const struct imap_thread_msg m[] = {
        M(1, 0, "p", "<a@x>", "<b@x>", NULL),
        M(2, 1, "q", "<b@x>", "<a@x>", NULL),
    };
    expect(true, m, 2, "(2 1)");
    /* A message referencing itself. */
    const struct imap_thread_msg self[] = {
        M(1, 0, "p", "<a@x>", "<a@x>", NULL),
    };
    expect(true, self, 1, "(1)");
}

static void test_subject_grouping_cases(void **state)
{
    (void)state;
    /* Two non-replies with one subject: a new dummy holds both. */
    const struct imap_thread_msg both[] = {
        M(1, 0, "Hello", "<a@x>", NULL, NULL),
        M(2, 1, "hello", "<b@x>", NULL, NULL),
    };
    expect(true, both, 2, "((1)(2))");
    /* Two replies likewise. */
    const struct imap_thread_msg replies[] = {
        M(1, 0, "Re: Hello", "<a@x>", NULL, NULL),
        M(2, 1, "Fwd: Hello", "<b@x>", NULL, NULL),
    };
    expect(true, replies, 2, "((1)(2))");
    /* The table holds the dummy (the thread of 1 and 2, whose subject is
     * its first child's); 3, a real message with that subject, becomes
     * one more child of the dummy, and the children sort by date. */
    const struct imap_thread_msg dummy[] = {
        M(1, 5, "Re: X", "<a@x>", "<missing@x>", NULL),
        M(2, 6, "Re: X", "<b@x>", "<missing@x>", NULL),
        M(3, 0, "X", "<c@x>", NULL, NULL),
    };
    expect(true, dummy, 3, "((3)(1)(2))");
    /* Two dummy-rooted threads with one subject: their children merge. */
    const struct imap_thread_msg dummies[] = {
        M(1, 1, "Re: Y", "<a@x>", "<m1@x>", NULL),
        M(2, 2, "Re: Y", "<b@x>", "<m1@x>", NULL),
        M(3, 3, "Re: Y", "<c@x>", "<m2@x>", NULL),
        M(4, 0, "Re: Y", "<d@x>", "<m2@x>", NULL),
    };
    expect(true, dummies, 4, "((4)(1)(2)(3))");
    /* A reply that came first does not take the table from the original
     * (6.B: a non-reply replaces a reply), so it joins the original. */
    const struct imap_thread_msg order[] = {
        M(1, 0, "Re: Z", "<a@x>", NULL, NULL),
        M(2, 1, "Z", "<b@x>", NULL, NULL),
    };
    expect(true, order, 2, "(2 1)");
    /* Empty subjects are never grouped. */
    const struct imap_thread_msg empty[] = {
        M(1, 0, "", "<a@x>", NULL, NULL),
        M(2, 1, "Re:", "<b@x>", NULL, NULL),
    };
    expect(true, empty, 2, "(1)(2)");
}

static void test_siblings_by_date_then_sequence(void **state)
{
    (void)state;
    const struct imap_thread_msg m[] = {
        M(1, 0, "p", "<a@x>", NULL, NULL),          M(2, 9, "c1", "<b@x>", "<a@x>", NULL),
        M(3, 5, "c2", "<c@x>", "<a@x>", NULL),      M(4, 5, "c3", "<d@x>", "<a@x>", NULL),
        M(5, 1, "g", "<e@x>", "<a@x> <c@x>", NULL),
    };
    expect(true, m, 5, "(1 (3 5)(4)(2))");
}

static void test_deep_chain(void **state)
{
    (void)state;
    /* A reply chain as long as a mailbox: no recursion to overflow. */
    enum { N = 3000 };
    struct imap_thread_msg *m = xcalloc(N, sizeof(*m));
    char(*ids)[32] = xcalloc(N, sizeof(*ids));
    for (size_t i = 0; i < N; i++) {
        snprintf(ids[i], sizeof(ids[i]), "<%zu@x>", i);
        m[i] = (struct imap_thread_msg)M((uint32_t)i + 1, (int64_t)i, i == 0 ? "s" : "Re: s",
                                         ids[i], i > 0 ? ids[i - 1] : NULL, NULL);
    }
    struct buf want = {0}, got = {0};
    buf_append_char(&want, '(');
    for (size_t i = 0; i < N; i++)
        buf_printf(&want, i == 0 ? "%zu" : " %zu", i + 1);
    buf_append_char(&want, ')');
    imap_thread_references(m, N, &got);
    assert_string_equal(buf_cstr(&got), buf_cstr(&want));
    buf_free(&want);
    buf_free(&got);
    free(ids);
    free(m);
}

/* Every number 1..n exactly once, parentheses balanced. */
static void assert_valid_threads(const struct buf *out, size_t n)
{
    unsigned char *seen = xcalloc(n + 1, 1);
    int depth = 0;
    for (size_t i = 0; i < out->len;) {
        char c = out->data[i];
        if (c == '(' || c == ')' || c == ' ') {
            depth += c == '(' ? 1 : c == ')' ? -1 : 0;
            assert_true(depth >= 0);
            i++;
            continue;
        }
        size_t v = 0;
        while (i < out->len && out->data[i] >= '0' && out->data[i] <= '9')
            v = v * 10 + (size_t)(out->data[i++] - '0');
        assert_true(v >= 1 && v <= n && !seen[v]);
        seen[v] = 1;
    }
    assert_int_equal(depth, 0);
    for (size_t v = 1; v <= n; v++)
        assert_true(seen[v]);
    free(seen);
}

static void test_hostile_references_bounded(void **state)
{
    (void)state;
    /* Message 1 references a 100000-deep chain; then 1000 pairs where a
     * message whose container already has a child names the bottom of the
     * chain as its parent: each loop check walks the whole chain, 10^8
     * steps in all without the budget. The answer must still come, quickly,
     * and name every message once. */
    enum { K = 100000, PAIRS = 1000, N = 1 + 2 * PAIRS };
    struct buf chain = {0};
    for (size_t i = 0; i < K; i++)
        buf_printf(&chain, "<c%zu@x> ", i);
    char bottom[32];
    snprintf(bottom, sizeof(bottom), "<c%d@x>", K - 1);
    struct imap_thread_msg *m = xcalloc(N, sizeof(*m));
    char(*ids)[32] = xcalloc(N, sizeof(*ids));
    char(*refs)[32] = xcalloc(N, sizeof(*refs));
    m[0] = (struct imap_thread_msg)M(1, 0, "chain", "<a@x>", buf_cstr(&chain), NULL);
    for (size_t j = 0; j < PAIRS; j++) {
        size_t p = 1 + 2 * j, b = p + 1;
        snprintf(ids[p], sizeof(ids[p]), "<p%zu@x>", j);
        snprintf(refs[p], sizeof(refs[p]), "<b%zu@x>", j);
        snprintf(ids[b], sizeof(ids[b]), "<b%zu@x>", j);
        m[p] = (struct imap_thread_msg)M((uint32_t)p + 1, 1, "p", ids[p], refs[p], NULL);
        m[b] = (struct imap_thread_msg)M((uint32_t)b + 1, 2, "b", ids[b], bottom, NULL);
    }
    struct buf out = {0};
    imap_thread_references(m, N, &out);
    assert_valid_threads(&out, N);
    buf_reset(&out);
    imap_thread_orderedsubject(m, N, &out);
    assert_valid_threads(&out, N);
    buf_free(&out);
    buf_free(&chain);
    free(refs);
    free(ids);
    free(m);
}

static void test_message_id_parsing(void **state)
{
    (void)state;
    const char *v = "<a@b> (comment <x@y>) <c @ d>\r\n <nonsense> <@e> <f@> <g@h";
    size_t pos = 0;
    struct buf id = {0};
    assert_true(imap_thread_next_msgid(v, strlen(v), &pos, &id));
    assert_string_equal(buf_cstr(&id), "a@b");
    assert_true(imap_thread_next_msgid(v, strlen(v), &pos, &id));
    assert_string_equal(buf_cstr(&id), "c@d");
    assert_false(imap_thread_next_msgid(v, strlen(v), &pos, &id));
    buf_free(&id);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_references_tree),
        cmocka_unit_test(test_orderedsubject),
        cmocka_unit_test(test_dummy_chain_pruned),
        cmocka_unit_test(test_in_reply_to_fallback_and_duplicates),
        cmocka_unit_test(test_loops_are_not_made),
        cmocka_unit_test(test_subject_grouping_cases),
        cmocka_unit_test(test_siblings_by_date_then_sequence),
        cmocka_unit_test(test_deep_chain),
        cmocka_unit_test(test_hostile_references_bounded),
        cmocka_unit_test(test_message_id_parsing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
