// Tests base/json.h: string quoting.
#include "base/json.h"

#include <gtest/gtest.h>

namespace paceline {
namespace {

TEST(Json, QuotesStringsAsValidUtf8Json) {
  EXPECT_EQ(json_quote("a \"b\" \\ c\n\t\r\x01"), "\"a \\\"b\\\" \\\\ c\\n\\t\\r\\u0001\"");
  // Characters pass as they are; a byte that starts none (a file name's, say) becomes U+FFFD.
  EXPECT_EQ(json_quote("h\xC3\xA9llo \xF0\x9F\x98\x80"), "\"h\xC3\xA9llo \xF0\x9F\x98\x80\"");
  EXPECT_EQ(json_quote("x\xFF\xC3(y"), "\"x\ufffd\ufffd(y\"");
}

}  // namespace
}  // namespace paceline
