// Well-formed UTF-8 (Unicode 15, table 3-7): what paceline's inputs must be and its JSON and
// messages are.
#ifndef PACELINE_BASE_UTF8_H_
#define PACELINE_BASE_UTF8_H_

#include <cstddef>
#include <string_view>

namespace paceline {

// The bytes of the well-formed UTF-8 character that starts at `at` in `text` (1 to 4), or 0
// where none does: a stray continuation byte, an overlong form, a surrogate, a code point past
// U+10FFFF, a byte never used (0xC0, 0xC1, 0xF5 to 0xFF) or a character cut short.
size_t utf8_character_bytes(std::string_view text, size_t at);

// The offset of the first byte of `text` that starts no well-formed character, or npos.
size_t invalid_utf8_offset(std::string_view text);

}  // namespace paceline

#endif  // PACELINE_BASE_UTF8_H_
