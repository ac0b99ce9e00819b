/* libFuzzer target: the file dict driver's loader. The input is used as the
 * content of the dict's data file; the driver must open it or refuse it with
 * an error, never crash, and whatever it loads must iterate cleanly. */
#include "core/log.h"
#include "core/yaml-doc.h"
#include "dict/dict.h"

#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct event_base *base;
static struct log_levels quiet = {.base = LOG_ERROR};
static char dir[64];
static char path[128];
static char config[256];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_install(&quiet); /* the driver logs every load and tail cut at info */
    base = event_base_new();
    snprintf(dir, sizeof(dir), "/tmp/petrel-fuzz-dict-file-%ld", (long)getpid());
    mkdir(dir, 0700);
    snprintf(path, sizeof(path), "%s/d.db", dir);
    snprintf(config, sizeof(config), "f:\n  driver: file\n  path: %s\n  fsync: never\n", path);
    return 0;
}

static void count_row(const struct dict_lookup_result *r, void *ctx)
{
    (void)r;
    (void)ctx;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        abort();
    fwrite(data, 1, size, f);
    fclose(f);
    char lock[160];
    snprintf(lock, sizeof(lock), "%s.lock", path);

    struct petrel_error err;
    struct ydoc *doc = ydoc_parse("fuzz.yaml", config, strlen(config), &err);
    if (doc == NULL)
        abort();
    struct dict_settings *settings = dict_settings_read("fuzz.yaml", doc->root, &err);
    ydoc_free(doc);
    struct dict_registry *reg = settings != NULL ? dict_registry_new(settings) : NULL;
    dict_settings_free(settings);
    if (reg == NULL)
        abort();
    if (dict_registry_open(reg, base, NULL, &err)) {
        struct dict *d = dict_registry_get(reg, "f");
        struct dict_op_settings set = {.username = "u"};
        struct dict_iterate *it =
            dict_iterate_init(d, &set, "shared/", DICT_ITER_RECURSE | DICT_ITER_SORT_BY_VALUE, &err);
        if (it != NULL) {
            struct dict_row row;
            size_t rows = 0;
            while (dict_iterate_next(it, &row) == DICT_ITER_ROW && rows < 100000)
                rows++;
            dict_iterate_deinit(it);
        }
        dict_lookup(d, &set, "shared/a", count_row, NULL);
        dict_lookup(d, &set, "priv/a", count_row, NULL);
    }
    dict_registry_free(reg);
    unlink(path);
    return 0;
}
