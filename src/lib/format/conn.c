/* pcrfs — the index connection's floor (conn.h): why the last call failed, and
 * preparing and stepping a statement under the work bound. Calls nothing of the
 * index module's other files.
 */
#include <stdio.h>
#include <sqlite3.h>
#include "format/conn.h"

const char *pcr_index_errmsg(struct pcr_index *idx)
{
    return idx->why[0] ? idx->why : sqlite3_errmsg(idx->db);
}

/* ---- bounded work ----
 * Every statement of a reader runs under a progress handler: after
 * PCR_INDEX_STEP_BUDGET virtual-machine instructions without producing a row it is
 * interrupted. A legitimate statement of this module spends a few dozen
 * instructions per row (a rowid range or a scan of a table, each row returned), so
 * the bound is about work between rows, not about the size of a table: loading a
 * million-row table never trips it, while a query that computes without end (a view
 * over a recursive query, were one to get past index_check_schema()) stops in well under
 * a second and its caller gets -EIO. */

int index_progress(void *ctx)
{
    struct pcr_index *idx = ctx;
    return ++idx->ticks > PCR_INDEX_STEP_BUDGET / PROGRESS_PERIOD;
}

/* After a statement stopped: say why if it was the budget. */
static void note_budget(struct pcr_index *idx)
{
    if (idx->ticks > PCR_INDEX_STEP_BUDGET / PROGRESS_PERIOD)
        snprintf(idx->why, sizeof(idx->why),
                 "a query ran past its work bound (%d SQLite instructions without a row)",
                 PCR_INDEX_STEP_BUDGET);
}

int index_step(struct pcr_index *idx, sqlite3_stmt *st)
{
    int rc;

    idx->ticks = 0;
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        note_budget(idx);
    return rc;
}

/* Preparing may read and parse the schema, which runs statements too. */
int index_prepare(struct pcr_index *idx, const char *sql, unsigned flags, sqlite3_stmt **st)
{
    int rc;

    idx->ticks = 0;
    rc = sqlite3_prepare_v3(idx->db, sql, -1, flags, st, NULL);
    if (rc != SQLITE_OK)
        note_budget(idx);
    return rc;
}

int64_t index_pragma_int(struct pcr_index *idx, const char *sql, int *rc)
{
    sqlite3_stmt *st = NULL;
    int64_t v = -1;

    *rc = index_prepare(idx, sql, 0, &st);
    if (*rc == SQLITE_OK) {
        *rc = index_step(idx, st);
        if (*rc == SQLITE_ROW) {
            v = sqlite3_column_int64(st, 0);
            *rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    return v;
}
