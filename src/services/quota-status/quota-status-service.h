/* quota-status: the Postfix policy service of document 3 (component
 * `quota-status`, docs/quota.md#quota-status). Postfix asks it at RCPT
 * (`check_policy_service inet:127.0.0.1:10240` or `unix:...`) whether a
 * recipient can take a message; it looks the recipient up in the userdb
 * through the auth service, sums the user's usage from the index
 * aggregates (read-only: nothing is written for a folder that has an
 * index), and answers quota_status_success (DUNNO), quota_status_overquota,
 * quota_status_toolarge or quota_status_nouser. A lookup or read error
 * answers DUNNO: the policy service never refuses mail because it is
 * broken (delivery-time enforcement still applies).
 *
 * Listens with net/line-server.h (allowed_nets at accept, per-address and
 * total connection caps, handshake and idle timeouts). Requests on one
 * connection are answered in order; at most quota_status.max_pipelined
 * wait for their lookups per connection (more closes it). Runs on the
 * process's loop with the process's storage handle.
 * Metric: petrel_quota_status_requests_total{result=ok|overquota|toolarge|
 * nouser|error}, petrel_quota_status_connections(_total). */
#ifndef PETREL_SERVICES_QUOTA_STATUS_SERVICE_H
#define PETREL_SERVICES_QUOTA_STATUS_SERVICE_H

#include "core/error.h"
#include "net/service-env.h"
#include "storage/mail-storage.h"
#include "storage/quota/quota-config.h"

#include <stddef.h>

struct quota_status_service;

/* Listens on cfg->status.listen; `cfg` and `storage` are borrowed and
 * outlive the service. NULL with err when a listener cannot be bound. */
struct quota_status_service *quota_status_service_start(const struct service_env *env,
                                                        const struct quota_config *cfg,
                                                        struct mail_storage *storage,
                                                        struct petrel_error *err);
/* The first listener's address ("127.0.0.1:10240"). */
const char *quota_status_service_address(const struct quota_status_service *svc);
/* Closes the listeners; open connections are still answered. */
void quota_status_service_stop_accepting(struct quota_status_service *svc);
/* Requests waiting for their userdb lookup (shutdown drain). */
size_t quota_status_service_in_flight(const struct quota_status_service *svc);
void quota_status_service_free(struct quota_status_service *svc);

#endif
