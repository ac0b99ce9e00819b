/* petrelctl internals: a thin HTTP client of the backend-plane API and the
 * director admin API. Exit codes: 0 ok, 1 the server said no, 2 usage,
 * 3 cannot connect. Errors go to stderr. */
#ifndef PETREL_CTL_H
#define PETREL_CTL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ctl_exit { CTL_OK = 0, CTL_REFUSED = 1, CTL_USAGE = 2, CTL_UNREACHABLE = 3 };

struct ctl_target {
    const char *url;   /* base URL, no trailing slash needed */
    const char *token; /* NULL/"" = no Authorization header */
    const char *cacert;
    const char *cert;
    const char *key;
    long timeout_secs;
};

struct ctl_options {
    struct ctl_target backend;
    struct ctl_target admin;
    bool json; /* raw JSON output instead of the readable form */
};

struct ctl_response {
    long status;
    char *body;
    size_t len;
};

/* Performs one request; `body` (JSON text) may be NULL. On a transport
 * failure prints "petrelctl: cannot connect to URL: reason" and returns
 * CTL_UNREACHABLE; otherwise CTL_OK with the response filled. */
enum ctl_exit ctl_http(const struct ctl_target *t, const char *method, const char *path,
                       const char *body, struct ctl_response *resp);
/* Streams the response body line by line to `on_line` (NDJSON). */
typedef bool (*ctl_line_fn)(const char *line, size_t len, void *ctx);
enum ctl_exit ctl_http_stream(const struct ctl_target *t, const char *method, const char *path,
                              const char *body, ctl_line_fn on_line, void *ctx, long *status);
void ctl_response_free(struct ctl_response *resp);
/* POSTs `body` (taken: decref'd here) as compact JSON. */
enum ctl_exit ctl_post_json(const struct ctl_target *t, const char *path, json_t *body,
                            struct ctl_response *resp);

/* Prints a JSON reply (raw with --json, readable otherwise) or, for an
 * error status, "petrelctl: <status>: <error>" on stderr. Returns the exit code. */
enum ctl_exit ctl_print_reply(const struct ctl_options *opts, const struct ctl_response *resp);
/* One request to the backend-plane API and its reply printed
 * (ctl_print_reply); `body` (JSON text) may be NULL. Returns the exit code. */
enum ctl_exit ctl_backend_call(const struct ctl_options *opts, const char *method, const char *path,
                               const char *body);
/* As ctl_backend_call, POSTing `body` (taken: decref'd here) as compact JSON. */
enum ctl_exit ctl_backend_post(const struct ctl_options *opts, const char *path, json_t *body);
/* Readable rendering of a JSON value: objects as "key: value" lines. */
void ctl_print_readable(const json_t *value, int indent);
/* URL-encodes one path segment or query value into a fresh string. */
char *ctl_escape(const char *s);

/* One option of a subcommand (ctl_parse_options), by what it sets:
 * --NAME VALUE sets *text; --NAME alone sets *flag, or ORs `bit` into
 * *bits; --NAME N sets *number to N, an integer within [min, max], or
 * fails with "petrelctl: <bad>". */
struct ctl_option {
    const char *name;
    const char **text;
    bool *flag;
    unsigned *bits;
    unsigned bit;
    int64_t *number;
    int64_t min, max;
    const char *bad;
};
/* Parses `count` options anywhere after argv[0] (the command word),
 * moving the positionals behind them (getopt_long's order). Returns the
 * index of the first positional, or -1 after an unknown option or a bad
 * value (getopt or the option has said why on stderr). */
int ctl_parse_options(int argc, char **argv, const struct ctl_option *options, size_t count);

/* Area dispatchers: argv[0] is the area's first word after "backend". */
int ctl_backend_main(const struct ctl_options *opts, int argc, char **argv);
/* argv[0] == "dict". */
int ctl_backend_dict(const struct ctl_options *opts, int argc, char **argv);
/* argv[0] is folder, index, subscriptions, specialuse, user or mail. */
int ctl_backend_storage(const struct ctl_options *opts, int argc, char **argv);
/* argv[0] == "acl" (ctl-acl.c). */
int ctl_backend_acl(const struct ctl_options *opts, int argc, char **argv);
/* argv[0] == "metadata": list, get, set, delete (ctl-metadata.c). */
int ctl_backend_metadata(const struct ctl_options *opts, int argc, char **argv);
/* argv[0] == "who": who [count] (ctl-who.c). */
int ctl_backend_who(const struct ctl_options *opts, int argc, char **argv);
/* argv[0] == "quota": show, recalc, clone list, clone get (ctl-quota.c). */
int ctl_backend_quota(const struct ctl_options *opts, int argc, char **argv);
/* `petrelctl auth ...`: argv[0] is test or user; talks to the auth service
 * directly (--auth-addr, env PETREL_AUTH_ADDR, default 127.0.0.1:10200). */
int ctl_auth_main(const struct ctl_options *opts, int argc, char **argv);
/* `petrelctl director ...` (ctl-director.c): the director admin API. */
int ctl_director_main(const struct ctl_options *opts, int argc, char **argv);

#endif
