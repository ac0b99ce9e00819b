/* libFuzzer target: the auth line protocol (clients/auth/auth-protocol.h).
 * The input is what a peer sent on an auth connection; it is cut at each LF
 * the way the server and the client read it, and every piece goes through:
 *   1. auth_line_parse() from an exact-size copy (plus the LF's place);
 *      a refusal must carry a reason, a success gives 1..AUTH_MAX_FIELDS
 *      fields that lie inside the copy;
 *   2. re-encoding with auth_line_add() (when the first field, the verb, is
 *      not empty): the result is one line with no raw LF or CR, parses back to the same fields, and
 * encodes again to the same bytes (the encoding is canonical);
 *   3. auth_line_param() finds a value for the key of every key=value field,
 *      and auth_id_valid() runs on the id position;
 *   4. auth_line_read_userdb() on the fields after the verb: when it takes
 *      them, the entry written with auth_line_add_userdb() and read back is
 *      the same entry; when it refuses, it says why. */
#include "core/buf.h"
#include "clients/auth/auth-protocol.h"
#include "clients/auth/userdb.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_lists_equal(char *const *a, char *const *b)
{
    size_t i = 0;
    for (; a[i] != NULL && b[i] != NULL; i++)
        assert(strcmp(a[i], b[i]) == 0);
    assert(a[i] == NULL && b[i] == NULL);
}

static void check_userdb_equal(const struct userdb_entry *a, const struct userdb_entry *b)
{
    assert(a->uid == b->uid);
    assert(a->gid == b->gid);
    assert(strcmp(a->home, b->home) == 0);
    assert(strcmp(a->mail_location, b->mail_location) == 0);
    check_lists_equal(a->groups, b->groups);
    check_lists_equal(a->quota_rule, b->quota_rule);
    check_lists_equal(a->allow_nets, b->allow_nets);
    assert(a->extra_count == b->extra_count);
    for (size_t i = 0; i < a->extra_count; i++) {
        assert(strcmp(a->extra[i].key, b->extra[i].key) == 0);
        assert(strcmp(a->extra[i].value, b->extra[i].value) == 0);
    }
}

/* Parses `len` bytes of `text` from a fresh exact-size copy, which the
 * caller frees. */
static bool parse_copy(const char *text, size_t len, char **copy, struct auth_line *line,
                       struct petrel_error *err)
{
    *copy = malloc(len + 1);
    memcpy(*copy, text, len);
    (*copy)[len] = '\n';
    return auth_line_parse(*copy, len, line, err);
}

static void encode_fields(struct buf *out, const struct auth_line *line)
{
    for (size_t i = 0; i < line->count; i++)
        auth_line_add(out, line->fields[i]);
    auth_line_end(out);
}

static void check_userdb(const struct auth_line *line)
{
    struct userdb_entry *e = userdb_entry_new("u");
    char *error = NULL;
    if (!auth_line_read_userdb(line, 1, e, &error)) {
        assert(error != NULL && error[0] != '\0');
        free(error);
        userdb_entry_free(e);
        return;
    }
    assert(error == NULL);

    struct buf b = {0};
    auth_line_add(&b, "OK");
    auth_line_add(&b, "1");
    auth_line_add(&b, "u");
    auth_line_add_userdb(&b, e);
    auth_line_end(&b);
    /* Escaping can double what the input held (a raw CR becomes "\r"), so
     * an input near the limit may write a line over it. */
    if (b.len - 1 > AUTH_LINE_MAX) {
        buf_free(&b);
        userdb_entry_free(e);
        return;
    }
    char *copy;
    struct auth_line back;
    struct petrel_error err;
    bool ok = parse_copy(b.data, b.len - 1, &copy, &back, &err);
    assert(ok);
    struct userdb_entry *e2 = userdb_entry_new("u");
    ok = auth_line_read_userdb(&back, 3, e2, &error);
    assert(ok && error == NULL);
    check_userdb_equal(e, e2);
    userdb_entry_free(e2);
    free(copy);
    buf_free(&b);
    userdb_entry_free(e);
}

static void check_line(const char *text, size_t len)
{
    char *copy;
    struct auth_line line;
    struct petrel_error err = {0};
    if (!parse_copy(text, len, &copy, &line, &err)) {
        assert(err.code == PETREL_ERR_INVALID && err.message[0] != '\0');
        free(copy);
        return;
    }
    assert(len > 0 && len <= AUTH_LINE_MAX);
    assert(line.count >= 1 && line.count <= AUTH_MAX_FIELDS);
    for (size_t i = 0; i < line.count; i++) {
        assert(line.fields[i] >= copy && line.fields[i] <= copy + len);
        assert(line.fields[i] + strlen(line.fields[i]) <= copy + len);
    }

    if (line.fields[0][0] == '\0') {
        /* Not a request or reply (their verb is never empty), and not
         * something auth_line_add() can write: an empty first field leaves
         * the buffer empty, so no separator goes before the second. */
        check_userdb(&line);
        free(copy);
        return;
    }

    /* Re-encode, re-parse, re-encode. */
    struct buf enc = {0};
    encode_fields(&enc, &line);
    assert(enc.len >= 2 && enc.data[enc.len - 1] == '\n');
    assert(memchr(enc.data, '\n', enc.len - 1) == NULL);
    assert(memchr(enc.data, '\r', enc.len) == NULL);
    /* Raw CRs in the input become "\r": the encoding may be longer. */
    if (enc.len - 1 <= AUTH_LINE_MAX) {
        char *copy2;
        struct auth_line line2;
        struct petrel_error err2 = {0};
        bool ok = parse_copy(enc.data, enc.len - 1, &copy2, &line2, &err2);
        assert(ok);
        assert(line2.count == line.count);
        for (size_t i = 0; i < line.count; i++)
            assert(strcmp(line.fields[i], line2.fields[i]) == 0);
        struct buf enc2 = {0};
        encode_fields(&enc2, &line2);
        assert(enc2.len == enc.len && memcmp(enc2.data, enc.data, enc.len) == 0);
        buf_free(&enc2);
        free(copy2);
    }
    buf_free(&enc);

    for (size_t i = 0; i < line.count; i++) {
        const char *eq = strchr(line.fields[i], '=');
        if (eq == NULL) {
            assert(auth_line_param(&line, i, line.fields[i]) != NULL);
            continue;
        }
        size_t key_len = (size_t)(eq - line.fields[i]);
        char *key = malloc(key_len + 1);
        memcpy(key, line.fields[i], key_len);
        key[key_len] = '\0';
        const char *v = auth_line_param(&line, i, key);
        assert(v != NULL);
        /* The first match from i on is this field itself. */
        assert(v == eq + 1);
        free(key);
    }
    if (line.count >= 2)
        (void)auth_id_valid(line.fields[1]);

    check_userdb(&line);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    size_t left = size;
    while (left > 0) {
        const char *lf = memchr(p, '\n', left);
        size_t len = lf != NULL ? (size_t)(lf - p) : left;
        check_line(p, len);
        if (lf == NULL)
            break;
        p = lf + 1;
        left -= len + 1;
    }
    return 0;
}
