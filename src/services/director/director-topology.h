/* The issues of GET /api/director/ring/topology, computed from the ring
 * status every replica answered (specification document 2, "Topology
 * issue"). Pure: no I/O, unit-tested.
 *
 * `replicas` is the topology's replicas array, the queried director first:
 * items {"addr", "reachable": true, "status": <Ring status>} or
 * {"addr", "reachable": false, "error"}. Issues, each {severity, type,
 * detail}:
 *   peer-unreachable      (error) a replica that did not answer;
 *   view-size-mismatch    (error) a replica whose ring size differs from the
 *                         queried one's;
 *   backend-set-divergence(error) a backendSetHash different from the
 *                         queried one's;
 *   asymmetric-edge       (error) X names Y as its right (left) neighbour
 *                         but Y, answering, does not name X as its left
 *                         (right);
 *   tombstone-divergence  (error) a replica whose tombstone addresses
 *                         differ from the queried one's;
 *   seq-lag               (warn)  a replica whose watermark for an origin
 *                         is below that origin's own last seq.
 * `healthy` is true when no issue has severity error. */
#ifndef PETREL_SERVICES_DIRECTOR_TOPOLOGY_H
#define PETREL_SERVICES_DIRECTOR_TOPOLOGY_H

#include <jansson.h>
#include <stdbool.h>

/* A new array of issues (caller owns it). */
json_t *director_topology_issues(const json_t *replicas);
bool director_topology_healthy(const json_t *issues);

#endif
