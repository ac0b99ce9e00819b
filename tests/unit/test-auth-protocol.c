/* Unit tests for clients/auth/auth-protocol.h: escaping round trips of
 * every byte, bad escapes, line and field limits, parameters and flags,
 * request ids, and userdb fields as parameters both ways. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "clients/auth/auth-protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A parsed line together with the copy its fields point into. */
struct parsed {
    char *copy;
    struct auth_line line;
};

/* Parses `len` bytes from an exact-size heap copy (plus the LF's place, which
 * the parser may write) so that reading past the end shows under ASan. */
static bool parse_n(const char *text, size_t len, struct parsed *p, struct petrel_error *err)
{
    p->copy = malloc(len + 1);
    assert_non_null(p->copy);
    memcpy(p->copy, text, len);
    p->copy[len] = '\n';
    return auth_line_parse(p->copy, len, &p->line, err);
}

/* Parses one complete line as written by auth_line_end(). */
static void parse_written(const struct buf *b, struct parsed *p)
{
    assert_true(b->len > 0);
    assert_int_equal(b->data[b->len - 1], '\n');
    assert_null(memchr(b->data, '\n', b->len - 1));
    struct petrel_error err = {0};
    if (!parse_n(b->data, b->len - 1, p, &err))
        fail_msg("written line does not parse: %s", err.message);
}

static void expect_parse_error(const char *text, size_t len, const char *reason_part)
{
    struct parsed p;
    struct petrel_error err = {0};
    bool ok = parse_n(text, len, &p, &err);
    free(p.copy);
    if (ok)
        fail_msg("expected a parse error for '%.*s'", (int)len, text);
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    if (strstr(err.message, reason_part) == NULL)
        fail_msg("error '%s' does not mention '%s'", err.message, reason_part);
}

static void test_every_byte_round_trips(void **state)
{
    (void)state;
    /* One field per byte value, then one field holding all of them. */
    char all[256];
    for (int i = 1; i <= 255; i++)
        all[i - 1] = (char)i;
    all[255] = '\0';
    struct buf b = {0};
    for (int i = 1; i <= 255; i++) {
        char one[2] = {(char)i, '\0'};
        auth_line_add(&b, one);
    }
    auth_line_add(&b, all);
    auth_line_add(&b, "");
    auth_line_end(&b);
    /* On the wire: no raw separator, terminator or CR inside the line. */
    size_t tabs = 0;
    for (size_t i = 0; i + 1 < b.len; i++) {
        assert_true(b.data[i] != '\n' && b.data[i] != '\r');
        if (b.data[i] == '\t')
            tabs++;
    }
    assert_int_equal(tabs, 256);

    struct parsed p;
    parse_written(&b, &p);
    assert_int_equal(p.line.count, 257);
    for (int i = 1; i <= 255; i++) {
        assert_int_equal(strlen(p.line.fields[i - 1]), 1);
        assert_int_equal((unsigned char)p.line.fields[i - 1][0], i);
    }
    assert_string_equal(p.line.fields[255], all);
    assert_string_equal(p.line.fields[256], "");
    free(p.copy);
    buf_free(&b);
}

static void test_escapes_on_the_wire(void **state)
{
    (void)state;
    struct buf b = {0};
    auth_line_add(&b, "VERIFY");
    auth_line_add(&b, "a\tb\nc\rd\\e");
    auth_line_add_param(&b, "k\t", "v=\\");
    auth_line_end(&b);
    assert_string_equal(buf_cstr(&b), "VERIFY\ta\\tb\\nc\\rd\\\\e\tk\\t=v=\\\\\n");
    /* A second line in the same buffer starts without a separator. */
    auth_line_add(&b, "DONE");
    auth_line_add(&b, "7");
    auth_line_end(&b);
    assert_string_equal(buf_cstr(&b) + strlen("VERIFY\ta\\tb\\nc\\rd\\\\e\tk\\t=v=\\\\\n"),
                        "DONE\t7\n");
    buf_free(&b);
}

