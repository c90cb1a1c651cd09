/* pcrfs — the index connection's hardening and the exact-schema check (schema.c);
 * the middle floor of the index module (see conn.h); not installed. */
#ifndef PCRFS_FORMAT_SCHEMA_H
#define PCRFS_FORMAT_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <sqlite3.h>
#include "format/conn.h"

/* The token tree has the same shape: a token file is a one-chunk file whose record is
 * a token shard (see pcrfs(5)); then the blobs. The tail of pcr_index_schema, and
 * what the fuzz target of the index adds to the tables it mutates. */
#define PCR_INDEX_TOKEN_TABLES                                                                     \
    "CREATE TABLE tok_dirs(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, name BLOB NOT NULL,"   \
    " first_child INTEGER NOT NULL, nsubdirs INTEGER NOT NULL,"                                    \
    " first_file INTEGER NOT NULL, nfiles INTEGER NOT NULL);"                                      \
    "CREATE TABLE tok_records(id INTEGER PRIMARY KEY, name TEXT NOT NULL, size INTEGER NOT NULL,"  \
    " nimages INTEGER NOT NULL, groups BLOB NOT NULL);"                                            \
    "CREATE TABLE tok_files(id INTEGER PRIMARY KEY, dir INTEGER NOT NULL, name BLOB NOT NULL,"     \
    " kind INTEGER NOT NULL, record INTEGER NOT NULL, slot INTEGER NOT NULL,"                      \
    " nchunks INTEGER NOT NULL, chunks BLOB NOT NULL, size INTEGER NOT NULL,"                      \
    " width INTEGER NOT NULL, height INTEGER NOT NULL, components INTEGER NOT NULL,"               \
    " src_size INTEGER NOT NULL, checksum INTEGER NOT NULL, note TEXT,"                            \
    " trailer INTEGER NOT NULL, sums BLOB NOT NULL, quality BLOB NOT NULL);"                       \
    "CREATE TABLE blobs(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;"

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
