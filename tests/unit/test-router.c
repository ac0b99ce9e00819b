/* Unit tests for net/http-router.h: literal and {param} routes, HEAD via GET,
 * 404 versus 405 with the Allow list. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net/http-router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Handlers are opaque to the router: distinct addresses are enough. */
static int h_health, h_version, h_user_get, h_user_put, h_user_delete, h_user_folder, h_root,
    h_users_list, h_users_me, h_post;

struct segs {
    char *v[16];
    size_t n;
    char storage[256];
};

/* Splits "/a/b/c" into decoded segments the way the server does ("" kept for "//"). */
static void split(struct segs *s, const char *path)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->storage, sizeof(s->storage), "%s", path);
    char *p = s->storage;
    if (*p == '/')
        p++;
    if (*p == '\0')
        return;
    for (;;) {
        s->v[s->n++] = p;
        char *slash = strchr(p, '/');
        if (slash == NULL)
            break;
        *slash = '\0';
        p = slash + 1;
    }
}

static struct http_router router;

static int setup(void **state)
{
    memset(&router, 0, sizeof(router));
    http_router_add(&router, HTTP_GET, "/api/backend/health", 0, &h_health, NULL);
    http_router_add(&router, HTTP_GET, "/api/backend/version", 1, &h_version, &h_version);
    http_router_add(&router, HTTP_GET, "/api/users/me", 0, &h_users_me, NULL);
    http_router_add(&router, HTTP_GET, "/api/users/{user}", 0, &h_user_get, NULL);
    http_router_add(&router, HTTP_PUT, "/api/users/{user}", 0, &h_user_put, NULL);
    http_router_add(&router, HTTP_DELETE, "/api/users/{user}", 0, &h_user_delete, NULL);
    http_router_add(&router, HTTP_GET, "/api/users/{user}/folders/{folder}", 0, &h_user_folder,
                    NULL);
    http_router_add(&router, HTTP_GET, "/api/users", 0, &h_users_list, NULL);
    http_router_add(&router, HTTP_POST, "/api/actions/run", 0, &h_post, NULL);
    http_router_add(&router, HTTP_GET, "/", 0, &h_root, NULL);
    return 0;
}

static int teardown(void **state)
{
    http_router_free(&router);
    assert_null(router.routes);
    assert_int_equal(router.count, 0);
    return 0;
}

static enum http_route_result route(enum http_method method, const char *path,
                                    struct http_route_match *m, char *allow, size_t allow_size)
{
    struct segs s;
    split(&s, path);
    memset(m, 0, sizeof(*m));
    return http_router_match(&router, method, s.v, s.n, m, allow, allow_size);
}

static void test_literal_route_matches(void **state)
{
    struct http_route_match m;
    assert_int_equal(route(HTTP_GET, "/api/backend/health", &m, NULL, 0), HTTP_ROUTE_FOUND);
    assert_ptr_equal(m.route->handler, &h_health);
    assert_string_equal(m.route->pattern, "/api/backend/health");
    assert_int_equal(m.param_count, 0);

    assert_int_equal(route(HTTP_GET, "/api/backend/version", &m, NULL, 0), HTTP_ROUTE_FOUND);
    assert_ptr_equal(m.route->handler, &h_version);
    assert_ptr_equal(m.route->ctx, &h_version);
    assert_int_equal(m.route->flags, 1);
}

static void test_root_route_has_no_segments(void **state)
{
    struct http_route_match m;
    assert_int_equal(route(HTTP_GET, "/", &m, NULL, 0), HTTP_ROUTE_FOUND);
    assert_ptr_equal(m.route->handler, &h_root);
}

