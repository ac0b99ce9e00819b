/* A backend-plane request answered later, from a callback (the dict, the
 * ACL registry): its client may leave meanwhile, and the answer is then
 * dropped. Embedded in the waiting call's state, which outlives the
 * request and is freed by the callback. */
#ifndef PETREL_SERVICES_API_PENDING_H
#define PETREL_SERVICES_API_PENDING_H

#include "net/http-server.h"

struct api_pending {
    struct http_request *req; /* NULL once its client has gone */
};

/* Holds `req` (its cancel hook clears p->req) until api_pending_take(). */
void api_pending_hold(struct api_pending *p, struct http_request *req);
/* The request to answer now, no longer cancellable, or NULL when its
 * client went away. Once only: p->req is NULL afterwards. */
struct http_request *api_pending_take(struct api_pending *p);

#endif
