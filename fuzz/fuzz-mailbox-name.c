/* libFuzzer target: folder names (storage/mailbox-name.h).
 * Input: a name (made NUL-terminated; an embedded NUL ends it).
 *   Decoding as modified UTF-7: a decoded name encodes back to exactly the
 *   input (the decoder accepts only the canonical form) and a failed decode
 *   leaves the output buffer as it was.
 *   Encoding as UTF-8: an encoded name is printable ASCII and decodes back
 *   to the input; encoding fails only on invalid UTF-8.
 *   Validation with '/' and '.' separators: a valid name is valid UTF-8. */
#include "storage/mailbox-name.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *name = malloc(size + 1);
    memcpy(name, data, size);
    name[size] = '\0';

    struct buf utf8 = {0};
    buf_append_str(&utf8, "pre");
    if (mailbox_name_from_mutf7(name, &utf8)) {
        struct buf back = {0};
        assert(mailbox_name_to_mutf7(utf8.data + 3, &back));
        assert(strcmp(buf_cstr(&back), name) == 0);
        buf_free(&back);
    } else {
        assert(utf8.len == 3 && strcmp(utf8.data, "pre") == 0);
    }

    struct buf mutf7 = {0};
    bool encoded = mailbox_name_to_mutf7(name, &mutf7);
    if (encoded) {
        for (size_t i = 0; i < mutf7.len; i++)
            assert(mutf7.data[i] >= 0x20 && mutf7.data[i] < 0x7f);
        struct buf back = {0};
        assert(mailbox_name_from_mutf7(buf_cstr(&mutf7), &back));
        assert(strcmp(buf_cstr(&back), name) == 0);
        buf_free(&back);
    } else {
        assert(mutf7.len == 0);
    }

    struct petrel_error err;
    if (mailbox_name_validate(name, '/', &err))
        assert(encoded);
    if (mailbox_name_validate(name, '.', &err))
        assert(encoded);
    (void)mailbox_name_is_inbox(name);

    buf_free(&utf8);
    buf_free(&mutf7);
    free(name);
    return 0;
}
