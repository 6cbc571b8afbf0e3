// safetensors: readers over files read into memory, for one file and for a Hugging Face folder (one file, or shards
// listed by model.safetensors.index.json).
// Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin,
// end)}, "__metadata__": {str: str}}, then the data section; offsets are relative to its start.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace inflight::engine {

struct MappedFile;

struct SafetensorsTensor {
  std::string name;
  std::string file;              // the file holding it, for error messages
  std::string dtype_name;        // as stored: "F32", "BF16", "I64", ...
  std::optional<kernels::DType> dtype;  // nullopt when dtype_name is not F32, F16 or BF16
  std::vector<int64_t> shape;    // row-major, shape[0] slowest: a HF weight is [out, in]
  const uint8_t* data = nullptr; // into the mapping; nbytes == prod(shape) * element size
  int64_t nbytes = 0;
};

class SafetensorsFile {
 public:
  // Maps and validates the whole header: JSON syntax, known dtypes, shapes, every data_offsets range
  // inside the data section, consistent with shape * element size, ranges not overlapping. A tensor of
  // a dtype the engine cannot use (I64, F64, ...) is listed with dtype == nullopt. Throws LoadError
  // naming the file (and the tensor).
  static SafetensorsFile open(const std::string& path);
  // The same over bytes in memory (tests, fuzzing); `name` stands for the path in errors.
  static SafetensorsFile from_memory(std::shared_ptr<const std::vector<uint8_t>> bytes, const std::string& name);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find_tensor(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // "__metadata__"
  std::shared_ptr<const void> storage() const { return storage_; }
  // Whether the bytes are this file's own map_file() copy (open()), which the loader may rearrange in place,
  // rather than memory the caller shares (from_memory()).
  bool private_copy() const { return private_copy_; }

 private:
  static SafetensorsFile parse(const std::string& path, const MappedFile& bytes);

  std::string path_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  std::shared_ptr<const void> storage_;
  bool private_copy_ = false;
};

// All tensors of a HF folder: model.safetensors; or, when model.safetensors.index.json exists, the
// shards its weight_map names (every listed tensor must be in its shard); or, with neither, every
// *.safetensors file in the folder. A tensor name in two files is a LoadError.
class SafetensorsModel {
 public:
  static SafetensorsModel open_folder(const std::string& folder);

  const std::string& folder() const { return folder_; }
  const SafetensorsTensor* find_tensor(const std::string& name) const;
  // As find_tensor, but throws LoadError naming the tensor (and, when it is there, its file and dtype)
  // when it is missing or its dtype is not F32, F16 or BF16.
  const SafetensorsTensor& require(const std::string& name) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }
  std::vector<std::shared_ptr<const void>> storage() const;

 private:
  std::string folder_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::pair<size_t, size_t>> index_;  // name -> (file, tensor) in files_
};

}  // namespace inflight::engine
