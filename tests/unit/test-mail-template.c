/* Unit tests for mail_template_expand (storage/namespace.h): every value put
 * into a home or location path is checked, so no user name can lead the
 * expansion outside the directory the template names. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/namespace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void assert_expands(const char *tmpl, const char *user, const char *home, const char *want)
{
    struct buf out = {0};
    struct petrel_error err = {0};
    if (!mail_template_expand(tmpl, user, home, &out, &err))
        fail_msg("'%s' with user '%s' failed: %s", tmpl, user, err.message);
    assert_string_equal(buf_cstr(&out), want);
    buf_free(&out);
}

static void assert_refused(const char *tmpl, const char *user, const char *why)
{
    struct buf out = {0};
    struct petrel_error err = {0};
    if (mail_template_expand(tmpl, user, NULL, &out, &err))
        fail_msg("'%s' with user '%s' expanded to '%s'", tmpl, user, buf_cstr(&out));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    if (strstr(err.message, why) == NULL)
        fail_msg("'%s': error '%s' does not say '%s'", user, err.message, why);
    buf_free(&out);
}

static void test_valid_users_expand(void **state)
{
    (void)state;
    assert_expands("/m/%u", "alice", NULL, "/m/alice");
    assert_expands("/m/%d/%n", "carol@example.com", NULL, "/m/example.com/carol");
    assert_expands("/m/%d/%n", "x@sub-1.Example_2.org", NULL, "/m/sub-1.Example_2.org/x");
    assert_expands("/m/%u", "escape@..", NULL, "/m/escape@.."); /* one component, harmless */
    assert_expands("/m/%d/%n", "bob", NULL, "/m//bob");         /* no domain: %d is empty */
    assert_expands("%h/Maildir", "bob", "/m/bob", "/m/bob/Maildir");
    assert_expands("/m/100%%/%n", "bob", NULL, "/m/100%/bob");
}

static void test_domain_components_are_checked(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "escape@..", "escape@.", "escape@", "e@a..b", "e@.a",           "e@a.",
        "e@-a.b",    "e@a-.b",   "e@a b",   "e@a@b",  "e@\xc3\xa9.org", "e@a:b",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_refused("/m/%d/%n", bad[i], "domain");
    char long_label[80];
    memset(long_label, 'a', 64);
    strcpy(long_label + 64, ".org");
    char user[100];
    snprintf(user, sizeof(user), "e@%s", long_label);
    assert_refused("/m/%d/%n", user, "domain");
    strcpy(long_label + 63, ".org"); /* a 63-byte label is fine */
    snprintf(user, sizeof(user), "e@%s", long_label);
    struct buf out = {0};
    assert_true(mail_template_expand("/m/%d", user, NULL, &out, NULL));
    buf_free(&out);
    /* only a template that uses %d looks at the domain */
    assert_expands("/m/%n", "escape@..", NULL, "/m/escape");
}

static void test_user_and_local_part_are_checked(void **state)
{
    (void)state;
    assert_refused("/m/%n", "@example.com", "local part");
    assert_refused("/m/%u", "..", "user");
    assert_refused("/m/%u", "a/b", "user");
    assert_refused("/m/%n", "../x@example.com", "user");
    assert_refused("/m/%u", "", "user");
    /* a '/' or '\\' anywhere is refused with the user name itself */
    assert_refused("/m/%d/%n", "e@a/b", "user must not contain");
    assert_refused("/m/%d/%n", "e@../../etc", "user must not contain");
    assert_refused("/m/%d/%n", "e@a\\b", "user must not contain");
}

/* The namespace resolver of storage/namespace.h: by slug, and by the
 * longest prefix a full name starts with. */
static void test_namespace_resolver(void **state)
{
    (void)state;
    struct namespace_config ns[] = {
        {.name = "inbox",
         .type = NAMESPACE_PERSONAL,
         .prefix = "",
         .separator = '/',
         .slug = "personal"},
        {.name = "public",
         .type = NAMESPACE_PUBLIC,
         .prefix = "Public/",
         .separator = '/',
         .slug = "public"},
        {.name = "team",
         .type = NAMESPACE_PUBLIC,
         .prefix = "Public/Team/",
         .separator = '/',
         .slug = "publicteam"},
    };
    struct mail_config cfg = {.namespaces = ns, .namespace_count = 3};
    assert_ptr_equal(namespace_by_slug(&cfg, "public"), &ns[1]);
    assert_null(namespace_by_slug(&cfg, "nope"));
    const char *rest = NULL;
    assert_ptr_equal(namespace_by_prefix(&cfg, "Public/Team/Plans", &rest), &ns[2]);
    assert_string_equal(rest, "Plans");
    assert_ptr_equal(namespace_by_prefix(&cfg, "Public/Sent", &rest), &ns[1]);
    assert_string_equal(rest, "Sent");
    assert_ptr_equal(namespace_by_prefix(&cfg, "Publicity", &rest), &ns[0]);
    assert_string_equal(rest, "Publicity");
    struct mail_config none = {.namespaces = &ns[1], .namespace_count = 1};
    assert_null(namespace_by_prefix(&none, "INBOX", NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_users_expand),
        cmocka_unit_test(test_namespace_resolver),
        cmocka_unit_test(test_domain_components_are_checked),
        cmocka_unit_test(test_user_and_local_part_are_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
