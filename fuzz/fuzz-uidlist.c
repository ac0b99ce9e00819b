/* libFuzzer target: dovecot-uidlist parsing (storage/maildir/maildir-uidlist.h).
 * Input: file contents, any bytes.
 *   A rejected input leaves an empty list and an INVALID error that names the
 *   file and line ("fuzz:<n>: ...").
 *   An accepted list is well-formed (UIDs ascending, below next UID, base
 *   names without '/' or ':'), every entry is found by UID and by base name,
 *   it formats (with a GUID stamped when it had none), the text parses back
 *   to the same list, and formatting that gives the same bytes again. */
#include "storage/maildir/maildir-uidlist.h"
#include "uidlist-same.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct uidlist ul;
    struct petrel_error err;
    memset(&err, 0, sizeof(err));
    if (!uidlist_parse("fuzz", (const char *)data, size, &ul, &err)) {
        assert(err.code == PETREL_ERR_INVALID);
        assert(strncmp(err.message, "fuzz:", 5) == 0);
        assert(ul.entries == NULL && ul.count == 0 && ul.extra_header == NULL);
        return 0;
    }
    assert(ul.uid_validity != 0 && ul.next_uid != 0);
    assert(ul.file_size <= size);
    uint32_t prev = 0;
    for (size_t i = 0; i < ul.count; i++) {
        const struct uidlist_entry *e = &ul.entries[i];
        assert(e->uid > prev && e->uid < ul.next_uid);
        assert(e->base[0] != '\0' && strpbrk(e->base, "/:\n") == NULL);
        assert(uidlist_find_uid(&ul, e->uid) == e);
        assert(uidlist_find_base(&ul, e->base) == e);
        prev = e->uid;
    }
    assert(uidlist_find_uid(&ul, 0) == NULL);

    if (!ul.has_guid) {
        ul.has_guid = true;
        memset(ul.guid, 0x5a, sizeof(ul.guid));
    }
    struct buf text = {0};
    bool ok = uidlist_format(&ul, &text, &err);
    if (!ok) {
        fprintf(stderr, "format failed: %s\n", err.message);
        abort();
    }
    struct uidlist back;
    ok = uidlist_parse("fuzz", text.data, text.len, &back, &err);
    if (!ok) {
        fprintf(stderr, "re-parse failed: %s\n", err.message);
        abort();
    }
    assert(back.file_size == text.len);
    uidlist_assert_same(&ul, &back);
    struct buf again = {0};
    assert(uidlist_format(&back, &again, &err));
    assert(again.len == text.len && memcmp(again.data, text.data, text.len) == 0);
    buf_free(&again);
    buf_free(&text);
    uidlist_free(&back);
    uidlist_free(&ul);
    return 0;
}
