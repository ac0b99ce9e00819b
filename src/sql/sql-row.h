/* One result row as every executor hands it over: column names and values
 * that stay valid until the callback returns (or the next row). */
#ifndef PETREL_SQL_ROW_H
#define PETREL_SQL_ROW_H

#include <stdbool.h>
#include <stddef.h>

struct sql_value {
    const char *data; /* NULL: SQL NULL; else NUL-terminated at data[len] */
    size_t len;
};

struct sql_row {
    size_t ncols;
    const char *const *names;
    const struct sql_value *values;
};

/* Called per row; returning false stops reading further rows. */
typedef bool sql_row_fn(const struct sql_row *row, void *ctx);

#endif
