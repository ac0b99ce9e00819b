/* Unit tests for core/yaml-doc.h: the tree, its line numbers, and what it refuses
 * (aliases, anchors, duplicate keys, deep nesting, several documents, size). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/yaml-doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct ydoc *parse(const char *text, struct petrel_error *err)
{
    return ydoc_parse("t.yaml", text, strlen(text), err);
}

static struct ydoc *parse_ok(const char *text)
{
    struct petrel_error err = {0};
    struct ydoc *doc = parse(text, &err);
    if (doc == NULL)
        fail_msg("parse failed: %s", err.message);
    return doc;
}

/* Expects failure with exactly `message`. */
static void expect_error(const char *text, const char *message)
{
    struct petrel_error err = {0};
    struct ydoc *doc = parse(text, &err);
    if (doc != NULL) {
        ydoc_free(doc);
        fail_msg("accepted: %s", text);
    }
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    assert_string_equal(err.message, message);
}

/* Expects failure whose message starts with `prefix`. */
static void expect_error_prefix(const char *text, const char *prefix)
{
    struct petrel_error err = {0};
    struct ydoc *doc = parse(text, &err);
    if (doc != NULL) {
        ydoc_free(doc);
        fail_msg("accepted: %s", text);
    }
    if (strncmp(err.message, prefix, strlen(prefix)) != 0)
        fail_msg("message '%s' does not start with '%s'", err.message, prefix);
}

static void test_tree_records_types_and_lines(void **state)
{
    struct ydoc *doc = parse_ok("# comment\n"
                                "name: petrel\n"
                                "\n"
                                "telemetry:\n"
                                "  listen: \":8080\"\n"
                                "  allowed_nets:\n"
                                "    - 10.0.0.0/8\n"
                                "    - '::1'\n"
                                "flow: {a: 1, b: [x, y]}\n");
    assert_string_equal(doc->file, "t.yaml");
    const struct ynode *root = doc->root;
    assert_non_null(root);
    assert_int_equal(root->type, YNODE_MAP);
    assert_int_equal(root->count, 3);
    assert_string_equal(root->keys[0], "name");
    assert_int_equal(root->key_lines[0], 2);
    assert_string_equal(root->keys[1], "telemetry");
    assert_int_equal(root->key_lines[1], 4);
    assert_int_equal(root->key_lines[2], 9);

    const struct ynode *name = ynode_get(root, "name");
    assert_int_equal(name->type, YNODE_SCALAR);
    assert_string_equal(name->scalar, "petrel");
    assert_int_equal(name->line, 2);
    assert_false(name->quoted);

    const struct ynode *tel = ynode_get(root, "telemetry");
    assert_int_equal(tel->type, YNODE_MAP);
    const struct ynode *listen = ynode_get(tel, "listen");
    assert_string_equal(listen->scalar, ":8080");
    assert_true(listen->quoted);
    assert_int_equal(listen->line, 5);
    assert_int_equal(tel->key_lines[1], 6);

    const struct ynode *nets = ynode_get(tel, "allowed_nets");
    assert_int_equal(nets->type, YNODE_SEQ);
    assert_int_equal(nets->count, 2);
    assert_null(nets->keys);
    assert_string_equal(nets->items[0]->scalar, "10.0.0.0/8");
    assert_int_equal(nets->items[0]->line, 7);
    assert_false(nets->items[0]->quoted);
    assert_string_equal(nets->items[1]->scalar, "::1");
    assert_int_equal(nets->items[1]->line, 8);
    assert_true(nets->items[1]->quoted);

    const struct ynode *flow = ynode_get(root, "flow");
    assert_int_equal(flow->type, YNODE_MAP);
    assert_int_equal(flow->line, 9);
    assert_int_equal(ynode_get(flow, "b")->type, YNODE_SEQ);
    assert_string_equal(ynode_get(flow, "b")->items[1]->scalar, "y");

    assert_null(ynode_get(root, "missing"));
    assert_null(ynode_get(name, "petrel")); /* not a map */
    assert_null(ynode_get(nets, "0"));
    assert_null(ynode_get(NULL, "x"));
    ydoc_free(doc);
}

static void test_block_scalars_count_as_quoted(void **state)
{
    struct ydoc *doc = parse_ok("a: |\n  text\nb: >\n  folded\nc: plain\nd: \"\"\ne:\n");
    assert_true(ynode_get(doc->root, "a")->quoted);
    assert_string_equal(ynode_get(doc->root, "a")->scalar, "text\n");
    assert_true(ynode_get(doc->root, "b")->quoted);
    assert_false(ynode_get(doc->root, "c")->quoted);
    assert_true(ynode_get(doc->root, "d")->quoted);
    assert_string_equal(ynode_get(doc->root, "d")->scalar, "");
    const struct ynode *e = ynode_get(doc->root, "e");
    assert_int_equal(e->type, YNODE_SCALAR);
    assert_string_equal(e->scalar, "");
    assert_false(e->quoted);
    ydoc_free(doc);
}

