/* Unit tests for the one user-name rule (core/user-name.h) and for its
 * users agreeing on it: a name auth lets log in is one the storage takes
 * and the warden records, and a name one refuses the others refuse too
 * (issue 21: before, auth accepted ".x" and "a\b", which the storage then
 * refused after a successful login). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/user-name.h"
#include "services/auth/auth-db.h"
#include "clients/warden/warden-protocol.h"
#include "storage/mail-storage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct name_case {
    const char *name;
    bool valid;
};

static const struct name_case cases[] = {
    {"alice", true},
    {"carol@example.com", true},
    {"j\xc3\xbcrgen", true}, /* UTF-8 */
    {"a.b", true},
    {"escape@..", true}, /* one path component; the template checks %d */
    {"", false},
    {".hidden", false},
    {".", false},
    {"..", false},
    {"a/b", false},
    {"a\\b", false},
    {"tab\there", false},
    {"del\x7f", false},
    {"c1\xc2\x85", false}, /* U+0085 NEL */
    {"bad\xff", false},    /* not UTF-8 */
    {"half\xc3", false},   /* truncated sequence */
};

static void test_rule(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct petrel_error err;
        petrel_error_clear(&err);
        bool ok = user_name_valid(cases[i].name, USER_NAME_MAX, &err);
        if (ok != cases[i].valid)
            fail_msg("'%s': valid=%d, want %d", cases[i].name, ok, cases[i].valid);
        if (!ok)
            assert_int_equal(err.code, PETREL_ERR_INVALID);
    }
}

static void test_maximum_is_a_parameter(void **state)
{
    (void)state;
    char name[1100];
    memset(name, 'u', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    name[USER_NAME_MAX] = '\0';
    assert_true(user_name_valid(name, USER_NAME_MAX, NULL));
    name[USER_NAME_MAX] = 'u';
    name[USER_NAME_MAX + 1] = '\0';
    assert_false(user_name_valid(name, USER_NAME_MAX, NULL));
    assert_true(warden_user_valid(name)); /* the registry takes longer names */
    name[USER_NAME_MAX + 1] = 'u';
    name[WARDEN_USER_MAX] = '\0';
    assert_true(warden_user_valid(name));
    name[WARDEN_USER_MAX] = 'u';
    name[WARDEN_USER_MAX + 1] = '\0';
    assert_false(warden_user_valid(name));
}

/* auth, the storage and the warden answer alike for every case. */
static void test_layers_agree(void **state)
{
    (void)state;
    struct namespace_config ns = {.name = "inbox",
                                  .type = NAMESPACE_PERSONAL,
                                  .prefix = "",
                                  .separator = '/',
                                  .location = "maildir:%h/Maildir",
                                  .subscriptions = true,
                                  .slug = "personal"};
    struct mail_config cfg = {
        .home = "/nonexistent/%u", .fsync = 2, .namespaces = &ns, .namespace_count = 1};
    struct mail_storage *storage = mail_storage_new(&cfg, NULL);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *name = cases[i].name;
        bool auth = auth_username_valid(name);
        bool store = mail_user_get(storage, name, NULL) != NULL;
        bool warden = warden_user_valid(name);
        if (auth != cases[i].valid || store != cases[i].valid || warden != cases[i].valid)
            fail_msg("'%s': auth=%d storage=%d warden=%d, want %d", name, auth, store, warden,
                     cases[i].valid);
    }
    mail_storage_free(storage);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule),
        cmocka_unit_test(test_maximum_is_a_parameter),
        cmocka_unit_test(test_layers_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
