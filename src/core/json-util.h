/* Typed field access on jansson objects for request decoding. Each getter
 * returns false with a client-facing message ("field 'user' must be a
 * string") in err (code PETREL_ERR_INVALID) when the field is mistyped, or
 * missing while required. Absent optional fields leave *out untouched.
 * Returned strings point into the JSON object (valid while it lives). */
#ifndef PETREL_CORE_JSON_UTIL_H
#define PETREL_CORE_JSON_UTIL_H

#include "core/error.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Parses a request body: must be one JSON object (an empty body is `{}`).
 * Depth and size are bounded by the caller's body limit and jansson's own
 * depth limit. */
json_t *json_parse_object(const char *data, size_t len, struct petrel_error *err);

bool json_get_string(const json_t *obj, const char *key, bool required, const char **out,
                     struct petrel_error *err);
bool json_get_int(const json_t *obj, const char *key, bool required, int64_t *out,
                  struct petrel_error *err);
bool json_get_bool(const json_t *obj, const char *key, bool required, bool *out,
                   struct petrel_error *err);
/* `out` is borrowed; type checked to be an object / array. */
bool json_get_object(const json_t *obj, const char *key, bool required, json_t **out,
                     struct petrel_error *err);
bool json_get_array(const json_t *obj, const char *key, bool required, json_t **out,
                    struct petrel_error *err);

/* Appends `s` as a JSON string literal (with quotes). Invalid UTF-8 bytes
 * become U+FFFD so the output is always valid JSON. */
struct buf;
void json_append_string(struct buf *out, const char *s, size_t len);

/* Serialises compactly into a fresh string (caller frees). */
char *json_dump_compact(const json_t *value);

#endif
