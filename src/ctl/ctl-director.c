/* petrelctl director ...: a thin client of the director admin API
 * (docs/director.md). URL from --admin-url / PETREL_ADMIN_URL (default
 * http://localhost:9103), token from --admin-token / PETREL_ADMIN_TOKEN
 * (fallback DIRECTOR_API_TOKEN).
 *
 *   status | dump | map [user] [--tag T]
 *   backend list | add <ip> <port> [--tag T] [--vhosts N] | update <ip> --vhosts N
 *         | remove <ip> | up|down|flush <ip|all>
 *   user move <user> <ip>:<port> | kick <user>
 *   ring show | add <addr> | remove <addr> | topology */
#include "ctl/ctl.h"

#include "core/slice.h"
#include "core/xalloc.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dir_args {
    const char *tag;
    int64_t vhosts; /* -1: not given */
};

static void director_usage(void)
{
    fprintf(stderr,
            "usage: petrelctl [options] director <command>\n"
            "  status                          backends and peers\n"
            "  dump                            backends, user mappings (with expiry), peers\n"
            "  map [<user>] [--tag T]          all mappings, or where <user> goes now\n"
            "  backend list\n"
            "  backend add <ip> <port> [--tag T] [--vhosts N]   (vhosts default 100)\n"
            "  backend update <ip> --vhosts N\n"
            "  backend remove <ip>\n"
            "  backend up|down|flush <ip|all>\n"
            "  user move <user> <ip>:<port>    override the hash for <user>\n"
            "  user kick <user>                end the user's sessions (login proxies)\n"
            "  ring show | topology            this replica's ring view, the whole ring's health\n"
            "  ring add <addr> | remove <addr> peer directors (<ip>:<port> ring addresses)\n"
            "URL: --admin-url or PETREL_ADMIN_URL (default http://localhost:9103); token:\n"
            "--admin-token, PETREL_ADMIN_TOKEN or DIRECTOR_API_TOKEN\n");
}

/* Options anywhere after the command words; returns the index of the
 * first positional (-1: bad options). */
static int parse_args(int argc, char **argv, struct dir_args *a)
{
    a->tag = NULL;
    a->vhosts = -1;
    const struct ctl_option options[] = {
        {"tag", .text = &a->tag},
        {"vhosts", .number = &a->vhosts, .min = 0, .max = LONG_MAX,
         .bad = "--vhosts needs a number >= 0"},
    };
    return ctl_parse_options(argc, argv, options, sizeof(options) / sizeof(options[0]));
}

/* One request; prints the reply (readable or --json) unless `print` is
 * NULL, in which case `print_fn` renders it. */
static int request(const struct ctl_options *opts, const char *method, const char *path,
                   json_t *body, void (*print_fn)(const json_t *reply))
{
    char *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    struct ctl_response resp;
    enum ctl_exit rc = ctl_http(&opts->admin, method, path, text, &resp);
    free(text);
    if (rc != CTL_OK)
        return rc;
    if (print_fn != NULL && !opts->json && resp.status >= 200 && resp.status < 300) {
        json_t *v = json_loadb(resp.body, resp.len, 0, NULL);
        if (v != NULL) {
            print_fn(v);
            json_decref(v);
            ctl_response_free(&resp);
            return CTL_OK;
        }
    }
    rc = ctl_print_reply(opts, &resp);
    ctl_response_free(&resp);
    return rc;
}

/* request() on the path `path_fmt` gives with `arg`, URL-escaped, in its
 * one %s; the reply printed as request() does without a print_fn. */
static int request_on(const struct ctl_options *opts, const char *method, const char *path_fmt,
                      const char *arg, json_t *body)
{
    char *escaped = ctl_escape(arg);
    char *path = xasprintf(path_fmt, escaped);
    int rc = request(opts, method, path, body, NULL);
    free(path);
    free(escaped);
    return rc;
}

/* ---------- readable tables ---------- */

static const char *str_or_dash(const json_t *v)
{
    const char *s = json_string_value(v);
    return s != NULL && *s != '\0' ? s : "-";
}

/* A row's last column, `text`; a dump pads it to `width` and adds the
 * row's time in `time_key`. */
