/* The policy delegation protocol's request reader (policy-request.h). */
#include "services/quota-status/policy-request.h"

#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

void policy_request_init(struct policy_request *r)
{
    memset(r, 0, sizeof(*r));
}

void policy_request_reset(struct policy_request *r)
{
    free(r->request);
    free(r->protocol_state);
    free(r->recipient);
    memset(r, 0, sizeof(*r));
}

static bool name_is(const char *name, size_t len, const char *want)
{
    return strlen(want) == len && memcmp(name, want, len) == 0;
}

static void keep(char **slot, const char *value, size_t len)
{
    free(*slot);
    *slot = len > 0 ? xstrndup(value, len) : NULL;
}

/* size= is decimal; anything else (empty, signs, overflow) is "unknown". */
static uint64_t parse_size(const char *v, size_t len)
{
    uint64_t n = 0;
    if (len == 0 || len > 20)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return 0;
        unsigned d = (unsigned)(v[i] - '0');
        if (n > (UINT64_MAX - d) / 10)
            return 0;
        n = n * 10 + d;
    }
    return n;
}

enum policy_line policy_request_line(struct policy_request *r, const char *line, size_t len,
                                     size_t max_bytes, struct petrel_error *err)
{
    if (len > 0 && line[len - 1] == '\r')
        len--;
    if (len == 0)
        return POLICY_DONE;
    r->bytes += len + 1;
    if (r->bytes > max_bytes) {
        petrel_error_set(err, PETREL_ERR_LIMIT, "request longer than %zu bytes", max_bytes);
        return POLICY_ERROR;
    }
    if (++r->attrs > POLICY_MAX_ATTRS) {
        petrel_error_set(err, PETREL_ERR_LIMIT, "more than %d attributes", POLICY_MAX_ATTRS);
        return POLICY_ERROR;
    }
    const char *eq = memchr(line, '=', len);
    if (eq == NULL || eq == line) {
        petrel_error_set(err, PETREL_ERR_INVALID, "expected name=value");
        return POLICY_ERROR;
    }
    if (memchr(line, '\0', len) != NULL) {
        petrel_error_set(err, PETREL_ERR_INVALID, "NUL in an attribute");
        return POLICY_ERROR;
    }
    size_t name_len = (size_t)(eq - line);
    const char *value = eq + 1;
    size_t value_len = len - name_len - 1;
    bool kept = name_is(line, name_len, "recipient") || name_is(line, name_len, "request") ||
                name_is(line, name_len, "protocol_state");
    if (kept && value_len > POLICY_MAX_VALUE) {
        petrel_error_set(err, PETREL_ERR_LIMIT, "%.*s longer than %d bytes", (int)name_len, line,
                         POLICY_MAX_VALUE);
        return POLICY_ERROR;
    }
    if (name_is(line, name_len, "recipient"))
        keep(&r->recipient, value, value_len);
    else if (name_is(line, name_len, "request"))
        keep(&r->request, value, value_len);
    else if (name_is(line, name_len, "protocol_state"))
        keep(&r->protocol_state, value, value_len);
    else if (name_is(line, name_len, "size"))
        r->size = parse_size(value, value_len);
    return POLICY_MORE;
}
