/* Topology issues (director-topology.h). */
#include "services/director/director-topology.h"

#include <stdio.h>
#include <string.h>

static void issue(json_t *issues, const char *severity, const char *type, const char *detail)
{
    json_array_append_new(
        issues, json_pack("{s:s, s:s, s:s}", "severity", severity, "type", type, "detail", detail));
}

static const char *str(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s != NULL ? s : "";
}

static const json_t *status_of(const json_t *replica)
{
    if (!json_is_true(json_object_get(replica, "reachable")))
        return NULL;
    const json_t *st = json_object_get(replica, "status");
    return json_is_object(st) ? st : NULL;
}

/* The member object of `addr` in a status, or NULL. */
static const json_t *member(const json_t *status, const char *addr)
{
    size_t i;
    const json_t *m;
    json_array_foreach(json_object_get(status, "members"), i, m)
    {
        if (strcmp(str(m, "addr"), addr) == 0)
            return m;
    }
    return NULL;
}

static const json_t *self_member(const json_t *status)
{
    return member(status, str(status, "self"));
}

/* The status of the replica `addr`, when it answered. */
static const json_t *status_for(const json_t *replicas, const char *addr)
{
    size_t i;
    const json_t *r;
    json_array_foreach(replicas, i, r)
    {
        if (strcmp(str(r, "addr"), addr) == 0)
            return status_of(r);
    }
    return NULL;
}

/* True when both statuses list the same tombstone addresses. */
static bool same_tombstones(const json_t *a, const json_t *b)
{
    const json_t *ta = json_object_get(a, "tombstones"), *tb = json_object_get(b, "tombstones");
    if (json_array_size(ta) != json_array_size(tb))
        return false;
    size_t i, j;
    const json_t *x, *y;
    json_array_foreach(ta, i, x)
    {
        bool found = false;
        json_array_foreach(tb, j, y)
        {
            if (strcmp(str(x, "addr"), str(y, "addr")) == 0)
                found = true;
        }
        if (!found)
            return false;
    }
    return true;
}

static void check_edges(json_t *issues, const json_t *replicas, const char *addr,
                        const json_t *status)
{
    const json_t *me = self_member(status);
    static const char *const sides[2][2] = {{"right", "left"}, {"left", "right"}};
    for (int s = 0; s < 2; s++) {
        const char *other = json_string_value(json_object_get(me, sides[s][0]));
        if (other == NULL)
            continue;
        const json_t *ost = status_for(replicas, other);
        if (ost == NULL)
            continue; /* unreachable: reported as such */
        const char *back = json_string_value(json_object_get(self_member(ost), sides[s][1]));
        if (back == NULL || strcmp(back, addr) != 0) {
            char detail[400];
            snprintf(detail, sizeof(detail),
                     "%s has %s as its %s neighbour but %s has %s as its %s", addr, other,
                     sides[s][0], other, back != NULL ? back : "none", sides[s][1]);
            issue(issues, "error", "asymmetric-edge", detail);
        }
    }
}

static void check_seq(json_t *issues, const json_t *replicas, const char *addr,
                      const json_t *status)
{
    size_t i;
    const json_t *r;
    json_array_foreach(replicas, i, r)
    {
        const json_t *ost = status_of(r);
        if (ost == NULL || strcmp(str(r, "addr"), addr) == 0)
            continue;
        const char *origin = str(r, "addr");
        const json_t *own = json_object_get(self_member(ost), "seq");
        const json_t *m = member(status, origin);
        if (!json_is_integer(own) || m == NULL)
            continue;
        const json_t *seen = json_object_get(m, "seq");
        json_int_t have = json_is_integer(seen) ? json_integer_value(seen) : 0;
        if (have < json_integer_value(own)) {
            char detail[400];
            snprintf(detail, sizeof(detail),
                     "%s has processed %s's changes up to seq %lld; %s is at %lld", addr, origin,
                     (long long)have, origin, (long long)json_integer_value(own));
            issue(issues, "warn", "seq-lag", detail);
        }
    }
}

json_t *director_topology_issues(const json_t *replicas)
{
    json_t *issues = json_array();
    const json_t *first = json_array_get(replicas, 0);
    const json_t *base = first != NULL ? status_of(first) : NULL;
    const char *base_addr = first != NULL ? str(first, "addr") : "";
    size_t i;
    const json_t *r;
    char detail[400];
    json_array_foreach(replicas, i, r)
    {
        const char *addr = str(r, "addr");
        const json_t *st = status_of(r);
        if (st == NULL) {
            snprintf(detail, sizeof(detail), "peer %s did not answer: %s", addr, str(r, "error"));
            issue(issues, "error", "peer-unreachable", detail);
            continue;
        }
        if (base != NULL && st != base) {
            json_int_t a = json_integer_value(json_object_get(base, "size"));
            json_int_t b = json_integer_value(json_object_get(st, "size"));
            if (a != b) {
                snprintf(detail, sizeof(detail), "%s sees %lld ring members, %s sees %lld",
                         base_addr, (long long)a, addr, (long long)b);
                issue(issues, "error", "view-size-mismatch", detail);
            }
            if (strcmp(str(base, "backendSetHash"), str(st, "backendSetHash")) != 0) {
                snprintf(detail, sizeof(detail), "%s and %s have different backend sets", base_addr,
                         addr);
                issue(issues, "error", "backend-set-divergence", detail);
            }
            if (!same_tombstones(base, st)) {
                snprintf(detail, sizeof(detail), "%s and %s know different members to be dead",
                         base_addr, addr);
                issue(issues, "error", "tombstone-divergence", detail);
            }
        }
        check_edges(issues, replicas, addr, st);
        check_seq(issues, replicas, addr, st);
    }
    return issues;
}

bool director_topology_healthy(const json_t *issues)
{
    size_t i;
    const json_t *it;
    json_array_foreach(issues, i, it)
    {
        if (strcmp(str(it, "severity"), "error") == 0)
            return false;
    }
    return true;
}
