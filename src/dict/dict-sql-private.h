/* Internals of the `sql` dict driver, shared by dict-sql.c (configuration,
 * table map, SQL text and the step logic of every operation) and the two
 * executors: dict-sql-sqlite.c (synchronous, embedded) and dict-sql-pgsql.c
 * (asynchronous libpq on the event loop).
 *
 * The split: dict-sql.c knows what to say (SQL text with numbered
 * placeholders and the parameters to bind, how to read the rows back),
 * the executors know how to say it. Values never enter SQL text: every
 * statement is built from validated identifiers and placeholders only, and
 * everything a client sent travels as a bound parameter. */
#ifndef PETREL_DICT_SQL_PRIVATE_H
#define PETREL_DICT_SQL_PRIVATE_H

#include "dict/dict-private.h"
#include "sql/sql-row.h"
#include "sql/sql-stmt.h"

#define SQL_MAX_FIELDS 16 /* pattern variables per map, and value_fields */
#define SQL_MAX_MAPS 64
#define SQL_MAX_COLUMNS (2 * SQL_MAX_FIELDS + 2) /* result columns of any statement */
#define SQL_FETCH_ROWS 1000                      /* rows per PostgreSQL cursor FETCH */
#define SQL_DEFAULT_TABLE "dict"

/* One entry of `maps:`: keys matching `pattern` live in columns of `table`. */
struct sql_map {
    char *pattern; /* "shared/quota/$user/$kind", "priv/quota/storage" */
    bool priv;     /* pattern starts with "priv/" */
    char *table;
    size_t var_count; /* variables in pattern order */
    char *vars[SQL_MAX_FIELDS];
    char *var_columns[SQL_MAX_FIELDS];
    char *username_field; /* priv maps only */
    size_t value_count;   /* 1 = read-write; more = lookup/iterate only */
    char *value_fields[SQL_MAX_FIELDS];
    char *expire_field; /* optional TTL column (seconds since the epoch) */
};

struct sql_config {
    char *dict_name;
    enum sql_dialect dialect;
    char *path;    /* sqlite */
    char *connect; /* pgsql: libpq conninfo */
    char *table;   /* the default table */
    int64_t busy_timeout_ms;
    int64_t pool_size;
    int64_t connect_timeout_ms;
    int64_t query_timeout_ms;
    struct sql_map *maps;
    size_t map_count;
};

/* ---------- statements ---------- */

/* DDL creating the default table (and its TTL index) when missing. */
void sql_build_schema(const struct sql_config *cfg, struct sql_stmt *q);

/* ---------- lookup ---------- */

/* The first live row of `key` (a storage key); q->columns value columns. */
void sql_build_lookup(const struct sql_config *cfg, const char *key, int64_t now,
                      struct sql_stmt *q);

/* ---------- iterate ---------- */

/* A table an iteration reads: a map (with the pattern variables that the
 * prefix fixes) or the default table. */
struct sql_iter_source {
    const struct sql_map *map; /* NULL: the default table */
    size_t bound;              /* leading variables with an exact value */
    char *values[SQL_MAX_FIELDS];
    char *partial;  /* value prefix of variable `bound`, or NULL */
    char *username; /* priv maps */
};

struct sql_iter_plan {
    const struct sql_config *cfg;
    char *prefix; /* storage prefix */
    unsigned flags;
    size_t count;
    struct sql_iter_source sources[SQL_MAX_MAPS + 1];
};

/* Which tables an iteration of `prefix` reads: the matching maps in
 * configuration order, then the default table. */
void sql_iter_plan_init(struct sql_iter_plan *p, const struct sql_config *cfg, const char *prefix,
                        unsigned flags);
void sql_iter_plan_free(struct sql_iter_plan *p);
/* The SELECT of source `i` (ORDER BY per the SORT_* flags). */
void sql_build_iterate(const struct sql_iter_plan *p, size_t i, int64_t now, struct sql_stmt *q);
/* True when source `i` returns PostgreSQL results in text format. */
bool sql_iter_text_results(const struct sql_iter_plan *p, size_t i);
/* Turns one result row of source `i` into *row: the storage key (kept in
 * *key) and its values (in `values`, pointing into `cols`). False for a
 * row the iteration does not want (a deeper key of a non-recursive
 * iteration). */
bool sql_iter_row(const struct sql_iter_plan *p, size_t i, const struct sql_value *cols,
                  size_t ncols, struct buf *key, struct dict_value *values, struct dict_row *row);

/* ---------- transactions ---------- */

/* Refuses, before anything runs, a batch that cannot succeed (a write to a
 * multi-value map, a TTL on a map without expire_field, a NUL byte in a
 * value bound for a text column). *error is allocated. */
bool sql_ops_check(const struct sql_config *cfg, const struct dict_tx_op *ops, size_t count,
                   int64_t expire_secs, char **error);

/* Progress through one operation: one or two statements. */
struct sql_op_state {
    int step;
    char number[32]; /* SQLite atomic-inc: the new counter as text */
};

enum sql_op_next {
    SQL_OP_AGAIN, /* run sql_op_build again for the next step */
    SQL_OP_DONE,
    SQL_OP_NOT_FOUND, /* atomic-inc of a missing key: the rest still applies */
    SQL_OP_FAILED,    /* *error set; roll the transaction back */
};

/* Builds the statement of the operation's current step. */
void sql_op_build(const struct sql_config *cfg, const struct dict_tx_op *op,
                  const struct sql_op_state *st, int64_t expire_secs, int64_t now,
                  struct sql_stmt *q);
/* Feeds the step's outcome: rows changed, and the first column of the first
 * row (NULL when there was none). */
enum sql_op_next sql_op_result(const struct sql_config *cfg, const struct dict_tx_op *op,
                               struct sql_op_state *st, int64_t changes,
                               const struct sql_value *first, char **error);
/* "set shared/x" for messages (the key shortened). Allocated. */
char *sql_op_describe(const struct dict_tx_op *op);

/* ---------- expiry ---------- */

/* Tables with a TTL column: the default table, then maps with expire_field. */
size_t sql_expire_count(const struct sql_config *cfg);
void sql_build_expire(const struct sql_config *cfg, size_t i, int64_t now, struct sql_stmt *q);

/* ---------- executors ---------- */

/* The two executors are dict driver tables of their own (without the
 * configuration functions, which dict-sql.c has for both); dict-sql.c
 * forwards each operation to the one its backend names. */
extern const struct dict_driver_ops sql_executor_sqlite;
extern const struct dict_driver_ops sql_executor_pgsql;

#endif
