/* The `director:` configuration section (docs/configuration.md#director):
 * admin API and ring listeners, authentication, user expiry, permanent
 * peers, the initial backend list and the limits on everything a client
 * controls. Read with the cfg-read helpers, so a bad value is reported as
 * `file:line: director.<key>: message`. */
#ifndef PETREL_SERVICES_DIRECTOR_CONFIG_H
#define PETREL_SERVICES_DIRECTOR_CONFIG_H

#include "core/cfg-read.h"
#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DIRECTOR_MAX_PEERS 64
#define DIRECTOR_MAX_INITIAL_BACKENDS 4096

struct director_backend_config {
    char *ip;
    int64_t port;
    char *tag;
    int64_t vhosts;
};

struct director_config {
    /* api: */
    char *api_listen;
    char **api_allowed_nets; /* NULL-terminated */
    char *token_env;         /* variable holding the bearer token */
    char *token_file;        /* file holding it (Kubernetes secret); "" = none */
    int64_t api_request_timeout_ms;
    int64_t api_max_body_bytes;
    int64_t api_max_connections;
    /* Start the API on a non-loopback address without a token (else refused). */
    bool api_allow_unauthenticated_remote;
    int api_listen_line; /* not a key: where api.listen was set (0 = default) */
    int64_t api_max_connections_per_ip; /* 0 = no cap */
    /* ring: */
    char *ring_listen;
    char *self; /* ring identity "<ip>:<port>"; "" = derived at start */
    char **ring_allowed_nets;
    char *ring_secret_file;          /* shared ring secret (ring-auth.h); "" = none */
    char *ring_secret_env;           /* variable holding it (or `<name>_FILE` naming its file) */
    bool ring_allow_unauthenticated; /* accept clients that do not authenticate */
    int64_t ring_auth_timeout_ms;    /* accept -> authenticated, else closed */
    int64_t ring_handshake_timeout_ms;
    int64_t ring_max_clients;
    int64_t ring_max_pending_per_address; /* connections of one address still in the handshake */
    int64_t ring_max_line;
    int64_t ring_max_output;
    int64_t ring_max_sessions_per_client;
    int64_t ring_reconnect_min_ms; /* peer links: first redial delay, doubling... */
    int64_t ring_reconnect_max_ms; /* ...up to this */
    int64_t ring_peer_timeout_ms;  /* peer dial + handshake, PONG wait, topology's GET ring */
    int64_t ring_ping_interval_ms; /* a quiet peer link sends PING after this */
    /* routing */
    int64_t user_expire_ms;
    int64_t kill_timeout_ms;
    char **peers; /* NULL-terminated "<ip>:<port>" ring addresses */
    struct director_backend_config *backends;
    size_t backend_count;
    /* limits: */
    int64_t max_users;
    int64_t max_backends;
    int64_t max_vhosts;
    int64_t max_username;
    int64_t max_tag;
};

void director_config_defaults(struct director_config *cfg);
/* Reads the `director:` map (NULL keeps the defaults). */
bool director_config_read(const struct cfg_ctx *ctx, const struct ynode *node,
                          struct director_config *cfg);
void director_config_free(struct director_config *cfg);
/* Writes the section as YAML (the token never, only whether it is set). */
void director_config_print(const struct director_config *cfg, FILE *out);

/* The bearer token: the file `token_file`, else the file named by
 * `<token_env>_FILE`, else the variable `token_env`; surrounding white
 * space trimmed. *out is a fresh string ("" = authentication off). False
 * when a named file cannot be read. */
bool director_config_token(const struct director_config *cfg, char **out, struct petrel_error *err);

/* The ring secret (ring_secret_load): `ring_secret_file`, else the file
 * named by `<ring_secret_env>_FILE`, else the variable `ring_secret_env`.
 * *out is fresh ("" = none; free with ring_secret_free). False when a named
 * file cannot be read or the secret is too short; also when there is no
 * secret and `ring_allow_unauthenticated` is false (the director must not
 * start with an open ring port unless the configuration says so). */
bool director_config_ring_secret(const struct director_config *cfg, char **out,
                                 struct petrel_error *err);

/* Splits a ring address "<ip>:<port>" / "[<ip6>]:<port>" into canonical ip
 * text and port; false when it is not one. */
bool director_parse_addr(const char *text, char ip[46], unsigned *port);

#endif