static void test_pseudo_random_fields_round_trip(void **state)
{
    (void)state;
    uint32_t x = 12345;
    for (int round = 0; round < 500; round++) {
        struct buf b = {0};
        char fields[8][64];
        size_t n = 1 + (size_t)(round % 8);
        /* A verb first: a line of one empty field would be an empty line. */
        auth_line_add(&b, "X");
        for (size_t f = 0; f < n; f++) {
            size_t len = (size_t)(round * 7 + f * 13) % 63;
            for (size_t i = 0; i < len; i++) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                /* Bias towards the bytes that need escaping. */
                static const char special[] = "\\\t\n\r=";
                fields[f][i] = (x & 3) == 0 ? special[(x >> 2) % 5] : (char)(1 + (x >> 8) % 255);
            }
            fields[f][len] = '\0';
            auth_line_add(&b, fields[f]);
        }
        auth_line_end(&b);
        struct parsed p;
        parse_written(&b, &p);
        assert_int_equal(p.line.count, n + 1);
        for (size_t f = 0; f < n; f++)
            assert_string_equal(p.line.fields[f + 1], fields[f]);
        free(p.copy);
        buf_free(&b);
    }
}

static void test_empty_fields(void **state)
{
    (void)state;
    struct parsed p;
    struct petrel_error err = {0};
    const char *text = "a\t\tb\t";
    assert_true(parse_n(text, strlen(text), &p, &err));
    assert_int_equal(p.line.count, 4);
    assert_string_equal(p.line.fields[0], "a");
    assert_string_equal(p.line.fields[1], "");
    assert_string_equal(p.line.fields[2], "b");
    assert_string_equal(p.line.fields[3], "");
    free(p.copy);

    assert_true(parse_n("\t", 1, &p, &err));
    assert_int_equal(p.line.count, 2);
    free(p.copy);

    /* Raw control bytes other than TAB are data. */
    assert_true(parse_n("a\rb\x01", 4, &p, &err));
    assert_int_equal(p.line.count, 1);
    assert_string_equal(p.line.fields[0], "a\rb\x01");
    free(p.copy);
}

static void test_bad_lines(void **state)
{
    (void)state;
    expect_parse_error("", 0, "empty");
    expect_parse_error("a\\", 2, "end of the line");
    expect_parse_error("a\\x", 3, "bad escape '\\x'");
    expect_parse_error("a\\T", 3, "bad escape");
    expect_parse_error("\\ b", 3, "bad escape");
    expect_parse_error("a\\0b", 4, "escaped NUL");
    expect_parse_error("a\0b", 3, "NUL byte");
    expect_parse_error("a\\\0", 3, "NUL byte");
    expect_parse_error("ok\tx\\\xff", 6, "bad escape '\\?'");
}

static void test_line_length_limit(void **state)
{
    (void)state;
    char *big = malloc(AUTH_LINE_MAX + 2);
    assert_non_null(big);
    memset(big, 'a', AUTH_LINE_MAX + 1);
    struct parsed p;
    struct petrel_error err = {0};
    assert_true(parse_n(big, AUTH_LINE_MAX, &p, &err));
    assert_int_equal(p.line.count, 1);
    assert_int_equal(strlen(p.line.fields[0]), AUTH_LINE_MAX);
    free(p.copy);
    expect_parse_error(big, AUTH_LINE_MAX + 1, "longer than");
    free(big);
}

static void test_field_count_limit(void **state)
{
    (void)state;
    struct buf b = {0};
    for (int i = 0; i < AUTH_MAX_FIELDS; i++)
        auth_line_add(&b, "x");
    struct parsed p;
    struct petrel_error err = {0};
    assert_true(parse_n(b.data, b.len, &p, &err));
    assert_int_equal(p.line.count, AUTH_MAX_FIELDS);
    free(p.copy);
    auth_line_add(&b, "x");
    expect_parse_error(b.data, b.len, "more than");
    /* Empty fields count as well. */
    buf_reset(&b);
    for (int i = 0; i < AUTH_MAX_FIELDS; i++)
        buf_append_char(&b, '\t');
    expect_parse_error(b.data, b.len, "more than");
    buf_free(&b);
}