static void print_last(const char *text, int width, bool dump, const json_t *row,
                       const char *time_key)
{
    if (dump)
        printf("%-*s %lld\n", width, text,
               (long long)json_integer_value(json_object_get(row, time_key)));
    else
        printf("%s\n", text);
}

static void print_backends(const json_t *list, bool dump)
{
    printf("%-40s %-6s %-12s %-6s %s\n", "BACKEND", "PORT", "TAG", "STATE",
           dump ? "VHOSTS  LAST-UPDOWN" : "VHOSTS");
    size_t i;
    json_t *b;
    json_array_foreach(list, i, b)
    {
        char vhosts[24];
        snprintf(vhosts, sizeof(vhosts), "%lld",
                 (long long)json_integer_value(json_object_get(b, "vhosts")));
        printf("%-40s %-6lld %-12s %-6s ", str_or_dash(json_object_get(b, "ip")),
               (long long)json_integer_value(json_object_get(b, "port")),
               str_or_dash(json_object_get(b, "tag")),
               json_is_true(json_object_get(b, "up")) ? "up" : "flush");
        print_last(vhosts, 7, dump, b, "last_updown_change");
    }
}

static void print_peers(const json_t *list)
{
    printf("peers:");
    if (json_array_size(list) == 0)
        printf(" (none)");
    size_t i;
    json_t *p;
    json_array_foreach(list, i, p)
    {
        printf(" %s", str_or_dash(p));
    }
    printf("\n");
}

static void print_users(const json_t *list, bool dump)
{
    printf("%-10s %-46s %s\n", "HASH", "HOST", dump ? "WEAK  EXPIRES-AT" : "WEAK");
    size_t i;
    json_t *u;
    json_array_foreach(list, i, u)
    {
        const char *weak = json_is_true(json_object_get(u, "weak")) ? "yes" : "no";
        printf("%-10lld %-46s ", (long long)json_integer_value(json_object_get(u, "hash")),
               str_or_dash(json_object_get(u, "host")));
        print_last(weak, 5, dump, u, "expires_at");
    }
}

static void show_status(const json_t *v)
{
    print_backends(json_object_get(v, "backends"), false);
    print_peers(json_object_get(v, "peers"));
}

static void show_dump(const json_t *v)
{
    print_backends(json_object_get(v, "backends"), true);
    printf("\n");
    print_users(json_object_get(v, "users"), true);
    printf("\n");
    print_peers(json_object_get(v, "peers"));
}

static void show_map(const json_t *v)
{
    print_users(json_object_get(v, "users"), false);
}

static void show_backend_list(const json_t *v)
{
    print_backends(json_object_get(v, "backends"), false);
}

/* ---------- commands ---------- */

static int cmd_map(const struct ctl_options *opts, int argc, char **argv)
{
    struct dir_args a;
    int first = parse_args(argc, argv, &a);
    if (first < 0 || argc - first > 1) {
        fprintf(stderr, "usage: petrelctl director map [<user>] [--tag T]\n");
        return CTL_USAGE;
    }
    if (argc - first == 0)
        return request(opts, "GET", "/api/director/map", NULL, show_map);
    char *user = ctl_escape(argv[first]);
    char *tag = a.tag != NULL ? ctl_escape(a.tag) : NULL;
    char *path = tag != NULL ? xasprintf("/api/director/map?user=%s&tag=%s", user, tag)
                             : xasprintf("/api/director/map?user=%s", user);
    int rc = request(opts, "GET", path, NULL, NULL);
    free(path);
    free(user);
    free(tag);
    return rc;
}

static int backend_usage(void)
{
    fprintf(stderr, "usage: petrelctl director backend list | add <ip> <port> [--tag T] "
                    "[--vhosts N] | update <ip> --vhosts N | remove <ip> | up|down|flush "
                    "<ip|all>\n");
    return CTL_USAGE;
}

