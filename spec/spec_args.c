// spec/spec_args.c — the speculative-decoding options of bonsai-speculative and bonsai-serve (see dspark.h).
#include "spec/dspark.h"
#include "base/util.h"

// type_fn: --spec-type T.
static int type_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    bn_spec_params *p = base;
    p->type = bn_spec_type_from_name(v);
    return p->type < 0 ? bn_err(err, errlen, "'%s' is not one of draft-dspark|draft-oracle|draft-replay|none", v) : 0;
}

// snap_fn: --spec-snap-mem MIB (0..1 TiB) into bytes.
static int snap_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    long long mib;
    if (bn_args_int(opt, v, 0, 1 << 20, &mib, err, errlen) != 0) return -1;
    ((bn_spec_params *)base)->cpu_snap_bytes = (size_t)mib << 20;
    return 0;
}

#define O(f) offsetof(bn_spec_params, f)
const bn_arg bn_spec_args[] = {
    BN_SECTION("speculative decoding (DSpark, docs/dspark.md)"),
    BN_FN(
        "--spec-type", type_fn, "T",
        "draft-dspark (needs -md) | none | draft-oracle (a MEASUREMENT AID: the target's own greedy continuation from "
        "a second target state; forces acceptance) | draft-replay (bonsai-speculative's MEASUREMENT AID, needs -md and "
        "--temp 0: decodes natively first, then runs the drafter every round but proposes the recorded tokens)"),
    BN_INT("--spec-draft-n-max, --draft-max, --draft", O(n_max), "N",
           "drafts per round (clamped to the drafter's block size)", 0, 64),
    BN_INT("--spec-draft-n-min, --draft-min", O(n_min), "N", "shorter drafts are not verified", 0, 64),
    BN_FLOAT("--spec-draft-p-min, --draft-p-min", O(p_min), "P", "confidence-head truncation (0: off)", 0, 1),
    BN_FALSE("--no-spec-adaptive, --no-adaptive", O(adaptive),
             "always draft n-max (by default an online cost model shortens drafts or switches drafting off when it "
             "does not pay)"),
    BN_FN("--spec-snap-mem", snap_fn, "MIB",
          "CPU target: roll rejected drafts back to a snapshot kept after every verified token while n-max + 1 "
          "snapshots fit in MIB MiB (default 256); beyond, or 0: restore the state before the verify and re-run the "
          "accepted tokens"),
    {0}};
#undef O
