#pragma once
// The full symbol table (.symtab) of an ELF64 little-endian file: a relocatable object, a shared object or a cubin.
#include <filesystem>
#include <string>
#include <vector>

namespace crucible::eval {

struct ElfSymbol {
  std::string name;
  bool defined = false;  // false: undefined here, for the linker to resolve
  bool global = false;   // global or weak binding
  unsigned char other = 0;  // st_other: visibility, and in a cubin the entry-function flag
};

// A kernel (an entry function) in a cubin's symbol table has this bit of st_other set.
constexpr unsigned char kCubinEntryFlag = 0x10;

// Throws std::runtime_error on a file that is not ELF64 little-endian or is malformed.
std::vector<ElfSymbol> read_symbol_table(const std::filesystem::path& path);

}  // namespace crucible::eval
