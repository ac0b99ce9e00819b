/* Typed reading of configuration sections out of a YAML tree. Each module
 * that owns configuration writes a `<module>_config_read()` on top of these:
 * it fills its own typed struct (defaults first), then calls
 * cfg_check_keys() so an unknown key stops start-up. Every error message has
 * the form `file:line: <key path>: message`. All functions return false on
 * error (message in ctx->err) and leave the output untouched when the key is
 * absent. Strings returned are fresh allocations owned by the caller. */
#ifndef PETREL_CORE_CFG_READ_H
#define PETREL_CORE_CFG_READ_H

#include "core/error.h"
#include "core/yaml-doc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cfg_ctx {
    const char *file;
    struct petrel_error *err;
};

/* Reports an error at `node` (or at the file when NULL). Returns false. */
bool cfg_fail(const struct cfg_ctx *ctx, const struct ynode *node, const char *path,
              const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* As cfg_fail, at the line of `key` in the map `section` when it is there
 * (a key present but wrong), else at the section (a key missing). */
bool cfg_fail_key(const struct cfg_ctx *ctx, const struct ynode *section, const char *key,
                  const char *path, const char *msg);

/* Ensures `node` is a map (NULL counts as an empty map). */
bool cfg_expect_map(const struct cfg_ctx *ctx, const struct ynode *node, const char *path);
/* Fails on the first key of `map` not in the NULL-terminated `allowed` list. */
bool cfg_check_keys(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                    const char *const allowed[]);

/* Scalars. `path` names the section for messages ("backend_api"). */
bool cfg_string(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                const char *key, char **out);
bool cfg_bool(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
              const char *key, bool *out);
bool cfg_int(const struct cfg_ctx *ctx, const struct ynode *map, const char *path, const char *key,
             int64_t min, int64_t max, int64_t *out);
/* A duration: plain seconds (integer) or a Go-style string ("30s", "5m", "1h30m", "250ms"). */
bool cfg_duration_ms(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                     const char *key, int64_t min_ms, int64_t max_ms, int64_t *out_ms);
/* A key naming one of `names` (NULL-terminated): *out gets the index of
 * the match; absent keeps *out. Any other value is an error "expected a,
 * b or c, found '<value>'". */
bool cfg_choice(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                const char *key, const char *const names[], int *out);
/* A list of strings; *out is a NULL-terminated array (free with cfg_strv_free). */
bool cfg_string_list(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                     const char *key, size_t max_items, char ***out, size_t *count);
void cfg_strv_free(char **v);
/* Item `i` of the list under `key` in `map` (what an error about that item
 * points at, for its line); the key's node itself when it is no list or
 * too short, NULL when absent. */
const struct ynode *cfg_list_item(const struct ynode *map, const char *key, size_t i);
/* A copy of a NULL-terminated list of strings (defaults), freed with
 * cfg_strv_free. */
char **cfg_strv_dup(const char *const *items);

/* Recipient-to-user mapping keys (lmtp and quota_status read the same
 * ones). `username_format`: not empty, only %u, %n, %d and %%.
 * `recipient_delimiter`: printable ASCII other than '@', '"' and '\\'.
 * `section` names the section for messages; the key's line is reported. */
bool cfg_check_username_format(const struct cfg_ctx *ctx, const struct ynode *map,
                               const char *section, const char *fmt);
bool cfg_check_recipient_delimiter(const struct cfg_ctx *ctx, const struct ynode *map,
                                   const char *section, const char *delimiters);

/* Parses "250ms", "30s", "5m", "2h", "1h30m" or a plain number of seconds. */
bool duration_parse_ms(const char *text, int64_t *out_ms);

#endif