static void test_literal_segments_must_match_exactly(void **state)
{
    struct http_route_match m;
    assert_int_equal(route(HTTP_GET, "/api/backend/healthz", &m, NULL, 0), HTTP_ROUTE_NOT_FOUND);
    assert_int_equal(route(HTTP_GET, "/api/backend/Health", &m, NULL, 0), HTTP_ROUTE_NOT_FOUND);
    assert_int_equal(route(HTTP_GET, "/api/backend", &m, NULL, 0), HTTP_ROUTE_NOT_FOUND);
    assert_int_equal(route(HTTP_GET, "/api/backend/health/x", &m, NULL, 0), HTTP_ROUTE_NOT_FOUND);
    assert_int_equal(route(HTTP_GET, "/nothing", &m, NULL, 0), HTTP_ROUTE_NOT_FOUND);
}

static void test_param_segment_value_is_returned(void **state)
{
    struct http_route_match m;
    assert_int_equal(route(HTTP_GET, "/api/users/alice@example.org", &m, NULL, 0),
                     HTTP_ROUTE_FOUND);
    assert_ptr_equal(m.route->handler, &h_user_get);
    assert_int_equal(m.param_count, 1);
    assert_string_equal(m.names[0], "user");
    assert_string_equal(m.values[0], "alice@example.org");
}

static void test_several_params_are_returned_in_order(void **state)
{
    struct http_route_match m;
    assert_int_equal(route(HTTP_GET, "/api/users/bob/folders/INBOX", &m, NULL, 0),
                     HTTP_ROUTE_FOUND);
    assert_ptr_equal(m.route->handler, &h_user_folder);
    assert_int_equal(m.param_count, 2);
    assert_string_equal(m.names[0], "user");
    assert_string_equal(m.values[0], "bob");
    assert_string_equal(m.names[1], "folder");
    assert_string_equal(m.values[1], "INBOX");
    /* The route keeps the pattern text and stores bare names. */
    assert_string_equal(m.route->pattern, "/api/users/{user}/folders/{folder}");
    assert_true(m.route->is_param[2]);
    assert_false(m.route->is_param[1]);
    assert_string_equal(m.route->segments[2], "user");
}

static void test_earlier_literal_route_wins_over_param(void **state)
{
    struct http_route_match m;
    assert_int_equal(route(HTTP_GET, "/api/users/me", &m, NULL, 0), HTTP_ROUTE_FOUND);
    assert_ptr_equal(m.route->handler, &h_users_me);
    assert_int_equal(m.param_count, 0);
}

static void test_method_selects_among_routes_of_one_path(void **state)
{
    struct http_route_match m;
    assert_int_equal(route(HTTP_PUT, "/api/users/carol", &m, NULL, 0), HTTP_ROUTE_FOUND);
    assert_ptr_equal(m.route->handler, &h_user_put);
    assert_string_equal(m.values[0], "carol");
    assert_int_equal(route(HTTP_DELETE, "/api/users/carol", &m, NULL, 0), HTTP_ROUTE_FOUND);
    assert_ptr_equal(m.route->handler, &h_user_delete);
}

static void test_empty_segment_never_matches_a_param(void **state)
{
    struct http_route_match m;
    char allow[64];
    /* "/api/users/" has an empty last segment. */
    assert_int_equal(route(HTTP_GET, "/api/users/", &m, allow, sizeof(allow)),
                     HTTP_ROUTE_NOT_FOUND);
    assert_int_equal(route(HTTP_GET, "/api/users//folders/INBOX", &m, NULL, 0),
                     HTTP_ROUTE_NOT_FOUND);
    assert_int_equal(route(HTTP_GET, "/api/users/bob/folders/", &m, NULL, 0), HTTP_ROUTE_NOT_FOUND);
    /* Nor a literal. */
    assert_int_equal(route(HTTP_GET, "/api//users", &m, NULL, 0), HTTP_ROUTE_NOT_FOUND);
}

