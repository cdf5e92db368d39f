// Registration entry points of the files that make up the misc family; all
// are called from TSR_REGISTER_OPS(misc) in misc.cc.
#pragma once

#include "ops/op_registry.h"

namespace tessera {

void register_einsum(OpRegistry& reg);  // misc_einsum.cc
void register_tfidf(OpRegistry& reg);   // misc_tfidf.cc: TfIdfVectorizer

}  // namespace tessera
