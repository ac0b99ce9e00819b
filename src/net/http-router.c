#include "net/http-router.h"

#include "core/xalloc.h"

#include <stdint.h>
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

/* One segment position of the tree. The routes ending here are indices into
 * router->routes (the array moves as it grows), ascending: the order of
 * registration. */
struct http_route_node {
    char *literal;                     /* NULL for the root and a "{param}" node */
    struct http_route_node **children; /* literal segments, each once */
    size_t child_count;
    size_t child_cap;
    struct http_route_node *param;
    size_t *routes;
    size_t route_count;
    size_t route_cap;
};

static struct http_route_node *node_child(struct http_route_node *node, const char *literal)
{
    for (size_t i = 0; i < node->child_count; i++) {
        if (strcmp(node->children[i]->literal, literal) == 0)
            return node->children[i];
    }
    struct http_route_node *c = xcalloc(1, sizeof(*c));
    c->literal = xstrdup(literal);
    node->children =
        xgrow(node->children, &node->child_cap, node->child_count + 1, sizeof(*node->children));
    node->children[node->child_count++] = c;
    return c;
}

static void tree_add(struct http_router *router, size_t index)
{
    const struct http_route *r = &router->routes[index];
    if (router->root == NULL)
        router->root = xcalloc(1, sizeof(*router->root));
    struct http_route_node *node = router->root;
    for (size_t i = 0; i < r->segment_count; i++) {
        if (r->is_param[i]) {
            if (node->param == NULL)
                node->param = xcalloc(1, sizeof(*node->param));
            node = node->param;
        } else {
            node = node_child(node, r->segments[i]);
        }
    }
    node->routes =
        xgrow(node->routes, &node->route_cap, node->route_count + 1, sizeof(*node->routes));
    node->routes[node->route_count++] = index;
}

static void node_free(struct http_route_node *node)
{
    if (node == NULL)
        return;
    for (size_t i = 0; i < node->child_count; i++)
        node_free(node->children[i]);
    free(node->children);
    node_free(node->param);
    free(node->routes);
    free(node->literal);
    free(node);
}

static bool method_accepts(enum http_method route_method, enum http_method method)
{
    return route_method == method || (route_method == HTTP_GET && method == HTTP_HEAD);
}

struct tree_walk {
    const struct http_router *router;
    char *const *segments;
    size_t segment_count;
    enum http_method method;
    size_t best;     /* least index of a route accepting path and method */
    bool path_known; /* some route accepts the path */
};

/* Visits every node the request path reaches at its full depth: a literal
 * child and the param child may both lead to a match, and the earlier
 * registered route must win whichever branch holds it. */
static void tree_walk(struct tree_walk *w, const struct http_route_node *node, size_t depth)
{
    if (depth == w->segment_count) {
        for (size_t i = 0; i < node->route_count; i++) {
            size_t index = node->routes[i];
            w->path_known = true;
            if (index < w->best && method_accepts(w->router->routes[index].method, w->method)) {
                w->best = index;
                break; /* ascending: the rest are later */
            }
        }
        return;
    }
    const char *seg = w->segments[depth];
    for (size_t i = 0; i < node->child_count; i++) {
        const struct http_route_node *c = node->children[i];
        if (c->literal[0] == seg[0] && strcmp(c->literal, seg) == 0) {
            tree_walk(w, c, depth + 1);
            break;
        }
    }
    if (node->param != NULL && seg[0] != '\0')
        tree_walk(w, node->param, depth + 1);
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
    tree_add(router, router->count - 1);
}

static bool path_matches(const struct http_route *r, char *const *segments, size_t n)
{
    if (r->segment_count != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (r->is_param[i] ? segments[i][0] == '\0' : strcmp(r->segments[i], segments[i]) != 0)
            return false;
    }
    return true;
}

static void allow_add(char *allow, size_t size, const char *method)
{
    if (allow == NULL || strstr(allow, method) != NULL)
        return;
    size_t used = strlen(allow);
    snprintf(allow + used, size - used, "%s%s", used > 0 ? ", " : "", method);
}

/* The request's segments fill the route's parameters (the route is known to
 * match). */
static void fill_params(const struct http_route *r, char *const *segments,
                        struct http_route_match *match)
{
    size_t params = 0;
    for (size_t i = 0; i < r->segment_count; i++) {
        if (r->is_param[i]) {
            match->names[params] = r->segments[i];
            match->values[params] = segments[i];
            params++;
        }
    }
    match->param_count = params;
    match->route = r;
}

enum http_route_result http_router_match(const struct http_router *router, enum http_method method,
                                         char *const *segments, size_t segment_count,
                                         struct http_route_match *match, char *allow,
                                         size_t allow_size)
{
    if (allow != NULL && allow_size > 0)
        allow[0] = '\0';
    struct tree_walk w = {
        .router = router,
        .segments = segments,
        .segment_count = segment_count,
        .method = method,
        .best = SIZE_MAX,
    };
    if (router->root != NULL)
        tree_walk(&w, router->root, 0);
    if (w.best != SIZE_MAX) {
        fill_params(&router->routes[w.best], segments, match);
        return HTTP_ROUTE_FOUND;
    }
    if (!w.path_known)
        return HTTP_ROUTE_NOT_FOUND;
    /* A 405's Allow header lists the path's methods in registration order:
     * the rare case, answered by scanning every route. */
    for (size_t i = 0; i < router->count; i++) {
        const struct http_route *r = &router->routes[i];
        if (!path_matches(r, segments, segment_count))
            continue;
        allow_add(allow, allow_size, http_method_name(r->method));
        if (r->method == HTTP_GET)
            allow_add(allow, allow_size, "HEAD");
    }
    return HTTP_ROUTE_WRONG_METHOD;
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
    node_free(router->root);
    router->root = NULL;
    router->routes = NULL;
    router->count = 0;
    router->cap = 0;
}