static void test_params_and_flags(void **state)
{
    (void)state;
    struct buf b = {0};
    auth_line_add(&b, "FAIL");
    auth_line_add(&b, "17");
    auth_line_add_param(&b, "user", "a=b\tc");
    auth_line_add_param(&b, "reason", "");
    auth_line_add(&b, "temp");
    auth_line_add_param(&b, "user", "second");
    auth_line_end(&b);
    struct parsed p;
    parse_written(&b, &p);
    assert_int_equal(p.line.count, 6);
    assert_string_equal(auth_line_param(&p.line, 2, "user"), "a=b\tc"); /* first one wins */
    assert_string_equal(auth_line_param(&p.line, 2, "reason"), "");
    assert_string_equal(auth_line_param(&p.line, 2, "temp"), "");
    assert_null(auth_line_param(&p.line, 2, "te"));
    assert_null(auth_line_param(&p.line, 2, "tempx"));
    assert_null(auth_line_param(&p.line, 2, "us"));
    assert_null(auth_line_param(&p.line, 2, "missing"));
    /* Positional fields before `first` are not parameters. */
    assert_null(auth_line_param(&p.line, 2, "17"));
    assert_string_equal(auth_line_param(&p.line, 1, "17"), "");
    assert_null(auth_line_param(&p.line, 6, "user"));
    assert_null(auth_line_param(&p.line, 100, "user"));
    free(p.copy);
    buf_free(&b);
}

static void test_ids(void **state)
{
    (void)state;
    assert_true(auth_id_valid("1"));
    assert_true(auth_id_valid("req-17.a_B"));
    assert_true(auth_id_valid("-"));
    char id[AUTH_ID_MAX + 2];
    memset(id, '9', AUTH_ID_MAX);
    id[AUTH_ID_MAX] = '\0';
    assert_true(auth_id_valid(id));
    id[AUTH_ID_MAX] = '9';
    id[AUTH_ID_MAX + 1] = '\0';
    assert_false(auth_id_valid(id));
    assert_false(auth_id_valid(""));
    assert_false(auth_id_valid("a b"));
    assert_false(auth_id_valid("a/b"));
    assert_false(auth_id_valid("a=b"));
    assert_false(auth_id_valid("\xc3\xa9"));
    assert_false(auth_id_valid("a\tb"));
}

static struct userdb_entry *full_entry(void)
{
    struct userdb_entry *e = userdb_entry_new("alice");
    char *error = NULL;
    assert_true(userdb_entry_set(e, "uid", "1000", &error));
    assert_true(userdb_entry_set(e, "gid", "0", &error));
    assert_true(userdb_entry_set(e, "home", "/srv/mail/a\tl\\ice\n", &error));
    assert_true(userdb_entry_set(e, "mail", "maildir:~/Maildir", &error));
    assert_true(userdb_entry_set(e, "groups", "staff, sales", &error));
    assert_true(userdb_entry_set(e, "quota_rule", "*:storage=1G", &error));
    assert_true(userdb_entry_set(e, "quota_rule2", "Trash:storage=+10%", &error));
    assert_true(userdb_entry_set(e, "quota_rule3", "*:storage=1G", &error)); /* a repeat */
    assert_true(userdb_entry_set(e, "allow_nets", "10.0.0.0/8, ::1/128", &error));
    assert_true(userdb_entry_set(e, "nice", "x=y\tz", &error));
    assert_true(userdb_entry_set(e, "empty", "", &error));
    assert_true(userdb_entry_set(e, "\xff\x01", "\r\n", &error));
    return e;
}

static void assert_list_equal(char *const *a, char *const *b)
{
    size_t i = 0;
    for (; a[i] != NULL && b[i] != NULL; i++)
        assert_string_equal(a[i], b[i]);
    assert_null(a[i]);
    assert_null(b[i]);
}

static void assert_userdb_equal(const struct userdb_entry *a, const struct userdb_entry *b)
{
    assert_int_equal(a->uid, b->uid);
    assert_int_equal(a->gid, b->gid);
    assert_string_equal(a->home, b->home);
    assert_string_equal(a->mail_location, b->mail_location);
    assert_list_equal(a->groups, b->groups);
    assert_list_equal(a->quota_rule, b->quota_rule);
    assert_list_equal(a->allow_nets, b->allow_nets);
    assert_int_equal(a->extra_count, b->extra_count);
    for (size_t i = 0; i < a->extra_count; i++) {
        assert_string_equal(a->extra[i].key, b->extra[i].key);
        assert_string_equal(a->extra[i].value, b->extra[i].value);
    }
}

