/* The dict endpoints of the backend-plane API (document 1, "Health and
 * dict"): drivers, exists, lookup, iterate (NDJSON stream), set, unset,
 * atomic-inc, expire-scan, commit-batch. Values travel as base64. */
#include "services/backend-api/api-pending.h"
#include "services/backend-api/backend-api.h"

#include "core/base64.h"
#include "services/backend-api/dict-request.h"
#include "core/buf.h"
#include "core/json-util.h"
#include "core/log.h"
#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

#define COMPONENT "backend-api"

struct dict_api {
    struct dict_registry *dicts;
    struct metric_family *ops_total;
};

static const char *result_status(enum dict_commit_result r)
{
    switch (r) {
    case DICT_COMMIT_OK:
        return "ok";
    case DICT_COMMIT_NOT_FOUND:
        return "not-found";
    case DICT_COMMIT_FAILED:
        return "failed";
    case DICT_COMMIT_WRITE_UNCERTAIN:
        return "write-uncertain";
    }
    return "failed";
}

static void count(const struct dict_api *api, const struct dict *dict, const char *op,
                  const char *result)
{
    const char *values[] = {dict_name(dict), dict_driver_name(dict), op, result};
    metric_add(metric_series_get(api->ops_total, values), 1);
}

/* Resolves {name}; replies 404 / 503 itself and returns NULL. */
static struct dict *request_dict(struct dict_api *api, struct http_request *req)
{
    const char *name = http_request_param(req, "name");
    struct dict *dict = name != NULL ? dict_registry_get(api->dicts, name) : NULL;
    if (dict == NULL) {
        http_reply_error(req, 404, "dict not configured: %s", name != NULL ? name : "");
        return NULL;
    }
    if (!dict_is_open(dict)) {
        http_reply_error(req, 503, "dict %s is closed (shutting down)", name);
        return NULL;
    }
    return dict;
}

/* Resolves the dict and decodes the body; replies itself on failure. */
static bool decode(struct dict_api *api, struct http_request *req, enum dict_request_kind kind,
                   struct dict **dict, struct dict_request *dr)
{
    *dict = request_dict(api, req);
    if (*dict == NULL)
        return false;
    size_t len = 0;
    const char *body = http_request_body(req, &len);
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!dict_request_decode(kind, body, len, dr, &err)) {
        http_reply_error(req, 400, "%s", err.message);
        return false;
    }
    return true;
}

/* ---------- drivers / exists ---------- */

static void handle_drivers(struct http_request *req, void *ctx)
{
    (void)ctx;
    json_t *list = json_array();
    for (size_t i = 0; i < dict_driver_count(); i++)
        json_array_append_new(list, json_string(dict_driver_name_at(i)));
    http_reply_json(req, 200, json_pack("{s:o}", "drivers", list));
}

static void handle_exists(struct http_request *req, void *ctx)
{
    struct dict_api *api = ctx;
    const char *name = http_request_param(req, "name");
    bool exists = dict_registry_get(api->dicts, name) != NULL;
    http_reply_json(req, 200, json_pack("{s:s, s:b}", "name", name, "exists", exists));
}

/* ---------- pending calls (async drivers may answer after the client left) ---------- */

struct call {
    struct dict_api *api;
    struct dict *dict;
    struct api_pending pending;
    const char *op;
};

static struct call *call_new(struct dict_api *api, struct dict *dict, struct http_request *req,
                             const char *op)
{
    struct call *call = xcalloc(1, sizeof(*call));
    call->api = api;
    call->dict = dict;
    call->op = op;
    api_pending_hold(&call->pending, req);
    return call;
}


/* ---------- lookup ---------- */

static void lookup_done(const struct dict_lookup_result *r, void *ctx)
{
    struct call *call = ctx;
    count(call->api, call->dict, "lookup", r->ret > 0 ? "found" : r->ret == 0 ? "not_found" : "error");
    struct http_request *req = api_pending_take(&call->pending);
    free(call);
    if (req == NULL)
        return;
    if (r->ret < 0) {
        http_reply_error(req, 500, "lookup failed: %s", r->error != NULL ? r->error : "unknown");
        return;
    }
    struct buf out = {0};
    buf_append_str(&out, r->ret > 0 ? "{\"found\":true,\"values\":[" : "{\"found\":false,\"values\":[");
    for (size_t i = 0; i < r->value_count; i++) {
        if (i > 0)
            buf_append_char(&out, ',');
        buf_append_char(&out, '"');
        base64_encode_append(&out, r->values[i].data, r->values[i].len);
        buf_append_char(&out, '"');
    }
    buf_append_str(&out, "]}");
    http_reply(req, 200, "application/json", out.data, out.len);
    buf_free(&out);
}

