#include "passes/pipeline.h"

#include "passes/shape_inference.h"

namespace tessera {

Status optimize_graph(Graph& g, const OptimizeOptions& opts, OptimizeStats* stats) {
  OptimizeStats local;
  OptimizeStats& st = stats ? *stats : local;
  // A graph the importer let through but the verifier rejects (some
  // unusual outer-scope reference) is optimised all the same; only a graph
  // that verified before must verify after.
  const bool verified_before = verify_graph(g).ok();
  unshare_nested_graphs(g);
  if (opts.widen_float16) TSR_RETURN_IF_ERROR(widen_float16(g, &st.widen));
  TSR_RETURN_IF_ERROR(infer_shapes(g));
  for (int iter = 0; iter < opts.max_iterations; ++iter) {
    ++st.iterations;
    bool changed = false;
    if (opts.canonicalize) {
      CanonicalizeStats cs;
      TSR_RETURN_IF_ERROR(canonicalize(g, &cs, opts.canonicalize_options));
      changed = changed || cs.changed();
      st.canonicalize += cs;
    }
    if (opts.fuse_qdq) {
      int fused = 0;
      TSR_ASSIGN_OR_RETURN(fused, fuse_qdq(g));
      changed = changed || fused > 0;
      st.qdq_fused += fused;
    }
    if (opts.fold_constants) {
      ConstantFoldingStats fs;
      TSR_RETURN_IF_ERROR(constant_folding(g, &fs, opts.folding));
      changed = changed || fs.changed();
      st.folding += fs;
    }
    DceStats ds;
    TSR_RETURN_IF_ERROR(dce(g, &ds));
    changed = changed || ds.changed();
    st.dce += ds;
    if (!changed) break;
    TSR_RETURN_IF_ERROR(infer_shapes(g));
  }
  Status verified = verified_before ? verify_graph(g) : Status::Ok();
  if (!verified.ok()) {
    return InternalError("graph optimisation produced an invalid graph: " + verified.message());
  }
  return Status::Ok();
}

}  // namespace tessera