/* Writes "OK 1 <user> <userdb>", parses it and reads the userdb back. */
static struct userdb_entry *round_trip(const struct userdb_entry *e)
{
    struct buf b = {0};
    auth_line_add(&b, "OK");
    auth_line_add(&b, "1");
    auth_line_add(&b, e->username);
    auth_line_add_userdb(&b, e);
    auth_line_end(&b);
    struct parsed p;
    parse_written(&b, &p);
    assert_string_equal(p.line.fields[2], e->username);
    struct userdb_entry *back = userdb_entry_new(p.line.fields[2]);
    char *error = NULL;
    if (!auth_line_read_userdb(&p.line, 3, back, &error))
        fail_msg("userdb does not read back: %s", error);
    assert_null(error);
    free(p.copy);
    buf_free(&b);
    return back;
}

static void test_userdb_round_trip(void **state)
{
    (void)state;
    struct userdb_entry *e = full_entry();
    struct userdb_entry *back = round_trip(e);
    assert_userdb_equal(e, back);
    assert_int_equal(back->quota_rule[2] != NULL, 1);
    userdb_entry_free(back);
    userdb_entry_free(e);

    /* Nothing set: no parameters at all, and everything reads back unset. */
    e = userdb_entry_new("bob");
    struct buf b = {0};
    auth_line_add_userdb(&b, e);
    assert_int_equal(b.len, 0);
    buf_free(&b);
    back = round_trip(e);
    assert_int_equal(back->uid, -1);
    assert_int_equal(back->gid, -1);
    assert_string_equal(back->home, "");
    assert_null(back->groups[0]);
    assert_int_equal(back->extra_count, 0);
    userdb_entry_free(back);
    userdb_entry_free(e);
}

static void test_userdb_list_caps_round_trip(void **state)
{
    (void)state;
    struct userdb_entry *e = userdb_entry_new("carol");
    char *error = NULL;
    for (int i = 0; i < USERDB_MAX_LIST; i++) {
        char v[32];
        snprintf(v, sizeof(v), "g%d", i);
        assert_true(userdb_entry_set(e, "groups", v, &error));
        snprintf(v, sizeof(v), "*:messages=%d", i);
        assert_true(userdb_entry_set(e, "quota_rule", v, &error));
    }
    for (int i = 0; i < USERDB_MAX_EXTRA; i++) {
        char k[32];
        snprintf(k, sizeof(k), "x%d", i);
        assert_true(userdb_entry_set(e, k, "v", &error));
    }
    char *long_home = malloc(USERDB_MAX_FIELD + 1);
    memset(long_home, 'h', USERDB_MAX_FIELD);
    long_home[USERDB_MAX_FIELD] = '\0';
    assert_true(userdb_entry_set(e, "home", long_home, &error));
    free(long_home);
    struct userdb_entry *back = round_trip(e);
    assert_userdb_equal(e, back);
    userdb_entry_free(back);
    userdb_entry_free(e);
}

static void test_userdb_unrepresentable_extra_left_out(void **state)
{
    (void)state;
    struct userdb_entry *e = userdb_entry_new("dave");
    /* Only a driver bypassing userdb_entry_set could store these. */
    e->extra = calloc(3, sizeof(*e->extra));
    e->extra[0].key = strdup("a=b");
    e->extra[0].value = strdup("c");
    e->extra[1].key = strdup("");
    e->extra[1].value = strdup("d");
    e->extra[2].key = strdup("ok");
    e->extra[2].value = strdup("=");
    e->extra_count = 3;
    struct userdb_entry *back = round_trip(e);
    assert_int_equal(back->extra_count, 1);
    assert_string_equal(back->extra[0].key, "ok");
    assert_string_equal(back->extra[0].value, "=");
    userdb_entry_free(back);
    userdb_entry_free(e);
}

/* Reads the userdb parameters of `fields` (NULL-terminated); returns the
 * error text or NULL, and the entry in *out when it is wanted. */
static char *read_fields(const char *const *fields, struct userdb_entry **out)
{
    struct buf b = {0};
    for (size_t i = 0; fields[i] != NULL; i++)
        auth_line_add(&b, fields[i]);
    auth_line_end(&b);
    struct parsed p;
    parse_written(&b, &p);
    struct userdb_entry *e = userdb_entry_new("u");
    char *error = NULL;
    bool ok = auth_line_read_userdb(&p.line, 0, e, &error);
    assert_true(ok == (error == NULL));
    free(p.copy);
    buf_free(&b);
    if (out != NULL)
        *out = e;
    else
        userdb_entry_free(e);
    return error;
}

