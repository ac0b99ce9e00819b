/* Unit tests for core/cfg-read.h: typed readers over a YAML tree and
 * duration_parse_ms(). Every error must read `file:line: key.path: message`. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/cfg-read.h"

#include <stdlib.h>
#include <string.h>

/* ---- duration_parse_ms -------------------------------------------------- */

static int64_t duration(const char *text)
{
    int64_t ms = -12345;
    if (!duration_parse_ms(text, &ms))
        fail_msg("'%s' refused", text);
    return ms;
}

static void expect_bad_duration(const char *text)
{
    int64_t ms = -12345;
    if (duration_parse_ms(text, &ms))
        fail_msg("'%s' accepted as %lld ms", text, (long long)ms);
    assert_int_equal(ms, -12345);
}

static void test_duration_units(void **state)
{
    assert_int_equal(duration("250ms"), 250);
    assert_int_equal(duration("30s"), 30000);
    assert_int_equal(duration("5m"), 300000);
    assert_int_equal(duration("2h"), 7200000);
    assert_int_equal(duration("1d"), 86400000);
    assert_int_equal(duration("0s"), 0);
    assert_int_equal(duration("0ms"), 0);
}

static void test_duration_compound_values_add_up(void **state)
{
    assert_int_equal(duration("1h30m"), 5400000);
    assert_int_equal(duration("1m30s"), 90000);
    assert_int_equal(duration("1s500ms"), 1500);
    assert_int_equal(duration("2h0m5s"), 7205000);
}

static void test_duration_plain_number_is_seconds(void **state)
{
    assert_int_equal(duration("30"), 30000);
    assert_int_equal(duration("0"), 0);
    assert_int_equal(duration("86400"), 86400000);
}

static void test_duration_malformed_text_is_refused(void **state)
{
    expect_bad_duration("");
    expect_bad_duration("   ");
    expect_bad_duration("s");
    expect_bad_duration("ms");
    expect_bad_duration("-5");
    expect_bad_duration("-5s");
    expect_bad_duration("1.5s");
    expect_bad_duration("5x");
    expect_bad_duration("5 s");
    expect_bad_duration("5s ");
    expect_bad_duration("5mss");
    expect_bad_duration("1h30");
    expect_bad_duration("h1");
    expect_bad_duration("5S");
    expect_bad_duration("thirty");
}

static void test_duration_overflow_is_refused(void **state)
{
    expect_bad_duration("9223372036854775807");   /* seconds: too many milliseconds */
    expect_bad_duration("9223372036854775808ms"); /* beyond int64 */
    expect_bad_duration("99999999999999999h");
    expect_bad_duration("9223372036854775807ms1ms");
    assert_int_equal(duration("9223372036854775807ms"), INT64_MAX);
    assert_int_equal(duration("9223372036854775"), INT64_C(9223372036854775000));
}

/* ---- typed readers -------------------------------------------------------- */

struct fixture {
    struct ydoc *doc;
    struct petrel_error err;
    struct cfg_ctx ctx;
};

static struct fixture fx;

static const struct ynode *load(const char *text)
{
    ydoc_free(fx.doc);
    memset(&fx.err, 0, sizeof(fx.err));
    fx.doc = ydoc_parse("c.yaml", text, strlen(text), &fx.err);
    if (fx.doc == NULL)
        fail_msg("YAML: %s", fx.err.message);
    fx.ctx.file = "c.yaml";
    fx.ctx.err = &fx.err;
    return fx.doc->root;
}

static int teardown(void **state)
{
    ydoc_free(fx.doc);
    fx.doc = NULL;
    return 0;
}

static void assert_error(const char *expected)
{
    assert_int_equal(fx.err.code, PETREL_ERR_INVALID);
    assert_string_equal(fx.err.message, expected);
}

