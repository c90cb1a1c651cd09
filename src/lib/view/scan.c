/* pcrfs — scan1/ .. scanL/ and full/: the store's image tree at one level each
 * (view.h). full/ serves level L under view number L+1: the bytes of scanL/ under
 * numbers of its own, so that cp -a, du and tar never take a file of full/ for a
 * hard link of its twin.
 */
#include "util/json.h"
#include "view/view.h"

static unsigned scan_count(const struct pcr_views *vs, const void *state)
{
    (void)state;
    return vs->levels;
}

/* scanK serves level K */
static unsigned scan_level(const struct pcr_views *vs, const void *state, unsigned i)
{
    (void)vs, (void)state;
    return i;
}

static void level_stats(const struct pcr_view *v, struct pcr_json *b)
{
    pcr_json_printf(b, ", \"level\": %u", v->level);
}

const struct pcr_view_desc pcr_view_scan = {
    .name = "scan%u",
    .level_rule = PCR_LEVEL_FIXED,
    .tree = PCR_TREE_IMAGES,
    .cache = {.names = true, .listings = true, .pages = true},
    .view_stats = true,
    .count = scan_count,
    .number = 1,
    .level = scan_level,
    .view_stats_json = level_stats,
};

static unsigned one(const struct pcr_views *vs, const void *state)
{
    (void)vs, (void)state;
    return 1;
}

static unsigned full_level(const struct pcr_views *vs, const void *state, unsigned i)
{
    (void)state, (void)i;
    return vs->levels;
}

static unsigned full_number(const struct pcr_views *vs, unsigned i)
{
    (void)i;
    return vs->levels + 1;
}

/* full/'s number is L+1, after scanL/'s. */
const struct pcr_view_desc pcr_view_full = {
    .name = "full",
    .level_rule = PCR_LEVEL_FIXED,
    .tree = PCR_TREE_IMAGES,
    .cache = {.names = true, .listings = true, .pages = true},
    .view_stats = true,
    .count = one,
    .number_of = full_number,
    .level = full_level,
    .view_stats_json = level_stats,
};
