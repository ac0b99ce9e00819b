/* Unit tests for clients/auth/userdb.h: setting fields by name (with and
 * without the userdb_ prefix), lists and their caps, bad uid/gid and CIDRs,
 * the JSON shape, allow_nets matching and deep copies. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "clients/auth/userdb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_ok(struct userdb_entry *e, const char *name, const char *value)
{
    char *error = NULL;
    if (!userdb_entry_set(e, name, value, &error))
        fail_msg("setting %s=%s failed: %s", name, value, error != NULL ? error : "(null)");
    assert_null(error);
}

/* Fails the set and checks that the message mentions `needle`. */
static void set_bad(struct userdb_entry *e, const char *name, const char *value, const char *needle)
{
    char *error = NULL;
    assert_false(userdb_entry_set(e, name, value, &error));
    assert_non_null(error);
    if (strstr(error, needle) == NULL)
        fail_msg("error '%s' does not mention '%s'", error, needle);
    free(error);
}

static void assert_list(char *const *list, const char *const *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        assert_non_null(list[i]);
        assert_string_equal(list[i], want[i]);
    }
    assert_null(list[n]);
}

static const char *extra_value(const struct userdb_entry *e, const char *key)
{
    for (size_t i = 0; i < e->extra_count; i++) {
        if (strcmp(e->extra[i].key, key) == 0)
            return e->extra[i].value;
    }
    return NULL;
}

static void test_new_is_unset(void **state)
{
    (void)state;
    struct userdb_entry *e = userdb_entry_new("alice@example.org");
    assert_string_equal(e->username, "alice@example.org");
    assert_null(e->password);
    assert_int_equal(e->uid, -1);
    assert_int_equal(e->gid, -1);
    assert_string_equal(e->home, "");
    assert_string_equal(e->mail_location, "");
    assert_null(e->groups[0]);
    assert_null(e->quota_rule[0]);
    assert_null(e->allow_nets[0]);
    assert_int_equal(e->extra_count, 0);
    assert_true(userdb_entry_allows_ip(e, "192.0.2.1"));
    userdb_entry_free(e);
    userdb_entry_free(NULL);
}

static void test_scalar_fields(void **state)
{
    (void)state;
    struct userdb_entry *e = userdb_entry_new("alice");
    set_ok(e, "uid", "1000");
    set_ok(e, "userdb_gid", "100");
    set_ok(e, "home", "/var/mail/alice");
    set_ok(e, "mail", "maildir:~/Maildir");
    assert_int_equal(e->uid, 1000);
    assert_int_equal(e->gid, 100);
    assert_string_equal(e->home, "/var/mail/alice");
    assert_string_equal(e->mail_location, "maildir:~/Maildir");

    set_ok(e, "userdb_mail_location", "sdbox:~/dbox");
    set_ok(e, "userdb_home", "/home/alice");
    set_ok(e, "UID", "0");
    set_ok(e, "gid", "4294967294");
    assert_string_equal(e->mail_location, "sdbox:~/dbox");
    assert_string_equal(e->home, "/home/alice");
    assert_int_equal(e->uid, 0);
    assert_int_equal(e->gid, 4294967294LL);
    assert_int_equal(e->extra_count, 0);
    userdb_entry_free(e);
}

static void test_bad_ids(void **state)
{
    (void)state;
    struct userdb_entry *e = userdb_entry_new("alice");
    set_ok(e, "uid", "1000");
    set_bad(e, "uid", "-1", "uid");
    set_bad(e, "uid", "", "non-negative integer");
    set_bad(e, "uid", "12a", "non-negative integer");
    set_bad(e, "uid", "alice", "non-negative integer");
    set_bad(e, "userdb_uid", "4294967295", "limit");
    set_bad(e, "uid", "99999999999999999999999", "limit");
    set_bad(e, "gid", "1.5", "gid");
    /* A failed set leaves the old value. */
    assert_int_equal(e->uid, 1000);
    assert_int_equal(e->gid, -1);
    /* NULL error pointer is allowed. */
    assert_false(userdb_entry_set(e, "uid", "x", NULL));
    userdb_entry_free(e);
}