static void test_string_reads_scalars_and_keeps_defaults(void **state)
{
    const struct ynode *m = load("a: hello\nb: \"quoted: yes\"\nc: 42\nd: ~\ne: null\nf: ''\n");
    char *s = strdup("default");
    assert_true(cfg_string(&fx.ctx, m, "", "missing", &s));
    assert_string_equal(s, "default");
    assert_true(cfg_string(&fx.ctx, m, "", "d", &s));
    assert_string_equal(s, "default");
    assert_true(cfg_string(&fx.ctx, m, "", "e", &s));
    assert_string_equal(s, "default");
    assert_true(cfg_string(&fx.ctx, m, "", "a", &s));
    assert_string_equal(s, "hello");
    assert_true(cfg_string(&fx.ctx, m, "", "b", &s));
    assert_string_equal(s, "quoted: yes");
    assert_true(cfg_string(&fx.ctx, m, "", "c", &s));
    assert_string_equal(s, "42");
    assert_true(cfg_string(&fx.ctx, m, "", "f", &s));
    assert_string_equal(s, "");
    free(s);

    /* A quoted "null" is a string. */
    m = load("a: 'null'\n");
    s = NULL;
    assert_true(cfg_string(&fx.ctx, m, "", "a", &s));
    assert_string_equal(s, "null");
    free(s);
}

static void test_string_refuses_lists_and_maps(void **state)
{
    const struct ynode *root = load("sec:\n  name:\n    - a\n  other: {x: 1}\n");
    const struct ynode *sec = ynode_get(root, "sec");
    char *s = NULL;
    assert_false(cfg_string(&fx.ctx, sec, "sec", "name", &s));
    assert_error("c.yaml:3: sec.name: expected a scalar, found a list");
    assert_false(cfg_string(&fx.ctx, sec, "sec", "other", &s));
    assert_error("c.yaml:4: sec.other: expected a scalar, found a mapping");
    assert_null(s);
}

static void test_bool_accepts_yaml_spellings(void **state)
{
    const struct ynode *m =
        load("a: true\nb: False\nc: yes\nd: NO\ne: on\nf: off\ng: ~\nh: TRUE\n");
    bool v = false;
    assert_true(cfg_bool(&fx.ctx, m, "", "a", &v));
    assert_true(v);
    assert_true(cfg_bool(&fx.ctx, m, "", "b", &v));
    assert_false(v);
    assert_true(cfg_bool(&fx.ctx, m, "", "c", &v));
    assert_true(v);
    assert_true(cfg_bool(&fx.ctx, m, "", "d", &v));
    assert_false(v);
    assert_true(cfg_bool(&fx.ctx, m, "", "e", &v));
    assert_true(v);
    assert_true(cfg_bool(&fx.ctx, m, "", "f", &v));
    assert_false(v);
    v = true;
    assert_true(cfg_bool(&fx.ctx, m, "", "g", &v));
    assert_true(v);
    assert_true(cfg_bool(&fx.ctx, m, "", "missing", &v));
    assert_true(v);
    v = false;
    assert_true(cfg_bool(&fx.ctx, m, "", "h", &v));
    assert_true(v);
}

static void test_choice_gives_the_index_and_names_the_choices(void **state)
{
    static const char *const names[] = {"personal", "shared", "public", NULL};
    static const char *const two[] = {"any", "own", NULL};
    const struct ynode *root =
        load("ns:\n  a: shared\n  b: private\n  c: [x]\n  d: ~\n  e: Shared\n  f: nope\n");
    const struct ynode *ns = ynode_get(root, "ns");
    int v = -1;
    assert_true(cfg_choice(&fx.ctx, ns, "ns", "a", names, &v));
    assert_int_equal(v, 1);
    assert_true(cfg_choice(&fx.ctx, ns, "ns", "missing", names, &v));
    assert_true(cfg_choice(&fx.ctx, ns, "ns", "d", names, &v));
    assert_int_equal(v, 1);
    assert_false(cfg_choice(&fx.ctx, ns, "ns", "b", names, &v));
    assert_error("c.yaml:3: ns.b: expected personal, shared or public, found 'private'");
    assert_false(cfg_choice(&fx.ctx, ns, "ns", "c", names, &v));
    assert_error("c.yaml:4: ns.c: expected a scalar, found a list");
    assert_false(cfg_choice(&fx.ctx, ns, "ns", "e", names, &v));
    assert_error("c.yaml:6: ns.e: expected personal, shared or public, found 'Shared'");
    assert_false(cfg_choice(&fx.ctx, ns, "", "f", two, &v));
    assert_error("c.yaml:7: f: expected any or own, found 'nope'");
    assert_int_equal(v, 1);
}

