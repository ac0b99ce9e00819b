/* libFuzzer target: the YAML configuration path.
 * Input: the bytes of a petrel.yaml. Runs ydoc_parse() on its own (checking
 * the shape of the tree it builds), then the whole config_parse() path
 * (YAML -> typed config, every section reader, address and CIDR checks),
 * prints the result and frees everything. ASan/LSan catch memory errors and
 * leaks; the asserts below catch broken invariants.
 * It also checks that config_print() output parses back to a configuration
 * that prints the same (FUZZ_CONFIG_ROUNDTRIP=0 turns that off). */
#include "core/yaml-doc.h"
#include "server/config.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *devnull;
static bool roundtrip;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* config_parse() applies these overrides; keep runs reproducible. */
    unsetenv("LOG_LEVEL");
    unsetenv("PETREL_COMPONENT");
    unsetenv("BACKEND_API_TOKEN");
    devnull = fopen("/dev/null", "w");
    const char *rt = getenv("FUZZ_CONFIG_ROUNDTRIP");
    roundtrip = rt == NULL || strcmp(rt, "0") != 0;
    return 0;
}

static char *print_to_string(const struct petrel_config *cfg, size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    assert(f != NULL);
    config_print(cfg, f);
    fclose(f);
    return text;
}

/* config_print() writes YAML that config_parse() reads back to the same thing. */
static void check_roundtrip(const struct petrel_config *cfg)
{
    /* Dict driver options and SQL `connect` strings (paths, passwords) are
     * not printed, so such a config does not read back whole; everything
     * else must. */
    if (dict_settings_count(cfg->dicts) > 0)
        return;
    if ((cfg->auth.has_passdb && cfg->auth.passdb.driver == AUTH_DB_SQL) ||
        (cfg->auth.has_userdb && cfg->auth.userdb.driver == AUTH_DB_SQL))
        return;
    size_t len1, len2;
    char *text1 = print_to_string(cfg, &len1);
    struct petrel_error err;
    memset(&err, 0, sizeof(err));
    struct petrel_config *again = config_parse("fuzz.yaml", text1, len1, &err);
    if (again == NULL) {
        fprintf(stderr, "printed configuration does not parse: %s\n---\n%s---\n", err.message,
                text1);
        abort();
    }
    char *text2 = print_to_string(again, &len2);
    if (len1 != len2 || memcmp(text1, text2, len1) != 0) {
        fprintf(stderr, "print/parse/print differs:\n---\n%s---\n%s---\n", text1, text2);
        abort();
    }
    free(text2);
    config_free(again);
    free(text1);
}

static void check_error(const struct petrel_error *err)
{
    assert(err->code != PETREL_OK);
    assert(memchr(err->message, '\0', sizeof(err->message)) != NULL);
    assert(err->message[0] != '\0');
}

/* Walks the tree: every node well-formed, depth bounded as documented. */
static size_t walk(const struct ynode *n, int depth)
{
    assert(n != NULL);
    assert(depth <= 64);
    assert(n->line >= 1);
    assert(n->count <= n->cap || (n->count == 0 && n->cap == 0));
    size_t nodes = 1;
    switch (n->type) {
    case YNODE_SCALAR:
        assert(n->scalar != NULL);
        assert(n->count == 0);
        (void)strlen(n->scalar);
        break;
    case YNODE_MAP:
        assert(n->scalar == NULL);
        for (size_t i = 0; i < n->count; i++) {
            assert(n->keys[i] != NULL);
            assert(n->key_lines[i] >= 1);
            /* Duplicate keys are refused, so lookup finds this very item. */
            assert(ynode_get(n, n->keys[i]) == n->items[i]);
            nodes += walk(n->items[i], depth + 1);
        }
        break;
    case YNODE_SEQ:
        assert(n->scalar == NULL);
        assert(n->keys == NULL);
        for (size_t i = 0; i < n->count; i++)
            nodes += walk(n->items[i], depth + 1);
        break;
    }
    (void)ynode_type_name(n->type);
    return nodes;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    struct petrel_error err;

    /* 1. The YAML tree on its own. */
    memset(&err, 0, sizeof(err));
    struct ydoc *doc = ydoc_parse("fuzz.yaml", text, size, &err);
    if (doc != NULL) {
        assert(doc->file != NULL && strcmp(doc->file, "fuzz.yaml") == 0);
        if (doc->root != NULL) {
            walk(doc->root, 0);
            (void)ynode_get(doc->root, "backend_api");
            (void)ynode_get(doc->root, "");
        }
        ydoc_free(doc);
    } else {
        check_error(&err);
    }

    /* 2. The full typed configuration. */
    memset(&err, 0, sizeof(err));
    struct petrel_config *cfg = config_parse("fuzz.yaml", text, size, &err);
    if (cfg != NULL) {
        assert(cfg->components != NULL);
        for (size_t i = 0; cfg->components[i] != NULL; i++)
            assert(config_has_component(cfg, cfg->components[i]));
        assert(cfg->telemetry.listen != NULL && cfg->backend_api.listen != NULL);
        assert(cfg->backend_api.token_env != NULL && cfg->backend_api.auth_master_addr != NULL);
        assert(cfg->log.override_count <= LOG_MAX_OVERRIDES);
        assert(cfg->shutdown_timeout_ms >= 0 && cfg->shutdown_timeout_ms <= 3600000);
        assert(cfg->backend_api.max_body_bytes >= 1024);
        assert(cfg->telemetry.check_count <= 64);
        for (size_t i = 0; i < cfg->telemetry.check_count; i++)
            assert(cfg->telemetry.checks[i].name != NULL && cfg->telemetry.checks[i].tcp != NULL);
        if (devnull != NULL)
            config_print(cfg, devnull);
        if (roundtrip)
            check_roundtrip(cfg);
        config_free(cfg);
    } else {
        check_error(&err);
    }
    return 0;
}
