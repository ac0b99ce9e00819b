/* What the process gives every service when it starts: the event loop,
 * the metrics registry, the readiness checks and the internal TLS context.
 * All pointers are borrowed from the process context and outlive services. */
#ifndef PETREL_NET_SERVICE_ENV_H
#define PETREL_NET_SERVICE_ENV_H

#include "core/metrics.h"
#include "net/readiness.h"

#include <event2/event.h>
#include <openssl/ssl.h>

struct service_env {
    struct event_base *base;
    struct metrics_registry *metrics;
    struct readiness *readiness;
    SSL_CTX *internal_tls;       /* server context, NULL when internal TLS is off */
    const char *tls_client_cert; /* for self-checks against mTLS listeners */
    const char *tls_client_key;
};

#endif
