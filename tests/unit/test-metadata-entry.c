/* Unit tests for storage/metadata/metadata-entry.h: RFC 5464 entry names
 * (what Dovecot 2.3 accepts and refuses for the same input), DEPTH, and
 * the dict keys of Dovecot's mail_attribute_dict layout. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/metadata/metadata-entry.h"

#include <stdio.h>
#include <string.h>

#define GUID "e82fbd0231f4086b7060000083ecc375"

static struct metadata_entry entry(const char *text, bool bare_ok)
{
    struct metadata_entry e;
    const char *why = NULL;
    assert_true(metadata_entry_parse(text, strlen(text), bare_ok, &e, &why));
    return e;
}

static const char *fmt(const struct metadata_entry *e)
{
    static char out[METADATA_ENTRY_MAX + 16];
    struct buf b = {0};
    metadata_entry_format(e, &b);
    snprintf(out, sizeof(out), "%s", buf_cstr(&b));
    buf_free(&b);
    return out;
}

static void test_names(void **state)
{
    (void)state;
    struct metadata_entry e = entry("/shared/Comment", false);
    assert_int_equal(e.scope, METADATA_SHARED);
    assert_string_equal(e.path, "comment"); /* case-insensitive, kept lower */
    assert_string_equal(fmt(&e), "/shared/comment");
    e = entry("/PRIVATE/Vendor/x.y/Z z", false);
    assert_int_equal(e.scope, METADATA_PRIVATE);
    assert_string_equal(fmt(&e), "/private/vendor/x.y/z z");
    e = entry("/private", true);
    assert_string_equal(e.path, "");
    assert_string_equal(fmt(&e), "/private");
    static const struct {
        const char *text;
        const char *why;
    } bad[] = {
        /* Dovecot 2.3 answers BAD to each of these */
        {"/private/a//b", "Entry name can't contain consecutive '/'"},
        {"/private/a/b/", "Entry name can't end with '/'"},
        {"/private/", "Entry name can't end with '/'"},
        {"/private/a*b", "Entry name can't contain '*' or '%'"},
        {"/shared/a%", "Entry name can't contain '*' or '%'"},
        {"/other/a", "Entry name must begin with /private or /shared"},
        {"/privatex/a", "Entry name must begin with /private or /shared"},
        {"private/a", "Entry name must begin with /private or /shared"},
        {"", "Entry name must begin with /private or /shared"},
        /* not an entry to set (Dovecot stores it under an empty name) */
        {"/private", "Entry name must name an entry below /private or /shared"},
        {"/shared/caf\xc3\xa9", "Entry name must be printable ASCII"},
        {"/shared/a\tb", "Entry name must be printable ASCII"},
        {"/shared/a\x7f", "Entry name must be printable ASCII"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *why = NULL;
        assert_false(metadata_entry_parse(bad[i].text, strlen(bad[i].text), false, &e, &why));
        assert_string_equal(why, bad[i].why);
    }
    char big[METADATA_ENTRY_MAX + 2];
    memcpy(big, "/shared/", 8);
    memset(big + 8, 'a', sizeof(big) - 9);
    big[sizeof(big) - 1] = '\0';
    const char *why = NULL;
    assert_false(metadata_entry_parse(big, strlen(big), false, &e, &why));
    assert_string_equal(why, "Entry name is too long");
    assert_true(metadata_entry_parse(big, strlen(big) - 1, false, &e, &why));
}

static void test_internal(void **state)
{
    (void)state;
    struct metadata_entry e = entry("/private/vendor/vendor.dovecot/pvt/x", false);
    assert_true(metadata_entry_internal(&e));
    e = entry("/shared/vendor/vendor.dovecot/pvt", false);
    assert_true(metadata_entry_internal(&e));
    e = entry("/shared/vendor/vendor.dovecot/pvtx", false);
    assert_false(metadata_entry_internal(&e));
    e = entry("/shared/vendor/vendor.dovecot/public", false);
    assert_false(metadata_entry_internal(&e));
}

