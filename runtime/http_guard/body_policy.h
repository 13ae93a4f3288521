#pragma once
// Whether a request's body may be read, decided from its head alone, before a byte of the body is read: a server
// that reads first and refuses afterwards has already spent the memory a large body asks for.
#include <cstddef>
#include <string>
#include <vector>

namespace crucible::http_guard {

// The request head's fields that say how large its body is and how it is sent.
struct BodyHeaders {
  std::string method;
  std::vector<std::string> content_length;     // every Content-Length value given
  std::vector<std::string> transfer_encoding;  // every Transfer-Encoding value given
  std::vector<std::string> content_encoding;   // every Content-Encoding value given
};

struct BodyVerdict {
  int status = 0;      // 0: the body may be read; else the HTTP status to answer with, the body left unread
  std::string reason;  // for the client, one line
  bool allowed() const { return status == 0; }
};

// At most `max_bytes`, declared up front by one Content-Length. Refused: a streamed (chunked) body, whose size is
// known only once it has been read (411); a compressed one, which may inflate far past its declared size (415);
// a Content-Length that is not one plain decimal number (400); a larger one (413); and a POST, PUT or PATCH without
// Content-Length (411), whose body HTTP libraries read until the client closes.
BodyVerdict check_body(const BodyHeaders& head, std::size_t max_bytes);

}  // namespace crucible::http_guard
