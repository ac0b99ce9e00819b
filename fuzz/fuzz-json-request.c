/* libFuzzer target: JSON request bodies as the API handlers decode them.
 * Input: a request body. json_parse_object(), then the typed getters on the
 * keys handlers use (optional and required, every type, so both the match
 * and the mistyped paths run), one level down into "value" objects and
 * "ops" arrays (batch requests), duration_parse_ms() on every string found,
 * and a dump/re-parse round trip. Then the real dict endpoint decoder,
 * dict_request_decode(), for every request kind, with invariants on what it
 * returns and a base64 round trip of every decoded value (decoding is strict,
 * so re-encoding must give back the client's text). Everything is freed;
 * LSan reports leaks. */
#include "core/base64.h"
#include "core/buf.h"
#include "core/cfg-read.h"
#include "core/json-util.h"
#include "services/backend-api/dict-request.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const keys[] = {"user",  "folder", "key",      "value",    "flags",
                                   "op",    "ops",    "level",    "ttl",      "kind",
                                   "delta", "path",   "username", "home_dir", "expire_secs",
                                   NULL};

static void check_error(const struct petrel_error *err)
{
    assert(err->code == PETREL_ERR_INVALID);
    assert(memchr(err->message, '\0', sizeof(err->message)) != NULL);
    assert(err->message[0] != '\0');
}

/* Every string a handler may read: as a duration and as a base64 value. */
static void check_string(const char *s)
{
    int64_t ms = -1;
    if (duration_parse_ms(s, &ms))
        assert(ms >= 0);
    size_t len = strlen(s);
    struct buf dec = {0};
    buf_append(&dec, "x", 1); /* decoding appends after what is there */
    if (base64_decode_append(&dec, s, len)) {
        assert(dec.len >= 1 && dec.data[0] == 'x');
        struct buf enc = {0};
        base64_encode_append(&enc, dec.data + 1, dec.len - 1);
        assert(enc.len == len && memcmp(enc.data, s, len) == 0);
        buf_free(&enc);
    } else {
        assert(dec.len == 1 && dec.data[1] == '\0');
    }
    buf_free(&dec);
}

/* Runs every getter on every key of `obj`, as a handler would. */
static void decode_fields(const json_t *obj, int depth)
{
    for (size_t k = 0; keys[k] != NULL; k++) {
        const char *key = keys[k];
        json_t *raw = json_object_get(obj, key);
        for (int required = 0; required <= 1; required++) {
            struct petrel_error err;
            memset(&err, 0, sizeof(err));

            const char *s = NULL;
            if (json_get_string(obj, key, required, &s, &err)) {
                if (s != NULL) {
                    assert(json_is_string(raw));
                    assert(strlen(s) == json_string_length(raw));
                    check_string(s);
                } else {
                    assert(!required);
                }
            } else {
                check_error(&err);
            }

            int64_t i = 0;
            memset(&err, 0, sizeof(err));
            if (json_get_int(obj, key, required, &i, &err)) {
                if (raw != NULL && !json_is_null(raw))
                    assert(json_is_integer(raw) && json_integer_value(raw) == i);
            } else {
                check_error(&err);
            }

            bool b = false;
            memset(&err, 0, sizeof(err));
            if (json_get_bool(obj, key, required, &b, &err)) {
                if (raw != NULL && !json_is_null(raw))
                    assert(json_is_boolean(raw) && b == json_is_true(raw));
            } else {
                check_error(&err);
            }

            json_t *o = NULL;
            memset(&err, 0, sizeof(err));
            if (json_get_object(obj, key, required, &o, &err)) {
                if (o != NULL) {
                    assert(json_is_object(o) && o == raw);
                    if (depth < 2)
                        decode_fields(o, depth + 1);
                }
            } else {
                check_error(&err);
            }

            json_t *a = NULL;
            memset(&err, 0, sizeof(err));
            if (json_get_array(obj, key, required, &a, &err)) {
                if (a != NULL) {
                    assert(json_is_array(a) && a == raw);
                    size_t idx;
                    json_t *item;
                    json_array_foreach(a, idx, item)
                    {
                        if (json_is_string(item))
                            check_string(json_string_value(item));
                        else if (json_is_object(item) && depth < 2)
                            decode_fields(item, depth + 1);
                    }
                }
            } else {
                check_error(&err);
            }
        }
    }
}

