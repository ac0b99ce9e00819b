/* The `monitor` component (docs/monitor.md): the backend health monitor,
 * a sidecar of the director. It keeps a link to the director's ring port
 * (monitor-director-link.h) whose HOST handshake and RING-CHANGE pushes
 * give it the backend list, probes every backend with each enabled
 * protocol (monitor-probe.h) every `interval`, runs each backend's state
 * machine (monitor-backend-state.h) and sends BACKEND-FLUSH / BACKEND-UP.
 *
 * Probing goes on while the director is unreachable; a report decided
 * meanwhile is kept and sent after the next handshake if the director's
 * view still differs. Metrics: petrel_monitor_probes_total{protocol,result},
 * petrel_monitor_probe_seconds{protocol},
 * petrel_monitor_backend_state{ip,port,tag,state},
 * petrel_monitor_reports_total{report}, petrel_monitor_director_connected.
 * Readiness check `monitor-director`: the director handshake is complete. */
#ifndef PETREL_SERVICES_MONITOR_SERVICE_H
#define PETREL_SERVICES_MONITOR_SERVICE_H

#include "core/error.h"
#include "services/monitor/monitor-config.h"
#include "net/service-env.h"

#include <stddef.h>

struct monitor_service;

/* `cfg` must have been loaded (monitor_config_load) and outlive the
 * service. Connects to the director from the loop. NULL with err when the
 * TLS context cannot be built. */
struct monitor_service *monitor_service_start(const struct service_env *env,
                                              const struct monitor_config *cfg,
                                              struct petrel_error *err);
/* Stops probing and closes the director link (shutdown). */
void monitor_service_stop(struct monitor_service *svc);
/* Nonzero for a moment after monitor_service_stop(): connections just
 * closed may still hold queued libevent callbacks, so the process keeps its
 * loop turning until this is 0 before it exits. */
size_t monitor_service_in_flight(const struct monitor_service *svc);
/* The director address the service talks to. */
const char *monitor_service_director(const struct monitor_service *svc);
/* Backends currently known. */
size_t monitor_service_backends(const struct monitor_service *svc);
void monitor_service_free(struct monitor_service *svc);

#endif
