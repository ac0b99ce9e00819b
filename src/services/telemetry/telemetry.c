#include "services/telemetry/telemetry.h"

#include "core/buf.h"
#include "core/cfg-read.h"
#include "core/clock.h"
#include "core/json-util.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/http-server.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <strings.h>
#include <sys/socket.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COMPONENT "telemetry"

#define READINESS_REFRESH_SECS 10

struct telemetry {
    const struct service_env *env;
    struct event *refresh_timer; /* keeps petrel_readiness_check current between probes */
    struct http_server *http;
    struct cidr_list allowed;
    struct cidr_list loopback; /* peers that may change the log level without a token */
    bool token_set;
    unsigned char token_digest[32]; /* SHA-256 of telemetry.token_env's value */
    bool allow_unauthenticated_remote;
    int64_t deadline_ms;
    struct metric_family *log_level_gauge;
    struct event *revert_timer;
    enum log_level revert_to;
    time_t revert_at;
};

static void collect_log_level(void *arg)
{
    struct telemetry *t = arg;
    /* One series at a time: the current level. */
    metric_family_reset(t->log_level_gauge);
    enum log_level level = log_level_for(NULL);
    const char *values[] = {log_level_name(level)};
    metric_set(metric_series_get(t->log_level_gauge, values), (double)level);
}

static void refresh_done(const struct readiness_result *results, size_t count, bool ready,
                         void *ctx)
{
    (void)results;
    (void)count;
    (void)ready;
    (void)ctx;
}

/* Runs the checks in the background so the readiness gauges mean something
 * even when nobody calls /readyz. */
static void refresh_readiness(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct telemetry *t = arg;
    readiness_run(t->env->readiness, t->deadline_ms, refresh_done, NULL);
    struct timeval tv = {READINESS_REFRESH_SECS, 0};
    evtimer_add(t->refresh_timer, &tv);
}

static void handle_healthz(struct http_request *req, void *ctx)
{
    (void)ctx;
    http_reply(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
}

struct readyz_call {
    struct http_request *req;
    bool cancelled;
};

static void readyz_cancel(struct http_request *req, enum http_cancel_reason why, void *ctx)
{
    (void)req;
    (void)why;
    struct readyz_call *call = ctx;
    call->cancelled = true;
}

static void readyz_done(const struct readiness_result *results, size_t count, bool ready, void *ctx)
{
    struct readyz_call *call = ctx;
    if (!call->cancelled) {
        json_t *checks = json_array();
        for (size_t i = 0; i < count; i++) {
            json_t *c = json_pack("{s:s, s:b}", "name", results[i].name, "ok", results[i].ok);
            if (!results[i].ok && results[i].error != NULL)
                json_object_set_new(c, "error", json_string(results[i].error));
            json_array_append_new(checks, c);
        }
        json_t *body = json_pack("{s:b, s:o}", "ready", ready, "checks", checks);
        http_request_set_cancel(call->req, NULL, NULL);
        http_reply_json(call->req, ready ? 200 : 503, body);
    }
    free(call);
}

static void handle_readyz(struct http_request *req, void *ctx)
{
    struct telemetry *t = ctx;
    struct readyz_call *call = xcalloc(1, sizeof(*call));
    call->req = req;
    http_request_set_cancel(req, readyz_cancel, call);
    readiness_run(t->env->readiness, t->deadline_ms, readyz_done, call);
}

static void handle_metrics(struct http_request *req, void *ctx)
{
    struct telemetry *t = ctx;
    struct buf out = {0};
    metrics_render(t->env->metrics, &out);
    http_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", out.data, out.len);
    buf_free(&out);
}

static json_t *level_reply(struct telemetry *t)
{
    json_t *body = json_pack("{s:s}", "level", log_level_name(log_level_for(NULL)));
    if (t->revert_at != 0) {
        json_object_set_new(body, "reverts_to", json_string(log_level_name(t->revert_to)));
        json_object_set_new(body, "reverts_in_secs",
                            json_integer((json_int_t)(t->revert_at - time(NULL))));
    }
    return body;
}

static void handle_get_level(struct http_request *req, void *ctx)
{
    http_reply_json(req, 200, level_reply(ctx));
}

static void revert_level(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct telemetry *t = arg;
    if (log_installed() != NULL) {
        enum log_level from = log_base_level();
        log_set_base_level(t->revert_to);
        log_info(COMPONENT, "log level reverted", "from=%s to=%s", log_level_name(from),
                 log_level_name(t->revert_to));
    }
    t->revert_at = 0;
}

static bool sha256_of(const char *data, size_t len, unsigned char out[32])
{
    unsigned int n = 0;
    return EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) == 1 && n == 32;
}

