/* Operator APIs are not opened to other hosts without a token by accident
 * (config-exposure.h). */
#include "server/config-exposure.h"

#include "net/sockaddr.h"
#include "services/director/director-config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool config_listen_is_local(const char *listen)
{
    struct net_addr addr;
    if (!net_addr_parse(listen, &addr, NULL))
        return false;
    if (addr.ss.ss_family == AF_UNIX)
        return true;
    if (addr.ss.ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)&addr.ss;
        return (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
    }
    if (addr.ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&addr.ss;
        return IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr);
    }
    return false;
}

static bool refuse(const struct petrel_config *cfg, int line, const char *section,
                   const char *listen, const char *token_source, const char *example,
                   struct petrel_error *err)
{
    char where[64] = "";
    if (line > 0)
        snprintf(where, sizeof(where), ":%d", line);
    return petrel_error_set(
        err, PETREL_ERR_INVALID,
        "%s%s: %s.listen: %s is reachable from other hosts and %s is empty, so anyone there "
        "could use the API unauthenticated; set the token, listen on a loopback address "
        "(%s), or set %s.allow_unauthenticated_remote: true",
        cfg->file, where, section, listen, token_source, example, section);
}

bool config_check_exposure(const struct petrel_config *cfg, struct petrel_error *err)
{
    const struct backend_api_config *b = &cfg->backend_api;
    if (config_has_component(cfg, "backend-api") && !b->allow_unauthenticated_remote &&
        !config_listen_is_local(b->listen)) {
        const char *token = getenv(b->token_env);
        if (token == NULL || *token == '\0')
            return refuse(cfg, b->listen_line, "backend_api", b->listen, b->token_env,
                          "127.0.0.1:9105", err);
    }
    const struct director_config *d = &cfg->director;
    if (config_has_component(cfg, "director") && !d->api_allow_unauthenticated_remote &&
        !config_listen_is_local(d->api_listen)) {
        char *token = NULL;
        if (!director_config_token(d, &token, err))
            return false;
        bool empty = token[0] == '\0';
        free(token);
        if (empty) {
            char source[200];
            snprintf(source, sizeof(source), "%.64s (and %.64s_FILE, director.api.token_file)",
                     d->token_env, d->token_env);
            return refuse(cfg, d->api_listen_line, "director.api", d->api_listen, source,
                          "127.0.0.1:9103", err);
        }
    }
    return true;
}
