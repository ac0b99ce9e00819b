#include "core/json-util.h"

#include "core/buf.h"
#include "core/utf8.h"
#include "core/xalloc.h"

#include <stdio.h>

#include <string.h>

json_t *json_parse_object(const char *data, size_t len, struct petrel_error *err)
{
    size_t i = 0;
    while (i < len && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n'))
        i++;
    if (i == len)
        return json_object();
    json_error_t jerr;
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        petrel_error_set(err, PETREL_ERR_INVALID, "malformed JSON at line %d column %d: %s",
                         jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        petrel_error_set(err, PETREL_ERR_INVALID, "request body must be a JSON object");
        return NULL;
    }
    return root;
}

static json_t *field(const json_t *obj, const char *key, bool required, bool *ok,
                     struct petrel_error *err)
{
    *ok = true;
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v)) {
        if (required)
            *ok = petrel_error_set(err, PETREL_ERR_INVALID, "field '%s' is required", key);
        return NULL;
    }
    return v;
}

bool json_get_string(const json_t *obj, const char *key, bool required, const char **out,
                     struct petrel_error *err)
{
    bool ok;
    json_t *v = field(obj, key, required, &ok, err);
    if (v == NULL)
        return ok;
    if (!json_is_string(v))
        return petrel_error_set(err, PETREL_ERR_INVALID, "field '%s' must be a string", key);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return petrel_error_set(err, PETREL_ERR_INVALID, "field '%s' must not contain NUL", key);
    *out = json_string_value(v);
    return true;
}

bool json_get_int(const json_t *obj, const char *key, bool required, int64_t *out,
                  struct petrel_error *err)
{
    bool ok;
    json_t *v = field(obj, key, required, &ok, err);
    if (v == NULL)
        return ok;
    if (!json_is_integer(v))
        return petrel_error_set(err, PETREL_ERR_INVALID, "field '%s' must be an integer", key);
    *out = (int64_t)json_integer_value(v);
    return true;
}

bool json_get_bool(const json_t *obj, const char *key, bool required, bool *out,
                   struct petrel_error *err)
{
    bool ok;
    json_t *v = field(obj, key, required, &ok, err);
    if (v == NULL)
        return ok;
    if (!json_is_boolean(v))
        return petrel_error_set(err, PETREL_ERR_INVALID, "field '%s' must be a boolean", key);
    *out = json_is_true(v);
    return true;
}

bool json_get_object(const json_t *obj, const char *key, bool required, json_t **out,
                     struct petrel_error *err)
{
    bool ok;
    json_t *v = field(obj, key, required, &ok, err);
    if (v == NULL)
        return ok;
    if (!json_is_object(v))
        return petrel_error_set(err, PETREL_ERR_INVALID, "field '%s' must be an object", key);
    *out = v;
    return true;
}

bool json_get_array(const json_t *obj, const char *key, bool required, json_t **out,
                    struct petrel_error *err)
{
    bool ok;
    json_t *v = field(obj, key, required, &ok, err);
    if (v == NULL)
        return ok;
    if (!json_is_array(v))
        return petrel_error_set(err, PETREL_ERR_INVALID, "field '%s' must be an array", key);
    *out = v;
    return true;
}

char *json_dump_compact(const json_t *value)
{
    char *s = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
    if (s == NULL)
        petrel_fatal("json_dumps failed");
    return s;
}

void json_append_string(struct buf *out, const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    buf_reserve(out, len + 2);
    buf_append_char(out, '"');
    size_t i = 0;
    while (i < len) {
        unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            buf_append(out, esc, 2);
            i++;
        } else if (c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            buf_append(out, esc, 6);
            i++;
        } else if (c < 0x80) {
            buf_append_char(out, (char)c);
            i++;
        } else {
            uint32_t cp;
            size_t n = utf8_decode(p + i, len - i, &cp);
            if (n == 0) {
                buf_append(out, "\xef\xbf\xbd", 3);
                i++;
            } else {
                buf_append(out, s + i, n);
                i += n;
            }
        }
    }
    buf_append_char(out, '"');
}
