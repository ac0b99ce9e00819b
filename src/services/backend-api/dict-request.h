/* Decoding of dict endpoint request bodies into a typed request, separate
 * from HTTP so the rules are fuzzed and unit-tested on their own. Decoding
 * validates everything a client controls: JSON shape and types, the `op`
 * object (empty = none), keys/paths (priv/ needs op.username), base64
 * values, iterate flags, batch size and op kinds. */
#ifndef PETREL_SERVICES_DICT_REQUEST_H
#define PETREL_SERVICES_DICT_REQUEST_H

#include "core/buf.h"
#include "core/error.h"
#include "dict/dict.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DICT_REQUEST_MAX_BATCH 10000

enum dict_request_kind {
    DICT_REQ_LOOKUP,
    DICT_REQ_ITERATE,
    DICT_REQ_SET,
    DICT_REQ_UNSET,
    DICT_REQ_ATOMIC_INC,
    DICT_REQ_EXPIRE_SCAN,
    DICT_REQ_COMMIT_BATCH,
};

struct dict_request_op {
    enum dict_request_kind kind; /* SET, UNSET or ATOMIC_INC */
    const char *key;
    size_t value_offset; /* into dict_request.values */
    size_t value_len;
    int64_t delta;
};

struct dict_request {
    json_t *body; /* owns the strings below */
    struct dict_op_settings op;
    const char *key;  /* lookup, set, unset, atomic-inc */
    const char *path; /* iterate */
    unsigned flags;   /* iterate */
    struct dict_request_op *ops; /* set/unset/atomic-inc: one; commit-batch: many */
    size_t op_count;
    struct buf values; /* decoded values, back to back */
};

/* Decodes `len` bytes of body. On failure returns false with a message for
 * a 400 reply (err->code PETREL_ERR_INVALID); `out` is then already freed. */
bool dict_request_decode(enum dict_request_kind kind, const char *body, size_t len,
                         struct dict_request *out, struct petrel_error *err);
/* The value bytes of op i. */
const char *dict_request_value(const struct dict_request *req, size_t i);
/* Queues the decoded ops on a transaction. */
void dict_request_queue(const struct dict_request *req, struct dict_transaction *tx);
void dict_request_free(struct dict_request *req);

#endif
