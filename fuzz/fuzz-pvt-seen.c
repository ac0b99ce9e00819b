/* libFuzzer target: a reader's private \Seen file (storage/mailbox-pvt.h).
 * Input: file contents, any bytes.
 *   A file either parses or gives no UIDs; parsed UIDs are non-zero and
 *   strictly ascending, their count matches the length, and the bytes
 *   written back from them are the input. */
#include "storage/mailbox-pvt.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t uv = 0;
    uint32_t *uids = NULL;
    size_t count = 0;
    struct petrel_error err;
    if (!mailbox_pvt_parse(data, size, &uv, &uids, &count, &err)) {
        assert(uids == NULL && count == 0);
        return 0;
    }
    assert(size == 16 + 4 * count);
    for (size_t i = 0; i < count; i++)
        assert(uids[i] != 0 && (i == 0 || uids[i - 1] < uids[i]));
    for (size_t i = 0; i < count; i++) {
        const uint8_t *p = data + 16 + 4 * i;
        assert(((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                (uint32_t)p[3] << 24) == uids[i]);
    }
    free(uids);
    return 0;
}
