// Tests base/utf8.h: which byte sequences are well-formed UTF-8 characters.
#include "base/utf8.h"

#include <gtest/gtest.h>

#include <string_view>

namespace paceline {
namespace {

TEST(Utf8, CharactersOfOneToFourBytes) {
  EXPECT_EQ(utf8_character_bytes("a", 0), 1u);
  EXPECT_EQ(utf8_character_bytes("\xC3\xA9", 0), 2u);          // é
  EXPECT_EQ(utf8_character_bytes("\xE2\x80\x94", 0), 3u);      // —
  EXPECT_EQ(utf8_character_bytes("\xF0\x9F\x98\x80", 0), 4u);  // U+1F600
  EXPECT_EQ(utf8_character_bytes("\xF4\x8F\xBF\xBF", 0), 4u);  // U+10FFFF, the last
  EXPECT_EQ(invalid_utf8_offset("plain \xC3\xA9t\xC3\xA9"), std::string_view::npos);
}

TEST(Utf8, RefusesWhatIsNotACharacter) {
  for (const std::string_view bad : {
           std::string_view("\x80"),              // a continuation byte alone
           std::string_view("\xC0\xAF"),          // overlong '/'
           std::string_view("\xE0\x80\xAF"),      // overlong, three bytes
           std::string_view("\xED\xA0\x80"),      // a surrogate, U+D800
           std::string_view("\xF4\x90\x80\x80"),  // past U+10FFFF
           std::string_view("\xFF"),              // never used
           std::string_view("\xC3"),              // cut short
           std::string_view("\xE2\x80"),          // cut short
           std::string_view("\xC3\x28"),          // a lead byte before ASCII
       }) {
    EXPECT_EQ(utf8_character_bytes(bad, 0), 0u) << testing::PrintToString(bad);
  }
  EXPECT_EQ(invalid_utf8_offset("ab\xC3\xA9\xFF"), 4u);
  EXPECT_EQ(invalid_utf8_offset("ab\xC3"), 2u);
}

}  // namespace
}  // namespace paceline
