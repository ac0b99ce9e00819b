/* Fuzzes the decoding of dict endpoint bodies (services/backend-api/dict-request.c)
 * and the base64 codec it relies on. The first byte picks the endpoint. */
#include "core/base64.h"
#include "core/buf.h"
#include "services/backend-api/dict-request.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    enum dict_request_kind kind = (enum dict_request_kind)(data[0] % 7);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;

    struct dict_request req;
    struct petrel_error err;
    if (dict_request_decode(kind, body, len, &req, &err)) {
        /* Every decoded op must point at bytes inside the value buffer. */
        for (size_t i = 0; i < req.op_count; i++) {
            if (req.ops[i].value_offset + req.ops[i].value_len > req.values.len)
                abort();
            if (req.ops[i].key == NULL)
                abort();
        }
        dict_request_free(&req);
    }

    /* base64 round trip: what decodes must re-encode to the same text. */
    struct buf decoded = {0};
    if (base64_decode_append(&decoded, body, len)) {
        struct buf encoded = {0};
        base64_encode_append(&encoded, decoded.data != NULL ? decoded.data : "", decoded.len);
        if (encoded.len != len || memcmp(encoded.data, body, len) != 0)
            abort();
        buf_free(&encoded);
    }
    buf_free(&decoded);
    return 0;
}