static void handle_lookup(struct http_request *req, void *ctx)
{
    struct dict_api *api = ctx;
    struct dict *dict;
    struct dict_request dr;
    if (!decode(api, req, DICT_REQ_LOOKUP, &dict, &dr))
        return;
    dict_lookup(dict, &dr.op, dr.key, lookup_done, call_new(api, dict, req, "lookup"));
    dict_request_free(&dr);
}

/* ---------- iterate ---------- */

struct iter_call {
    struct dict_api *api;
    struct dict *dict;
    struct http_request *req;
    struct dict_iterate *it;
    bool started;
    bool pumping;
    size_t rows;
    struct buf line;
};

static void iter_finish(struct iter_call *ic, const char *result)
{
    count(ic->api, ic->dict, "iterate", result);
    dict_iterate_deinit(ic->it);
    buf_free(&ic->line);
    free(ic);
}

static void iter_write_row(struct iter_call *ic, const struct dict_row *row)
{
    struct buf *l = &ic->line;
    buf_reset(l);
    buf_append_str(l, "{\"key\":");
    json_append_string(l, row->key, strlen(row->key));
    buf_append_str(l, ",\"values\":[");
    for (size_t i = 0; i < row->value_count; i++) {
        if (i > 0)
            buf_append_char(l, ',');
        buf_append_char(l, '"');
        base64_encode_append(l, row->values[i].data, row->values[i].len);
        buf_append_char(l, '"');
    }
    buf_append_str(l, "]}\n");
    http_stream_write(ic->req, l->data, l->len);
    ic->rows++;
}

static void iter_write_error(struct iter_call *ic, const char *message)
{
    struct buf *l = &ic->line;
    buf_reset(l);
    buf_append_str(l, "{\"error\":");
    json_append_string(l, message, strlen(message));
    buf_append_str(l, "}\n");
    http_stream_write(ic->req, l->data, l->len);
}

static void iter_begin_stream(struct iter_call *ic)
{
    if (!ic->started) {
        ic->started = true;
        http_stream_begin(ic->req, 200, "application/x-ndjson");
    }
}

/* Moves rows from the dict to the client while the client keeps up. */
static void iter_pump(struct iter_call *ic)
{
    if (ic->pumping)
        return; /* a synchronous async-callback from inside next() */
    ic->pumping = true;
    for (;;) {
        if (ic->started && !http_stream_writable(ic->req)) {
            ic->pumping = false;
            return; /* resumed by the drain callback */
        }
        struct dict_row row;
        enum dict_iter_status st = dict_iterate_next(ic->it, &row);
        if (st == DICT_ITER_ROW) {
            iter_begin_stream(ic);
            iter_write_row(ic, &row);
            continue;
        }
        if (st == DICT_ITER_WAIT) {
            ic->pumping = false;
            return; /* resumed by the dict's async callback */
        }
        struct http_request *req = ic->req;
        http_request_set_cancel(req, NULL, NULL);
        if (st == DICT_ITER_DONE) {
            iter_begin_stream(ic);
            http_stream_end(req);
            iter_finish(ic, "ok");
            return;
        }
        const char *msg = dict_iterate_error(ic->it);
        log_warn(COMPONENT, "dict iterate failed", "dict=%s rows=%zu error=\"%s\"",
                 dict_name(ic->dict), ic->rows, msg);
        if (!ic->started) {
            http_reply_error(req, 500, "iterate failed: %s", msg);
        } else {
            iter_write_error(ic, msg);
            http_stream_end(req);
        }
        iter_finish(ic, "error");
        return;
    }
}

static void iter_on_async(void *ctx)
{
    iter_pump(ctx);
}

static void iter_on_drain(struct http_request *req, void *ctx)
{
    (void)req;
    iter_pump(ctx);
}

static void iter_cancel(struct http_request *req, enum http_cancel_reason why, void *ctx)
{
    (void)req;
    struct iter_call *ic = ctx;
    if (why == HTTP_CANCEL_TIMEOUT && ic->started)
        iter_write_error(ic, "iterate timed out");
    log_warn(COMPONENT, "dict iterate cancelled", "dict=%s rows=%zu reason=%s",
             dict_name(ic->dict), ic->rows,
             why == HTTP_CANCEL_TIMEOUT ? "timeout" : why == HTTP_CANCEL_SHUTDOWN ? "shutdown"
                                                                                  : "client_gone");
    iter_finish(ic, "cancelled");
}

static void handle_iterate(struct http_request *req, void *ctx)
{
    struct dict_api *api = ctx;
    struct dict *dict;
    struct dict_request dr;
    if (!decode(api, req, DICT_REQ_ITERATE, &dict, &dr))
        return;
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict_iterate *it = dict_iterate_init(dict, &dr.op, dr.path, dr.flags, &err);
    dict_request_free(&dr);
    if (it == NULL) {
        http_reply_petrel_error(req, &err);
        return;
    }
    struct iter_call *ic = xcalloc(1, sizeof(*ic));
    ic->api = api;
    ic->dict = dict;
    ic->req = req;
    ic->it = it;
    dict_iterate_set_async_callback(it, iter_on_async, ic);
    http_request_set_cancel(req, iter_cancel, ic);
    http_stream_on_drain(req, iter_on_drain, ic);
    iter_pump(ic);
}