static void test_head_is_answered_by_get_routes(void **state)
{
    struct http_route_match m;
    assert_int_equal(route(HTTP_HEAD, "/api/backend/health", &m, NULL, 0), HTTP_ROUTE_FOUND);
    assert_ptr_equal(m.route->handler, &h_health);
    assert_int_equal(route(HTTP_HEAD, "/api/users/dave", &m, NULL, 0), HTTP_ROUTE_FOUND);
    assert_ptr_equal(m.route->handler, &h_user_get);
    assert_string_equal(m.values[0], "dave");
}

static void test_head_is_not_answered_by_post_routes(void **state)
{
    struct http_route_match m;
    char allow[64];
    assert_int_equal(route(HTTP_HEAD, "/api/actions/run", &m, allow, sizeof(allow)),
                     HTTP_ROUTE_WRONG_METHOD);
    assert_string_equal(allow, "POST");
}

static void test_wrong_method_lists_allowed_methods(void **state)
{
    struct http_route_match m;
    char allow[64] = "stale";
    assert_int_equal(route(HTTP_POST, "/api/backend/health", &m, allow, sizeof(allow)),
                     HTTP_ROUTE_WRONG_METHOD);
    assert_string_equal(allow, "GET, HEAD");

    assert_int_equal(route(HTTP_POST, "/api/users/erin", &m, allow, sizeof(allow)),
                     HTTP_ROUTE_WRONG_METHOD);
    assert_string_equal(allow, "GET, HEAD, PUT, DELETE");

    assert_int_equal(route(HTTP_GET, "/api/actions/run", &m, allow, sizeof(allow)),
                     HTTP_ROUTE_WRONG_METHOD);
    assert_string_equal(allow, "POST");

    /* The Allow list is optional. */
    assert_int_equal(route(HTTP_PATCH, "/api/users/erin", &m, NULL, 0), HTTP_ROUTE_WRONG_METHOD);
}

static void test_allow_list_is_not_duplicated_by_overlapping_routes(void **state)
{
    /* "/api/users/me" is matched by the literal route and by "{user}". */
    struct http_route_match m;
    char allow[64];
    assert_int_equal(route(HTTP_OPTIONS, "/api/users/me", &m, allow, sizeof(allow)),
                     HTTP_ROUTE_WRONG_METHOD);
    assert_string_equal(allow, "GET, HEAD, PUT, DELETE");
}

static void test_allow_list_truncates_safely(void **state)
{
    struct http_route_match m;
    char allow[8];
    assert_int_equal(route(HTTP_POST, "/api/users/erin", &m, allow, sizeof(allow)),
                     HTTP_ROUTE_WRONG_METHOD);
    assert_true(strlen(allow) < sizeof(allow));
    assert_int_equal(strncmp(allow, "GET, HE", strlen(allow)), 0);
}

static void test_not_found_clears_allow(void **state)
{
    struct http_route_match m;
    char allow[64] = "GET";
    assert_int_equal(route(HTTP_GET, "/missing", &m, allow, sizeof(allow)), HTTP_ROUTE_NOT_FOUND);
    assert_string_equal(allow, "");
}

static void test_empty_router_finds_nothing(void **state)
{
    struct http_router empty = {0};
    struct http_route_match m;
    char *segs[] = {"a"};
    char allow[16] = "x";
    assert_int_equal(http_router_match(&empty, HTTP_GET, segs, 1, &m, allow, sizeof(allow)),
                     HTTP_ROUTE_NOT_FOUND);
    assert_string_equal(allow, "");
    http_router_free(&empty);
}

static void test_many_routes_grow_the_table(void **state)
{
    struct http_router r = {0};
    static int handlers[100];
    char pattern[64];
    for (int i = 0; i < 100; i++) {
        snprintf(pattern, sizeof(pattern), "/r%d/{id}", i);
        http_router_add(&r, HTTP_GET, pattern, 0, &handlers[i], NULL);
    }
    assert_int_equal(r.count, 100);
    for (int i = 0; i < 100; i += 7) {
        char seg0[16];
        snprintf(seg0, sizeof(seg0), "r%d", i);
        char *segs[] = {seg0, "42"};
        struct http_route_match m;
        assert_int_equal(http_router_match(&r, HTTP_GET, segs, 2, &m, NULL, 0), HTTP_ROUTE_FOUND);
        assert_ptr_equal(m.route->handler, &handlers[i]);
        assert_string_equal(m.values[0], "42");
    }
    http_router_free(&r);
}

