#include "net/http-router.h"

#include "core/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void split_segments(const char *pattern, struct http_route *r)
{
    size_t cap = 0;
    const char *p = pattern;
    while (*p == '/')
        p++;
    while (*p != '\0') {
        const char *slash = strchr(p, '/');
        size_t len = slash != NULL ? (size_t)(slash - p) : strlen(p);
        r->segments = xgrow(r->segments, &cap, r->segment_count + 1, sizeof(*r->segments));
        r->segments[r->segment_count++] = xstrndup(p, len);
        p += len;
        while (*p == '/')
            p++;
    }
}

static bool is_param(const char *seg)
{
    size_t len = strlen(seg);
    return len >= 3 && seg[0] == '{' && seg[len - 1] == '}';
}

void http_router_add(struct http_router *router, enum http_method method, const char *pattern,
                     unsigned flags, void *handler, void *ctx)
{
    router->routes =
        xgrow(router->routes, &router->cap, router->count + 1, sizeof(*router->routes));
    struct http_route *r = &router->routes[router->count++];
    memset(r, 0, sizeof(*r));
    r->method = method;
    r->pattern = xstrdup(pattern);
    r->flags = flags;
    r->handler = handler;
    r->ctx = ctx;
    split_segments(pattern, r);
    r->is_param = xcalloc(r->segment_count + 1, sizeof(bool));
    size_t params = 0;
    for (size_t i = 0; i < r->segment_count; i++) {
        if (is_param(r->segments[i])) {
            /* Keep only the name: "{name}" -> "name". */
            size_t len = strlen(r->segments[i]);
            memmove(r->segments[i], r->segments[i] + 1, len - 2);
            r->segments[i][len - 2] = '\0';
            r->is_param[i] = true;
            params++;
        }
    }
    if (params > HTTP_ROUTER_MAX_PARAMS)
        petrel_fatal("route %s has too many parameters", pattern);
}

static bool path_matches(const struct http_route *r, char *const *segments, size_t n,
                         struct http_route_match *match)
{
    if (r->segment_count != n)
        return false;
    size_t params = 0;
    for (size_t i = 0; i < n; i++) {
        if (r->is_param[i]) {
            if (segments[i][0] == '\0')
                return false;
            if (match != NULL) {
                match->names[params] = r->segments[i];
                match->values[params] = segments[i];
            }
            params++;
            continue;
        }
        if (strcmp(r->segments[i], segments[i]) != 0)
            return false;
    }
    if (match != NULL)
        match->param_count = params;
    return true;
}

static void allow_add(char *allow, size_t size, const char *method)
{
    if (allow == NULL || strstr(allow, method) != NULL)
        return;
    size_t used = strlen(allow);
    snprintf(allow + used, size - used, "%s%s", used > 0 ? ", " : "", method);
}

enum http_route_result http_router_match(const struct http_router *router, enum http_method method,
                                         char *const *segments, size_t segment_count,
                                         struct http_route_match *match, char *allow,
                                         size_t allow_size)
{
    if (allow != NULL && allow_size > 0)
        allow[0] = '\0';
    bool path_known = false;
    for (size_t i = 0; i < router->count; i++) {
        const struct http_route *r = &router->routes[i];
        if (!path_matches(r, segments, segment_count, NULL))
            continue;
        if (r->method == method || (r->method == HTTP_GET && method == HTTP_HEAD)) {
            path_matches(r, segments, segment_count, match);
            match->route = r;
            return HTTP_ROUTE_FOUND;
        }
        path_known = true;
        allow_add(allow, allow_size, http_method_name(r->method));
        if (r->method == HTTP_GET)
            allow_add(allow, allow_size, "HEAD");
    }
    return path_known ? HTTP_ROUTE_WRONG_METHOD : HTTP_ROUTE_NOT_FOUND;
}

void http_router_free(struct http_router *router)
{
    for (size_t i = 0; i < router->count; i++) {
        struct http_route *r = &router->routes[i];
        for (size_t k = 0; k < r->segment_count; k++)
            free(r->segments[k]);
        free(r->segments);
        free(r->is_param);
        free(r->pattern);
    }
    free(router->routes);
    router->routes = NULL;
    router->count = 0;
    router->cap = 0;
}
