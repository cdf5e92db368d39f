// ai.tessera.Region: one external region of a compiled program, standing in
// the glue graph for the nodes the partitioner placed on a backend. Its
// attributes:
//   engine          index into the program's engine table
//   backend         the backend's name (for messages and reports)
//   output_dtypes   dtype per output        } the region's outputs are
//   output_ranks    rank per output         } concrete: engines are compiled
//   output_dims     all dims, concatenated  } for fixed shapes
// Its inference lives here, with the IR; running it belongs to the runtime
// (src/runtime/region_kernel.cc), which holds the engines.
#include "ops/op_registry.h"
#include "ops/region_attrs.h"

namespace tessera {

namespace {

Status infer_region(InferContext& ctx) {
  std::vector<ValueInfo> outs;
  auto st = region_output_types(ctx.node(), &outs);
  if (!st.ok()) return ctx.error(st.message());
  for (int i = 0; i < ctx.num_outputs() && i < static_cast<int>(outs.size()); ++i) {
    ctx.set_output(i, outs[static_cast<size_t>(i)].dtype, outs[static_cast<size_t>(i)].shape);
  }
  return Status::Ok();
}

// The runtime runs Region nodes with their engines (src/runtime/region_kernel.cc);
// the registry's kernel only says so.
Expected<std::unique_ptr<Kernel>> refuse_region(const KernelInit& init) {
  return InvalidModel(init.node.describe() + ": a Region node runs only inside a compiled program");
}

}  // namespace

void set_region_output_types(Node& n, const std::vector<ValueInfo>& outs) {
  Attribute dt, rk, dm;
  dt.kind = rk.kind = dm.kind = Attribute::Kind::kInts;
  for (const auto& vi : outs) {
    dt.ints.push_back(static_cast<int64_t>(vi.dtype));
    Dims d = vi.shape.concrete();
    rk.ints.push_back(static_cast<int64_t>(d.size()));
    dm.ints.insert(dm.ints.end(), d.begin(), d.end());
  }
  n.attrs["output_dtypes"] = dt;
  n.attrs["output_ranks"] = rk;
  n.attrs["output_dims"] = dm;
}

Status region_output_types(const Node& n, std::vector<ValueInfo>* outs) {
  std::vector<int64_t> dt = n.attr_ints("output_dtypes"), rk = n.attr_ints("output_ranks"),
                       dm = n.attr_ints("output_dims");
  if (dt.size() != n.outputs.size() || rk.size() != n.outputs.size()) {
    return InvalidModel("output_dtypes/output_ranks do not match the " + std::to_string(n.outputs.size()) +
                        " outputs");
  }
  size_t pos = 0;
  outs->clear();
  for (size_t i = 0; i < dt.size(); ++i) {
    DType t = dtype_from_onnx(static_cast<int32_t>(dt[i]));
    if (t == DType::kUndefined || !dtype_is_supported(t)) return InvalidModel("output " + std::to_string(i) + ": bad dtype");
    if (rk[i] < 0 || rk[i] > 64 || pos + static_cast<size_t>(rk[i]) > dm.size()) {
      return InvalidModel("output " + std::to_string(i) + ": bad rank");
    }
    Dims d(dm.begin() + static_cast<std::ptrdiff_t>(pos), dm.begin() + static_cast<std::ptrdiff_t>(pos + rk[i]));
    int64_t elems = 1;
    for (int64_t v : d) {
      // Bounded so that a corrupt artifact cannot ask for an absurd buffer.
      if (v < 0 || (v > 0 && elems > (int64_t{1} << 40) / v)) {
        return InvalidModel("output " + std::to_string(i) + ": bad dim " + std::to_string(v));
      }
      elems *= v;
    }
    pos += static_cast<size_t>(rk[i]);
    outs->push_back(ValueInfo{t, Shape::FromDims(d)});
  }
  if (pos != dm.size()) return InvalidModel("output_dims has extra entries");
  return Status::Ok();
}

TSR_REGISTER_OPS(region) { reg.add(OpSchema{"Region", kRegionDomain, infer_region, refuse_region, nullptr, {}}); }

}  // namespace tessera
