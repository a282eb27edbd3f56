# ctest: `make demo` builds only pgw-actor (not the test suites) and says
# first that the first build takes a while; `make build` builds everything.
# Reads the recipes with `make -n`: nothing is built or installed.
function(recipe target out)
  execute_process(COMMAND make -n -C ${PGW_SOURCE_DIR} ${target} BUILD=build-x
                  OUTPUT_VARIABLE text RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "make -n ${target} failed (${rc})")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
recipe(demo demo)
string(REGEX MATCHALL "cmake --build [^\n]*" builds "${demo}")
if(NOT builds MATCHES "^cmake --build build-x -j[0-9]+ --target pgw-actor$")
  message(FATAL_ERROR "make demo should build only pgw-actor, builds: ${builds}")
endif()
if(NOT demo MATCHES "first build[^\n]*several minutes")
  message(FATAL_ERROR "make demo does not announce the first build's time")
endif()
recipe(build build)
if(NOT build MATCHES "cmake --build build-x -j[0-9]+\n")
  message(FATAL_ERROR "make build should build every target: ${build}")
endif()
