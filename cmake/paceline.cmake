# Helpers that declare every paceline target the same way.

# paceline_library(<name> SOURCES <files...> DEPS <targets...>)
# A static library whose includes are rooted at the repository.
function(paceline_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  target_compile_options(${name} PRIVATE ${PACELINE_WARNINGS})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# paceline_test(<name> SOURCES <files...> DEPS <targets...>)
# A GoogleTest executable registered with CTest, run from the repository root so tests can
# read catalog and scenario files by their repository paths.
function(paceline_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_options(${name} PRIVATE ${PACELINE_WARNINGS})
  gtest_discover_tests(${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                       DISCOVERY_TIMEOUT 60)
endfunction()

# paceline_benchmark(<name> SOURCES <files...> DEPS <targets...>)
# A Google Benchmark executable; not part of ctest (speed is measured, not asserted).
function(paceline_benchmark name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/benchmarks/benchmark_main.cc)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} paceline_base benchmark::benchmark)
  target_compile_options(${name} PRIVATE ${PACELINE_WARNINGS})
endfunction()