static void test_pattern_slashes_are_normalised(void **state)
{
    struct http_router r = {0};
    http_router_add(&r, HTTP_GET, "//a//{b}/", 0, &h_root, NULL);
    assert_int_equal(r.routes[0].segment_count, 2);
    char *segs[] = {"a", "x"};
    struct http_route_match m;
    assert_int_equal(http_router_match(&r, HTTP_GET, segs, 2, &m, NULL, 0), HTTP_ROUTE_FOUND);
    assert_string_equal(m.names[0], "b");
    http_router_free(&r);
}

static void test_braces_need_a_name_to_be_a_param(void **state)
{
    struct http_router r = {0};
    http_router_add(&r, HTTP_GET, "/a/{}", 0, &h_root, NULL);
    char *literal[] = {"a", "{}"};
    char *other[] = {"a", "x"};
    struct http_route_match m;
    assert_int_equal(http_router_match(&r, HTTP_GET, literal, 2, &m, NULL, 0), HTTP_ROUTE_FOUND);
    assert_int_equal(m.param_count, 0);
    assert_int_equal(http_router_match(&r, HTTP_GET, other, 2, &m, NULL, 0), HTTP_ROUTE_NOT_FOUND);
    http_router_free(&r);
}

static void test_param_route_registered_first_wins_over_literal(void **state)
{
    /* The literal and the param branch both reach the path: the earlier
     * registration answers, whichever branch holds it. */
    struct http_router r = {0};
    static int h_param, h_literal, h_literal_post;
    http_router_add(&r, HTTP_GET, "/items/{id}", 0, &h_param, NULL);
    http_router_add(&r, HTTP_GET, "/items/special", 0, &h_literal, NULL);
    http_router_add(&r, HTTP_POST, "/items/special", 0, &h_literal_post, NULL);
    char *segs[] = {"items", "special"};
    struct http_route_match m;
    assert_int_equal(http_router_match(&r, HTTP_GET, segs, 2, &m, NULL, 0), HTTP_ROUTE_FOUND);
    assert_ptr_equal(m.route->handler, &h_param);
    assert_string_equal(m.values[0], "special");
    assert_int_equal(http_router_match(&r, HTTP_POST, segs, 2, &m, NULL, 0), HTTP_ROUTE_FOUND);
    assert_ptr_equal(m.route->handler, &h_literal_post);
    assert_int_equal(m.param_count, 0);
    char allow[64];
    assert_int_equal(http_router_match(&r, HTTP_DELETE, segs, 2, &m, allow, sizeof(allow)),
                     HTTP_ROUTE_WRONG_METHOD);
    assert_string_equal(allow, "GET, HEAD, POST");
    http_router_free(&r);
}

/* The answer of a scan of every route in registration order: what the
 * router's segment tree must reproduce. */
static enum http_route_result reference_match(const struct http_router *r, enum http_method method,
                                              char *const *segs, size_t n,
                                              const struct http_route **found)
{
    bool path_known = false;
    for (size_t i = 0; i < r->count; i++) {
        const struct http_route *route = &r->routes[i];
        if (route->segment_count != n)
            continue;
        bool ok = true;
        for (size_t k = 0; k < n && ok; k++)
            ok = route->is_param[k] ? segs[k][0] != '\0' : strcmp(route->segments[k], segs[k]) == 0;
        if (!ok)
            continue;
        if (route->method == method || (route->method == HTTP_GET && method == HTTP_HEAD)) {
            *found = route;
            return HTTP_ROUTE_FOUND;
        }
        path_known = true;
    }
    return path_known ? HTTP_ROUTE_WRONG_METHOD : HTTP_ROUTE_NOT_FOUND;
}

