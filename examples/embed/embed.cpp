// A C++ program embedding Tessera through tessera.hpp: compiles an ONNX model to an artifact, loads the artifact,
// runs it on zeros (symbolic dims taken as 1) and prints each output's shape. Usage: embed_cpp MODEL.onnx OUT.tsr
#include <tessera/tessera.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: embed_cpp MODEL.onnx OUT.tsr\n");
    return 2;
  }
  try {
    tessera::Env env;
    tessera::SessionOptions opts;
    opts.Tune(TESSERA_TUNE_OFF);
    tessera::Compile(env, argv[1], argv[2], &opts);
    tessera::Session session(env, argv[2]);
    std::vector<tessera::Value> inputs;
    std::vector<std::pair<std::string, const tessera::Value*>> feeds;
    for (const tessera::IoInfo& in : session.Inputs()) {
      std::vector<int64_t> dims;
      for (int64_t d : in.dims) dims.push_back(d < 0 ? 1 : d);
      inputs.push_back(tessera::Value::Create(in.dtype, dims));
    }
    for (size_t i = 0; i < inputs.size(); ++i) feeds.emplace_back(session.Inputs()[i].name, &inputs[i]);
    std::vector<tessera::Value> out = session.Run(feeds);
    const auto outputs = session.Outputs();
    for (size_t i = 0; i < out.size(); ++i) {
      std::printf("%s: [", outputs[i].name.c_str());
      const auto dims = out[i].Dims();
      for (size_t d = 0; d < dims.size(); ++d) std::printf("%s%lld", d ? "," : "", static_cast<long long>(dims[d]));
      std::printf("]\n");
    }
    std::printf("backends available: %s\n", env.AvailableBackends().c_str());
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "embed_cpp: error %d: %s\n", static_cast<int>(e.code()), e.what());
    return 1;
  }
  return 0;
}