static void test_bool_refuses_strings_and_other_words(void **state)
{
    const struct ynode *root = load("tls:\n  enabled: \"true\"\n  other: maybe\n  n: 1\n");
    const struct ynode *tls = ynode_get(root, "tls");
    bool v = false;
    assert_false(cfg_bool(&fx.ctx, tls, "tls", "enabled", &v));
    assert_error("c.yaml:2: tls.enabled: expected true or false, found a quoted string");
    assert_false(cfg_bool(&fx.ctx, tls, "tls", "other", &v));
    assert_error("c.yaml:3: tls.other: expected true or false, found 'maybe'");
    assert_false(cfg_bool(&fx.ctx, tls, "tls", "n", &v));
    assert_error("c.yaml:4: tls.n: expected true or false, found '1'");
    assert_false(v);
}

static void test_int_reads_within_range(void **state)
{
    const struct ynode *m = load("a: 1024\nb: -3\nc: 0\nd: ~\n");
    int64_t v = 77;
    assert_true(cfg_int(&fx.ctx, m, "", "a", 0, 2048, &v));
    assert_int_equal(v, 1024);
    assert_true(cfg_int(&fx.ctx, m, "", "b", -5, 5, &v));
    assert_int_equal(v, -3);
    assert_true(cfg_int(&fx.ctx, m, "", "c", 0, 0, &v));
    assert_int_equal(v, 0);
    v = 77;
    assert_true(cfg_int(&fx.ctx, m, "", "d", 0, 1, &v));
    assert_true(cfg_int(&fx.ctx, m, "", "missing", 0, 1, &v));
    assert_int_equal(v, 77);
}

static void test_int_refuses_bad_text_and_out_of_range(void **state)
{
    const struct ynode *root = load("api:\n"
                                    "  a: 1023\n"
                                    "  b: 2049\n"
                                    "  c: 12abc\n"
                                    "  d: \"5\"\n"
                                    "  e: 0x10\n"
                                    "  f: 99999999999999999999\n"
                                    "  g: 1.5\n"
                                    "  h: [1]\n");
    const struct ynode *api = ynode_get(root, "api");
    int64_t v = 77;
    assert_false(cfg_int(&fx.ctx, api, "api", "a", 1024, 2048, &v));
    assert_error("c.yaml:2: api.a: 1023 is out of range [1024, 2048]");
    assert_false(cfg_int(&fx.ctx, api, "api", "b", 1024, 2048, &v));
    assert_error("c.yaml:3: api.b: 2049 is out of range [1024, 2048]");
    assert_false(cfg_int(&fx.ctx, api, "api", "c", 0, 100, &v));
    assert_error("c.yaml:4: api.c: expected an integer, found '12abc'");
    assert_false(cfg_int(&fx.ctx, api, "api", "d", 0, 100, &v));
    assert_error("c.yaml:5: api.d: expected an integer, found '5'");
    assert_false(cfg_int(&fx.ctx, api, "api", "e", 0, 100, &v));
    assert_error("c.yaml:6: api.e: expected an integer, found '0x10'");
    assert_false(cfg_int(&fx.ctx, api, "api", "f", 0, INT64_MAX, &v));
    assert_error("c.yaml:7: api.f: expected an integer, found '99999999999999999999'");
    assert_false(cfg_int(&fx.ctx, api, "api", "g", 0, 100, &v));
    assert_error("c.yaml:8: api.g: expected an integer, found '1.5'");
    assert_false(cfg_int(&fx.ctx, api, "api", "h", 0, 100, &v));
    assert_error("c.yaml:9: api.h: expected a scalar, found a list");
    assert_int_equal(v, 77);
}

