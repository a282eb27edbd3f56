# ctest: install the build into a fresh prefix and use it as a new user
# would, with no environment to help: the installed programs run, only the
# public headers are there, and tests/consumer builds with find_package(pgw)
# and runs without LD_LIBRARY_PATH. Also: the README's embedding example is
# the code between main.cpp's embed markers, to the letter.
file(REMOVE_RECURSE ${PGW_WORK_DIR})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}")
  endif()
endfunction()

# The README's example is tests/consumer/main.cpp's.
file(READ ${PGW_SOURCE_DIR}/tests/consumer/main.cpp main_cpp)
file(READ ${PGW_SOURCE_DIR}/README.md readme)
string(REGEX MATCH "// \\[embed\\]\n(.*)// \\[/embed\\]" _ "${main_cpp}")
set(example "${CMAKE_MATCH_1}")
set(opening "<!-- tests/consumer/main.cpp, embed -->\n```cpp\n")
string(FIND "${readme}" "${opening}" from)
set(in_readme "")
if(from GREATER -1)
  string(LENGTH "${opening}" n)
  math(EXPR from "${from} + ${n}")
  string(SUBSTRING "${readme}" ${from} -1 rest)
  string(FIND "${rest}" "\n```\n" to)
  math(EXPR to "${to} + 1")
  string(SUBSTRING "${rest}" 0 ${to} in_readme)
endif()
if(example STREQUAL "" OR NOT example STREQUAL in_readme)
  message(FATAL_ERROR "README.md's embedding example differs from the code "
                      "between the embed markers of tests/consumer/main.cpp: "
                      "copy it over")
endif()

set(prefix ${PGW_WORK_DIR}/prefix)
step(${CMAKE_COMMAND} --install ${PGW_BUILD_DIR} --prefix ${prefix})

# Only the public surface is installed, under include/pgw/.
file(GLOB_RECURSE installed RELATIVE ${prefix}/include ${prefix}/include/*)
list(SORT installed)
set(public
    pgw/actors/interfaces.hpp pgw/client.hpp pgw/config/loader.hpp
    pgw/config/settings.hpp pgw/node_builder.hpp)
foreach(h ${installed})
  if(NOT h MATCHES "^pgw/messages/[a-z_]+\\.hpp$")
    list(FIND public ${h} at)
    if(at EQUAL -1)
      message(FATAL_ERROR "installed header outside the public surface: ${h}")
    endif()
  endif()
endforeach()
foreach(h ${public})
  if(NOT EXISTS ${prefix}/include/${h})
    message(FATAL_ERROR "public header not installed: ${h}")
  endif()
endforeach()

# The installed programs run with no environment at all (RPATH).
foreach(program pgw-actor pgw-upstream-sim)
  execute_process(COMMAND env -i ${prefix}/bin/${program} --help
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "usage")
    message(FATAL_ERROR "installed ${program} --help failed (${rc}): ${err}")
  endif()
endforeach()

step(${CMAKE_COMMAND} -S ${PGW_SOURCE_DIR}/tests/consumer -B ${PGW_WORK_DIR}/build
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
step(${CMAKE_COMMAND} --build ${PGW_WORK_DIR}/build)
step(env -u LD_LIBRARY_PATH ${PGW_WORK_DIR}/build/consumer
     ${prefix}/bin/pgw-upstream-sim)