static void expect_userdb_error(const char *field, const char *reason_part)
{
    const char *fields[] = {"uid=1", field, NULL};
    char *error = read_fields(fields, NULL);
    if (error == NULL)
        fail_msg("'%s' was accepted", field);
    if (strstr(error, reason_part) == NULL)
        fail_msg("error '%s' for '%s' does not mention '%s'", error, field, reason_part);
    free(error);
}

static void test_userdb_bad_values(void **state)
{
    (void)state;
    expect_userdb_error("uid=abc", "uid");
    expect_userdb_error("uid=-1", "uid");
    expect_userdb_error("gid=99999999999", "gid");
    expect_userdb_error("uid=", "uid");
    expect_userdb_error("allow_net=10.0.0.1/8", "allow_net");
    expect_userdb_error("allow_net=nonsense", "allow_net");
    expect_userdb_error("allow_net=", "allow_net");
    expect_userdb_error("extra=novalue", "extra");
    expect_userdb_error("extra==v", "extra");
    expect_userdb_error("group=", "group");

    char *too_long = malloc(USERDB_MAX_FIELD + 16);
    snprintf(too_long, 16, "home=");
    memset(too_long + 5, 'h', USERDB_MAX_FIELD + 1);
    too_long[5 + USERDB_MAX_FIELD + 1] = '\0';
    expect_userdb_error(too_long, "longer than");
    free(too_long);

    /* One past each list cap. */
    const char *keys[] = {"group=g%d", "quota_rule=*:messages=%d", "allow_net=10.0.%d.0/24",
                          "extra=k%d=v"};
    for (size_t k = 0; k < 4; k++) {
        int cap = k == 3 ? USERDB_MAX_EXTRA : USERDB_MAX_LIST;
        const char **fields = calloc((size_t)cap + 2, sizeof(char *));
        char **owned = calloc((size_t)cap + 1, sizeof(char *));
        for (int i = 0; i <= cap; i++) {
            owned[i] = malloc(64);
            snprintf(owned[i], 64, keys[k], i);
            fields[i] = owned[i];
        }
        char *error = read_fields(fields, NULL);
        assert_non_null(error);
        assert_non_null(strstr(error, "more than"));
        free(error);
        /* Exactly at the cap is fine. */
        fields[cap] = NULL;
        error = read_fields(fields, NULL);
        assert_null(error);
        for (int i = 0; i <= cap; i++)
            free(owned[i]);
        free(owned);
        free(fields);
    }
}

static void test_userdb_forward_compatible_and_repeats(void **state)
{
    (void)state;
    const char *fields[] = {"futurekey=1",
                            "flag",
                            "uid=5",
                            "uid=6",
                            "group=a",
                            "group=a",
                            "group=b,c",
                            "extra=k=1",
                            "extra=k=2",
                            "extra=j==x",
                            "averyveryveryverylongkey=z",
                            "mail_location=m",
                            "=",
                            "home=/h",
                            NULL};
    struct userdb_entry *e = NULL;
    char *error = read_fields(fields, &e);
    assert_null(error);
    assert_int_equal(e->uid, 6); /* the last one wins */
    assert_int_equal(e->gid, -1);
    assert_string_equal(e->home, "/h");
    assert_string_equal(e->mail_location, "m");
    assert_string_equal(e->groups[0], "a");
    assert_string_equal(e->groups[1], "b,c"); /* one group per parameter, taken as is */
    assert_null(e->groups[2]);
    assert_int_equal(e->extra_count, 2);
    assert_string_equal(e->extra[0].key, "k");
    assert_string_equal(e->extra[0].value, "2");
    assert_string_equal(e->extra[1].key, "j");
    assert_string_equal(e->extra[1].value, "=x");
    userdb_entry_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_byte_round_trips),
        cmocka_unit_test(test_escapes_on_the_wire),
        cmocka_unit_test(test_pseudo_random_fields_round_trip),
        cmocka_unit_test(test_empty_fields),
        cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_line_length_limit),
        cmocka_unit_test(test_field_count_limit),
        cmocka_unit_test(test_params_and_flags),
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_userdb_round_trip),
        cmocka_unit_test(test_userdb_list_caps_round_trip),
        cmocka_unit_test(test_userdb_unrepresentable_extra_left_out),
        cmocka_unit_test(test_userdb_bad_values),
        cmocka_unit_test(test_userdb_forward_compatible_and_repeats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