/* Changing the log level is an operator's act: allowed from a loopback
 * peer, with the bearer token, or from anywhere when the configuration
 * says so. The token is compared by digest, in constant time. */
static bool may_set_level(struct telemetry *t, struct http_request *req)
{
    if (t->allow_unauthenticated_remote)
        return true;
    const struct sockaddr *peer = http_request_peer(req);
    if (peer != NULL && (peer->sa_family == AF_UNIX || cidr_list_match(&t->loopback, peer)))
        return true;
    const char *auth = http_request_header(req, "Authorization");
    if (!t->token_set || auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0)
        return false;
    const char *token = auth + 7;
    while (*token == ' ')
        token++;
    unsigned char digest[32];
    return sha256_of(token, strlen(token), digest) &&
           CRYPTO_memcmp(digest, t->token_digest, sizeof(digest)) == 0;
}

static void handle_set_level(struct http_request *req, void *ctx)
{
    struct telemetry *t = ctx;
    if (!may_set_level(t, req)) {
        log_warn(COMPONENT, "log level change refused", "peer=%s", http_request_peer_ip(req));
        http_reply_error(req, t->token_set ? 401 : 403,
                         "changing the log level needs a loopback peer%s, or "
                         "telemetry.allow_unauthenticated_remote",
                         t->token_set ? " or the bearer token" : " (no telemetry token is set)");
        return;
    }
    json_t *body = http_request_json(req);
    if (body == NULL)
        return;
    struct petrel_error err;
    petrel_error_clear(&err);
    const char *name = NULL;
    const char *ttl = NULL;
    enum log_level level;
    int64_t ttl_ms = 0;
    if (!json_get_string(body, "level", true, &name, &err) ||
        !json_get_string(body, "ttl", false, &ttl, &err)) {
        http_reply_error(req, 400, "%s", err.message);
    } else if (!log_level_parse(name, &level)) {
        http_reply_error(req, 400, "unknown level '%s' (debug, info, warn, error)", name);
    } else if (ttl != NULL &&
               (!duration_parse_ms(ttl, &ttl_ms) || ttl_ms <= 0 || ttl_ms > 7LL * 86400 * 1000)) {
        http_reply_error(req, 400, "invalid ttl '%s' (a duration such as 30s, 5m, 1h)", ttl);
    } else {
        enum log_level previous = log_base_level();
        if (t->revert_at != 0) {
            /* A new change replaces the pending revert; revert to the original level. */
            previous = t->revert_to;
            evtimer_del(t->revert_timer);
            t->revert_at = 0;
        }
        log_set_base_level(level);
        if (ttl_ms > 0) {
            t->revert_to = previous;
            t->revert_at = time(NULL) + (time_t)((ttl_ms + 999) / 1000);
            struct timeval tv = clock_ms_to_timeval(ttl_ms);
            evtimer_add(t->revert_timer, &tv);
        }
        log_info(COMPONENT, "log level changed", "level=%s ttl_ms=%lld peer=%s",
                 log_level_name(level), (long long)ttl_ms, http_request_peer_ip(req));
        http_reply_json(req, 200, level_reply(t));
    }
    json_decref(body);
}

