/* libFuzzer target: the ACL list index file (storage/acl/acl-list-index.h).
 * Input: file contents, any bytes.
 *   An index either parses or is left empty with a "line N:" reason; a
 *   parsed index has sorted rows, unique per (folder, identifier), with
 *   real rights only; it formats as lines without a raw control byte in a
 *   folder field that parse back to the same rows, and that text formats
 *   to the same bytes again. Renaming and removing a subtree keep the rows
 *   sorted and the text parseable; visibility never reports the root or a
 *   folder without the lookup right. */
#include "storage/acl/acl-list-index.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_sorted(const struct acl_index *idx)
{
    for (size_t i = 0; i < idx->count; i++) {
        const struct acl_index_row *r = &idx->rows[i];
        assert(r->entry.rights != 0 && (r->entry.rights & ~ACL_ALL_RIGHTS) == 0);
        if (i == 0)
            continue;
        const struct acl_index_row *p = &idx->rows[i - 1];
        int c = strcmp(p->folder, r->folder);
        assert(c < 0 || (c == 0 && acl_id_compare(&p->entry.id, &r->entry.id) < 0));
    }
}

static void round_trip(const struct acl_index *idx)
{
    struct buf text = {0};
    acl_list_index_format(idx, &text);
    struct acl_index back = {0};
    char why[160];
    bool ok = acl_list_index_parse(text.data, text.len, &back, why, sizeof(why));
    assert(ok);
    assert(acl_list_index_equal(idx, &back));
    struct buf again = {0};
    acl_list_index_format(&back, &again);
    assert(again.len == text.len && memcmp(again.data, text.data, text.len) == 0);
    buf_free(&text);
    buf_free(&again);
    acl_list_index_free(&back);
}

static void visit(void *arg, const char *folder, uint32_t rights)
{
    (void)arg;
    assert(folder[0] != '\0');
    assert((rights & ACL_LOOKUP) != 0 && (rights & ~ACL_ALL_RIGHTS) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct acl_index idx = {0};
    char why[160];
    if (!acl_list_index_parse((const char *)data, size, &idx, why, sizeof(why))) {
        assert(idx.count == 0);
        assert(strncmp(why, "line ", 5) == 0);
        acl_list_index_free(&idx);
        return 0;
    }
    check_sorted(&idx);
    round_trip(&idx);
    const char *groups[] = {"staff", "grp"};
    struct acl_identity who[] = {
        {0},
        {.user = "bob"},
        {.user = "bob", .groups = groups, .group_count = 2, .owner = true},
    };
    for (size_t i = 0; i < sizeof(who) / sizeof(who[0]); i++)
        acl_list_index_visible_in(&idx, &who[i], visit, NULL);
    if (idx.count > 0) {
        /* rename the first row's folder under a name taken from the last */
        char *from = strdup(idx.rows[0].folder);
        char *to = malloc(strlen(idx.rows[idx.count - 1].folder) + 3);
        strcpy(to, idx.rows[idx.count - 1].folder);
        strcat(to, "/n");
        acl_list_index_rename_folder(&idx, from, to, '/');
        check_sorted(&idx);
        round_trip(&idx);
        acl_list_index_remove_folder(&idx, to, '/');
        check_sorted(&idx);
        for (size_t i = 0; i < idx.count; i++)
            assert(strcmp(idx.rows[i].folder, to) != 0);
        free(from);
        free(to);
    }
    acl_list_index_free(&idx);
    return 0;
}
