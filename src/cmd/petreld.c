/* petreld: the Petrel daemon. Argument parsing only; see server/daemon.h. */
#include "server/daemon.h"
#include "version.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COMPONENTS 32

static void usage(FILE *out)
{
    fprintf(out, "usage: petreld [-c FILE] [--component NAME]... [--check-config]\n"
                 "  -c, --config FILE     configuration (default $PETREL_CONFIG or "
                 "/etc/petrel/petrel.yaml)\n"
                 "      --component NAME  run only this component (repeatable)\n"
                 "      --check-config    validate and print the effective configuration\n"
                 "  -V, --version         print the version\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"component", required_argument, NULL, 'C'},
        {"check-config", no_argument, NULL, 'k'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *components[MAX_COMPONENTS + 1] = {NULL};
    size_t component_count = 0;
    struct daemon_options opts = {0};
    opts.config_path = getenv("PETREL_CONFIG");
    int c;
    while ((c = getopt_long(argc, argv, "c:Vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            opts.config_path = optarg;
            break;
        case 'C':
            if (component_count == MAX_COMPONENTS) {
                fprintf(stderr, "petreld: too many --component options\n");
                return 2;
            }
            components[component_count++] = optarg;
            break;
        case 'k':
            opts.check_config = true;
            break;
        case 'V':
            printf("petreld %s\n", PETREL_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    if (opts.config_path == NULL || *opts.config_path == '\0')
        opts.config_path = "/etc/petrel/petrel.yaml";
    opts.components = component_count > 0 ? components : NULL;
    return daemon_run(&opts);
}
