/* libFuzzer target: the HTTP router's segment tree against a scan of every
 * route in registration order (what the router did before the tree, and
 * what http-router.h promises): same result, same route, same parameters,
 * same Allow list on a 405, for route tables where literal and "{param}"
 * segments overlap at every depth, the same path is registered for several
 * methods or twice, and GET routes answer HEAD.
 * Input: byte 0 = number of routes (1..32); per route a method byte, a
 * depth byte (0..6) and one byte per segment choosing from a few literals,
 * two parameters and brace-shaped literals; then requests, each a method
 * byte, a depth byte (0..8) and one byte per segment (the request words
 * include "" and the pattern spellings). */
#include "net/http-router.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const pattern_parts[] = {"a", "b", "c", "ab", "{p}", "{q}", "{}", "{x"};
static const char *const path_words[] = {"a", "b", "c", "ab", "", "{p}", "x", "A"};

/* As the router formats it: each method once. */
static void allow_add(char *allow, size_t size, const char *method)
{
    if (strstr(allow, method) != NULL)
        return;
    size_t used = strlen(allow);
    snprintf(allow + used, size - used, "%s%s", used > 0 ? ", " : "", method);
}

static bool path_matches(const struct http_route *r, char *const *segs, size_t n)
{
    if (r->segment_count != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (r->is_param[i] ? segs[i][0] == '\0' : strcmp(r->segments[i], segs[i]) != 0)
            return false;
    }
    return true;
}

static enum http_route_result reference(const struct http_router *r, enum http_method method,
                                        char *const *segs, size_t n,
                                        const struct http_route **found, char *allow,
                                        size_t allow_size)
{
    allow[0] = '\0';
    bool known = false;
    for (size_t i = 0; i < r->count; i++) {
        const struct http_route *route = &r->routes[i];
        if (!path_matches(route, segs, n))
            continue;
        if (route->method == method || (route->method == HTTP_GET && method == HTTP_HEAD)) {
            *found = route;
            return HTTP_ROUTE_FOUND;
        }
        known = true;
        allow_add(allow, allow_size, http_method_name(route->method));
        if (route->method == HTTP_GET)
            allow_add(allow, allow_size, "HEAD");
    }
    return known ? HTTP_ROUTE_WRONG_METHOD : HTTP_ROUTE_NOT_FOUND;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t pos = 0;
    size_t routes = (size_t)(data[pos++] % 32) + 1;
    struct http_router router = {0};
    static int handler;
    for (size_t i = 0; i < routes && pos + 2 <= size; i++) {
        enum http_method m = (enum http_method)(data[pos++] % (HTTP_METHOD_OTHER + 1));
        size_t depth = data[pos++] % 7;
        char pattern[64] = "/";
        for (size_t k = 0; k < depth && pos < size; k++) {
            if (k > 0)
                strcat(pattern, "/");
            strcat(pattern, pattern_parts[data[pos++] % 8]);
        }
        http_router_add(&router, m, pattern, 0, &handler, NULL);
    }
    while (pos + 2 <= size) {
        enum http_method m = (enum http_method)(data[pos++] % (HTTP_METHOD_OTHER + 1));
        size_t depth = data[pos++] % 9;
        char *segs[8];
        size_t n = 0;
        for (; n < depth && pos < size; n++)
            segs[n] = (char *)path_words[data[pos++] % 8];
        /* A full Allow buffer and one that truncates. */
        for (size_t allow_size = 8; allow_size <= 128; allow_size += 120) {
            const struct http_route *want = NULL;
            char want_allow[128], got_allow[128];
            enum http_route_result expect =
                reference(&router, m, segs, n, &want, want_allow, allow_size);
            struct http_route_match match;
            memset(&match, 0, sizeof(match));
            enum http_route_result got =
                http_router_match(&router, m, segs, n, &match, got_allow, allow_size);
            assert(got == expect);
            if (got == HTTP_ROUTE_FOUND) {
                assert(match.route == want);
                size_t params = 0;
                for (size_t k = 0; k < n; k++) {
                    if (want->is_param[k]) {
                        assert(match.names[params] == want->segments[k]);
                        assert(match.values[params] == segs[k]);
                        params++;
                    }
                }
                assert(match.param_count == params);
            } else if (got == HTTP_ROUTE_WRONG_METHOD) {
                assert(strcmp(got_allow, want_allow) == 0);
            }
        }
    }
    http_router_free(&router);
    return 0;
}