struct telemetry *telemetry_start(const struct service_env *env, const struct telemetry_config *cfg,
                                  struct petrel_error *err)
{
    struct telemetry *t = xcalloc(1, sizeof(*t));
    t->env = env;
    t->deadline_ms = cfg->readiness_deadline_ms > 0 ? cfg->readiness_deadline_ms : 800;
    static const char *const loopback[] = {"127.0.0.0/8", "::1/128", NULL};
    if (!cidr_list_parse((const char *const *)cfg->allowed_nets, &t->allowed, err) ||
        !cidr_list_parse(loopback, &t->loopback, err)) {
        cidr_list_free(&t->allowed);
        free(t);
        return NULL;
    }
    t->allow_unauthenticated_remote = cfg->allow_unauthenticated_remote;
    const char *token = cfg->token_env != NULL ? getenv(cfg->token_env) : NULL;
    if (token != NULL && *token != '\0') {
        if (!sha256_of(token, strlen(token), t->token_digest)) {
            cidr_list_free(&t->allowed);
            cidr_list_free(&t->loopback);
            free(t);
            petrel_error_set(err, PETREL_ERR_IO, "telemetry: cannot hash the token");
            return NULL;
        }
        t->token_set = true;
    }
    static const char *const labels[] = {"level", NULL};
    t->log_level_gauge = metrics_gauge(
        env->metrics, "petrel_log_level",
        "Current log level; the value is the numeric level (debug -4, info 0, warn 4, error 8).",
        labels);
    metrics_add_collector(env->metrics, collect_log_level, t);
    t->revert_timer = evtimer_new(env->base, revert_level, t);
    t->refresh_timer = evtimer_new(env->base, refresh_readiness, t);

    struct http_server_options opts = {
        .name = COMPONENT,
        .allowed_nets = &t->allowed,
        .metrics = env->metrics,
        .max_body = 64 * 1024,
    };
    t->http = http_server_new(env->base, &opts);
    /* The allow-list applies to every path but /healthz (node probes). */
    http_server_route(t->http, HTTP_GET, "/healthz", HTTP_ROUTE_PUBLIC, handle_healthz, t);
    http_server_route(t->http, HTTP_GET, "/readyz", 0, handle_readyz, t);
    http_server_route(t->http, HTTP_GET, "/metrics", 0, handle_metrics, t);
    http_server_route(t->http, HTTP_GET, "/debug/loglevel", 0, handle_get_level, t);
    http_server_route(t->http, HTTP_POST, "/debug/loglevel", 0, handle_set_level, t);
    for (size_t i = 0; i < cfg->check_count; i++)
        readiness_add_tcp(env->readiness, cfg->checks[i].name, cfg->checks[i].tcp,
                          cfg->checks[i].tls, NULL, NULL);
    if (!http_server_listen(t->http, cfg->listen, err)) {
        telemetry_free(t);
        return NULL;
    }
    log_info(COMPONENT, "listening", "addr=%s", http_server_address(t->http));
    return t;
}

const char *telemetry_address(const struct telemetry *t)
{
    return http_server_address(t->http);
}

void telemetry_level_reloaded(struct telemetry *t)
{
    if (t->revert_at != 0) {
        evtimer_del(t->revert_timer);
        t->revert_at = 0;
    }
}

void telemetry_start_refresh(struct telemetry *t)
{
    struct timeval now = {0, 0};
    evtimer_add(t->refresh_timer, &now);
}

void telemetry_abandon_in_flight(struct telemetry *t)
{
    http_server_abandon_all(t->http);
}

void telemetry_stop_accepting(struct telemetry *t)
{
    evtimer_del(t->refresh_timer);
    http_server_stop_accepting(t->http);
}

size_t telemetry_in_flight(const struct telemetry *t)
{
    return http_server_in_flight(t->http);
}

void telemetry_free(struct telemetry *t)
{
    if (t == NULL)
        return;
    metrics_remove_collector(t->env->metrics, collect_log_level, t);
    http_server_free(t->http);
    event_free(t->revert_timer);
    event_free(t->refresh_timer);
    cidr_list_free(&t->allowed);
    cidr_list_free(&t->loopback);
    free(t);
}