static void test_empty_documents_have_no_root(void **state)
{
    static const char *const empties[] = {"", "\n\n", "# only a comment\n", "---\n", "---\n...\n"};
    for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
        struct ydoc *doc = parse_ok(empties[i]);
        assert_null(doc->root);
        ydoc_free(doc);
    }
    /* An explicitly quoted empty string is a value, not an empty document. */
    struct ydoc *doc = parse_ok("''\n");
    assert_non_null(doc->root);
    assert_int_equal(doc->root->type, YNODE_SCALAR);
    ydoc_free(doc);
}

static void test_explicit_single_document_markers_are_accepted(void **state)
{
    struct ydoc *doc = parse_ok("---\na: 1\n...\n");
    assert_int_equal(doc->root->type, YNODE_MAP);
    assert_int_equal(doc->root->line, 2);
    ydoc_free(doc);
}

static void test_second_document_is_refused(void **state)
{
    expect_error("a: 1\n---\nb: 2\n", "t.yaml:2: only one YAML document allowed");
    expect_error("---\na: 1\n---\nb: 2\n", "t.yaml:3: only one YAML document allowed");
    expect_error("a: 1\n...\n---\n", "t.yaml:3: only one YAML document allowed");
}

static void test_aliases_and_anchors_are_refused(void **state)
{
    expect_error("base: &b 1\nother: *b\n", "t.yaml:1: base: anchors are not supported");
    expect_error("a:\n  b: *x\n", "t.yaml:2: a.b: aliases are not supported");
    expect_error("list:\n  - &m {k: v}\n", "t.yaml:2: list: anchors are not supported");
    expect_error("seq: &s [1]\n", "t.yaml:1: seq: anchors are not supported");
    expect_error("*x\n", "t.yaml:1: aliases are not supported");
    /* The classic billion-laughs shape stops at the first anchor. */
    expect_error("a: &a [\"lol\",\"lol\"]\nb: &b [*a,*a]\nc: &c [*b,*b]\n",
                 "t.yaml:1: a: anchors are not supported");
}

static void test_duplicate_keys_are_refused_with_both_lines(void **state)
{
    expect_error("a: 1\nb: 2\na: 3\n", "t.yaml:3: a: duplicate key (first at line 1)");
    expect_error("top:\n  x: 1\n\n  y: 2\n  x: 3\n",
                 "t.yaml:5: top.x: duplicate key (first at line 2)");
    expect_error("list:\n  - k: 1\n    k: 2\n",
                 "t.yaml:3: list.k: duplicate key (first at line 2)");
    /* The same key in different maps is fine. */
    struct ydoc *doc = parse_ok("a:\n  x: 1\nb:\n  x: 2\n");
    ydoc_free(doc);
}

static void test_non_scalar_keys_are_refused(void **state)
{
    expect_error("? [a, b]\n: 1\n", "t.yaml:1: mapping keys must be plain strings");
    expect_error("ok: 1\n? {x: 1}\n: 2\n", "t.yaml:2: mapping keys must be plain strings");
}