static void check_dict_request(enum dict_request_kind kind, const char *body, size_t len)
{
    struct dict_request req;
    struct petrel_error err;
    memset(&err, 0, sizeof(err));
    if (!dict_request_decode(kind, body, len, &req, &err)) {
        check_error(&err);
        assert(req.body == NULL && req.ops == NULL && req.values.data == NULL);
        return;
    }
    assert(req.body != NULL && json_is_object(req.body));
    assert(req.op.expire_secs >= 0);
    assert(req.op.username == NULL || req.op.username[0] != '\0');
    switch (kind) {
    case DICT_REQ_LOOKUP:
        assert(req.key != NULL && req.op_count == 0);
        assert(dict_key_validate(req.key, &req.op, false, &err));
        break;
    case DICT_REQ_ITERATE:
        assert(req.path != NULL && req.flags <= DICT_ITER_ALL_FLAGS);
        assert(dict_key_validate(req.path, &req.op, true, &err));
        break;
    case DICT_REQ_SET:
    case DICT_REQ_UNSET:
    case DICT_REQ_ATOMIC_INC:
        assert(req.op_count == 1 && req.ops[0].kind == kind && req.key == req.ops[0].key);
        break;
    case DICT_REQ_EXPIRE_SCAN:
        assert(req.op_count == 0);
        break;
    case DICT_REQ_COMMIT_BATCH: {
        json_t *ops = json_object_get(req.body, "ops");
        assert(json_is_array(ops) && req.op_count == json_array_size(ops));
        assert(req.op_count <= DICT_REQUEST_MAX_BATCH);
        break;
    }
    }
    for (size_t i = 0; i < req.op_count; i++) {
        const struct dict_request_op *op = &req.ops[i];
        assert(op->key != NULL && dict_key_validate(op->key, &req.op, false, &err));
        assert(op->value_offset <= req.values.len &&
               op->value_len <= req.values.len - op->value_offset);
        const char *value = dict_request_value(&req, i);
        if (op->kind != DICT_REQ_SET) {
            assert(op->value_len == 0);
            continue;
        }
        /* Strict base64: encoding the decoded bytes gives the original text. */
        json_t *item = kind == DICT_REQ_COMMIT_BATCH
                           ? json_array_get(json_object_get(req.body, "ops"), i)
                           : req.body;
        const char *b64 = json_string_value(json_object_get(item, "value"));
        assert(b64 != NULL);
        struct buf enc = {0};
        base64_encode_append(&enc, value, op->value_len);
        assert(enc.len == strlen(b64) && memcmp(enc.data, b64, enc.len) == 0);
        struct buf dec = {0};
        assert(base64_decode_append(&dec, enc.data, enc.len));
        assert(dec.len == op->value_len && (dec.len == 0 || memcmp(dec.data, value, dec.len) == 0));
        buf_free(&enc);
        buf_free(&dec);
    }
    dict_request_free(&req);
    assert(req.body == NULL && req.ops == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const enum dict_request_kind kinds[] = {
        DICT_REQ_LOOKUP,      DICT_REQ_ITERATE,     DICT_REQ_SET,          DICT_REQ_UNSET,
        DICT_REQ_ATOMIC_INC,  DICT_REQ_EXPIRE_SCAN, DICT_REQ_COMMIT_BATCH,
    };
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        check_dict_request(kinds[k], (const char *)data, size);

    struct petrel_error err;
    memset(&err, 0, sizeof(err));
    json_t *obj = json_parse_object((const char *)data, size, &err);
    if (obj == NULL) {
        check_error(&err);
        return 0;
    }
    assert(json_is_object(obj));
    decode_fields(obj, 0);

    /* What we parsed serialises and parses back to the same value. */
    char *dump = json_dump_compact(obj);
    memset(&err, 0, sizeof(err));
    json_t *again = json_parse_object(dump, strlen(dump), &err);
    assert(again != NULL);
    assert(json_equal(obj, again));
    json_decref(again);
    free(dump);
    json_decref(obj);
    return 0;
}
