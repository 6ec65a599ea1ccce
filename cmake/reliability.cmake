# reliability.cmake - the sanitizer and fuzzing build modes.
#
#   -DDL_SANITIZE=ON  every C object is built with AddressSanitizer and
#                     UndefinedBehaviorSanitizer (leak detection included);
#                     scripts/test_sanitize.sh builds this into build-asan with
#                     -DDL_CUDA=OFF (CUDA objects are not instrumented).
#   -DDL_FUZZ=ON      clang only: every C object is built with
#                     -fsanitize=fuzzer-no-link,address,undefined and the
#                     libFuzzer targets of tests/fuzz/ are added
#                     (scripts/fuzz.sh builds this into build-fuzz).
# Included right after the warning options, before any target is made, so the
# flags reach every object of the library.
option(DL_SANITIZE "Build with AddressSanitizer + UndefinedBehaviorSanitizer" OFF)
option(DL_FUZZ "Build the libFuzzer targets (clang)" OFF)

set(DL_SAN_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined
  -fno-omit-frame-pointer -g)
if(DL_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "DL_FUZZ=ON needs clang: configure with CC=clang")
  endif()
  # -Wno-pass-failed: clang reports every `omp simd` loop its vectoriser
  # declines, which is noise here (the normal gcc build is warning-free)
  list(APPEND DL_SAN_FLAGS -fsanitize=fuzzer-no-link -Wno-pass-failed)
endif()
if(DL_SANITIZE OR DL_FUZZ)
  message(STATUS "dlua: sanitizers on (${DL_SAN_FLAGS})")
  add_compile_options("$<$<COMPILE_LANGUAGE:C>:${DL_SAN_FLAGS}>")
  add_link_options(-fsanitize=address,undefined)
endif()
