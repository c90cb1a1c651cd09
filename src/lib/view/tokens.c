/* pcrfs — tokens/: the store's token tree (pcr_store_open_tokens()), its one level,
 * under a view number that does not move with L (view.h).
 */
#include "util/json.h"
#include "view/view.h"

static unsigned tok_count(const struct pcr_views *vs, const void *state)
{
    (void)state;
    return vs->tokstore != NULL;
}

static unsigned tok_level(const struct pcr_views *vs, const void *state, unsigned i)
{
    (void)vs, (void)state, (void)i;
    return 1;
}

static void tok_stats(const struct pcr_view *v, struct pcr_json *b)
{
    struct pcr_stats ts;

    pcr_store_stats(v->store, &ts);
    pcr_json_printf(b, ", \"level\": 1, \"shard_bytes\": %llu",
                    (unsigned long long)ts.level[1].bytes);
}

const struct pcr_view_desc pcr_view_tokens = {
    .name = "tokens",
    .level_rule = PCR_LEVEL_FIXED,
    .tree = PCR_TREE_TOKENS,
    .cache = {.names = true, .listings = true, .pages = true},
    .view_stats = true,
    .count = tok_count,
    .number = PCR_VIEW_TOKENS,
    .level = tok_level,
    .view_stats_json = tok_stats,
};
