/* libFuzzer target: METADATA entry names (storage/metadata/metadata-entry.h).
 * Input: an entry name, any bytes (the first byte chooses bare_ok).
 *   An accepted name is printable ASCII without '*' '%', its path lower
 *   case with no empty component and no trailing '/'; it formats to a name
 *   that parses to the same entry; its dict key (folder and server) maps
 *   back to it unless it is internal; DEPTH 0 and 1 results are within
 *   infinity's, and an entry is always within its own depth. */
#include "storage/metadata/metadata-entry.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define GUID "0123456789abcdef0123456789abcdef"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    bool bare_ok = data[0] & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    struct metadata_entry e;
    const char *why = NULL;
    if (!metadata_entry_parse(text, len, bare_ok, &e, &why)) {
        assert(why != NULL);
        return 0;
    }
    size_t plen = strlen(e.path);
    assert(bare_ok || plen > 0);
    for (size_t i = 0; i < plen; i++) {
        char c = e.path[i];
        assert(c >= 0x20 && c <= 0x7e && c != '*' && c != '%' && !(c >= 'A' && c <= 'Z'));
        assert(c != '/' || (i > 0 && e.path[i - 1] != '/'));
    }
    assert(plen == 0 || e.path[plen - 1] != '/');
    struct buf name = {0};
    metadata_entry_format(&e, &name);
    struct metadata_entry back;
    bool ok = metadata_entry_parse(name.data, name.len, bare_ok, &back, &why);
    assert(ok && back.scope == e.scope && strcmp(back.path, e.path) == 0);
    buf_free(&name);
    if (plen > 0) {
        for (int server = 0; server < 2; server++) {
            struct buf key = {0};
            metadata_dict_key(&e, GUID, server, &key);
            bool found = metadata_entry_from_key(key.data, e.scope, GUID, server, &back);
            assert(found == !metadata_entry_internal(&e));
            if (found)
                assert(back.scope == e.scope && strcmp(back.path, e.path) == 0);
            buf_free(&key);
        }
    }
    struct metadata_entry bare = e;
    bare.path[0] = '\0';
    assert(metadata_entry_in_depth(&e, &e, 0));
    assert(metadata_entry_in_depth(&bare, &e, -1));
    if (metadata_entry_in_depth(&bare, &e, 1))
        assert(strchr(e.path, '/') == NULL);
    return 0;
}
