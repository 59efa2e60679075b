// Keeps the prebuilt binary runnable on glibc 2.34+ (Ubuntu 22.04, RHEL 9 era CUDA images).
//
// The binary links libstdc++ statically. GCC 12's libstdc++.a, built against glibc 2.36, refers
// to arc4random (for std::random_device("arc4random"), which this program never uses), and that
// one reference would make the dynamic loader demand GLIBC_2.36. Defining the function here
// satisfies the reference inside the executable, with getrandom (glibc 2.25).
#include <sys/random.h>

#include <cstdint>
#include <ctime>

extern "C" uint32_t arc4random(void) {
  uint32_t value = 0;
  if (getrandom(&value, sizeof(value), 0) != static_cast<ssize_t>(sizeof(value))) {
    value = static_cast<uint32_t>(std::time(nullptr));
  }
  return value;
}
