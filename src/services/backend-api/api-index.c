/* /api/backend/index/{dump,rebuild,optimize,cache-purge} */
#include "services/backend-api/api-storage.h"
#include "services/backend-api/backend-api.h"

#include "core/json-util.h"

#include <string.h>
#include <time.h>

#define DUMP_MAX_LIMIT 1000000

static void dump_record(const struct mailbox_message *msg, void *ctx)
{
    json_t *records = ctx;
    json_array_append_new(records,
                          json_pack("{s:I, s:s, s:o, s:I, s:I, s:I}", "uid", (json_int_t)msg->uid,
                                    "filename", msg->filename, "flags",
                                    storage_flags_json(msg->flags, msg->keywords,
                                                       msg->keyword_count),
                                    "modseq", (json_int_t)msg->modseq, "size",
                                    (json_int_t)msg->size, "vsize", (json_int_t)msg->vsize));
}

static void handle_dump(struct http_request *req, struct storage_request *sr,
                        struct petrel_error *err)
{
    int64_t limit = 0;
    if (!json_get_int(sr->body, "limit", false, &limit, err) || limit < 0 ||
        limit > DUMP_MAX_LIMIT) {
        http_reply_error(req, 400, "%s",
                         err->message[0] != '\0' ? err->message
                                                 : "limit must be between 0 and 1000000");
        return;
    }
    struct mailbox *box = storage_request_open(req, sr);
    if (box != NULL) {
        struct mailbox_info info;
        json_t *records = json_array();
        bool truncated = false;
        /* Records first: a refresh only moves forward, so the header read
         * after them has a next_uid above every record listed. */
        if (!mailbox_foreach(box, limit > 0 ? (size_t)limit : DUMP_MAX_LIMIT, dump_record, records,
                             &truncated, err) ||
            !mailbox_get_info(box, false, &info, err)) {
            json_decref(records);
            http_reply_petrel_error(req, err);
        } else {
            char guid[33];
            mailbox_guid_hex(info.guid, guid);
            http_reply_json(req, 200,
                            json_pack("{s:s, s:s, s:I, s:I, s:I, s:b, s:o}", "folder",
                                      mailbox_name(box), "folder_guid", guid, "uid_validity",
                                      (json_int_t)info.uid_validity, "next_uid",
                                      (json_int_t)info.next_uid, "highest_modseq",
                                      (json_int_t)info.highest_modseq, "truncated", truncated,
                                      "records", records));
        }
        mailbox_close(box);
    }
}

static void handle_rebuild(struct http_request *req, struct storage_request *sr,
                           struct petrel_error *err)
{
    bool reset_uids = false;
    if (!json_get_bool(sr->body, "reset_uids", false, &reset_uids, err)) {
        http_reply_error(req, 400, "%s", err->message);
    } else if (reset_uids) {
        http_reply_error(req, 501, "reset_uids is not supported: UIDs are always preserved");
    } else {
        struct timespec start;
        clock_gettime(CLOCK_MONOTONIC, &start);
        struct mailbox *box = storage_request_open(req, sr);
        if (box != NULL) {
            struct mailbox_rebuild_stats st;
            struct mailbox_info info;
            if (!mailbox_index_rebuild(box, &st, err) ||
                !mailbox_get_info(box, false, &info, err)) {
                http_reply_petrel_error(req, err);
            } else {
                char guid[33];
                mailbox_guid_hex(info.guid, guid);
                http_reply_json(
                    req, 200,
                    json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "folder", mailbox_name(box),
                              "folder_guid", guid, "scanned", (json_int_t)st.scanned,
                              "uids_preserved", (json_int_t)st.uids_preserved, "uids_assigned",
                              (json_int_t)st.uids_assigned, "orphans_dropped",
                              (json_int_t)st.orphans_dropped, "duration_ms",
                              (json_int_t)storage_elapsed_ms(&start)));
            }
            mailbox_close(box);
        }
    }
}

/* A maintenance step on the request's folder: the reply's fields, or NULL
 * with `err` set. */
typedef json_t *index_step_fn(struct mailbox *box, struct petrel_error *err);

/* Runs `step` on the request's folder, timed from its opening; the reply
 * gets duration_ms last. */
static void run_timed(struct http_request *req, struct storage_request *sr,
                      struct petrel_error *err, index_step_fn *step)
{
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    struct mailbox *box = storage_request_open(req, sr);
    if (box != NULL) {
        json_t *reply = step(box, err);
        if (reply == NULL) {
            http_reply_petrel_error(req, err);
        } else {
            json_object_set_new(reply, "duration_ms",
                                json_integer((json_int_t)storage_elapsed_ms(&start)));
            http_reply_json(req, 200, reply);
        }
        mailbox_close(box);
    }
}

static json_t *optimize(struct mailbox *box, struct petrel_error *err)
{
    if (!mailbox_index_optimize(box, err))
        return NULL;
    return json_pack("{s:s}", "folder", mailbox_name(box));
}

static void handle_optimize(struct http_request *req, struct storage_request *sr,
                            struct petrel_error *err)
{
    run_timed(req, sr, err, optimize);
}

static json_t *cache_purge(struct mailbox *box, struct petrel_error *err)
{
    uint64_t carried = 0;
    uint64_t reclaimed = 0;
    if (!mailbox_cache_purge(box, &carried, &reclaimed, err))
        return NULL;
    return json_pack("{s:I, s:I}", "carried", (json_int_t)carried, "reclaimed_bytes",
                     (json_int_t)reclaimed);
}

static void handle_cache_purge(struct http_request *req, struct storage_request *sr,
                               struct petrel_error *err)
{
    run_timed(req, sr, err, cache_purge);
}

void backend_api_register_index(struct http_server *http, struct storage_api *api)
{
    static const struct storage_route routes[] = {
        {"/api/backend/index/dump", STORAGE_FOLDER_REQUIRED, handle_dump, 0},
        {"/api/backend/index/rebuild", STORAGE_FOLDER_REQUIRED, handle_rebuild, 0},
        {"/api/backend/index/optimize", STORAGE_FOLDER_REQUIRED, handle_optimize, 0},
        {"/api/backend/index/cache-purge", STORAGE_FOLDER_REQUIRED, handle_cache_purge, 0},
    };
    storage_register(http, api, NULL, routes, sizeof(routes) / sizeof(routes[0]));
}