static void test_groups(void **state)
{
    (void)state;
    struct userdb_entry *e = userdb_entry_new("alice");
    set_ok(e, "groups", " staff, , sales ,,");
    set_ok(e, "acl_groups", "sales,support");
    set_ok(e, "userdb_groups", "");
    const char *want[] = {"staff", "sales", "support"};
    assert_list(e->groups, want, 3);
    userdb_entry_free(e);
}

static void test_quota_rules_in_order(void **state)
{
    (void)state;
    struct userdb_entry *e = userdb_entry_new("alice");
    set_ok(e, "quota_rule", "*:storage=1G");
    set_ok(e, "userdb_quota_rule2", "Trash:storage=+100M");
    set_ok(e, "quota_rule3", "Spam:ignore");
    set_ok(e, "quota_rulex", "not a rule");
    const char *want[] = {"*:storage=1G", "Trash:storage=+100M", "Spam:ignore"};
    assert_list(e->quota_rule, want, 3);
    assert_string_equal(extra_value(e, "quota_rulex"), "not a rule");
    userdb_entry_free(e);
}

static void test_allow_nets(void **state)
{
    (void)state;
    struct userdb_entry *e = userdb_entry_new("alice");
    set_ok(e, "allow_nets", "10.0.0.0/8, 192.0.2.7 ,2001:db8::/32,::1");
    const char *want[] = {"10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::1"};
    assert_list(e->allow_nets, want, 4);

    set_bad(e, "allow_nets", "10.0.0.0/8,10.0.0.1/8", "10.0.0.1/8");
    set_bad(e, "userdb_allow_nets", "not-an-ip", "not-an-ip");
    set_bad(e, "allow_nets", "10.0.0.0/33", "prefix");
    assert_list(e->allow_nets, want, 4);

    /* allow_nets replaces: one field in every passdb. */
    set_ok(e, "userdb_allow_nets", "127.0.0.1");
    const char *want2[] = {"127.0.0.1"};
    assert_list(e->allow_nets, want2, 1);
    userdb_entry_free(e);
}

static void test_allows_ip(void **state)
{
    (void)state;
    struct userdb_entry *e = userdb_entry_new("alice");
    set_ok(e, "allow_nets", "10.0.0.0/8,192.0.2.7,2001:db8::/32");
    assert_true(userdb_entry_allows_ip(e, "10.1.2.3"));
    assert_true(userdb_entry_allows_ip(e, "192.0.2.7"));
    assert_false(userdb_entry_allows_ip(e, "192.0.2.8"));
    assert_false(userdb_entry_allows_ip(e, "11.0.0.1"));
    assert_true(userdb_entry_allows_ip(e, "2001:db8::1"));
    assert_true(userdb_entry_allows_ip(e, "2001:DB8:ffff::1"));
    assert_false(userdb_entry_allows_ip(e, "2001:db9::1"));
    /* IPv4-mapped peers match IPv4 networks. */
    assert_true(userdb_entry_allows_ip(e, "::ffff:10.9.9.9"));
    assert_true(userdb_entry_allows_ip(e, "::ffff:192.0.2.7"));
    assert_false(userdb_entry_allows_ip(e, "::ffff:192.0.2.9"));
    /* A zone is ignored. */
    assert_true(userdb_entry_allows_ip(e, "2001:db8::1%eth0"));
    /* Unparseable addresses are outside. */
    assert_false(userdb_entry_allows_ip(e, ""));
    assert_false(userdb_entry_allows_ip(e, "10.0.0"));
    assert_false(userdb_entry_allows_ip(e, "10.0.0.1/8"));
    assert_false(userdb_entry_allows_ip(e, "example.org"));
    assert_false(userdb_entry_allows_ip(e, NULL));

    set_ok(e, "allow_nets", "::/0");
    assert_true(userdb_entry_allows_ip(e, "2001:db8::5"));
    set_ok(e, "allow_nets", "0.0.0.0/0");
    assert_true(userdb_entry_allows_ip(e, "203.0.113.5"));
    assert_false(userdb_entry_allows_ip(e, "2001:db8::5"));
    userdb_entry_free(e);
}

