/* pcrfs build — the plan of a build made on many machines (mkpcrfs(1), "Building on
 * many machines").
 *
 * A plan fixes a build: the options, the image tree as the walk numbered it (every
 * directory, every file in id order with its size and modification time) and the
 * token options. It is text, one item a line, names escaped (%XX for bytes up to
 * space, '%' and DEL), about 50 bytes per image:
 *
 *   pcrfs-plan 1
 *   made_by mkpcrfs VERSION   a part of another version refuses the plan
 *   created SECONDS        meta "created" of the store (the mtime a mount serves)
 *   source PATH            SRC as given ("-": none, a store of tokens only)
 *   per_record N
 *   scans preset NAME | scans file LABEL TEXT
 *   drop_markers 0|1
 *   quality 0|1
 *   skipped N              entries the walk skipped (meta "skipped")
 *   tokopt CODE VALUE      one token option as given (tokimport.h), repeated
 *   dirs D
 *   d PARENT FIRST_CHILD NSUBDIRS FIRST_FILE NFILES NAME   D lines, ids 1..D
 *   files N
 *   f SIZE MTIME_NS NAME   N lines, ids 1..N (each directory's files in a row)
 *   end HASH               XXH64 of every byte before this line, in hex
 *
 * The hash is the plan's identity: every part records it, and the merge refuses
 * parts of another plan. A plan is read back strictly (a damaged or edited plan is
 * refused, naming its line).
 */
#ifndef PCRFS_TOOLS_PLAN_H
#define PCRFS_TOOLS_PLAN_H

#include "builder/builder.h"

/* Write the plan of the walked build @b to @path (atomically: a temporary file
 * beside it, renamed). @return 0 or -1 (reported; out of memory, the build's
 * result is -ENOMEM). */
int plan_write(struct build *b, const char *path);
/* Read the plan at @path into @b (options, tree, stamps, token options, its hash).
 * @return 0 or -1 (reported; out of memory as for plan_write()). */
int plan_read(struct build *b, const char *path);

#endif
