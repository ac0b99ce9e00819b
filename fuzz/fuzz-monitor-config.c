/* libFuzzer target: the monitor file (services/monitor/monitor-config.h).
 * Input: the bytes of a monitor.yaml. Runs monitor_config_parse() and, when
 * it accepts, checks the invariants the service relies on: at least one
 * protocol probed, ports in range, thresholds consistent (1 <=
 * rapid_fails_needed <= rapid_rounds when rapid_rounds > 0), credentials
 * without CR/LF and found by their own tag, the "" entry as the fallback,
 * and that printing works; then frees everything (LSan catches leaks). A
 * refused file must leave a `file:line: ...` or `file: ...` message. */
#include "services/monitor/monitor-config.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    unsetenv(MONITOR_CONFIG_ENV);
    devnull = fopen("/dev/null", "w");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct monitor_config cfg;
    monitor_config_defaults(&cfg);
    struct petrel_error err = {0};
    bool ok = monitor_config_parse(&cfg, "fuzz.yaml", (const char *)data, size, &err);
    if (!ok) {
        assert(strncmp(err.message, "fuzz.yaml", 9) == 0);
        assert(cfg.file == NULL);
        monitor_config_free(&cfg);
        return 0;
    }
    assert(cfg.file != NULL && strcmp(cfg.file, "fuzz.yaml") == 0);
    assert(cfg.poll_imap || cfg.poll_pop3 || cfg.poll_lmtp);
    assert(cfg.imap_port >= 1 && cfg.imap_port <= 65535);
    assert(cfg.pop3_port >= 1 && cfg.pop3_port <= 65535);
    assert(cfg.lmtp_port >= 1 && cfg.lmtp_port <= 65535);
    assert(cfg.interval_ms >= 10 && cfg.timeout_ms >= 10);
    assert(cfg.retry_count >= 1);
    if (cfg.rapid_rounds > 0)
        assert(cfg.rapid_fails_needed >= 1 && cfg.rapid_fails_needed <= cfg.rapid_rounds);
    assert(cfg.reconnect_min_ms <= cfg.reconnect_max_ms);
    assert(cfg.tag_count <= MONITOR_MAX_TAGS);
    const struct monitor_credentials *fallback = NULL;
    for (size_t i = 0; i < cfg.tag_count; i++) {
        const struct monitor_credentials *c = &cfg.tags[i];
        assert(strlen(c->tag) <= MONITOR_MAX_TAG_LEN);
        assert(c->user[0] != '\0' && strlen(c->user) <= MONITOR_MAX_CREDENTIAL_LEN);
        assert(strlen(c->password) <= MONITOR_MAX_CREDENTIAL_LEN);
        assert(strpbrk(c->user, "\r\n") == NULL && strpbrk(c->password, "\r\n") == NULL);
        /* YAML maps have unique keys, so a tag finds its own entry. */
        assert(monitor_config_credentials(&cfg, c->tag) == c);
        if (c->tag[0] == '\0')
            fallback = c;
    }
    assert(monitor_config_credentials(&cfg, "\x01not-a-tag") == fallback);
    monitor_config_print(&cfg, devnull);
    monitor_config_free(&cfg);
    return 0;
}