static void test_duration_reader(void **state)
{
    const struct ynode *root = load("t:\n  a: 250ms\n  b: 30\n  c: soon\n  d: 2h\n  e: 5ms\n");
    const struct ynode *t = ynode_get(root, "t");
    int64_t v = 1;
    assert_true(cfg_duration_ms(&fx.ctx, t, "t", "a", 10, 60000, &v));
    assert_int_equal(v, 250);
    assert_true(cfg_duration_ms(&fx.ctx, t, "t", "b", 10, 60000, &v));
    assert_int_equal(v, 30000);
    assert_false(cfg_duration_ms(&fx.ctx, t, "t", "c", 10, 60000, &v));
    assert_error("c.yaml:4: t.c: expected a duration like 30s, 5m or 250ms, found 'soon'");
    assert_false(cfg_duration_ms(&fx.ctx, t, "t", "d", 10, 60000, &v));
    assert_error("c.yaml:5: t.d: duration out of range [10ms, 60000ms]");
    assert_false(cfg_duration_ms(&fx.ctx, t, "t", "e", 10, 60000, &v));
    assert_error("c.yaml:6: t.e: duration out of range [10ms, 60000ms]");
    assert_int_equal(v, 30000);
    assert_true(cfg_duration_ms(&fx.ctx, t, "t", "missing", 10, 60000, &v));
    assert_int_equal(v, 30000);
}

static void test_string_list(void **state)
{
    const struct ynode *root = load("nets:\n  - 10.0.0.0/8\n  - \"::1\"\n  - 5\n"
                                    "empty: []\n"
                                    "none: ~\n");
    char **v = NULL;
    size_t count = 99;
    assert_true(cfg_string_list(&fx.ctx, root, "", "nets", 3, &v, &count));
    assert_int_equal(count, 3);
    assert_string_equal(v[0], "10.0.0.0/8");
    assert_string_equal(v[1], "::1");
    assert_string_equal(v[2], "5");
    assert_null(v[3]);
    /* Replacing frees the previous list (checked by ASan). */
    assert_true(cfg_string_list(&fx.ctx, root, "", "empty", 3, &v, &count));
    assert_int_equal(count, 0);
    assert_non_null(v);
    assert_null(v[0]);
    char **keep = v;
    assert_true(cfg_string_list(&fx.ctx, root, "", "none", 3, &v, NULL));
    assert_ptr_equal(v, keep);
    assert_true(cfg_string_list(&fx.ctx, root, "", "missing", 3, &v, NULL));
    assert_ptr_equal(v, keep);
    cfg_strv_free(v);
    cfg_strv_free(NULL);
}

static void test_string_list_refusals(void **state)
{
    const struct ynode *root = load("s:\n"
                                    "  scalar: 10.0.0.0/8\n"
                                    "  nested:\n"
                                    "    - ok\n"
                                    "    - [a, b]\n"
                                    "  many: [a, b, c]\n"
                                    "  map: {a: b}\n");
    const struct ynode *s = ynode_get(root, "s");
    char **v = NULL;
    assert_false(cfg_string_list(&fx.ctx, s, "s", "scalar", 8, &v, NULL));
    assert_error("c.yaml:2: s.scalar: expected a list, found a scalar");
    assert_false(cfg_string_list(&fx.ctx, s, "s", "nested", 8, &v, NULL));
    assert_error("c.yaml:5: s.nested: list items must be strings, found a list");
    assert_false(cfg_string_list(&fx.ctx, s, "s", "many", 2, &v, NULL));
    assert_error("c.yaml:6: s.many: more than 2 items");
    assert_false(cfg_string_list(&fx.ctx, s, "s", "map", 8, &v, NULL));
    assert_error("c.yaml:7: s.map: expected a list, found a mapping");
    assert_null(v);
}