static void test_tree_agrees_with_a_scan_in_registration_order(void **state)
{
    /* Every pattern of up to three segments over {a, b, {p}} with a method
     * chosen by its number, registered in an order that interleaves
     * literal and param routes; then every path of up to three segments
     * over {a, b, c, ""} and every method. */
    static const char *const parts[] = {"a", "b", "{p}"};
    static const enum http_method methods[] = {HTTP_GET,    HTTP_POST, HTTP_PUT,
                                               HTTP_DELETE, HTTP_HEAD, HTTP_PATCH};
    static int handler;
    struct http_router r = {0};
    unsigned seq = 0;
    for (size_t len = 0; len <= 3; len++) {
        size_t total = 1;
        for (size_t k = 0; k < len; k++)
            total *= 3;
        for (size_t v = 0; v < total; v++) {
            size_t x = (v * 7 + len) % total; /* not in lexical order */
            char pattern[64] = "";
            for (size_t k = 0; k < len; k++) {
                strcat(pattern, "/");
                strcat(pattern, parts[x % 3]);
                x /= 3;
            }
            if (len == 0)
                strcpy(pattern, "/");
            http_router_add(&r, methods[seq % 4], pattern, 0, &handler, NULL);
            if (seq % 3 == 0) /* a second method on some paths */
                http_router_add(&r, methods[(seq + 1) % 4], pattern, 0, &handler, NULL);
            seq++;
        }
    }
    static const char *const words[] = {"a", "b", "c", ""};
    size_t checked = 0;
    for (size_t len = 0; len <= 3; len++) {
        size_t total = 1;
        for (size_t k = 0; k < len; k++)
            total *= 4;
        for (size_t v = 0; v < total; v++) {
            char *segs[3];
            size_t x = v;
            for (size_t k = 0; k < len; k++) {
                segs[k] = (char *)words[x % 4];
                x /= 4;
            }
            for (size_t mi = 0; mi < sizeof(methods) / sizeof(methods[0]); mi++) {
                const struct http_route *want = NULL;
                enum http_route_result expect = reference_match(&r, methods[mi], segs, len, &want);
                struct http_route_match m;
                memset(&m, 0, sizeof(m));
                enum http_route_result got =
                    http_router_match(&r, methods[mi], segs, len, &m, NULL, 0);
                assert_int_equal(got, expect);
                if (got == HTTP_ROUTE_FOUND) {
                    assert_ptr_equal(m.route, want);
                    size_t params = 0;
                    for (size_t k = 0; k < len; k++) {
                        if (want->is_param[k]) {
                            assert_ptr_equal(m.values[params], segs[k]);
                            params++;
                        }
                    }
                    assert_int_equal(m.param_count, params);
                }
                checked++;
            }
        }
    }
    assert_true(checked > 500);
    http_router_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_literal_route_matches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_root_route_has_no_segments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_literal_segments_must_match_exactly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_param_segment_value_is_returned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_several_params_are_returned_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_earlier_literal_route_wins_over_param, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_method_selects_among_routes_of_one_path, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_empty_segment_never_matches_a_param, setup, teardown),
        cmocka_unit_test_setup_teardown(test_head_is_answered_by_get_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_head_is_not_answered_by_post_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_method_lists_allowed_methods, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allow_list_is_not_duplicated_by_overlapping_routes,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_allow_list_truncates_safely, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_found_clears_allow, setup, teardown),
        cmocka_unit_test(test_empty_router_finds_nothing),
        cmocka_unit_test(test_many_routes_grow_the_table),
        cmocka_unit_test(test_pattern_slashes_are_normalised),
        cmocka_unit_test(test_braces_need_a_name_to_be_a_param),
        cmocka_unit_test(test_param_route_registered_first_wins_over_literal),
        cmocka_unit_test(test_tree_agrees_with_a_scan_in_registration_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
