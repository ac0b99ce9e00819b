#include "services/backend-api/api-pending.h"

#include <stddef.h>

static void pending_cancel(struct http_request *req, enum http_cancel_reason why, void *ctx)
{
    (void)req;
    (void)why;
    struct api_pending *p = ctx;
    p->req = NULL;
}

void api_pending_hold(struct api_pending *p, struct http_request *req)
{
    p->req = req;
    http_request_set_cancel(req, pending_cancel, p);
}

struct http_request *api_pending_take(struct api_pending *p)
{
    struct http_request *req = p->req;
    if (req != NULL)
        http_request_set_cancel(req, NULL, NULL);
    p->req = NULL;
    return req;
}
