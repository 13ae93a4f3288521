// Reads ELF64 little-endian symbol tables, bounds-checking every access.
#include <elf.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "elf_symbols.h"
#include "crucible/eval/static_gate.h"

namespace crucible::eval {
namespace {

template <typename T>
T read_at(const std::string& image, std::size_t offset) {
  if (offset > image.size() || image.size() - offset < sizeof(T))
    throw std::runtime_error("malformed ELF: read past the end of the file");
  T value;
  std::memcpy(&value, image.data() + offset, sizeof(T));
  return value;
}

std::string string_at(const std::string& image, std::size_t table_offset, std::size_t table_size, std::size_t index) {
  if (index >= table_size) throw std::runtime_error("malformed ELF: symbol name outside its string table");
  std::size_t start = table_offset + index;
  std::size_t end = image.find('\0', start);
  if (end == std::string::npos || end > table_offset + table_size)
    throw std::runtime_error("malformed ELF: unterminated symbol name");
  return image.substr(start, end - start);
}

std::string read_image(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Elf64_Ehdr read_header(const std::string& image) {
  auto header = read_at<Elf64_Ehdr>(image, 0);
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) throw std::runtime_error("not an ELF file");
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB)
    throw std::runtime_error("not a 64-bit little-endian ELF file");
  if (header.e_shentsize != sizeof(Elf64_Shdr)) throw std::runtime_error("malformed ELF: section header size");
  return header;
}

// Calls visit(symbol, name) for every named symbol in the sections of the given type; false if there is none.
template <typename Visit>
bool for_each_symbol(const std::string& image, const Elf64_Ehdr& header, unsigned section_type, Visit visit) {
  bool found = false;
  for (std::size_t i = 0; i < header.e_shnum; ++i) {
    auto section = read_at<Elf64_Shdr>(image, header.e_shoff + i * sizeof(Elf64_Shdr));
    if (section.sh_type != section_type) continue;
    found = true;
    if (section.sh_link >= header.e_shnum) throw std::runtime_error("malformed ELF: symbol string table index");
    auto strtab = read_at<Elf64_Shdr>(image, header.e_shoff + section.sh_link * sizeof(Elf64_Shdr));
    if (section.sh_entsize != sizeof(Elf64_Sym)) throw std::runtime_error("malformed ELF: symbol entry size");
    std::size_t count = section.sh_size / sizeof(Elf64_Sym);
    for (std::size_t s = 1; s < count; ++s) {  // entry 0 is the null symbol
      auto sym = read_at<Elf64_Sym>(image, section.sh_offset + s * sizeof(Elf64_Sym));
      std::string name = string_at(image, strtab.sh_offset, strtab.sh_size, sym.st_name);
      if (!name.empty()) visit(sym, std::move(name));
    }
  }
  return found;
}

}  // namespace

std::vector<ElfSymbol> read_symbol_table_of_image(const std::string& image) {
  std::vector<ElfSymbol> symbols;
  for_each_symbol(image, read_header(image), SHT_SYMTAB, [&](const Elf64_Sym& sym, std::string name) {
    const unsigned bind = ELF64_ST_BIND(sym.st_info);
    symbols.push_back({std::move(name), sym.st_shndx != SHN_UNDEF, bind == STB_GLOBAL || bind == STB_WEAK,
                       sym.st_other});
  });
  return symbols;
}

std::vector<ElfSymbol> read_symbol_table(const std::filesystem::path& path) {
  return read_symbol_table_of_image(read_image(path));
}

std::optional<std::string> bytes_at_symbol(const std::filesystem::path& path, const std::string& symbol) {
  const std::string image = read_image(path);
  const Elf64_Ehdr header = read_header(image);
  std::optional<std::size_t> offset;
  for_each_symbol(image, header, SHT_SYMTAB, [&](const Elf64_Sym& sym, const std::string& name) {
    if (offset || name != symbol || sym.st_shndx == SHN_UNDEF || sym.st_shndx >= header.e_shnum) return;
    const auto section = read_at<Elf64_Shdr>(image, header.e_shoff + sym.st_shndx * sizeof(Elf64_Shdr));
    if (section.sh_type == SHT_NOBITS || sym.st_value < section.sh_addr ||
        sym.st_value - section.sh_addr >= section.sh_size)
      throw std::runtime_error("malformed ELF: " + symbol + " lies outside its section");
    offset = section.sh_offset + (sym.st_value - section.sh_addr);
  });
  if (!offset) return std::nullopt;
  if (*offset >= image.size()) throw std::runtime_error("malformed ELF: " + symbol + " lies past the end of the file");
  return image.substr(*offset);
}

DynamicSymbols read_dynamic_symbols(const std::filesystem::path& so_path) {
  const std::string image = read_image(so_path);
  const Elf64_Ehdr header = read_header(image);
  if (header.e_type != ET_DYN) throw std::runtime_error("not a shared object");
  DynamicSymbols symbols;
  const bool found = for_each_symbol(image, header, SHT_DYNSYM, [&](const Elf64_Sym& sym, std::string name) {
    if (ELF64_ST_BIND(sym.st_info) == STB_LOCAL) return;
    if (sym.st_shndx == SHN_UNDEF)
      symbols.imports.push_back(std::move(name));
    else if (ELF64_ST_VISIBILITY(sym.st_other) == STV_DEFAULT || ELF64_ST_VISIBILITY(sym.st_other) == STV_PROTECTED)
      symbols.exports.push_back(std::move(name));
  });
  if (!found) throw std::runtime_error("malformed shared object: no dynamic symbol table");
  return symbols;
}

}  // namespace crucible::eval
