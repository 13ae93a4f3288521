#pragma once
// The full symbol table (.symtab) of an ELF64 little-endian file: a relocatable object, a shared object or a cubin.
#include <filesystem>
#include <optional>
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
// The same for an ELF image in memory (a cubin embedded in a shared object).
std::vector<ElfSymbol> read_symbol_table_of_image(const std::string& image);
// The bytes from where a defined symbol of a shared object's .symtab points to the end of its file (an object
// embedded there, read by its own headers), or nothing where the file has no such symbol. Throws as above.
std::optional<std::string> bytes_at_symbol(const std::filesystem::path& path, const std::string& symbol);

}  // namespace crucible::eval
