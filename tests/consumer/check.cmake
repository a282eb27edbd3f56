# ctest: install the build into a fresh prefix, build the example consumer
# against it with find_package(pgw), and run it.
file(REMOVE_RECURSE ${PGW_WORK_DIR})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}")
  endif()
endfunction()
step(${CMAKE_COMMAND} --install ${PGW_BUILD_DIR} --prefix ${PGW_WORK_DIR}/prefix)
step(${CMAKE_COMMAND} -S ${PGW_SOURCE_DIR}/tests/consumer -B ${PGW_WORK_DIR}/build
     -DCMAKE_PREFIX_PATH=${PGW_WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
step(${CMAKE_COMMAND} --build ${PGW_WORK_DIR}/build)
step(${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${PGW_WORK_DIR}/prefix/lib
     ${PGW_WORK_DIR}/build/consumer ${PGW_WORK_DIR}/prefix/bin/pgw-upstream-sim)
