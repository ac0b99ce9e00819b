/* libFuzzer target: Dovecot's dovecot-acl file (storage/acl/acl-file.h).
 * Input: file contents, any bytes.
 *   A file either parses or leaves the list empty with a "line N:" reason;
 *   a parsed list is sorted with unique identifiers and no empty entry,
 *   formats as printable ASCII lines that parse back to the same list, and
 *   that text formats to the same bytes again. Effective rights never
 *   leave the eleven real rights. */
#include "storage/acl/acl-file.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct acl_list list = {0};
    char why[128];
    if (!acl_file_parse((const char *)data, size, &list, why, sizeof(why))) {
        assert(list.count == 0);
        assert(strncmp(why, "line ", 5) == 0);
        acl_list_free(&list);
        return 0;
    }
    for (size_t i = 0; i < list.count; i++) {
        assert(list.entries[i].rights != 0 && (list.entries[i].rights & ~ACL_ALL_RIGHTS) == 0);
        assert(i == 0 || acl_id_compare(&list.entries[i - 1].id, &list.entries[i].id) < 0);
    }
    struct buf text = {0};
    acl_file_format(&list, &text);
    for (size_t i = 0; i < text.len; i++) {
        unsigned char c = (unsigned char)text.data[i];
        assert(c == '\n' || (c >= 0x20 && c < 0x7f) || c >= 0x80);
    }
    struct acl_list back = {0};
    bool ok = acl_file_parse(text.data, text.len, &back, why, sizeof(why));
    assert(ok);
    assert(acl_list_equal(&list, &back));
    struct buf again = {0};
    acl_file_format(&back, &again);
    assert(again.len == text.len && (text.len == 0 || memcmp(again.data, text.data, text.len) == 0));
    const char *groups[] = {"staff", "grp"};
    struct acl_identity who[] = {
        {0},
        {.user = "bob"},
        {.user = "bob", .groups = groups, .group_count = 2},
        {.user = "olga", .owner = true},
    };
    for (size_t i = 0; i < sizeof(who) / sizeof(who[0]); i++)
        assert((acl_list_rights(&list, &who[i]) & ~ACL_ALL_RIGHTS) == 0);
    buf_free(&text);
    buf_free(&again);
    acl_list_free(&back);
    acl_list_free(&list);
    return 0;
}
