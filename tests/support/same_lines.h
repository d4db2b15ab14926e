// What a program prints alone and under the profiler, compared line by line: a program must
// print the same under adprof. Every differing line is named (its number, both texts).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "process.h"

namespace adprof_test {

inline ::testing::AssertionResult same_lines(const std::string &alone, const std::string &under) {
  const std::vector<std::string> want = lines_of(alone), got = lines_of(under);
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << got.size() << " lines under adprof, " << want.size() << " alone\nunder adprof:\n"
           << under << "alone:\n"
           << alone;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i]) {
      if (result) result = ::testing::AssertionFailure();
      result << "line " << i + 1 << " under adprof: \"" << got[i] << "\", alone: \"" << want[i]
             << "\"\n";
    }
  return result;
}

}  // namespace adprof_test