/* ---------- writes ---------- */

static void commit_done(enum dict_commit_result result, const char *error, void *ctx)
{
    struct call *call = ctx;
    count(call->api, call->dict, call->op, result_status(result));
    struct http_request *req = api_pending_take(&call->pending);
    const char *op = call->op;
    const char *name = dict_name(call->dict);
    free(call);
    if (req == NULL)
        return;
    if (result == DICT_COMMIT_OK || result == DICT_COMMIT_NOT_FOUND) {
        http_reply_json(req, 200,
                        json_pack("{s:i, s:s}", "result", (int)result, "status", result_status(result)));
        return;
    }
    log_warn(COMPONENT, "dict write failed", "dict=%s op=%s result=%d error=\"%s\"", name, op,
             (int)result, error != NULL ? error : "");
    http_reply_json(req, 500,
                    json_pack("{s:s, s:i, s:s}", "error",
                              error != NULL ? error : "write failed", "result", (int)result,
                              "status", result_status(result)));
}

static void handle_write(struct http_request *req, struct dict_api *api,
                         enum dict_request_kind kind, const char *op_name)
{
    struct dict *dict;
    struct dict_request dr;
    if (!decode(api, req, kind, &dict, &dr))
        return;
    struct dict_transaction *tx = dict_transaction_begin(dict, &dr.op);
    dict_request_queue(&dr, tx);
    dict_request_free(&dr);
    dict_transaction_commit(tx, commit_done, call_new(api, dict, req, op_name));
}

static void handle_set(struct http_request *req, void *ctx)
{
    handle_write(req, ctx, DICT_REQ_SET, "set");
}

static void handle_unset(struct http_request *req, void *ctx)
{
    handle_write(req, ctx, DICT_REQ_UNSET, "unset");
}

static void handle_atomic_inc(struct http_request *req, void *ctx)
{
    handle_write(req, ctx, DICT_REQ_ATOMIC_INC, "atomic-inc");
}

static void handle_commit_batch(struct http_request *req, void *ctx)
{
    handle_write(req, ctx, DICT_REQ_COMMIT_BATCH, "commit-batch");
}

static void expire_done(bool ok, const char *error, void *ctx)
{
    struct call *call = ctx;
    count(call->api, call->dict, "expire-scan", ok ? "ok" : "error");
    struct http_request *req = api_pending_take(&call->pending);
    free(call);
    if (req == NULL)
        return;
    if (ok)
        http_reply(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
    else
        http_reply_error(req, 500, "expire-scan failed: %s", error != NULL ? error : "unknown");
}

static void handle_expire_scan(struct http_request *req, void *ctx)
{
    struct dict_api *api = ctx;
    struct dict *dict;
    struct dict_request dr;
    if (!decode(api, req, DICT_REQ_EXPIRE_SCAN, &dict, &dr))
        return;
    dict_request_free(&dr);
    dict_expire_scan(dict, expire_done, call_new(api, dict, req, "expire-scan"));
}

static void dict_api_free(void *p)
{
    free(p);
}

void backend_api_register_dict(struct http_server *http, struct dict_registry *dicts,
                               struct metrics_registry *metrics)
{
    struct dict_api *api = xcalloc(1, sizeof(*api));
    api->dicts = dicts;
    static const char *const labels[] = {"dict", "driver", "op", "result", NULL};
    api->ops_total = metrics_counter(metrics, "petrel_dict_operations_total",
                                     "Dict operations through the API by dict, driver, operation "
                                     "and result.",
                                     labels);
    http_server_on_free(http, dict_api_free, api);
    http_server_route(http, HTTP_GET, "/api/backend/dict/drivers", 0, handle_drivers, api);
    http_server_route(http, HTTP_GET, "/api/backend/dict/{name}/exists", 0, handle_exists, api);
    http_server_route(http, HTTP_POST, "/api/backend/dict/{name}/lookup", 0, handle_lookup, api);
    http_server_route(http, HTTP_POST, "/api/backend/dict/{name}/iterate", HTTP_ROUTE_STREAM,
                      handle_iterate, api);
    http_server_route(http, HTTP_POST, "/api/backend/dict/{name}/set", 0, handle_set, api);
    http_server_route(http, HTTP_POST, "/api/backend/dict/{name}/unset", 0, handle_unset, api);
    http_server_route(http, HTTP_POST, "/api/backend/dict/{name}/atomic-inc", 0,
                      handle_atomic_inc, api);
    http_server_route(http, HTTP_POST, "/api/backend/dict/{name}/expire-scan", 0,
                      handle_expire_scan, api);
    http_server_route(http, HTTP_POST, "/api/backend/dict/{name}/commit-batch", 0,
                      handle_commit_batch, api);
}
