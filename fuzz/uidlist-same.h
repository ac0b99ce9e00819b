/* For the dovecot-uidlist fuzz targets: aborts unless two lists hold the
 * same header values and entries (base names and extensions included). */
#ifndef PETREL_FUZZ_UIDLIST_SAME_H
#define PETREL_FUZZ_UIDLIST_SAME_H

#include "storage/maildir/maildir-uidlist.h"

#include <assert.h>
#include <string.h>

static inline void uidlist_assert_same(const struct uidlist *a, const struct uidlist *b)
{
    assert(a->uid_validity == b->uid_validity);
    assert(a->next_uid == b->next_uid);
    assert(a->has_guid == b->has_guid);
    assert(memcmp(a->guid, b->guid, sizeof(a->guid)) == 0);
    assert(strcmp(a->extra_header, b->extra_header) == 0);
    assert(a->count == b->count);
    for (size_t i = 0; i < a->count; i++) {
        assert(a->entries[i].uid == b->entries[i].uid);
        assert(strcmp(a->entries[i].base, b->entries[i].base) == 0);
        assert(strcmp(a->entries[i].extensions, b->entries[i].extensions) == 0);
    }
}

#endif