static int cmd_backend(const struct ctl_options *opts, int argc, char **argv)
{
    struct dir_args a;
    int first = parse_args(argc, argv, &a);
    if (first < 0 || argc - first < 1)
        return backend_usage();
    const char *verb = argv[first];
    int n = argc - first - 1;
    char **pos = argv + first + 1;
    if (strcmp(verb, "list") == 0 && n == 0)
        return request(opts, "GET", "/api/director/backends", NULL, show_backend_list);
    if (strcmp(verb, "add") == 0 && n == 2) {
        uint64_t port = 0;
        if (!str_parse_u64(pos[1], 65535, &port) || port == 0) {
            fprintf(stderr, "petrelctl: port must be 1..65535\n");
            return CTL_USAGE;
        }
        json_t *body = json_pack("{s:s, s:i, s:s}", "ip", pos[0], "port", (int)port, "tag",
                                 a.tag != NULL ? a.tag : "");
        if (a.vhosts >= 0)
            json_object_set_new(body, "vhosts", json_integer(a.vhosts));
        return request(opts, "POST", "/api/director/backends", body, NULL);
    }
    if (n != 1)
        return backend_usage();
    char *ip = ctl_escape(pos[0]);
    int rc;
    if (strcmp(verb, "update") == 0) {
        if (a.vhosts < 0) {
            free(ip);
            fprintf(stderr, "petrelctl: backend update needs --vhosts N\n");
            return CTL_USAGE;
        }
        char *path = xasprintf("/api/director/backends/%s", ip);
        rc = request(opts, "PATCH", path, json_pack("{s:I}", "vhosts", (json_int_t)a.vhosts), NULL);
        free(path);
    } else if (strcmp(verb, "remove") == 0) {
        char *path = xasprintf("/api/director/backends/%s", ip);
        rc = request(opts, "DELETE", path, NULL, NULL);
        free(path);
    } else if (strcmp(verb, "up") == 0 || strcmp(verb, "down") == 0 || strcmp(verb, "flush") == 0) {
        char *path = xasprintf("/api/director/backends/%s/%s", ip, verb);
        rc = request(opts, "POST", path, NULL, NULL);
        free(path);
    } else {
        rc = backend_usage();
    }
    free(ip);
    return rc;
}

static int cmd_user(const struct ctl_options *opts, int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "move") == 0)
        return request_on(opts, "POST", "/api/director/users/%s/move", argv[2],
                          json_pack("{s:s}", "backend", argv[3]));
    if (argc == 3 && strcmp(argv[1], "kick") == 0)
        return request_on(opts, "POST", "/api/director/users/%s/kick", argv[2], NULL);
    fprintf(stderr, "usage: petrelctl director user move <user> <ip>:<port> | kick <user>\n");
    return CTL_USAGE;
}

static int cmd_ring(const struct ctl_options *opts, int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "show") == 0)
        return request(opts, "GET", "/api/director/ring", NULL, NULL);
    if (argc == 2 && strcmp(argv[1], "topology") == 0)
        return request(opts, "GET", "/api/director/ring/topology", NULL, NULL);
    if (argc == 3 && strcmp(argv[1], "add") == 0)
        return request(opts, "POST", "/api/director/ring", json_pack("{s:s}", "addr", argv[2]),
                       NULL);
    if (argc == 3 && strcmp(argv[1], "remove") == 0) {
        return request_on(opts, "DELETE", "/api/director/ring?addr=%s", argv[2], NULL);
    }
    fprintf(stderr,
            "usage: petrelctl director ring show | topology | add <addr> | remove <addr>\n");
    return CTL_USAGE;
}

int ctl_director_main(const struct ctl_options *opts, int argc, char **argv)
{
    if (argc < 1) {
        director_usage();
        return CTL_USAGE;
    }
    const char *cmd = argv[0];
    if (strcmp(cmd, "status") == 0 && argc == 1)
        return request(opts, "GET", "/api/director/status", NULL, show_status);
    if (strcmp(cmd, "dump") == 0 && argc == 1)
        return request(opts, "GET", "/api/director/dump", NULL, show_dump);
    if (strcmp(cmd, "map") == 0)
        return cmd_map(opts, argc, argv);
    if (strcmp(cmd, "backend") == 0)
        return cmd_backend(opts, argc, argv);
    if (strcmp(cmd, "user") == 0)
        return cmd_user(opts, argc, argv);
    if (strcmp(cmd, "ring") == 0)
        return cmd_ring(opts, argc, argv);
    if (strcmp(cmd, "help") != 0)
        fprintf(stderr, "petrelctl: unknown director command '%s'\n", cmd);
    director_usage();
    return CTL_USAGE;
}
