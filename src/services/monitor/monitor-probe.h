/* One asynchronous health probe on a libevent loop: connect to a backend
 * (through TLS when asked), hold the conversation of monitor-dialog.h, and
 * report one result. The whole attempt — connect, TLS handshake and
 * conversation up to the verdict — is bounded by `timeout_ms`; reply lines
 * longer than `max_line` fail the probe (protocol_error). The polite goodbye
 * after the verdict is bounded by the same deadline and never changes the
 * result. Nothing sent (the password in particular) is logged. */
#ifndef PETREL_SERVICES_MONITOR_PROBE_H
#define PETREL_SERVICES_MONITOR_PROBE_H

#include "core/error.h"
#include "services/monitor/monitor-dialog.h"

#include <event2/event.h>
#include <openssl/ssl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct monitor_probe_params {
    enum monitor_protocol proto;
    const struct sockaddr *addr; /* copied */
    socklen_t addr_len;
    SSL_CTX *tls;         /* NULL: plain TCP; borrowed, must outlive the probe */
    const char *tls_host; /* the backend's IP for certificate checks (verifying contexts) */
    const char *user;     /* NULL: connect and greeting only; copied */
    const char *password; /* copied, wiped when the probe ends */
    int64_t timeout_ms;
    size_t max_line;
};

struct monitor_probe_outcome {
    enum monitor_protocol proto;
    enum monitor_result result;
    double seconds;     /* from the start to the verdict */
    const char *detail; /* why it failed ("" when ok); borrowed for the callback */
};

typedef void monitor_probe_cb(const struct monitor_probe_outcome *outcome, void *ctx);

struct monitor_probe;

/* Starts a probe. The callback runs exactly once, from the loop (never
 * inside this call), unless the probe is cancelled first; the probe frees
 * itself after its callback returns. */
struct monitor_probe *monitor_probe_start(struct event_base *base,
                                          const struct monitor_probe_params *params,
                                          monitor_probe_cb *cb, void *ctx);
/* Stops a probe whose callback has not run: it will not run. */
void monitor_probe_cancel(struct monitor_probe *probe);

/* A TLS client context for probes: certificates are verified against
 * `ca_file` (with the backend's IP as the expected name) when it is given,
 * not verified at all when it is NULL. NULL with a message in err. */
SSL_CTX *monitor_probe_tls_ctx(const char *ca_file, struct petrel_error *err);

#endif