static void test_extra_fields(void **state)
{
    (void)state;
    struct userdb_entry *e = userdb_entry_new("alice");
    set_ok(e, "nologin", "y");
    set_ok(e, "userdb_proxy_host", "imap2.example.org");
    set_ok(e, "nologin", "");
    assert_int_equal(e->extra_count, 2);
    assert_string_equal(extra_value(e, "nologin"), "");
    assert_string_equal(extra_value(e, "proxy_host"), "imap2.example.org");
    set_bad(e, "userdb_", "x", "empty field name");
    set_bad(e, "", "x", "empty field name");
    assert_false(userdb_entry_set(e, NULL, "x", NULL));
    assert_false(userdb_entry_set(e, "home", NULL, NULL));
    userdb_entry_free(e);
}

static void test_caps(void **state)
{
    (void)state;
    struct userdb_entry *e = userdb_entry_new("alice");
    char name[32];
    char value[32];
    for (int i = 0; i < USERDB_MAX_EXTRA; i++) {
        snprintf(name, sizeof(name), "x%d", i);
        set_ok(e, name, "v");
    }
    set_bad(e, "one_more", "v", "extra fields");
    set_ok(e, "x0", "replacing is not adding");
    assert_int_equal(e->extra_count, USERDB_MAX_EXTRA);

    for (int i = 0; i < USERDB_MAX_LIST; i++) {
        snprintf(name, sizeof(name), "quota_rule%d", i + 1);
        snprintf(value, sizeof(value), "box%d:storage=1M", i);
        set_ok(e, name, value);
    }
    set_bad(e, "quota_rule999", "x:ignore", "quota rules");

    char groups[USERDB_MAX_LIST * 8 + 16];
    size_t off = 0;
    for (int i = 0; i < USERDB_MAX_LIST; i++)
        off += (size_t)snprintf(groups + off, sizeof(groups) - off, "g%d,", i);
    set_ok(e, "groups", groups);
    set_ok(e, "acl_groups", "g0,g1");
    set_bad(e, "acl_groups", "g0,one_more", "groups");
    assert_int_equal(strcmp(e->groups[USERDB_MAX_LIST - 1], "g63"), 0);
    assert_null(e->groups[USERDB_MAX_LIST]);

    char nets[USERDB_MAX_LIST * 16 + 32];
    off = 0;
    for (int i = 0; i <= USERDB_MAX_LIST; i++)
        off += (size_t)snprintf(nets + off, sizeof(nets) - off, "10.0.%d.0/24,", i);
    set_bad(e, "allow_nets", nets, "networks");
    assert_null(e->allow_nets[0]);

    char *big = malloc(USERDB_MAX_FIELD + 2);
    memset(big, 'a', USERDB_MAX_FIELD + 1);
    big[USERDB_MAX_FIELD + 1] = '\0';
    set_bad(e, "home", big, "longer than");
    set_bad(e, big, "v", "longer than");
    big[USERDB_MAX_FIELD] = '\0';
    set_ok(e, "home", big);
    free(big);
    userdb_entry_free(e);
}