static void test_dict_keys(void **state)
{
    (void)state;
    /* the keys Dovecot 2.3 wrote for SETMETADATA INBOX (/private/comment
     * "mine" /shared/Comment "ours") */
    struct buf b = {0};
    struct metadata_entry e = entry("/private/comment", false);
    metadata_dict_key(&e, GUID, false, &b);
    assert_string_equal(buf_cstr(&b), "priv/" GUID "/comment");
    buf_reset(&b);
    e = entry("/shared/Comment", false);
    metadata_dict_key(&e, GUID, false, &b);
    assert_string_equal(buf_cstr(&b), "shared/" GUID "/comment");
    buf_reset(&b);
    metadata_dict_key(&e, GUID, true, &b);
    assert_string_equal(buf_cstr(&b), "shared/" GUID "/vendor/vendor.dovecot/pvt/server/comment");
    buf_reset(&b);
    metadata_dict_prefix(METADATA_PRIVATE, GUID, false, &b);
    assert_string_equal(buf_cstr(&b), "priv/" GUID "/");
    buf_free(&b);
    /* and back */
    struct metadata_entry back;
    assert_true(metadata_entry_from_key("shared/" GUID "/comment", METADATA_SHARED, GUID, false,
                                        &back));
    assert_string_equal(fmt(&back), "/shared/comment");
    assert_true(metadata_entry_from_key("shared/" GUID "/vendor/vendor.dovecot/pvt/server/admin",
                                        METADATA_SHARED, GUID, true, &back));
    assert_string_equal(fmt(&back), "/shared/admin");
    /* server entries are not the INBOX's own; internal, foreign and odd keys are skipped */
    assert_false(metadata_entry_from_key("shared/" GUID "/vendor/vendor.dovecot/pvt/server/admin",
                                         METADATA_SHARED, GUID, false, &back));
    assert_false(metadata_entry_from_key("priv/" GUID "/comment", METADATA_SHARED, GUID, false,
                                         &back));
    assert_false(metadata_entry_from_key("priv/" GUID "/", METADATA_PRIVATE, GUID, false, &back));
    assert_false(metadata_entry_from_key("priv/" GUID "/Upper", METADATA_PRIVATE, GUID, false,
                                         &back));
    assert_false(metadata_entry_from_key("priv/" GUID "/a//b", METADATA_PRIVATE, GUID, false,
                                         &back));
    assert_false(metadata_entry_from_key("priv/0000/comment", METADATA_PRIVATE, GUID, false,
                                         &back));
}

static void test_depth(void **state)
{
    (void)state;
    struct metadata_entry shared = entry("/shared", true), a = entry("/shared/a", false),
                          ab = entry("/shared/a/b", false), abc = entry("/shared/a/b/c", false),
                          ax = entry("/shared/ax", false), pa = entry("/private/a", false);
    assert_true(metadata_entry_in_depth(&a, &a, 0));
    assert_false(metadata_entry_in_depth(&a, &ab, 0));
    assert_true(metadata_entry_in_depth(&a, &ab, 1));
    assert_false(metadata_entry_in_depth(&a, &abc, 1));
    assert_true(metadata_entry_in_depth(&a, &abc, -1));
    assert_false(metadata_entry_in_depth(&a, &ax, -1)); /* a prefix of the name is no parent */
    assert_false(metadata_entry_in_depth(&a, &pa, -1));
    assert_true(metadata_entry_in_depth(&shared, &a, 1));
    assert_true(metadata_entry_in_depth(&shared, &ax, 1));
    assert_false(metadata_entry_in_depth(&shared, &ab, 1));
    assert_true(metadata_entry_in_depth(&shared, &abc, -1));
    assert_false(metadata_entry_in_depth(&shared, &a, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_internal),
        cmocka_unit_test(test_dict_keys),
        cmocka_unit_test(test_depth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
