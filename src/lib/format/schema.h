/* pcrfs — the index connection's hardening and the exact-schema check (schema.c);
 * the middle floor of the index module (see conn.h); not installed. */
#ifndef PCRFS_FORMAT_SCHEMA_H
#define PCRFS_FORMAT_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <sqlite3.h>
#include "format/conn.h"

/* The schema of format PCR_INDEX_VERSION (format/index.h), as the writer creates it
 * (pcrfs(5)), and the reference a reader checks an index against. */
extern const char pcr_index_schema[];

/* Defensive mode, no trusted schema, views, triggers or extensions, limits, and the
 * progress handler. @return 0 or -EIO. */
int index_harden(struct pcr_index *idx);
/* Parse the reference schema once (pthread_once). @return 0 or -EIO. */
int index_ref_init(void);
/* The index's schema is exactly the reference. @return 0, or -EINVAL with @why. */
int index_check_schema(struct pcr_index *idx, char *why, size_t len);
/* A reader SELECT lists exactly table @t's columns, in order. */
bool index_select_matches(sqlite3_stmt *st, int t);
/* The first column of the row whose storage class its declared type does not allow,
 * or -1. */
int index_bad_column(sqlite3_stmt *st, int t);
/* "column name holds TEXT, want BLOB" */
void index_describe_bad(sqlite3_stmt *st, int t, int c, char *buf, size_t len);

#endif