static void test_syntax_errors_name_file_and_line(void **state)
{
    expect_error_prefix("a: 1\nb: [1, 2\nc: 3\n", "t.yaml:3: ");
    expect_error_prefix("a: 1\n  b: 2\n", "t.yaml:2: ");
    expect_error_prefix("a: 1\nb:\n\t- x\n", "t.yaml:3: ");
    expect_error_prefix("- a\nb: 1\n", "t.yaml:2: ");
    expect_error_prefix("a: \xff\n", "t.yaml:1: ");
    struct petrel_error err = {0};
    assert_null(parse("a: 1\nb: {x: 1\n", &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    assert_non_null(strstr(err.message, "flow mapping"));
}

/* `levels` nested flow sequences: "[[[...]]]". */
static char *nested(size_t levels)
{
    char *s = malloc(2 * levels + 2);
    assert_non_null(s);
    memset(s, '[', levels);
    memset(s + levels, ']', levels);
    s[2 * levels] = '\n';
    s[2 * levels + 1] = '\0';
    return s;
}

static void test_nesting_is_limited_to_64_levels(void **state)
{
    char *ok = nested(64);
    struct ydoc *doc = parse_ok(ok);
    const struct ynode *n = doc->root;
    size_t depth = 1;
    while (n->count > 0) {
        n = n->items[0];
        depth++;
    }
    assert_int_equal(depth, 64);
    ydoc_free(doc);
    free(ok);

    /* The limit counts levels below the root: 64 below it is the most. */
    char *edge = nested(65);
    doc = parse_ok(edge);
    ydoc_free(doc);
    free(edge);
    char *deep = nested(66);
    expect_error(deep, "t.yaml:1: nesting deeper than 64 levels");
    free(deep);

    /* Far deeper input is refused just as fast, without deep recursion. */
    char *very = nested(100000);
    expect_error(very, "t.yaml:1: nesting deeper than 64 levels");
    free(very);

    /* Block maps count too. */
    char text[8192] = "";
    for (int i = 0; i < 70; i++) {
        for (int k = 0; k < i; k++)
            strcat(text, " ");
        strcat(text, "k:\n");
    }
    expect_error_prefix(text, "t.yaml:");
    struct petrel_error err = {0};
    assert_null(parse(text, &err));
    assert_non_null(strstr(err.message, "nesting deeper than 64 levels"));
}

static void test_input_over_one_mebibyte_is_refused(void **state)
{
    size_t n = 1024 * 1024 + 1;
    char *text = malloc(n);
    assert_non_null(text);
    memset(text, '#', n);
    struct petrel_error err = {0};
    assert_null(ydoc_parse("big.yaml", text, n, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    assert_string_equal(err.message, "big.yaml: larger than 1048576 bytes");
    /* Exactly 1 MiB of comment is fine. */
    text[n - 2] = '\n';
    struct ydoc *doc = ydoc_parse("big.yaml", text, n - 1, &err);
    assert_non_null(doc);
    assert_null(doc->root);
    ydoc_free(doc);
    free(text);
}

static void test_input_need_not_be_nul_terminated(void **state)
{
    const char text[] = "a: 1\nb: 2\ngarbage: [";
    struct petrel_error err = {0};
    struct ydoc *doc = ydoc_parse("t.yaml", text, 10, &err); /* "a: 1\nb: 2\n" */
    assert_non_null(doc);
    assert_int_equal(doc->root->count, 2);
    ydoc_free(doc);
}

static void test_load_file_reads_and_reports(void **state)
{
    char path[] = "/tmp/petrel-test-yaml-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "x: 1\ny:\n  - z\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    struct petrel_error err = {0};
    struct ydoc *doc = ydoc_load_file(path, &err);
    assert_non_null(doc);
    assert_string_equal(doc->file, path);
    assert_int_equal(ynode_get(doc->root, "y")->items[0]->line, 3);
    ydoc_free(doc);

    /* Errors name the file path. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("x: 1\nx: 2\n", f);
    fclose(f);
    assert_null(ydoc_load_file(path, &err));
    char expected[128];
    snprintf(expected, sizeof(expected), "%s:2: x: duplicate key (first at line 1)", path);
    assert_string_equal(err.message, expected);
    unlink(path);

    assert_null(ydoc_load_file(path, &err));
    assert_int_equal(err.code, PETREL_ERR_IO);
    assert_non_null(strstr(err.message, path));
    assert_non_null(strstr(err.message, "cannot open"));
}

static void test_type_names(void **state)
{
    assert_string_equal(ynode_type_name(YNODE_SCALAR), "a scalar");
    assert_string_equal(ynode_type_name(YNODE_MAP), "a mapping");
    assert_string_equal(ynode_type_name(YNODE_SEQ), "a list");
    ydoc_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_records_types_and_lines),
        cmocka_unit_test(test_block_scalars_count_as_quoted),
        cmocka_unit_test(test_empty_documents_have_no_root),
        cmocka_unit_test(test_explicit_single_document_markers_are_accepted),
        cmocka_unit_test(test_second_document_is_refused),
        cmocka_unit_test(test_aliases_and_anchors_are_refused),
        cmocka_unit_test(test_duplicate_keys_are_refused_with_both_lines),
        cmocka_unit_test(test_non_scalar_keys_are_refused),
        cmocka_unit_test(test_syntax_errors_name_file_and_line),
        cmocka_unit_test(test_nesting_is_limited_to_64_levels),
        cmocka_unit_test(test_input_over_one_mebibyte_is_refused),
        cmocka_unit_test(test_input_need_not_be_nul_terminated),
        cmocka_unit_test(test_load_file_reads_and_reports),
        cmocka_unit_test(test_type_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
