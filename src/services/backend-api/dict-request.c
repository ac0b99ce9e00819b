#include "services/backend-api/dict-request.h"

#include "core/base64.h"
#include "core/json-util.h"
#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

static bool read_op_settings(const json_t *body, struct dict_op_settings *set,
                             struct petrel_error *err)
{
    memset(set, 0, sizeof(*set));
    json_t *op = NULL;
    if (!json_get_object(body, "op", false, &op, err))
        return false;
    if (op == NULL)
        return true;
    const char *key;
    json_t *value;
    json_object_foreach(op, key, value)
    {
        if (strcmp(key, "username") != 0 && strcmp(key, "home_dir") != 0 &&
            strcmp(key, "expire_secs") != 0)
            return petrel_error_set(err, PETREL_ERR_INVALID, "op: unknown field '%s'", key);
    }
    if (!json_get_string(op, "username", false, &set->username, err) ||
        !json_get_string(op, "home_dir", false, &set->home_dir, err) ||
        !json_get_int(op, "expire_secs", false, &set->expire_secs, err)) {
        petrel_error_prefix(err, "op");
        return false;
    }
    if (set->expire_secs < 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "op.expire_secs must not be negative");
    if (set->username != NULL && set->username[0] == '\0')
        set->username = NULL;
    return true;
}

static struct dict_request_op *add_op(struct dict_request *req, size_t *cap)
{
    req->ops = xgrow(req->ops, cap, req->op_count + 1, sizeof(*req->ops));
    struct dict_request_op *op = &req->ops[req->op_count++];
    memset(op, 0, sizeof(*op));
    return op;
}

/* Decodes one write (kind known) from `obj` into a new op. */
static bool decode_write(struct dict_request *req, size_t *cap, const json_t *obj,
                         enum dict_request_kind kind, struct petrel_error *err)
{
    const char *key = NULL;
    if (!json_get_string(obj, "key", true, &key, err) ||
        !dict_key_validate(key, &req->op, false, err))
        return false;
    struct dict_request_op *op = add_op(req, cap);
    op->kind = kind;
    op->key = key;
    if (kind == DICT_REQ_SET) {
        const char *b64 = NULL;
        if (!json_get_string(obj, "value", true, &b64, err))
            return false;
        op->value_offset = req->values.len;
        if (!base64_decode_append(&req->values, b64, strlen(b64)))
            return petrel_error_set(err, PETREL_ERR_INVALID, "value is not valid base64");
        op->value_len = req->values.len - op->value_offset;
    } else if (kind == DICT_REQ_ATOMIC_INC) {
        if (!json_get_int(obj, "delta", true, &op->delta, err))
            return false;
    }
    return true;
}

static bool decode_batch(struct dict_request *req, size_t *cap, struct petrel_error *err)
{
    json_t *ops = NULL;
    if (!json_get_array(req->body, "ops", true, &ops, err))
        return false;
    if (json_array_size(ops) > DICT_REQUEST_MAX_BATCH)
        return petrel_error_set(err, PETREL_ERR_INVALID, "more than %d ops in one batch",
                                DICT_REQUEST_MAX_BATCH);
    size_t i;
    json_t *item;
    json_array_foreach(ops, i, item)
    {
        const char *kind = NULL;
        if (!json_is_object(item)) {
            return petrel_error_set(err, PETREL_ERR_INVALID, "ops[%zu] must be an object", i);
        }
        if (!json_get_string(item, "kind", true, &kind, err)) {
            petrel_error_prefix(err, "ops[%zu]", i);
            return false;
        }
        enum dict_request_kind k;
        if (strcmp(kind, "set") == 0)
            k = DICT_REQ_SET;
        else if (strcmp(kind, "unset") == 0)
            k = DICT_REQ_UNSET;
        else if (strcmp(kind, "atomic-inc") == 0)
            k = DICT_REQ_ATOMIC_INC;
        else
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "ops[%zu]: unknown kind '%s' (set, unset, atomic-inc)", i,
                                    kind);
        if (!decode_write(req, cap, item, k, err)) {
            petrel_error_prefix(err, "ops[%zu]", i);
            return false;
        }
    }
    return true;
}

bool dict_request_decode(enum dict_request_kind kind, const char *body, size_t len,
                         struct dict_request *out, struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    out->body = json_parse_object(body, len, err);
    if (out->body == NULL)
        return false;
    size_t cap = 0;
    bool ok = read_op_settings(out->body, &out->op, err);
    if (ok) {
        switch (kind) {
        case DICT_REQ_LOOKUP:
            ok = json_get_string(out->body, "key", true, &out->key, err) &&
                 dict_key_validate(out->key, &out->op, false, err);
            break;
        case DICT_REQ_ITERATE: {
            int64_t flags = 0;
            ok = json_get_string(out->body, "path", true, &out->path, err) &&
                 json_get_int(out->body, "flags", false, &flags, err);
            if (ok && (flags < 0 || flags > DICT_ITER_ALL_FLAGS))
                ok = petrel_error_set(err, PETREL_ERR_INVALID,
                                      "flags must be a bitmask of 1, 2, 4, 8, 16");
            out->flags = (unsigned)flags;
            if (ok)
                ok = dict_key_validate(out->path, &out->op, true, err);
            break;
        }
        case DICT_REQ_SET:
        case DICT_REQ_UNSET:
        case DICT_REQ_ATOMIC_INC:
            ok = decode_write(out, &cap, out->body, kind, err);
            if (ok)
                out->key = out->ops[0].key;
            break;
        case DICT_REQ_EXPIRE_SCAN:
            break;
        case DICT_REQ_COMMIT_BATCH:
            ok = decode_batch(out, &cap, err);
            break;
        }
    }
    if (!ok) {
        dict_request_free(out);
        return false;
    }
    return true;
}

const char *dict_request_value(const struct dict_request *req, size_t i)
{
    return req->values.data != NULL ? req->values.data + req->ops[i].value_offset : "";
}

void dict_request_queue(const struct dict_request *req, struct dict_transaction *tx)
{
    for (size_t i = 0; i < req->op_count; i++) {
        const struct dict_request_op *op = &req->ops[i];
        switch (op->kind) {
        case DICT_REQ_SET:
            dict_set(tx, op->key, dict_request_value(req, i), op->value_len);
            break;
        case DICT_REQ_UNSET:
            dict_unset(tx, op->key);
            break;
        case DICT_REQ_ATOMIC_INC:
            dict_atomic_inc(tx, op->key, op->delta);
            break;
        default:
            break;
        }
    }
}

void dict_request_free(struct dict_request *req)
{
    json_decref(req->body);
    free(req->ops);
    buf_free(&req->values);
    memset(req, 0, sizeof(*req));
}
