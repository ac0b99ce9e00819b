/* Shared request handling for the storage-backed areas of the backend-plane
 * API (folder, index, subscriptions, specialuse, user, mail): decoding the
 * addressing fields (user, folder, namespace, root) with document 1's rules
 * and DECISIONS.md's status codes, and mapping flags to names. */
#ifndef PETREL_SERVICES_API_STORAGE_H
#define PETREL_SERVICES_API_STORAGE_H

#include "net/http-server.h"
#include "storage/mail-storage.h"

#include <jansson.h>
#include <stdbool.h>
#include <time.h>

struct auth_client;

struct storage_api {
    struct mail_storage *storage;
    struct auth_client *auth; /* NULL without backend_api.auth_master_addr */
};

struct storage_request {
    json_t *body;
    struct mail_user *user;
    const struct namespace_config *ns;
    const char *folder; /* NULL when not required and absent */
    int op;             /* a routed request: its route's op (struct storage_route) */
};

enum storage_folder_rule {
    STORAGE_FOLDER_NONE,     /* no folder field */
    STORAGE_FOLDER_REQUIRED, /* "folder is required" (400) when absent or "" */
    STORAGE_FOLDER_OPTIONAL,
};

/* Decodes the body and the addressing fields. On failure it has replied
 * (400 malformed / user / folder, 404 namespace) and returns false. The
 * namespace defaults to `personal`. */
bool storage_request_begin(struct storage_api *api, struct http_request *req,
                           enum storage_folder_rule folder_rule, struct storage_request *out);
/* The same with the user named by the field `user_field` ("owner", ...). */
bool storage_request_begin_as(struct storage_api *api, struct http_request *req,
                              const char *user_field, enum storage_folder_rule folder_rule,
                              struct storage_request *out);
void storage_request_end(struct storage_request *sr);
/* Opens the addressed folder; replies 404/500 itself on failure. */
struct mailbox *storage_request_open(struct http_request *req, struct storage_request *sr);
/* Flags + keyword names as a JSON array of strings ("\\Seen", "$Junk", ...). */
json_t *storage_flags_json(uint32_t flags, const char *const *keywords, size_t keyword_count);
/* A storage area's handler: it runs once storage_request_begin() has
 * decoded the request with its route's folder rule, and the request is
 * ended when it returns (so it answers before returning, or copies what
 * an asynchronous answer needs). `err` is cleared for it. */
typedef void storage_handler_fn(struct http_request *req, struct storage_request *sr,
                                struct petrel_error *err);
/* One POST route of a storage area; `op` tells a handler that serves
 * several routes which one it answers (sr->op). */
struct storage_route {
    const char *path;
    enum storage_folder_rule folder_rule;
    storage_handler_fn *handler;
    int op;
};
/* An area's own check of each of its requests, after the decoding and
 * before the handler: false when it has answered (a 400, ...). */
typedef bool storage_check_fn(struct http_request *req, const struct storage_request *sr);
/* Registers an area's `count` routes (a static table: kept, not copied);
 * `check` may be NULL. */
void storage_register(struct http_server *http, struct storage_api *api, storage_check_fn *check,
                      const struct storage_route *routes, size_t count);
/* A list of names of the user's folders in a namespace (mail_folder_list,
 * mail_subscriptions_list): fresh, freed with mail_folder_list_free. */
typedef bool storage_names_fn(struct mail_user *user, const struct namespace_config *ns,
                              char ***names, size_t *count, struct petrel_error *err);
/* Answers 200 {"<key>": [names...]} with what `list` gives, or its error. */
void storage_reply_names(struct http_request *req, const struct storage_request *sr,
                         struct petrel_error *err, const char *key, storage_names_fn *list);
/* Answers 200 {"status": "ok"} when `ok`, else the error in `err`. */
void storage_reply_done(struct http_request *req, bool ok, const struct petrel_error *err);
/* Milliseconds since `start` (CLOCK_MONOTONIC). */
long long storage_elapsed_ms(const struct timespec *start);

#endif