static void test_check_keys_names_the_unknown_key_and_its_line(void **state)
{
    static const char *const allowed[] = {"listen", "allowed_nets", NULL};
    const struct ynode *root = load("telemetry:\n  listen: \":1\"\n\n  lisen: \":2\"\n");
    const struct ynode *t = ynode_get(root, "telemetry");
    assert_false(cfg_check_keys(&fx.ctx, t, "telemetry", allowed));
    assert_error("c.yaml:4: telemetry.lisen: unknown key");
    static const char *const top[] = {"telemetry", NULL};
    assert_true(cfg_check_keys(&fx.ctx, root, "", top));
    static const char *const none[] = {NULL};
    assert_false(cfg_check_keys(&fx.ctx, root, "", none));
    assert_error("c.yaml:1: telemetry: unknown key");
    /* Not a map: nothing to check. */
    assert_true(cfg_check_keys(&fx.ctx, NULL, "x", none));
}

static void test_expect_map(void **state)
{
    const struct ynode *root = load("a: {x: 1}\nb:\nc: text\nd: [1]\ne: ''\n");
    assert_true(cfg_expect_map(&fx.ctx, ynode_get(root, "a"), "a"));
    assert_true(cfg_expect_map(&fx.ctx, ynode_get(root, "b"), "b"));
    assert_true(cfg_expect_map(&fx.ctx, NULL, "missing"));
    assert_false(cfg_expect_map(&fx.ctx, ynode_get(root, "c"), "c"));
    assert_error("c.yaml:3: c: expected a mapping, found a scalar");
    assert_false(cfg_expect_map(&fx.ctx, ynode_get(root, "d"), "d"));
    assert_error("c.yaml:4: d: expected a mapping, found a list");
    assert_false(cfg_expect_map(&fx.ctx, ynode_get(root, "e"), "e"));
    assert_error("c.yaml:5: e: expected a mapping, found a scalar");
}

static void test_fail_without_node_names_only_the_file(void **state)
{
    load("a: 1\n");
    assert_false(cfg_fail(&fx.ctx, NULL, "section", "broken %d", 7));
    assert_error("c.yaml: section: broken 7");
    assert_false(cfg_fail(&fx.ctx, ynode_get(fx.doc->root, "a"), "a", "bad"));
    assert_error("c.yaml:1: a: bad");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration_units),
        cmocka_unit_test(test_duration_compound_values_add_up),
        cmocka_unit_test(test_duration_plain_number_is_seconds),
        cmocka_unit_test(test_duration_malformed_text_is_refused),
        cmocka_unit_test(test_duration_overflow_is_refused),
        cmocka_unit_test_teardown(test_string_reads_scalars_and_keeps_defaults, teardown),
        cmocka_unit_test_teardown(test_string_refuses_lists_and_maps, teardown),
        cmocka_unit_test_teardown(test_bool_accepts_yaml_spellings, teardown),
        cmocka_unit_test_teardown(test_bool_refuses_strings_and_other_words, teardown),
        cmocka_unit_test_teardown(test_int_reads_within_range, teardown),
        cmocka_unit_test_teardown(test_int_refuses_bad_text_and_out_of_range, teardown),
        cmocka_unit_test_teardown(test_duration_reader, teardown),
        cmocka_unit_test_teardown(test_string_list, teardown),
        cmocka_unit_test_teardown(test_string_list_refusals, teardown),
        cmocka_unit_test_teardown(test_check_keys_names_the_unknown_key_and_its_line, teardown),
        cmocka_unit_test_teardown(test_expect_map, teardown),
        cmocka_unit_test_teardown(test_choice_gives_the_index_and_names_the_choices, teardown),
        cmocka_unit_test_teardown(test_fail_without_node_names_only_the_file, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
