/* Route table for the HTTP server: method + path pattern, where a "{name}"
 * segment matches one non-empty segment. Pure data structure (no I/O), so
 * matching rules are unit-tested on their own.
 *
 * The routes are also kept as a tree of path segments, so a lookup compares
 * each request segment with the literals that can follow the previous one
 * (a handful) instead of every route's whole pattern: the backend API has
 * over fifty routes sharing "/api/backend/". The answer is the one a scan
 * in registration order would give (the first route whose path and method
 * match), including where a literal and a "{param}" route overlap. */
#ifndef PETREL_NET_HTTP_ROUTER_H
#define PETREL_NET_HTTP_ROUTER_H

#include "net/http-parser.h"

#include <stdbool.h>
#include <stddef.h>

#define HTTP_ROUTER_MAX_PARAMS 8

struct http_route {
    enum http_method method;
    char *pattern;
    char **segments; /* parameter segments hold just the name */
    bool *is_param;
    size_t segment_count;
    unsigned flags;
    void *handler; /* opaque to the router */
    void *ctx;
};

struct http_route_node; /* the segment tree, private to http-router.c */

struct http_router {
    struct http_route *routes;
    size_t count;
    size_t cap;
    struct http_route_node *root;
};

enum http_route_result { HTTP_ROUTE_FOUND, HTTP_ROUTE_NOT_FOUND, HTTP_ROUTE_WRONG_METHOD };

struct http_route_match {
    const struct http_route *route;
    size_t param_count;
    const char *names[HTTP_ROUTER_MAX_PARAMS];  /* without braces, owned by the route */
    const char *values[HTTP_ROUTER_MAX_PARAMS]; /* the caller's segments */
};

void http_router_add(struct http_router *router, enum http_method method, const char *pattern,
                     unsigned flags, void *handler, void *ctx);
/* Matches decoded path segments. GET routes answer HEAD. On WRONG_METHOD,
 * `allow` (may be NULL) receives the methods the path accepts ("GET, HEAD"). */
enum http_route_result http_router_match(const struct http_router *router, enum http_method method,
                                         char *const *segments, size_t segment_count,
                                         struct http_route_match *match, char *allow,
                                         size_t allow_size);
void http_router_free(struct http_router *router);

#endif
