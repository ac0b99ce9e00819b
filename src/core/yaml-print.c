#include "core/yaml-print.h"

#include <stdbool.h>

/* Writes `s` as a YAML double-quoted scalar, escaped so it reads back as the
 * same string. */
void yaml_put_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)(s != NULL ? s : ""); *p != '\0'; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '\t')
            fputs("\\t", out);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

/* A mapping key: bare when it is a plain word, quoted otherwise. */
void yaml_put_key(FILE *out, const char *key)
{
    bool bare = key[0] != '\0';
    for (const char *p = key; *p != '\0' && bare; p++)
        bare = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
               *p == '_' || *p == '-' || *p == '.';
    if (bare)
        fputs(key, out);
    else
        yaml_put_str(out, key);
}

/* "<indent><key>: <quoted value>\n" */
void yaml_put_kv(FILE *out, const char *indent, const char *key, const char *value)
{
    fputs(indent, out);
    yaml_put_key(out, key);
    fputs(": ", out);
    yaml_put_str(out, value);
    fputc('\n', out);
}

void yaml_put_list(FILE *out, const char *indent, const char *key, char **list)
{
    if (list == NULL || list[0] == NULL) {
        fprintf(out, "%s%s: []\n", indent, key);
        return;
    }
    fprintf(out, "%s%s:\n", indent, key);
    for (size_t i = 0; list[i] != NULL; i++) {
        fprintf(out, "%s  - ", indent);
        yaml_put_str(out, list[i]);
        fputc('\n', out);
    }
}
