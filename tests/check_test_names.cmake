# Fails when a test binary has a test case whose name CMake would cut: a
# ';' (or a '[' ... ']' CMake reads as a list/escape) makes ctest run a
# truncated filter that matches no case, and a ctest entry that runs no case
# still passes. BINS: the binaries, separated by '|'.
string(REPLACE "|" ";" bins "${BINS}")
foreach(bin IN LISTS bins)
  execute_process(COMMAND ${bin} --list-test-cases --no-intro=true
                  OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${bin} --list-test-cases failed (${rc})")
  endif()
  string(FIND "${out}" ";" at)
  if(NOT at EQUAL -1)
    string(SUBSTRING "${out}" 0 ${at} before)
    string(REGEX REPLACE ".*\n" "" line "${before}")
    message(FATAL_ERROR "${bin}: a test case name has a ';' (ctest would "
                        "run none of it): \"${line};...\"")
  endif()
endforeach()