static void test_json_shape(void **state)
{
    (void)state;
    struct userdb_entry *e = userdb_entry_new("alice");
    json_t *j = userdb_entry_to_json(e);
    char *text = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(text, "{\"allow_nets\":[],\"extra\":{},\"gid\":-1,\"groups\":[],"
                              "\"home\":\"\",\"mail_location\":\"\",\"quota_rule\":[],"
                              "\"uid\":-1}");
    free(text);
    json_decref(j);

    set_ok(e, "uid", "1000");
    set_ok(e, "gid", "1000");
    set_ok(e, "home", "/home/alice");
    set_ok(e, "mail", "maildir:~/Maildir");
    set_ok(e, "groups", "staff,sales");
    set_ok(e, "quota_rule", "*:storage=1G");
    set_ok(e, "allow_nets", "10.0.0.0/8");
    set_ok(e, "nologin", "y");
    set_ok(e, "latin1", "caf\xe9");
    e->password = strdup("{PLAIN}secret");
    j = userdb_entry_to_json(e);
    text = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(text, "{\"allow_nets\":[\"10.0.0.0/8\"],"
                              "\"extra\":{\"latin1\":\"caf\xef\xbf\xbd\",\"nologin\":\"y\"},"
                              "\"gid\":1000,\"groups\":[\"staff\",\"sales\"],"
                              "\"home\":\"/home/alice\",\"mail_location\":\"maildir:~/Maildir\","
                              "\"quota_rule\":[\"*:storage=1G\"],\"uid\":1000}");
    assert_null(strstr(text, "secret"));
    free(text);
    json_decref(j);
    userdb_entry_free(e);
}

static void assert_entries_equal(const struct userdb_entry *a, const struct userdb_entry *b)
{
    assert_string_equal(a->username, b->username);
    if (a->password == NULL)
        assert_null(b->password);
    else
        assert_string_equal(a->password, b->password);
    json_t *ja = userdb_entry_to_json(a);
    json_t *jb = userdb_entry_to_json(b);
    assert_true(json_equal(ja, jb));
    json_decref(ja);
    json_decref(jb);
    assert_int_equal(a->extra_count, b->extra_count);
    for (size_t i = 0; i < a->extra_count; i++) {
        assert_string_equal(a->extra[i].key, b->extra[i].key);
        assert_string_equal(a->extra[i].value, b->extra[i].value);
    }
    assert_int_equal(userdb_entry_bytes(a), userdb_entry_bytes(b));
}

static void test_clone_and_bytes(void **state)
{
    (void)state;
    struct userdb_entry *e = userdb_entry_new("alice");
    size_t empty_bytes = userdb_entry_bytes(e);
    assert_true(empty_bytes >= sizeof(*e));

    struct userdb_entry *c = userdb_entry_clone(e);
    assert_entries_equal(e, c);
    userdb_entry_free(c);

    set_ok(e, "uid", "1000");
    set_ok(e, "home", "/home/alice");
    set_ok(e, "groups", "staff,sales");
    set_ok(e, "quota_rule", "*:storage=1G");
    set_ok(e, "allow_nets", "10.0.0.0/8");
    set_ok(e, "nologin", "y");
    e->password = strdup("{SHA512-CRYPT}$6$x$y");
    size_t full_bytes = userdb_entry_bytes(e);
    assert_true(full_bytes > empty_bytes + strlen("/home/alice") + strlen("*:storage=1G"));

    c = userdb_entry_clone(e);
    assert_entries_equal(e, c);
    /* Deep: changing the copy leaves the original alone. */
    assert_ptr_not_equal(c->home, e->home);
    assert_ptr_not_equal(c->groups, e->groups);
    set_ok(c, "groups", "more");
    set_ok(c, "nologin", "n");
    assert_null(e->groups[2]);
    assert_string_equal(extra_value(e, "nologin"), "y");
    userdb_entry_free(e);
    userdb_entry_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_is_unset),
        cmocka_unit_test(test_scalar_fields),
        cmocka_unit_test(test_bad_ids),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_quota_rules_in_order),
        cmocka_unit_test(test_allow_nets),
        cmocka_unit_test(test_allows_ip),
        cmocka_unit_test(test_extra_fields),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_json_shape),
        cmocka_unit_test(test_clone_and_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
