/* Writing configuration back as YAML (--check-config): scalars are escaped
 * so that what is printed reads back as the same configuration. */
#ifndef PETREL_CORE_YAML_PRINT_H
#define PETREL_CORE_YAML_PRINT_H

#include <stdio.h>

/* `s` as a double-quoted scalar (NULL prints ""). */
void yaml_put_str(FILE *out, const char *s);
/* A mapping key: bare when it is a plain word, quoted otherwise. */
void yaml_put_key(FILE *out, const char *key);
/* "<indent><key>: <quoted value>\n" */
void yaml_put_kv(FILE *out, const char *indent, const char *key, const char *value);
/* A NULL-terminated list as a block sequence ("[]" when empty or NULL). */
void yaml_put_list(FILE *out, const char *indent, const char *key, char **list);

#endif
